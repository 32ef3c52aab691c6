"""A small C helper, compiled at first use with the machine's C compiler and cached (as Triton
builds its launchers), for the per-record work on CUPTI's thread; Python does it when there is
no compiler.

Walking a completed activity buffer costs a ctypes call per record from Python (three records a
launch) while holding the GIL, so the thread that launches waits. The helper walks the whole
buffer with CUPTI's own cuptiActivityGetNextRecord in one call that releases the GIL, and hands
back the records' offsets. It binds nothing at build time (CUPTI's function comes as a pointer
at run time), so one build serves every libcupti; the cache is keyed by the source's hash.

PROTON_NATIVE=0 keeps everything in Python; PROTON_CACHE_DIR moves the cache (default
$XDG_CACHE_HOME/proton or ~/.cache/proton).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading

import numpy as np

from ..report import debug, warn

SOURCE = r"""
#include <stddef.h>
#include <stdint.h>

typedef int (*proton_next_fn)(uint8_t *buffer, size_t valid, void **record);

/* The offsets of a completed CUPTI activity buffer's records, walked with CUPTI's
   cuptiActivityGetNextRecord (`next`), at most `cap`; returns how many. */
int64_t proton_walk(proton_next_fn next, uint8_t *buffer, size_t valid, int64_t *offsets,
                    int64_t cap) {
    void *record = NULL;
    int64_t n = 0;
    while (n < cap && next(buffer, valid, &record) == 0)
        offsets[n++] = (int64_t)((uint8_t *)record - buffer);
    return n;
}
"""
NATIVE_ENV = "PROTON_NATIVE"
CACHE_ENV = "PROTON_CACHE_DIR"
RECORD_ALIGN = 8
"""CUPTI's records are 8-byte aligned and at least that long: a buffer of `valid` bytes holds
at most valid // 8 of them."""

_lock = threading.Lock()
_built: dict[str, ctypes.CDLL | None] = {}


def cache_dir() -> str:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "proton")
    return os.path.join(base, "native")


def library_path() -> str:
    key = hashlib.sha256(f"{SOURCE}{platform.machine()}".encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"walk-{key}.so")


def helper() -> ctypes.CDLL | None:
    """The compiled helper, built once per source version and machine; None (said once) when
    it cannot be built or PROTON_NATIVE=0."""
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    path = library_path()
    with _lock:
        if path in _built:
            return _built[path]
        lib = None
        try:
            if not os.path.exists(path):
                _compile(path)
            lib = _load(path)
        except (OSError, subprocess.SubprocessError, _NoCompiler) as exc:
            warn(f"reading CUPTI buffers in Python, which costs more per launch: the C helper "
                 f"could not be built ({exc}); install a C compiler (cc) or set "
                 f"{NATIVE_ENV}=0 to silence this")
        _built[path] = lib
        return lib


class _NoCompiler(Exception):
    pass


def _compile(path: str) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") \
        or shutil.which("clang")
    if not compiler:
        raise _NoCompiler("no C compiler: cc, gcc or clang on PATH, or CC")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as work:
        source = os.path.join(work, "walk.c")
        with open(source, "w") as f:
            f.write(SOURCE)
        out = os.path.join(work, "walk.so")
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", out, source],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise _NoCompiler(f"{compiler} failed: {done.stderr.strip()[:200]}")
        os.replace(out, path)  # whole or not at all, also when processes build at once
    debug(f"built the C helper {path}")


def _load(path: str) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(path)  # CDLL: the GIL is released during each call
    except OSError:  # a damaged cache entry: build it again, once
        os.remove(path)
        _compile(path)
        lib = ctypes.CDLL(path)
    lib.proton_walk.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_void_p, ctypes.c_int64]
    lib.proton_walk.restype = ctypes.c_int64
    return lib


class Walker:
    """A completed buffer's record offsets, by the helper when it is built, else in Python."""

    def __init__(self, next_record) -> None:
        """next_record: cuptiActivityGetNextRecord as a ctypes function (argtypes set)."""
        self._next = next_record
        lib = helper()
        self._native = lib.proton_walk if lib is not None else None
        self._next_address = ctypes.cast(next_record, ctypes.c_void_p).value

    @property
    def native(self) -> bool:
        return self._native is not None

    def __call__(self, buffer: int, valid: int):
        """The offsets from `buffer` of its records (a numpy array, or a list in Python)."""
        if self._native is not None:
            out = np.empty(valid // RECORD_ALIGN + 1, dtype=np.int64)
            n = self._native(self._next_address, buffer, valid, out.ctypes.data, len(out))
            return out[:n]
        offsets = []
        record, step = ctypes.c_void_p(), self._next
        append, rec = offsets.append, ctypes.byref(record)
        while step(buffer, valid, rec) == 0:
            append(record.value - buffer)
        return offsets
