"""Opening and closing frames on this thread's stack, and what the runtime is told about it.

Frames are tracked even while no session is live, so a session started inside open scopes still
places kernels under them. The runtime registers a `Recorder` with `attach`: it names the context
(which finds each frame's path), the collector (which pushes path ids, and takes the main
thread's path changes), and takes the frames' metrics. Nothing here imports the runtime.

A scope's enter and exit run here once each (proton.scope in a training step's inner loop):
while collecting on the main thread, each costs one call into the collector (push_main or
pop_main, one C call with the helper) and no clock read unless the frame is CPU-timed or a
trace session records scopes (then one read of the trace's clock at each end: `Span`).
"""
from __future__ import annotations

import itertools
import sys
from time import time_ns
from typing import Any, Callable, Protocol

from ..data.metrics import combine
from ..format import CPU_TIME, EXCLUSIVE
from ..data.paths import ROOT, SCOPE, STATE
from .shadow import ShadowContext
from . import stack
from .stack import Open, main_innermost, per_thread


class IdStack(Protocol):
    """The collector as frames see it: CUPTI's external correlation id stack of this thread."""

    pushes_ids: bool
    """False when launches are attributed another way (push and pop then do nothing)."""

    def push(self, path_id: int) -> None: ...

    def pop(self) -> None: ...

    def main_path(self, path_id: int) -> None:
        """The main thread's innermost frame is now `path_id` (ROOT: none): where launches of
        threads with no frame open go."""

    def push_main(self, path_id: int) -> None:
        """push and main_path in one (a frame opened on the main thread)."""

    def pop_main(self, path_id: int) -> None:
        """pop, and main_path of `path_id` (a frame closed on the main thread)."""


_span_ids = itertools.count(1)


class Span:
    """A scope's entry as a trace session records it: when it began, on the clock of the
    trace's kernels (Recorder.span_clock), and the metrics it was given (at its enter and
    exit, as Triton's Proton puts them on the scope's trace event)."""

    __slots__ = ("clock", "start", "metrics", "id")

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.start = clock()
        self.metrics: dict[str, Any] | None = None
        self.id = next(_span_ids)
        """Unique in the process: the trace event's scope_id."""

    def take(self, values: dict[str, Any]) -> None:
        """Metrics given to the scope while it is open (summed when given again)."""
        if self.metrics is None:
            self.metrics = {}
        metrics = self.metrics
        for key, value in values.items():
            old = metrics.get(key)
            metrics[key] = value if old is None else combine(old, value, key)


class Recorder:
    """What frames tell the runtime (which registers its own, with the same attributes and
    methods, through `attach`). This one, before any session, records nothing."""

    context = ShadowContext()
    """How a frame's path is found: shadow.ShadowContext or python.PythonContext."""
    collector: IdStack | None = None
    """Set while CUPTI collects."""
    recording = False
    """A session is live: metrics are added, and scopes are CPU-timed when there is no GPU."""
    span_clock: Callable[[], int] | None = None
    """While a trace session records scopes: the clock of its kernels, which times each
    scope's entry (a Span) for it; None otherwise (no clock is read)."""

    def add_metrics(self, path: int, values: dict[str, float], typed: bool = True,
                    metric_at: int | None = None, span: Span | None = None) -> None:
        """A frame's metrics, for the active sessions (and the frame's `span`, as they are
        kept: a GPU tensor's copy)."""

    def add_span(self, path: int, span: Span, thread: int) -> None:
        """A scope's entry timed by `span` ended now on `thread`: for the trace sessions."""

    def add_cpu_time(self, path: int, start_ns: int, end_ns: int) -> None:
        """A CPU-timed frame closed on the calling thread (time.time_ns() at entry and exit):
        each session counts the part inside its active stretches."""

    def check_session(self, session: int | None) -> None:
        """Raise SessionError unless `session` names a live session (None: any)."""


_recorder: Recorder = Recorder()


class ScopeListener(Protocol):
    """What hears the main thread's frames open and close (the runtime's parts: the scope
    ranges of counters:scopes=..., memory=True's allocator reads, the GPU's idle time). Called
    on the main thread only, never raising."""

    def scope_enter(self, top: Open) -> None: ...

    def scope_exit(self, top: Open) -> None: ...


listeners: tuple[ScopeListener, ...] | None = None
"""The runtime parts' scope listeners (runtime/parts), None while none listens: a frame's
enter and exit then cost one check for them."""


def listen(found: tuple[ScopeListener, ...]) -> None:
    """The runtime's parts that listen to scopes now (none: the empty tuple)."""
    global listeners
    listeners = found or None


