"""Proton's C helpers (cupti/native.c, cupti/pm_native.c, runtime/intra_native.c), each
compiled at first use with the machine's C compiler and cached, as Triton builds its
launchers: one loader for all of them. Each helper's C is a `.c` file of its package (package
data); its PROTON_API functions are exported (everything is built with -fvisibility=hidden) and
their ctypes signatures are read from their definitions there (`signatures`). What uses a
helper does its work in Python when the helper cannot be built (no compiler), said once.

The cache (PROTON_CACHE_DIR, default $XDG_CACHE_HOME/proton or ~/.cache/proton, then native/)
is a folder only this user may write (files.private_dir: made 0700, refused otherwise); a
library in it is loaded only when it is a regular file of this user's that no one else may
write (anything else is built again), and a build is renamed into place whole, so processes
that build at once never load half a file. A library's name is keyed by its sources (the .c
file and any generated header), the compiler flags, the compiler (its file), the Python ABI
and the machine.

PROTON_NATIVE=0 keeps everything in Python.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import sysconfig
import tempfile
import threading
from importlib import resources
from typing import Any, Callable

from ..files import cache_folder, private_dir
from ..report import debug, warn

NATIVE_ENV = "PROTON_NATIVE"
FLAGS = ("-O2", "-shared", "-fPIC", "-pthread", "-fvisibility=hidden")
"""How every helper is built (part of the cache key): only PROTON_API functions are exported."""
PLAIN_FLAGS = tuple(f for f in FLAGS if f != "-fvisibility=hidden")
"""compile_source's: C with no PROTON_API mark, all its functions visible."""


class BuildError(Exception):
    """A helper could not be compiled (no compiler, or it failed)."""


def enabled() -> bool:
    """The user has not turned the helpers off (PROTON_NATIVE=0: Python does their work)."""
    return os.environ.get(NATIVE_ENV, "1") != "0"


def compiler() -> str | None:
    """The C compiler: $CC, else cc, gcc or clang on PATH."""
    return _find_compiler(os.environ.get("CC"), os.environ.get("PATH"))


def _find_compiler(cc: str | None, path: str | None) -> str | None:
    return cc or shutil.which("cc", path=path) or shutil.which("gcc", path=path) \
        or shutil.which("clang", path=path)


@functools.lru_cache(maxsize=8)
def _compiler_file(cc_env: str | None, path: str | None) -> str:
    """The compiler's file (the link resolved) with its size and time: a compiler upgraded or
    swapped builds anew. Looked up once per process, $CC and $PATH (a search of PATH costs
    more than the rest of a helper's load)."""
    cc = _find_compiler(cc_env, path)
    if cc is None:
        return "no compiler"
    found = os.path.realpath(shutil.which(cc, path=path) or cc)
    try:
        st = os.stat(found)
    except OSError:
        return found
    return f"{found}:{st.st_size}:{st.st_mtime_ns}"


