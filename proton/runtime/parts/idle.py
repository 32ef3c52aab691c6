"""The CPU's waits on the GPU and the GPU's idle time as a part, for as long as the collector
runs: the waits summed per path (sync_time, sync_count) onto the active sessions; each wait as
an event for the traces that show them; the main thread's scope entries judged against the
GPU's busy time (runtime/idle.py's tracker, a scope listener) onto the sessions active at
their start, with each step's parts.

`buffered` runs after each CUPTI buffer (CUPTI's thread, holding the GIL) and at each flush;
the tracker's own lock guards it. PROTON_OFF=waits or idle leaves either out.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterator

from ...format import (EXCLUSIVE, GPU_IDLE, GPU_IDLE_EXCLUDED, SCOPE_WALL, STEP_COUNT,
                       STEP_PARTS, STEP_WALL, SYNC_COUNT, SYNC_TIME)
from ...options import parts_off
from ...report import warn
from .base import Part

if TYPE_CHECKING:
    from ...cupti.settings import PartAsks
    from ...options import SessionOptions
    from ..idle import IdleTracker, Judged  # numpy: loaded with the collector
    from ..session import Session


class IdlePart(Part):
    """Waits and idle time of every session while CUPTI collects."""

    name = "idle"

    def __init__(self, profiler) -> None:
        super().__init__(profiler)
        self.tracker: IdleTracker | None = None
        """The main thread's scope entries against the GPU's busy time, while collecting."""
        self.wait_events = False
        """The collector keeps each wait as an event (for a trace session, or the tracker)."""
        self._made: IdleTracker | None = None
        """The tracker made for the collector being started."""

    def wants(self, opts: SessionOptions) -> bool:
        return True

    def collector_asks(self, opts: SessionOptions, asks: PartAsks) -> PartAsks:
        from ..idle import IdleTracker

        off = parts_off()
        tracker = self._made = None if "idle" in off else IdleTracker()
        return replace(asks, busy=tracker.add if tracker else None,
                       launched=tracker.launched if tracker else None,
                       waits="waits" not in off)

    def collector_started(self, collector: Any) -> None:
        tracker, self._made = self._made, None
        if tracker is not None:
            tracker.clock, tracker.cut = collector.timestamp, collector.opened
            tracker.sink = self.add
        self.tracker = self.listener = tracker

    def collector_stopping(self) -> None:
        self.tracker = self.listener = None
        self.wait_events = False

    def collector_stopped(self, collector: Any) -> None:
        if left_out := collector.wait_events_dropped:
            warn(f"the trace misses {left_out} waits: more came between two CUPTI buffers "
                 "than its wait log holds (2^20)")

    @contextlib.contextmanager
    def own_work(self) -> Iterator[None]:
        """Proton's own work on the main thread (start, activate, deactivate, flushes): GPU idle
        time meanwhile is the profiler's, not the job's (runtime/idle.py). A session's start
        counts from when CUPTI began to collect (kernel activity on)."""
        idle, profiler = self.tracker, self.profiler
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        t0 = profiler.now() if idle is not None else None
        try:
            yield
        finally:
            if self.tracker is not None and profiler.collector is not None:
                begin = t0 if idle is self.tracker and t0 is not None \
                    else profiler.collector.opened
                self.tracker.own(begin, profiler.now())

    def buffered(self, final: bool = False) -> None:
        """The waits summed since the last take, onto the active sessions; the scope entries
        whose records have all come, judged and onto the sessions active at their start; each
        wait as an event onto the traces active at its start. `final`: the last steps end
        where the GPU drained (finalize)."""
        collector, idle = self.profiler.collector, self.tracker
        if collector is None:
            return
        sessions = self.profiler.sessions
        paths_, ns, counts = collector.take_syncs()
        if paths_:
            active = [s for s in list(sessions.values()) if s.active]
            for path, t, n in zip(paths_, ns, counts):
                for s in active:
                    s.add(path, {SYNC_TIME: t, SYNC_COUNT: n}, fold=False)
        if self.wait_events:
            events = collector.take_wait_events()
            if idle is not None and events:
                _host_stretches(idle, events)
            traces = [s for s in list(sessions.values()) if s.traces_waits]
            for path, start, end, thread in events:
                if path < 0:  # a slow launch call (cupti.native.SLOW_LAUNCH_PATH)
                    continue
                for s in traces:
                    if s.active_at(start):
                        s.add_wait(path, start, end, thread)
        if idle is not None:
            self.add(idle.advance(collector.watermark()))
            if final:
                self.add(idle.end_steps())

    def sessions_changed(self) -> None:
        """Waits are kept as events while the idle tracker classes the GPU's idle time by
        them, or a live session's trace shows them (Session.traces_waits). Under the lock."""
        collector = self.profiler.collector
        on = collector is not None and (self.tracker is not None or any(
            s.traces_waits for s in self.profiler.sessions.values()))
        if on != self.wait_events:
            if collector is not None:
                collector.wait_events(on)
            self.wait_events = on

    def add(self, judged: Judged | None) -> None:
        """Judged scope entries (runtime/idle.py) onto each session active at their start:
        per path, the sums of their wall and idle times (the node's own values); and judged
        step windows, the sums of their parts (format.STEP_METRICS)."""
        if judged is None:
            return
        import numpy as np

        steps = judged.steps
        if not len(judged) and (steps is None or not len(steps)):
            return
        busy = judged.busy if judged.busy is not None else \
            judged.walls - judged.idles - (judged.excluded if judged.excluded is not None else 0)
        excluded = judged.excluded if judged.excluded is not None else np.zeros(len(judged))
        # an entry in which the GPU ran nothing says nothing of the GPU unless it is inside a
        # step of a job whose GPU runs (Judged.shown): a job with no GPU work has no idle
        # metrics, as Triton's files have none (its test_scope_exclusive counts a scope's)
        entries = (judged.paths, judged.starts, busy > 0 if judged.shown is None else judged.shown,
                   np.stack((judged.walls, judged.idles, excluded), axis=1))
        names: tuple[str, ...] = (SCOPE_WALL + EXCLUSIVE, GPU_IDLE + EXCLUSIVE,
                                  GPU_IDLE_EXCLUDED + EXCLUSIVE)
        groups: list[tuple[tuple, tuple[str, ...]]] = [(entries, names)]
        if steps is not None and len(steps):
            ran = steps.parts[:, :3].sum(axis=1) > 0  # compute, comm, copy
            values = np.column_stack((steps.walls, np.ones(len(steps)), steps.parts))
            groups.append(((steps.paths, steps.starts, ran, values),
                           tuple(m + EXCLUSIVE for m in (STEP_WALL, STEP_COUNT, *STEP_PARTS))))
        for s in list(self.profiler.sessions.values()):
            if s.data != "tree":
                continue
            for (paths_, starts, keep, values), keys in groups:
                _add_sums(s, paths_, starts, keep, values, keys)

    def after_fork_in_child(self) -> None:
        self.tracker = self.listener = None
        self.wait_events = False


