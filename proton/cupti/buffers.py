"""CUPTI activity buffers taken raw, through ctypes over the libcupti cupti-python loaded.

cupti-python builds a Python object for every record of a completed buffer before its callback
runs: on an H200, 1,000,000 launches took 118 s under the profiler against 11 s bare, the record
objects costing more than the launches. Here CUPTI hands us the buffer itself, and the
collector's pipeline (pipeline.py) walks it with cuptiActivityGetNextRecord: in the C helper
(native.c), or in Python with the fields read by numpy. The subscription is ours too
(subscriber.py); activity kinds and external correlation ids go through cupti-python.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Callable, cast

from ..report import callback_failed, warn
from .subscriber import CALLBACK_CODES

_REQUESTED = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p),
                              ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
_COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
                              ctypes.c_size_t, ctypes.c_size_t)
_SUCCESS = 0
_IGNORE: Callable[[int, int], None] = lambda buffer, valid: None  # noqa: E731
_shared: dict[tuple[str, int], "RawBuffers"] = {}
"""The process's RawBuffers by (libcupti path, buffer size): CUPTI may call a callback late,
so one is never freed, and sessions reuse it (one per session kept each session's free buffers
and pipeline for the life of the process)."""


def loaded_libcupti(maps: str = "/proc/self/maps") -> str | None:
    """Path of the libcupti cupti-python loaded into this process, if any.

    Triton's own profiler may map another CUPTI (its bundled libcupti.so.12) beside it; the
    one whose major version is cupti-python's is ours.

    Raises:
        OSError: several libcupti files are mapped and none or several match.
    """
    found = set()
    try:
        with open(maps) as f:
            for line in f:
                if "/libcupti.so" in line:
                    found.add(line[line.index("/"):].strip().removesuffix(" (deleted)"))
    except OSError:
        return None
    if len(found) > 1:
        from importlib.metadata import version

        major = version("cupti-python").split(".")[0]
        found = {p for p in found if os.path.basename(p).startswith(f"libcupti.so.{major}")}
        if len(found) != 1:
            raise OSError("several libcupti libraries are loaded and none is clearly "
                          f"cupti-python's (libcupti.so.{major}); keep one CUDA toolkit's CUPTI "
                          "on the library path")
    return found.pop() if found else None


_checked_paths: set[str] = set()


def libcupti_mismatch(path: str, binding: str | None = None,
                      library: str | None = None) -> str | None:
    """One line when the libcupti at `path` is another CUDA minor release than cupti-python's
    (their record layouts are the binding's release's), else None. `binding` and `library` are
    the versions (default: the installed cupti-python's and the version of the
    nvidia-cuda-cupti that holds `path`; a libcupti from elsewhere, e.g. a CUDA toolkit, is not
    judged)."""
    from importlib.metadata import PackageNotFoundError, distribution, version

    try:
        binding = binding or version("cupti-python")
        if library is None:
            dist = distribution("nvidia-cuda-cupti")
            real = os.path.realpath(path)
            if not any(os.path.realpath(str(dist.locate_file(f))) == real for f in dist.files or ()
                       if "libcupti" in f.name):
                return None
            library = dist.version
    except PackageNotFoundError:
        return None
    if binding.split(".")[:2] == library.split(".")[:2]:
        return None
    minor = ".".join(binding.split(".")[:2])
    return (f"cupti-python {binding} reads CUDA {minor}'s CUPTI records, but this process loaded "
            f"libcupti {library} (nvidia-cuda-cupti): kernel records may read wrong; install "
            f"the matching one: pip install 'nvidia-cuda-cupti~={minor}.0'")


def warn_libcupti_mismatch(path: str) -> None:
    """libcupti_mismatch's line on stderr, once per library."""
    if path in _checked_paths:
        return
    _checked_paths.add(path)
    line = libcupti_mismatch(path)
    if line is not None:
        warn(line)


def timestamp_address(path: str) -> int:
    """The address of cuptiGetTimestamp in the libcupti at `path` (a loaded one)."""
    return cast(int, ctypes.cast(ctypes.CDLL(path).cuptiGetTimestamp, ctypes.c_void_p).value)


class RawBuffers:
    """Registers CUPTI's buffer callbacks; `on_buffer(address, valid bytes)` runs on CUPTI's
    thread for each completed buffer and must not keep it: the buffer is reused once it
    returns. A session takes the process's one through `shared` and lets go with `detach`."""

    @classmethod
    def shared(cls, path: str, size: int) -> "RawBuffers":
        """The process's RawBuffers for the libcupti at `path` and this buffer size."""
        key = (path, size)
        raw = _shared.get(key)
        if raw is None:
            raw = _shared[key] = cls(path, size)
        return raw

    def __init__(self, path: str, size: int) -> None:
        """path: the libcupti cupti-python loaded (loaded_libcupti())."""
        self._lib = ctypes.CDLL(path)  # the same handle: dlopen of a loaded library
        # PyDLL keeps the GIL across the call: walking a buffer is a few thousand short calls
        self._next = ctypes.PyDLL(path).cuptiActivityGetNextRecord
        self._next.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        self._next.restype = ctypes.c_int
        self._lib.cuptiActivityRegisterCallbacks.argtypes = [_REQUESTED, _COMPLETED]
        self._lib.cuptiActivityRegisterCallbacks.restype = ctypes.c_int
        self._size = size
        self.next_record = self._next
        """cuptiActivityGetNextRecord, for the pipeline's walk (ctypes, or the C helper)."""
        self.on_buffer: Callable[[int, int], None] = _IGNORE
        """Takes each completed buffer (pipeline.Pipeline.attach sets it)."""
        self._buffers: dict[int, ctypes.Array] = {}
        """Buffers lent to CUPTI, by address, alive until it gives them back."""
        self._free: list[ctypes.Array] = []
        """Buffers CUPTI gave back, lent again rather than allocated (and zeroed) anew."""
        self._lock = threading.Lock()
        # ctypes callbacks must outlive the registration
        self._requested, self._completed = _REQUESTED(self._give), _COMPLETED(self._take)

    def register(self) -> None:
        rc = self._lib.cuptiActivityRegisterCallbacks(self._requested, self._completed)
        if rc != _SUCCESS:
            raise OSError(f"cuptiActivityRegisterCallbacks failed with CUPTI error {rc}")

    def detach(self) -> None:
        """The session is over (its buffers flushed): a late buffer is dropped, and the
        session's pipeline is no longer reachable from here."""
        self.on_buffer = _IGNORE

    def _give(self, buffer, size, max_records) -> None:
        try:
            with self._lock:
                raw = self._free.pop() if self._free else None
            if raw is None:
                raw = (ctypes.c_uint64 * (self._size // 8))()  # 8-byte aligned, as CUPTI needs
            address = ctypes.addressof(raw)
            with self._lock:
                self._buffers[address] = raw
            buffer[0], size[0], max_records[0] = address, ctypes.sizeof(raw), 0
        except BaseException as exc:  # lend nothing instead
            buffer[0], size[0], max_records[0] = None, 0, 0
            callback_failed("while lending CUPTI a buffer", exc)

    def _take(self, context, stream, buffer, size, valid) -> None:
        try:
            if buffer and valid:
                self.on_buffer(buffer, valid)
        except BaseException as exc:
            callback_failed("while reading a CUPTI buffer", exc)
        finally:
            with self._lock:
                raw = self._buffers.pop(buffer, None)
                if raw is not None and len(self._free) < 4:
                    self._free.append(raw)


CALLBACK_CODES.update((RawBuffers._give.__code__, RawBuffers._take.__code__))  # CUPTI calls them