def build_key(texts: tuple[str, ...], flags: tuple[str, ...]) -> str:
    """What a built library depends on: its sources, flags, compiler, Python ABI, machine."""
    parts = [*texts, *flags, _compiler_file(os.environ.get("CC"), os.environ.get("PATH")),
             sysconfig.get_config_var("EXT_SUFFIX") or "", platform.machine()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cache_dir() -> str:
    """Where built helpers are kept: native/ in Proton's cache (files.cache_folder)."""
    return cache_folder("native")


def compile_to(out: str, files: dict[str, str], flags: tuple[str, ...],
               work: str | None = None) -> None:
    """Compile `files` ({name: text}; the first is compiled, the others are its headers) into
    `out` with `flags` (written in place: callers give a path in a folder of their own).
    work: a private folder for the sources (default: `out`'s)."""
    cc = compiler()
    if not cc:
        raise BuildError("no C compiler: cc, gcc or clang on PATH, or CC")
    work = work or os.path.dirname(out)
    for name, text in files.items():
        with open(os.path.join(work, name), "x", encoding="utf-8") as f:
            f.write(text)
    done = subprocess.run([cc, *flags, "-o", out, os.path.join(work, next(iter(files)))],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BuildError(f"{cc} failed: {done.stderr.strip()[:2000]}")


def build_into(path: str, files: dict[str, str], flags: tuple[str, ...]) -> None:
    """`files` compiled (as compile_to) to `path` in a private folder: whole or not at all
    (renamed into place), also when processes build at once."""
    folder = os.path.dirname(path)
    private_dir(folder)
    with tempfile.TemporaryDirectory(dir=folder) as work:  # mkdtemp: 0700, a random name
        out = os.path.join(work, "helper.so")
        compile_to(out, files, flags, work=work)
        os.replace(out, path)
    debug(f"built the C helper {path}")


def compile_source(path: str, code: str) -> None:
    """C `code` with no PROTON_API mark built to `path` with PLAIN_FLAGS, as a helper is (a
    private folder, renamed into place). Raises BuildError without a compiler or when it
    fails."""
    build_into(path, {"helper.c": code}, PLAIN_FLAGS)


def load_cached(path: str, build: Callable[[str], None]) -> ctypes.CDLL:
    """The library at `path` in the private cache folder, built by `build(path)` first when
    missing, damaged, or not a file this user built (a link, or writable by others: never
    loaded, it could run another user's code). Raises OSError for a folder others may write."""
    private_dir(os.path.dirname(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        build(path)
    else:  # only a file this user built: not a link, nor one others could have written
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() \
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            os.remove(path)
            build(path)
    try:
        return ctypes.CDLL(path)  # CDLL: the GIL is released during each call
    except OSError:  # a damaged cache entry: build it again, once
        os.remove(path)
        build(path)
        return ctypes.CDLL(path)


_C_TYPES = {"void": None, "int": ctypes.c_int, "int32_t": ctypes.c_int32,
            "int64_t": ctypes.c_int64, "uint32_t": ctypes.c_uint32, "size_t": ctypes.c_size_t}
_DEFINITION = re.compile(r"^PROTON_API\s+([^;{]*?)\b(proton_\w+)\s*\(([^)]*)\)\s*\{", re.M)


def _ctype(declaration: str, source: str):
    """The ctypes type of a C parameter or return type (its name, if any, dropped)."""
    text = " ".join(declaration.replace("const ", " ").split())
    if "*" in text or re.match(r"proton_\w+_fn\b", text):
        return ctypes.c_void_p  # pointers, and pointers to functions
    base = text.split()[0]
    if base not in _C_TYPES:
        raise ValueError(f"{source}: a PROTON_API type ctypes cannot take: {declaration!r}")
    return _C_TYPES[base]


def signatures(text: str, source: str) -> dict[str, tuple[Any, list]]:
    """{function: (restype, argtypes)} of every PROTON_API function defined in C `text` (the
    file `source`): keep each type one of int, int32_t, int64_t, uint32_t, size_t, a pointer,
    or a proton_*_fn typedef."""
    out = {}
    for ret, name, params in _DEFINITION.findall(text):
        params = [p for p in params.split(",") if p.strip() and p.strip() != "void"]
        out[name] = (_ctype(ret, source), [_ctype(p, source) for p in params])
    return out


class Helper:
    """One C helper: `source`, a .c file of `package` (package data), with the headers
    `headers()` generates ({name: text}), built at first use into the cache as
    `<prefix>-<key>.so`. `fallback`: the warning when it cannot be built, `{exc}` for why."""

    def __init__(self, package: str, source: str, prefix: str, fallback: str,
                 headers: Callable[[], dict[str, str]] = dict) -> None:
        self.package, self.source_name, self.prefix = package, source, prefix
        self.fallback, self.headers = fallback, headers
        self.built: dict[str, ctypes.CDLL | None] = {}
        """Each library path -> what was loaded there (None: could not be), once a process."""
        self._lock = threading.Lock()

    @functools.cached_property
    def source(self) -> str:
        """The .c file's text (read once: package data does not change while we run)."""
        return (resources.files(self.package) / self.source_name).read_text(encoding="utf-8")

    @functools.cached_property
    def _digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def files(self) -> dict[str, str]:
        """{name: text} of what is compiled: the .c file first, then its headers."""
        return {self.source_name: self.source, **self.headers()}

    def path(self, flags: tuple[str, ...] | None = None) -> str:
        """The cached library for this source, its headers, `flags` (FLAGS unless given), the
        compiler, Python's ABI and the machine."""
        texts = (self._digest, *self.headers().values())
        key = build_key(texts, FLAGS if flags is None else flags)
        return os.path.join(cache_dir(), f"{self.prefix}-{key[:16]}.so")

    def compile_to(self, out: str, flags: tuple[str, ...] | None = None,
                   work: str | None = None) -> None:
        """This helper compiled (compile_to) into `out` with `flags` (FLAGS unless given)."""
        compile_to(out, self.files(), FLAGS if flags is None else flags, work)

    def signatures(self) -> dict[str, tuple[Any, list]]:
        """{function: (restype, argtypes)} of its PROTON_API functions."""
        return self._signatures

    @functools.cached_property
    def _signatures(self) -> dict[str, tuple[Any, list]]:
        return signatures(self.source, self.source_name)

    def load(self) -> ctypes.CDLL | None:
        """The built library, its functions typed; None (said once) when it cannot be built,
        or PROTON_NATIVE=0."""
        if not enabled():
            return None
        flags = FLAGS
        path = self.path(flags)
        with self._lock:
            if path not in self.built:
                self.built[path] = self._load(path, flags)
            return self.built[path]

    def _load(self, path: str, flags: tuple[str, ...]) -> ctypes.CDLL | None:
        try:
            lib = load_cached(path, lambda out: build_into(out, self.files(), flags))
        except (OSError, subprocess.SubprocessError, BuildError) as exc:
            warn(self.fallback.format(exc=exc))
            return None
        for name, (restype, argtypes) in self.signatures().items():
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
        return lib