class CopiesPart(Part):
    """Copies and sets (MEMCPY, MEMCPY2, MEMSET records) on nodes of their own, joined to their
    calls by the collector; PROTON_OFF=copies leaves them out."""

    name = "copies"

    def wants(self, opts: SessionOptions) -> bool:
        return True

    def collector_asks(self, opts: SessionOptions, asks: PartAsks) -> PartAsks:
        return replace(asks, copies="copies" not in parts_off())


_ONLY_IF_ANY = {GPU_IDLE_EXCLUDED + EXCLUSIVE}
"""Written only where it is not 0 (files of jobs the profiler did not delay read as before)."""


def _host_stretches(idle: IdleTracker, events: list) -> None:
    """The wait log's events (path, start, end, thread) as the idle tracker's host stretches:
    the main thread's waits (SYNC) and any thread's slow launch calls (LAUNCH)."""
    from ...cupti.native import SLOW_LAUNCH_PATH
    from ..idle import LAUNCH, SYNC

    main = threading.main_thread().ident
    waits = [(a, b) for p, a, b, t in events if p >= 0 and t == main]
    slow = [(a, b) for p, a, b, _ in events if p == SLOW_LAUNCH_PATH]
    for kind, found in ((SYNC, waits), (LAUNCH, slow)):
        if found:
            idle.host(kind, [a for a, _ in found], [b for _, b in found])


def _add_sums(s: Session, paths_, starts, keep, values, keys: tuple[str, ...]) -> None:
    """Rows (path, start, values) whose start falls in one of `s`'s active stretches and that
    `keep` marks, summed per path and phase onto `s` (an entry goes to the phase it began in,
    as a kernel goes to its launch's: one judged after advance_phase is the earlier phase's)."""
    import numpy as np

    inside = np.zeros(len(paths_), dtype=bool)
    for start, end in list(s.intervals):
        inside |= (starts >= start) & ((starts <= end) | (end == -1))
    inside &= keep
    if not inside.any():
        return
    at = starts[inside]
    phase = np.searchsorted(np.asarray(s.phase_starts), at, side="right")
    pairs = np.stack((phase, paths_[inside]), axis=1)
    pairs, first, where = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
    where = where.reshape(-1)
    rows = values[inside].astype(float)
    sums = np.stack([np.bincount(where, rows[:, k], minlength=len(pairs))
                     for k in range(rows.shape[1])], axis=1)
    for (_, path), when, row in zip(pairs.tolist(), at[first].tolist(), sums.tolist()):
        s.add(path, {k: int(v) for k, v in zip(keys, row) if v or k not in _ONLY_IF_ANY},
              fold=False, at=when)


