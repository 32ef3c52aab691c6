"""Scopes: named regions of the user's code, nested per thread (the "shadow" context).

Entering a scope interns its call path and, while CUPTI collects, pushes the path id as the
thread's external correlation id, so launches inside carry it with no further Python.
With context="python" the launch callback reads the thread's open scopes instead (their names
and the frames that opened them, see python_context) and nothing is pushed.
"""
from __future__ import annotations

import functools
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import metrics as m
from .errors import ScopeError
from .paths import ROOT, SCOPE, STATE, paths
from .python_context import launch_path, opener
from .session import profiler


@dataclass(slots=True)
class _Open:
    """A frame entered on this thread and not yet exited."""

    path: int
    name: str
    kind: str
    start_ns: int
    """time.time_ns() at entry when CPU time is recorded, else 0."""
    cpu_timed: bool
    pushed_by: object | None
    """The collector that pushed this frame's CUPTI external correlation id, if one did; it
    pops it again even after it stopped collecting, so CUPTI's stack never drifts."""
    opener: object | None = None
    """The user's Python frame that opened it (recorded for context="python" only)..."""
    opened_at: tuple[int, int] | None = None
    """... and where: (instruction offset, line)."""


class _Stacks(threading.local):
    def __init__(self) -> None:
        self.open: list[_Open] = []
        self.version = 0
        """Counts scope changes on this thread (python_context keeps paths until it changes)."""
        self.op = None
        """The collector that pushed a launch's op id (Triton hook), until the launch's exit."""
        self.op_path: int | None = None
        """context="python": the op path of the launch in progress, for the launch callback."""
        self.kept = None
        """context="python": this thread's python_context.Kept frames."""


_stacks = stacks = _Stacks()
"""This thread's open frames (read by the python context's launch callback)."""


def depth() -> int:
    """How many frames are open on this thread."""
    return len(_stacks.open)


def push_op(collector, path: int) -> None:
    """The Triton hook's launch enter: `path` applies to this one launch (pop_op at its exit)."""
    pop_op()
    _stacks.op_path = path  # the python context's launch callback (and exact PC sampling) read it
    if not collector.python:
        collector.push(path)
    _stacks.op = collector


def pop_op() -> None:
    """Pop a launch's op id if one is still pushed: also called before any scope change, since
    a launch that raised never reached the hook's exit and CUPTI's id stack must stay true."""
    st = _stacks
    if st.op is not None:
        st.op.pop()
        st.op = None
        st.op_path = None


def launch_parent() -> int:
    """Where a launch made here goes: the innermost open frame's path, or with
    context="python" the Python call path of the caller (with the scopes in it)."""
    if not profiler.python:
        return current_path()
    return launch_path(sys._getframe(1), _stacks)


def current_path() -> int:
    """Path id of this thread's innermost open frame (ROOT when none)."""
    st = _stacks.open
    return st[-1].path if st else ROOT


def repush_open_scopes() -> None:
    """Called when the collector starts: the calling thread's open scopes take effect now."""
    collector = profiler.collector
    st = _stacks.open
    if st and collector is not None and st[-1].pushed_by is None:
        collector.push(st[-1].path)
        st[-1].pushed_by = collector


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
    return enter_frame(name, m.check_user_metrics(metrics), cpu_timed=cpu_timed)


def enter_frame(name: str, values: dict[str, float], *, cpu_timed: bool = False,
                kind: str = SCOPE) -> int:
    """enter_scope with checked metrics and a frame kind (SCOPE, STATE, or OP for the hook)."""
    stacks = _stacks
    if stacks.op is not None:
        pop_op()
    st = stacks.open
    collector = profiler.collector
    timed = cpu_timed or (collector is None and bool(profiler.sessions))
    top = _Open(ROOT, name, kind, time.time_ns() if timed else 0, timed, None)
    st.append(top)
    stacks.version += 1
    if profiler.python:  # the scope's node is in the python call path that opened it
        top.opener, top.opened_at = opener(sys._getframe(1))
        top.path = path = launch_path(top.opener, stacks)
    else:
        top.path = path = paths.intern(st[-2].path if len(st) > 1 else ROOT, name, kind)
    if collector is not None:
        collector.push(path)
        top.pushed_by = collector  # only once pushed: its exit pops exactly what it pushed
        if threading.get_ident() == profiler.main_thread:
            profiler.note_main_path(path)
    if values and profiler.sessions:
        profiler.add_metrics(path, values)
    return path