def attach(recorder: Recorder) -> None:
    """Register the runtime's recorder (once, when the runtime loads)."""
    global _recorder
    _recorder = recorder


def pop_op() -> None:
    """End the launch's op (runtime/ops.py opens it: stack.Stacks.op_path and .op): also called
    before any frame change, since a launch that raised never reached the hook's exit and
    CUPTI's id stack must stay true."""
    st = per_thread.stacks
    if st.op_path is not None:
        st.op_path = None
        op = st.op
        if op is not None:
            op.pop()
            st.op = None


def launch_parent() -> int:
    """Where a launch made by the caller goes (the innermost open frame, or with
    context="python" the caller's Python call path with the scopes in it)."""
    path = _recorder.context.launch_path(sys._getframe(1))
    return ROOT if path is None else path


def after_fork_in_child() -> None:
    """In a forked child only the forking thread lives on, now the main thread, and its open
    frames' CUPTI ids were pushed in the parent's CUPTI, which the child never calls (nor its
    range profiler)."""
    global listeners
    listeners = None
    stack.after_fork_in_child()
    st = per_thread.stacks
    st.op, st.op_path = None, None
    for top in st.open:
        top.pushed_by = None


def repush_open_scopes() -> None:
    """Called when the collector starts: the calling thread's open scopes take effect now."""
    collector = _recorder.collector
    st = per_thread.stacks.open
    if st and collector is not None and st[-1].pushed_by is None:
        collector.push(st[-1].path)
        st[-1].pushed_by = collector


def enter_frame(name: str, values: dict[str, float] | None, *, cpu_timed: bool = False,
                kind: str = SCOPE, below_states: bool = False) -> int:
    """Open a frame (a scope, a state, or the frame launch_metadata runs in) with checked
    metrics; return its path id."""
    opened = per_thread.stacks.open
    return opened[open_frame(name, values, cpu_timed, kind, below_states)].path


def open_frame(name: str, values: dict[str, float] | None, cpu_timed: bool, kind: str,
               below_states: bool = True) -> int:
    """enter_frame, positional, returning how many frames were open before (the new one's
    index on the stack): proton.scope's enter. `below_states` (a scope's: the default, so
    the scope's enter passes nothing more): a frame other than a state opened while states
    are set goes below them (see _open_below_states). Metrics are added before the frame
    opens, so a refused value (ScopeError) leaves none open."""
    st = per_thread.stacks
    if st.op_path is not None:  # set whenever an op is pushed
        pop_op()
    opened = st.open
    if below_states and opened and opened[-1].kind == STATE and kind != STATE:
        return _open_below_states(name, values, cpu_timed, kind)
    recorder = _recorder
    collector = recorder.collector
    # the entry time whenever the frame may be CPU-timed: without a collector every scope is
    # (not a state: it names work, as in Triton), for a session live now or started while it
    # is open (which counts the part after it)
    top = Open(ROOT, name, kind, time_ns() if cpu_timed or (collector is None and kind != STATE)
               else 0, cpu_timed, None)
    top.path = path = recorder.context.scope_path(opened[-1].path if opened else ROOT, top)
    clock = recorder.span_clock
    if clock is not None and kind == SCOPE:
        top.span = Span(clock)
    if values and recorder.recording:
        recorder.add_metrics(path, values, span=top.span)
    opened.append(top)
    st.version += 1
    if listeners is not None and st.main:
        for listener in listeners:
            listener.scope_enter(top)
    if collector is not None:
        if st.main:
            collector.push_main(path)
        else:
            collector.push(path)
        top.pushed_by = collector  # only once pushed: its exit pops exactly what it pushed
    return len(opened) - 1


def _states_on_top(above: int) -> int:
    """Where the states open on top of this thread's stack begin, above index `above`."""
    opened = per_thread.stacks.open
    first = len(opened)
    while first > above + 1 and opened[first - 1].kind == STATE:
        first -= 1
    return first


def _take_states(above: int) -> list[str]:
    """Close the states open on top of this thread's stack, above index `above`; return
    their names, outermost first, for _put_states."""
    opened = per_thread.stacks.open
    first = _states_on_top(above)
    names = [top.name for top in opened[first:]]
    unwind(first)
    return names


def _put_states(names: list[str]) -> None:
    for name in names:
        open_frame(name, None, False, STATE)


