"""A small C helper, compiled at first use with the machine's C compiler and cached (as Triton
builds its launchers), for the per-record work on CUPTI's thread; Python does it when there is
no compiler.

Walking a completed activity buffer costs a ctypes call per record from Python (three records a
launch) while holding the GIL, so the thread that launches waits. The helper walks the whole
buffer with CUPTI's own cuptiActivityGetNextRecord in one call that releases the GIL, and hands
back the records' offsets. It binds nothing at build time (CUPTI's function comes as a pointer
at run time), so one build serves every libcupti; the cache is keyed by the source's hash.

It can also read the records' fields as it walks (`Columns`, PROTON_NATIVE_READ=1): one call
per buffer instead of a numpy gather per field; off by default until measured on a GPU.

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
#include <string.h>

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

/* Walk as proton_walk does and copy the fields of the records of chosen kinds into columns of
   int64: a record whose kind (the uint32 it starts with) has group[kind] = g >= 0 adds a row to
   group g, its field f (the little-endian integer of sizes[i] bytes at offsets[i], i =
   first[g] + f, sign-extended when signs[i]) going to out[g][f * cap[g] + row]. A group has at
   most cap[g] rows (the caller sizes it for the buffer); rows[g] says how many it got. Returns
   the records walked. */
int64_t proton_columns(proton_next_fn next, uint8_t *buffer, size_t valid,
                       int32_t ngroups, int32_t nkinds, const int32_t *group,
                       const int32_t *nfields, const int32_t *first, const int32_t *offsets,
                       const int32_t *sizes, const int32_t *signs, int64_t **out,
                       const int64_t *cap, int64_t *rows) {
    void *record = NULL;
    int64_t n = 0;
    for (int32_t g = 0; g < ngroups; g++)
        rows[g] = 0;
    while (next(buffer, valid, &record) == 0) {
        const uint8_t *r = (const uint8_t *)record;
        uint32_t kind;
        n++;
        memcpy(&kind, r, sizeof kind);
        if (kind >= (uint32_t)nkinds || group[kind] < 0)
            continue;
        int32_t g = group[kind];
        if (rows[g] >= cap[g])
            continue;
        int64_t row = rows[g]++;
        for (int32_t f = 0; f < nfields[g]; f++) {
            int32_t i = first[g] + f, size = sizes[i];
            uint64_t v = 0;
            memcpy(&v, r + offsets[i], (size_t)size);
            if (signs[i] && size < 8 && ((v >> (8 * size - 1)) & 1))
                v |= ~(uint64_t)0 << (8 * size);
            out[g][f * cap[g] + row] = (int64_t)v;
        }
    }
    return n;
}
"""
NATIVE_ENV = "PROTON_NATIVE"
NATIVE_READ_ENV = "PROTON_NATIVE_READ"
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
    lib.proton_columns.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int32, ctypes.c_int32] + [ctypes.c_void_p] * 9
    lib.proton_columns.restype = ctypes.c_int64
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


class Columns:
    """The fields of a completed buffer's records, read in C during the walk: for each group of
    record kinds (kinds sharing one layout), one int64 array per field. None from `create` when
    the helper is not built (then Walker and numpy do it)."""

    KINDS = 256
    """Activity kinds the lookup table covers (CUPTI's are well under this)."""

    def __init__(self, lib: ctypes.CDLL, next_record,
                 groups: list[tuple[list[int], list[tuple[int, int, bool]], int]]) -> None:
        """groups: (kinds, fields as (offset, size, signed), record size) each."""
        self._call = lib.proton_columns
        self._next_address = ctypes.cast(next_record, ctypes.c_void_p).value
        table = np.full(self.KINDS, -1, dtype=np.int32)
        nfields, first, offsets, sizes, signs, record_sizes = [], [], [], [], [], []
        for g, (kinds, fields, record_size) in enumerate(groups):
            for kind in kinds:
                table[kind] = g
            first.append(len(offsets))
            nfields.append(len(fields))
            for at, size, signed in fields:
                if size not in (1, 2, 4, 8):
                    raise ValueError(f"a field of {size} bytes is not an integer")
                offsets.append(at)
                sizes.append(size)
                signs.append(int(signed))
            record_sizes.append(max(record_size, RECORD_ALIGN))
        arr = lambda v: np.array(v, dtype=np.int32)  # noqa: E731
        self._table, self._nfields, self._first = table, arr(nfields), arr(first)
        self._offsets, self._sizes, self._signs = arr(offsets), arr(sizes), arr(signs)
        self._record_sizes = record_sizes

    @classmethod
    def create(cls, next_record, groups) -> "Columns | None":
        lib = helper()
        return None if lib is None else cls(lib, next_record, groups)

    def __call__(self, buffer: int, valid: int) -> tuple[list[list[np.ndarray]], int]:
        """(each group's field columns, the records walked)."""
        caps = np.array([valid // size + 1 for size in self._record_sizes], dtype=np.int64)
        blocks = [np.empty((n, c), dtype=np.int64)
                  for n, c in zip(self._nfields.tolist(), caps.tolist())]
        pointers = (ctypes.c_void_p * len(blocks))(*[b.ctypes.data for b in blocks])
        rows = np.zeros(len(blocks), dtype=np.int64)
        walked = self._call(self._next_address, buffer, valid, len(blocks), self.KINDS,
                   self._table.ctypes.data, self._nfields.ctypes.data, self._first.ctypes.data,
                   self._offsets.ctypes.data, self._sizes.ctypes.data, self._signs.ctypes.data,
                   pointers, caps.ctypes.data, rows.ctypes.data)
        return [[block[f, :n] for f in range(block.shape[0])]
                for block, n in zip(blocks, rows.tolist())], int(walked)
