"""CUPTI activity buffers taken raw, through ctypes over the libcupti cupti-python loaded.

cupti-python builds a Python object for every record of a completed buffer before its callback
runs: on an H200, 1,000,000 launches took 118 s under the profiler against 11 s bare, the record
objects costing more than the launches. Here CUPTI hands us the buffer itself; we walk it with
cuptiActivityGetNextRecord and give the collector a view of the buffer and each record's offset,
which it reads with struct.unpack_from (see cupti_collector.struct_reader). Everything else
(subscription, activity kinds, external correlation ids) goes through cupti-python.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable

_REQUESTED = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p),
                              ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
_COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
                              ctypes.c_size_t, ctypes.c_size_t)
_SUCCESS = 0
_registered: list = []
"""Every RawBuffers ever registered: CUPTI may call a callback late, so they are never freed."""


def loaded_libcupti() -> str | None:
    """Path of the libcupti mapped into this process (cupti-python's), if any."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "/libcupti.so" in line:
                    return line[line.index("/"):].strip()
    except OSError:
        pass
    return None


class RawBuffers:
    """Registers CUPTI's buffer callbacks; `on_records(view, offsets)` runs on CUPTI's thread
    and must not keep `view`: the buffer is reused once it returns."""

    def __init__(self, on_records: Callable[[memoryview, list[int]], None], size: int) -> None:
        path = loaded_libcupti()
        if path is None:
            raise OSError("libcupti is not loaded in this process")
        self._lib = ctypes.CDLL(path)  # the same handle: dlopen of a loaded library
        self._next = self._lib.cuptiActivityGetNextRecord
        self._next.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        self._next.restype = ctypes.c_int
        self._lib.cuptiActivityRegisterCallbacks.argtypes = [_REQUESTED, _COMPLETED]
        self._lib.cuptiActivityRegisterCallbacks.restype = ctypes.c_int
        self._on_records, self._size = on_records, size
        self._buffers: dict[int, ctypes.Array] = {}
        """Buffers lent to CUPTI, by address, alive until it gives them back."""
        self._lock = threading.Lock()
        # ctypes callbacks must outlive the registration
        self._requested, self._completed = _REQUESTED(self._give), _COMPLETED(self._take)

    def register(self) -> None:
        rc = self._lib.cuptiActivityRegisterCallbacks(self._requested, self._completed)
        if rc != _SUCCESS:
            raise OSError(f"cuptiActivityRegisterCallbacks failed with CUPTI error {rc}")
        _registered.append(self)

    def _give(self, buffer, size, max_records) -> None:
        raw = (ctypes.c_uint64 * (self._size // 8))()  # 8-byte aligned, as CUPTI requires
        address = ctypes.addressof(raw)
        with self._lock:
            self._buffers[address] = raw
        buffer[0], size[0], max_records[0] = address, self._size, 0

    def _take(self, context, stream, buffer, size, valid) -> None:
        try:
            offsets = []
            if buffer and valid:
                record, step = ctypes.c_void_p(), self._next
                append, rec = offsets.append, ctypes.byref(record)
                while step(buffer, valid, rec) == _SUCCESS:
                    append(record.value - buffer)
                self._on_records(memoryview((ctypes.c_char * valid).from_address(buffer)),
                                 offsets)
        finally:
            with self._lock:
                self._buffers.pop(buffer, None)
