"""CUPTI's subscription and launch callbacks, through ctypes over the libcupti cupti-python loaded.

The process's one CUPTI subscriber. A shadow-context session enables the launch calls for
the C helper's launch log (native.LaunchLog; none when the helper is not built); a
python-context session enables the launch calls only, and its callback runs on the launching
thread at the call's enter and exit. cupti-python would build a Python object for every call's
data; here the callback gets CUPTI's pointer and reads the two fields it needs, at the offsets of
cupti-python's own layout of CUpti_CallbackData.
"""
from __future__ import annotations

import ctypes
from typing import Callable

from ..errors import ProfilerConflictError, ProtonError

CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
"""void (*)(void *userdata, CUpti_CallbackDomain, CUpti_CallbackId, const void *cbdata)"""
_MULTIPLE_SUBSCRIBERS = 39
_kept: list = []
"""Every callback ever subscribed: CUPTI may still be inside one as it unsubscribes."""
CALLBACK_CODES: set = set()
"""Code of every Python function CUPTI calls directly (main_thread.py makes no call while the
main thread is inside one: it is inside the CUDA call that made it)."""
PASSING_ON: set = set()
"""Code of the callbacks that only hand CUPTI's call on to another (NVTX, graphs, PC sampling
take theirs first): a callback that reads its caller's Python frame looks past them."""


def passes_on(func):
    """Mark `func` as a callback that hands CUPTI's calls on (see caller)."""
    PASSING_ON.add(func.__code__)
    return func


def caller(frame):
    """The innermost frame of the program that made the CUDA call, given the frame below a
    callback (None on a thread that runs no Python)."""
    while frame is not None and frame.f_code in PASSING_ON:
        frame = frame.f_back
    return frame


def cupti_enum(cupti, *names):
    """The first of `names` this cupti-python has: it renamed its enums between releases
    (driver_api_trace_cbid -> DriverApiTraceCbid)."""
    for name in names:
        if hasattr(cupti, name):
            return getattr(cupti, name)
    raise ProtonError(f"this cupti-python has none of {names}; install cupti-python 13.0.x")


def callback_fields(cupti) -> tuple[int, int, int]:
    """Offsets in CUpti_CallbackData of the callback site (0 = API enter), the correlation id
    and the pointer to the call's return value."""
    fields = cupti.callback_data_dtype.fields
    return tuple(fields[name][1] for name in
                 ("callback_site", "correlation_id", "function_return_value"))


class Subscriber:
    """cuptiSubscribe with `on_api(userdata, domain, cbid, cbdata)` as the callback, or with
    the C launch log's callback first (native.LaunchLog), which hands on_api the calls that
    are not launches."""

    def __init__(self, lib_path: str, on_api: Callable[[int, int, int, int], None],
                 log=None, enter: Callable[[int, int, int], None] | None = None) -> None:
        """log: native.LaunchLog, whose C callback takes CUPTI's calls first; enter: with it,
        the python context's launch enter (native.ENTER's arguments)."""
        lib = ctypes.CDLL(lib_path)  # the same handle: dlopen of a loaded library
        lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), CALLBACK, ctypes.c_void_p]
        lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
        lib.cuptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int,
                                            ctypes.c_uint32]
        self._lib = lib
        self._callback = CALLBACK(on_api)
        CALLBACK_CODES.add(on_api.__code__)
        self._forward = self._enter = None
        if log is not None:
            from .native import ENTER

            self._forward = self._callback
            self._enter = ENTER(enter) if enter is not None else None
            if enter is not None:
                CALLBACK_CODES.add(enter.__code__)
            log.configure(ctypes.cast(self._forward, ctypes.c_void_p).value, self._enter)
            self._callback = CALLBACK(log.callback)
        self._handle = ctypes.c_void_p()
        self.enabled: list[tuple[int, int]] = []
        """(domain, cbid) of every callback enabled: CUPTI calls back for these alone."""

    def subscribe(self) -> None:
        """Raises ProfilerConflictError when another profiler holds CUPTI."""
        rc = self._lib.cuptiSubscribe(ctypes.byref(self._handle), self._callback, None)
        if rc == _MULTIPLE_SUBSCRIBERS:
            raise ProfilerConflictError(
                "another profiler (torch.profiler, Triton's Proton, nsys or ncu) already uses "
                "CUPTI in this process; stop it first: one CUPTI profiler per process")
        if rc:
            raise ProtonError(f"CUPTI could not start: cuptiSubscribe failed with CUPTI error {rc}")
        _kept.extend((self._callback, self._forward, self._enter))

    def enable(self, domain: int, cbid: int) -> None:
        rc = self._lib.cuptiEnableCallback(1, self._handle, domain, cbid)
        if rc:
            raise ProtonError(f"CUPTI refused the launch callback {domain}/{cbid} (error {rc})")
        self.enabled.append((domain, cbid))

    def unsubscribe(self) -> None:
        if self._handle.value:
            self._lib.cuptiUnsubscribe(self._handle)
            self._handle = ctypes.c_void_p()