def _open_below_states(name: str, values: dict[str, float] | None, cpu_timed: bool,
                       kind: str) -> int:
    """A scope opened while states are set, as in Triton's Proton (a state is the last frame
    of every path while it is set): the scope goes under the innermost scope and the states
    move below it, so its metrics and its kernels land on scope/state."""
    states = _take_states(-1)
    at = open_frame(name, None, cpu_timed, kind, False)
    _put_states(states)
    if values and _recorder.recording:
        opened = per_thread.stacks.open
        try:
            _recorder.add_metrics(opened[-1].path, values, span=opened[at].span)
        except BaseException:
            close_below_states(at)  # a refused value opens nothing
            raise
    return at


def close_below_states(at: int, values: dict[str, float] | None = None) -> int:
    """Close the frame at index `at` of this thread's stack and every frame above it but the
    states open on top, which stay set: they move down to where the frame was. `values` go
    where the frame's kernels went (the innermost state's node under it, else its own).
    Returns the closed frame's path id. The exit of a scope opened while states were set."""
    opened = per_thread.stacks.open
    if at >= len(opened):  # closed already (by the user, inside it)
        return -1
    if values and _recorder.recording and opened[-1].kind == STATE and len(opened) > at + 1:
        _recorder.add_metrics(opened[-1].path, values, span=opened[at].span)
        values = None
    states = _take_states(at)
    path = opened[at].path
    while len(opened) > at + 1:  # scopes left open inside it
        close_frame({})
    close_frame(values)
    _put_states(states)
    return path


def below_states() -> int:
    """The index of this thread's innermost frame that is not one of the states on top of the
    stack (-1: none)."""
    return _states_on_top(-1) - 1


def innermost() -> Open | None:
    """This thread's innermost open frame."""
    opened = per_thread.stacks.open
    return opened[-1] if opened else None


def close_frame(values: dict[str, float] | None = None, named: str | None = None) -> int:
    """Close this thread's innermost frame (there must be one): its CUPTI id, its CPU time and
    its metrics (`values`, added after it closes); return its path id. With `named` (a
    scope's exit), only if the innermost frame is called so: else return -1, closing none."""
    st = per_thread.stacks
    opened = st.open
    if named is not None and (not opened or opened[-1].name != named):
        return -1
    if st.op_path is not None:
        pop_op()
    top = opened.pop()
    st.version += 1
    if listeners is not None and st.main:
        for listener in listeners:
            listener.scope_exit(top)
    by = top.pushed_by
    recorder = _recorder
    collector = recorder.collector
    if collector is not None and by is collector and st.main and (
            not opened or opened[-1].pushed_by is not None):
        collector.pop_main(opened[-1].path if opened else ROOT)  # the common case: one call
    else:
        if by is not None:
            by.pop()
        if collector is not None:
            if opened and opened[-1].pushed_by is None:  # opened before collecting: now
                collector.push(opened[-1].path)
                opened[-1].pushed_by = collector
            if st.main:
                collector.main_path(opened[-1].path if opened else ROOT)
    if recorder.recording and times_cpu(top, collector):
        recorder.add_cpu_time(top.path, top.start_ns, time_ns())
    if values and recorder.recording:
        recorder.add_metrics(top.path, values, span=top.span)
    if top.span is not None:  # after its exit's metrics, as Triton's Proton times it
        if top.cpu_timed:  # as Triton's cpu_timed_scope gives it to the trace's event
            top.span.take({CPU_TIME + EXCLUSIVE: time_ns() - top.start_ns})
        recorder.add_span(top.path, top.span, st.thread)
    return top.path


def time_open_scopes(clock: Callable[[], int] | None) -> None:
    """A trace session began to record scopes on `clock` (the span clock changed): every
    thread's open scopes are timed from now on it, as if entered now (a trace records a
    scope's part inside the session; an entry timed on another clock could not be placed)."""
    if clock is None:
        return
    for _, opened in stack.every_open():
        for top in opened:
            if top.kind == SCOPE and (top.span is None or top.span.clock != clock):
                top.span = Span(clock)


def times_cpu(frame: Open, collector: IdStack | None) -> bool:
    """Whether `frame` records cpu_time now: a cpu_timed_scope always, any scope while no
    collector runs (with one, scopes carry their kernels' time instead)."""
    return bool(frame.start_ns) and (frame.cpu_timed or collector is None)


def unwind(to_depth: int) -> None:
    """Close every frame above `to_depth` on this thread, never raising: an exception left
    them open (the user's exception goes on, not a ScopeError)."""
    opened = per_thread.stacks.open
    while len(opened) > to_depth:
        close_frame({})


def recording() -> bool:
    """A session is live."""
    return _recorder.recording


def check_session(session: int | None) -> None:
    """SessionError unless `session` is a live session's id (the runtime's recorder knows)."""
    _recorder.check_session(session)
