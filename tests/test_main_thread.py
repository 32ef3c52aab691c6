"""main_thread.call: calls that must not race the main thread's kernel launches run on the main
thread, between two of its Python instructions, never inside a CUPTI callback, and a main
thread that runs no Python costs the caller a bounded wait, not a hang."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from proton.cupti import main_thread
from proton.cupti.main_thread import MainThreadBusy
from proton.cupti.subscriber import CALLBACK_CODES


def _in_thread(fn):
    """Run fn on a new thread while the main thread spins in Python; (value, error)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 10
    while worker.is_alive() and time.monotonic() < deadline:
        sum(range(100))  # Python instructions: pending calls run between them
    worker.join(10)
    return out.get("value"), out.get("error")


def test_a_call_from_another_thread_runs_on_the_main_thread():
    value, error = _in_thread(lambda: main_thread.call(
        lambda: threading.current_thread() is threading.main_thread(), timeout=5, what="x"))
    assert error is None and value is True


def test_a_call_on_the_main_thread_runs_at_once():
    assert main_thread.call(threading.get_ident, timeout=0.1, what="x") == threading.get_ident()


def test_the_calls_exception_reaches_the_caller():
    def fail():
        raise ValueError("from the main thread")

    _, error = _in_thread(lambda: main_thread.call(fail, timeout=5, what="x"))
    assert isinstance(error, ValueError) and "from the main thread" in str(error)


class _Answered(Exception):
    """Raised in the main thread by SIGUSR1's handler: the asking thread has its answer."""


def _blocked_main(timeout: float, keep: bool, block_s: float = 10.0):
    """The main thread sleeps (a C call) while a thread asks for a call, until that thread has
    its answer (it wakes the sleep with SIGUSR1; at most block_s): however late the loaded
    machine starts the thread, the main thread runs no Python meanwhile. (A lock's wait would
    not do: a signal such as SIGCHLD interrupting it makes CPython run the pending calls.)"""
    ran: list[str] = []
    out: dict = {}
    main = threading.get_ident()
    asleep: list[bool] = []

    def ask():
        # only once the main thread is about to sleep: asked earlier (as soon as the thread
        # starts), the call could run in the Python of Thread.start() still returning
        while not asleep:
            time.sleep(0.001)
        time.sleep(0.05)  # it sleeps now: from the flag to the sleep no pending call can run
        out["asked"] = time.monotonic()
        try:
            main_thread.call(lambda: ran.append(threading.current_thread().name),
                             timeout=timeout, what="switching it on", keep=keep)
        except MainThreadBusy as exc:
            out["error"] = exc
            out["at"] = time.monotonic()
        finally:
            signal.pthread_kill(main, signal.SIGUSR1)

    def answered(signum, frame):
        raise _Answered

    before = signal.signal(signal.SIGUSR1, answered)
    try:
        worker = threading.Thread(target=ask)
        worker.start()
        try:
            asleep.append(True)  # a C method, then the C sleep: no Python runs between
            time.sleep(block_s)
        except _Answered:
            pass
        worker.join(5)
    finally:
        signal.signal(signal.SIGUSR1, before)
    for _ in range(1000):  # Python again: anything kept runs now
        sum(range(10))
    return ran, out


def test_a_busy_main_thread_costs_the_caller_its_timeout_then_a_one_line_reason():
    ran, out = _blocked_main(timeout=0.2, keep=False)
    assert isinstance(out.get("error"), MainThreadBusy)
    message = str(out["error"])
    assert "switching it on" in message and "main thread" in message and "\n" not in message
    # gave up at its timeout (the main thread would have waited 10 s)
    assert 0.15 < out["at"] - out["asked"] < 2.0
    assert ran == []  # dropped: it never runs late


def test_a_kept_call_runs_once_the_busy_main_thread_runs_python_again():
    ran, out = _blocked_main(timeout=0.2, keep=True)
    assert isinstance(out.get("error"), MainThreadBusy)
    assert ran == ["MainThread"]


def test_no_call_runs_while_the_main_thread_is_inside_a_cupti_callback():
    left: list[float] = []

    inside = threading.Event()

    def callback():  # as CUPTI would call it from inside a launch: Python in a CUDA call
        inside.set()  # the thread asks only now: a call asked before it may run before it
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            sum(range(10))
        left.append(time.monotonic())

    def ask() -> None:
        inside.wait(5)
        main_thread.call(lambda: ran_at.append(time.monotonic()), timeout=5, what="x")

    CALLBACK_CODES.add(callback.__code__)
    try:
        ran_at: list[float] = []
        worker = threading.Thread(target=ask)
        worker.start()
        callback()
        for _ in range(10000):
            if ran_at:
                break
            sum(range(10))
            time.sleep(0.001)
        worker.join(5)
    finally:
        CALLBACK_CODES.discard(callback.__code__)
    assert ran_at and left and ran_at[0] >= left[0]
