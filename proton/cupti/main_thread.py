"""Calls that must run on the job's main thread, between two of its Python instructions.

CUPTI's PC-sampling control calls take a CUPTI lock, then the driver's context lock for
writing; a kernel launch holds that driver lock and then takes the CUPTI lock. Seen on an H100
(2026-11-25): `cuptiPCSamplingDisable` on a capture thread and `cuLaunchKernelEx` under a torch
matmul on the main thread, each waiting for the other for good. So such a call is made where no
launch can be in flight: on the main thread (which makes a training job's launches; autograd's
thread launches only while the main thread waits in `backward()`), at a point where it runs
Python (not inside a CUDA call, nor inside a CUPTI callback that a launch is running), and
holding the GIL throughout (pcsampling.Library), so no other Python thread starts a launch
meanwhile.

From another thread the call is handed over with `Py_AddPendingCall`, which the interpreter runs
on the main thread between two instructions. A main thread that runs no Python for `timeout`
seconds (a long C call, a blocking wait) gets no chance: the call is then dropped
(`keep=False`) or left to run whenever it next runs Python (`keep=True`, for clean-ups such as
disabling sampling), and `MainThreadBusy` tells the caller.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections import deque
from types import FrameType
from typing import Callable, TypeVar

from .. import settings
from ..errors import ProtonError
from .subscriber import CALLBACK_CODES

T = TypeVar("T")
TIMEOUT = settings.value("PROTON_MAIN_THREAD_TIMEOUT")
"""Seconds a call waits for the main thread to run Python (PROTON_MAIN_THREAD_TIMEOUT)."""


class MainThreadBusy(ProtonError):
    """The main thread ran no Python in time to make a call that must be made there."""


class _Request:
    __slots__ = ("fn", "state", "value", "error", "done")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.state = "waiting"
        """waiting -> running -> done; or waiting -> dropped (timed out, not kept)."""
        self.value: object = None
        self.error: BaseException | None = None
        self.done = threading.Event()


_queue: deque[_Request] = deque()
_lock = threading.Lock()
_PENDING = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


def _in_cupti_callback() -> bool:
    """The main thread is inside a CUPTI callback (so inside the CUDA call that made it)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code in CALLBACK_CODES:
            return True
        frame = frame.f_back
    return False


def _run_pending(_arg) -> int:
    """On the main thread, between two instructions: run what waits. Never raises (an
    exception here would surface in the job's own code)."""
    try:
        if _in_cupti_callback():
            return 0  # the waiter asks again shortly, once the CUDA call has returned
        while True:
            with _lock:
                if not _queue:
                    return 0
                request = _queue.popleft()
                if request.state != "waiting":
                    continue
                request.state = "running"
            _run(request)
    except BaseException:
        return 0


def _run(request: _Request) -> None:
    try:
        request.value = request.fn()
    except BaseException as exc:
        request.error = exc
    request.state = "done"
    request.done.set()


_trampoline = _PENDING(_run_pending)  # kept: the interpreter holds only its address
_add_pending = ctypes.pythonapi.Py_AddPendingCall
_add_pending.argtypes = [_PENDING, ctypes.c_void_p]
_add_pending.restype = ctypes.c_int


def call(fn: Callable[[], T], *, timeout: float, what: str, keep: bool = False) -> T:
    """fn() on the main thread (here, when this is it or it has ended); its result or its
    exception.

    Raises:
        MainThreadBusy: the main thread ran no Python within `timeout` seconds; `what`
            names the call in the message. With `keep`, fn still runs when it next does.
    """
    main = threading.main_thread()
    if threading.current_thread() is main or not main.is_alive():
        return fn()
    request = _Request(fn)
    with _lock:
        _queue.append(request)
    deadline = time.monotonic() + timeout
    while not request.done.wait(0.005):
        with _lock:
            if request.state != "waiting":
                continue  # running on the main thread: wait for it
            if not main.is_alive():  # no launch comes from it any more: make the call here
                request.state = "running"
            elif time.monotonic() > deadline:
                if not keep:
                    request.state = "dropped"
                raise MainThreadBusy(
                    f"{what} must run on the job's main thread, which ran no Python for "
                    f"{timeout:g} s (busy in a C call or a blocking wait)"
                    + ("; it will run when the main thread next runs Python" if keep else ""))
        if request.state == "running":
            _run(request)
        else:
            _add_pending(_trampoline, None)  # again each time: it may have run in a callback
    if request.error is not None:
        raise request.error
    return request.value  # type: ignore[return-value]