def exit_scope(name: str | None = None, *, metrics: Mapping[str, Any] | None = None) -> int:
    """Close this thread's innermost scope; with `name`, check that it is the one closed.

    `metrics` are added to the scope's node after it closes.

    Raises:
        ScopeError: no scope is open, or the innermost one is not `name`.
    """
    values = m.check_user_metrics(metrics)
    st = _stacks.open
    if not st:
        if not profiler.sessions:
            return -1
        raise ScopeError(f"exit_scope({name or ''!r}) with no open scope on this thread; "
                         "pair every exit_scope with an enter_scope")
    if name is not None and st[-1].name != name:
        raise ScopeError(f"exit_scope({name!r}) but the innermost open scope is "
                         f"{st[-1].name!r}; close scopes in the reverse order of opening")
    return _close(st, values)


def _close(st: list[_Open], values: dict[str, float]) -> int:
    """Pop the innermost frame: its CUPTI id, its CPU time, its metrics."""
    if _stacks.op is not None:
        pop_op()
    top = st.pop()
    _stacks.version += 1
    if top.pushed_by is not None:
        top.pushed_by.pop()
    collector = profiler.collector
    if collector is not None:
        if st and st[-1].pushed_by is None:  # opened before collecting began: applies from now
            collector.push(st[-1].path)
            st[-1].pushed_by = collector
        if threading.get_ident() == profiler.main_thread:
            profiler.note_main_path(st[-1].path if st else ROOT)
    if top.cpu_timed and top.start_ns:
        values[m.CPU_TIME + m.EXCLUSIVE] = time.time_ns() - top.start_ns
    if values and profiler.sessions:
        profiler.add_metrics(top.path, values)
    return top.path


def unwind(to_depth: int) -> None:
    """Close every frame above `to_depth` on this thread, never raising: an exception left
    them open (the user's exception goes on, not a ScopeError)."""
    st = _stacks.open
    while len(st) > to_depth:
        _close(st, {})


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

    _cpu_timed = False

    _kind = SCOPE

    def __init__(self, name: str, metrics: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.metrics = m.check_user_metrics(metrics)
        self._depths: list[int] = []

    def _open(self) -> int:
        before = depth()
        enter_frame(self.name, self.metrics, cpu_timed=self._cpu_timed, kind=self._kind)
        return before

    def __enter__(self) -> "scope":
        self._depths.append(self._open())
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        before = self._depths.pop()
        if exc_type is None:
            exit_scope(self.name)
        else:
            unwind(before)

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            before = self._open()  # a local, so recursion and threads share the object safely
            try:
                result = func(*args, **kwargs)
            except BaseException:
                unwind(before)
                raise
            exit_scope(self.name)
            return result

        return wrapper


class cpu_timed_scope(scope):
    """A scope that also records its wall time on the CPU as `cpu_time (ns)` (exclusive).

    Usage:
        with proton.cpu_timed_scope("data_loading"):
            batch = next(loader)
    """

    _cpu_timed = True


class state(scope):
    """Name the kernels launched inside with an extra innermost frame (Triton's `state`).

    Usage:
        with proton.state("warmup"):
            kernel[grid](x)
    """

    _kind = STATE

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def __exit__(self, exc_type, exc, tb) -> None:
        before = self._depths.pop()
        if exc_type is None:
            exit_state()
        else:
            unwind(before)


def enter_state(name: str) -> None:
    """Open a state frame on this thread (see `state`); scopes opened inside nest under it."""
    enter_frame(name, {}, kind=STATE)


def exit_state() -> None:
    """Close the innermost frame, which must be a state.

    Raises:
        ScopeError: the innermost open frame is a scope, not a state.
    """
    st = _stacks.open
    if st and st[-1].kind != STATE:
        raise ScopeError(f"exit_state() but the innermost open frame is the scope "
                         f"{st[-1].name!r}; close it first")
    exit_scope()
