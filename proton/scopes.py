"""Scopes: named regions of the user's code, nested per thread.

Entering a scope interns its call path and, while CUPTI collects, pushes the path id as the
thread's external correlation id, so launches inside carry it with no further Python.
With context="python" the launch callback reads the thread's open scopes instead (their names
and the frames that opened them, see context/python.py) and nothing is pushed.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from .context.frames import (below_states, close_below_states, close_frame, enter_frame,
                             innermost, open_frame, recording, unwind)
from .context.stack import per_thread
from .data.metrics import check_scope_name, check_user_metrics
from .data.paths import SCOPE, STATE
from .errors import ScopeError
from .format import LAUNCH_METADATA
from .runtime import ops
from .service.protocol import listen_asked

_listen_pending = listen_asked()
"""PROTON_LISTEN is set: the first scope opens the capture endpoint (a launcher's way to make a
job capturable; importing proton opens nothing). One global read per scope otherwise."""


def _listen_from_environment() -> None:
    global _listen_pending
    _listen_pending = False
    from .service.endpoint import listen_from_environment

    listen_from_environment()


def enter_scope(name: str, *, metrics: Mapping[str, Any] | None = None,
                cpu_timed: bool = False) -> int:
    """Open a scope on this thread; return its path id.

    Scopes are tracked even while no session is live, so a session started inside open scopes
    still places kernels under them.

    Usage:
        proton.enter_scope("attention")
        ...
        proton.exit_scope("attention")
    """
    if _listen_pending:
        _listen_from_environment()
    return enter_frame(check_scope_name(name), check_user_metrics(metrics),
                       cpu_timed=cpu_timed, below_states=True)


def exit_scope(name: str | None = None, *, metrics: Mapping[str, Any] | None = None) -> int:
    """Close this thread's innermost scope; with `name`, check that it is the one closed.

    `metrics` are added to the scope's node after it closes (to its state's, while a state
    is set: see `state`). States set inside it stay set.

    Raises:
        ScopeError: no scope is open, or the innermost one is not `name`.
    """
    if name is not None:
        check_scope_name(name)
    values = check_user_metrics(metrics)
    top = innermost()
    at = -1
    if top is not None and top.kind == STATE:  # scopes opened while it is set sit below it
        at = below_states()
        top = per_thread.stacks.open[at] if at >= 0 else None
    if top is None:
        if not recording():
            return -1
        raise ScopeError(f"exit_scope({name or ''!r}) with no open scope on this thread; "
                         "pair every exit_scope with an enter_scope")
    if name is not None and top.name != name:
        raise ScopeError(f"exit_scope({name!r}) but the innermost open scope is "
                         f"{top.name!r}; close scopes in the reverse order of opening")
    return close_frame(values) if at < 0 else close_below_states(at, values)


class scope:
    """A named region, as a context manager or a decorator.

    Usage:
        with proton.scope("forward", {"tokens": 4096}):
            model(x)

        @proton.scope("step")
        def step(): ...

    Args:
        name: the frame's name in the tree.
        metrics: numbers added to the scope's node at entry; a name ending in "(exc)" is
            exclusive (not summed into parents).
    """

    __slots__ = ("name", "metrics", "_depths")

    _cpu_timed = False

    _kind = SCOPE

    def __init__(self, name: str, metrics: Mapping[str, Any] | None = None) -> None:
        self.name = name if name.__class__ is str and name else check_scope_name(name)
        self.metrics = None if metrics is None else check_user_metrics(metrics)
        self._depths: list[int] = []
        """How many frames were open at each enter not yet exited (a scope object may be
        entered again before it exits): an exception unwinds to it."""

    def _open(self) -> int:
        if _listen_pending:
            _listen_from_environment()
        return open_frame(self.name, self.metrics, self._cpu_timed, self._kind)

    def __enter__(self) -> "scope":
        self._depths.append(self._open())
        return self

    def _close(self) -> None:
        exit_scope(self.name)

    def _unwind(self, before: int) -> None:
        """An exception left it (and maybe frames inside it) open."""
        close_below_states(before)  # a state set inside stays set, as on a normal exit

    def __exit__(self, exc_type, exc, tb) -> None:
        before = self._depths.pop()
        if exc_type is not None:
            self._unwind(before)
            return
        if close_frame(None, self.name) == -1:  # not the innermost frame, or none open
            exit_scope(self.name)  # its one-line error (or nothing with no session live)

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            before = self._open()  # a local, so recursion and threads share the object safely
            try:
                result = func(*args, **kwargs)
            except BaseException:
                self._unwind(before)
                raise
            self._close()
            return result

        return wrapper


class cpu_timed_scope(scope):
    """A scope that also records `cpu_time (ns)` (exclusive): as in Triton's Proton, the
    wall-clock time on the host from entering to leaving it (sleeps and waits included), not the
    process's CPU time. Without a GPU every scope records it.

    Usage:
        with proton.cpu_timed_scope("data_loading"):
            batch = next(loader)
    """

    __slots__ = ()

    _cpu_timed = True


class state(scope):
    """Name what happens while it is set with a last frame, as Triton's `state` does: kernels
    launched inside go to a child `name` of the innermost scope, and a scope entered inside
    goes under the innermost scope with the state below it (scope -> inner scope -> state),
    where its metrics and kernels land. Unlike Triton's, a state set inside another nests
    (outer -> inner) rather than replacing it.

    Usage:
        with proton.state("warmup"):
            kernel[grid](x)            # -> <scope>/warmup/kernel
    """

    __slots__ = ()

    _kind = STATE

    def __init__(self, name: str) -> None:
        super().__init__(check_scope_name(name, "state name"))

    def _close(self) -> None:
        exit_state()

    def _unwind(self, before: int) -> None:
        unwind(before)

    def __exit__(self, exc_type, exc, tb) -> None:
        before = self._depths.pop()
        if exc_type is None:
            self._close()
        else:
            self._unwind(before)


class metadata_state(ops.frame):
    """The state Triton's Proton puts launch-metadata work in: kernels launched inside go right
    under `__proton_launch_metadata` (then `kernel_name`, when given, as a second state),
    which both viewers hide. Without a kernel name, the launch hook's own state.

    Usage:
        with proton.metadata_state("matmul_kernel"):
            flops = x.sum().item()   # launch metadata that itself launches a kernel
    """

    __slots__ = ()

    def __init__(self, kernel_name: str | None = None) -> None:  # Triton 3.9's parameter name
        super().__init__(LAUNCH_METADATA, *([check_scope_name(kernel_name, "kernel name")]
                                            if kernel_name else []))


def enter_state(name: str) -> None:
    """Set a state on this thread (see `state`) until exit_state()."""
    enter_frame(check_scope_name(name, "state name"), {}, kind=STATE)


def exit_state() -> None:
    """Unset the state set last on this thread (see `state`).

    Raises:
        ScopeError: no state is set on this thread.
    """
    top = innermost()
    if top is None or top.kind != STATE:
        if top is None and not recording():
            return
        where = f" (the innermost open frame is the scope {top.name!r})" if top else ""
        raise ScopeError(f"exit_state() but no state is set on this thread{where}; pair "
                         "every exit_state with an enter_state")
    close_frame()
