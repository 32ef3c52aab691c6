"""One profile being recorded: its options, when it was active, and the metrics it holds."""
from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..cupti.attribution import KernelRecord
from ..data.chrome_trace import ScopeSpan
from ..data.job import Job
from ..data.metrics import DEVICE_CUDA, check_same_type, combine
from ..format import BYTES, COUNT, CPU_COUNT, CPU_TIME, DEVICE_ID, DEVICE_TYPE, EXCLUSIVE, TIME


@dataclass(slots=True)
class Phase:
    """One phase's data (see Session.nodes, events, spans, waits)."""

    nodes: dict[int, dict[str, float]]
    events: list
    spans: list
    waits: list


@dataclass(slots=True)
class Session:
    """One profile being recorded."""

    id: int
    name: str
    """The name given to start(); the file is written to `path`."""
    path: str
    context: str
    data: str
    hook: str | None
    """hook= as given to start() (None: no launch hook)."""
    intervals: list[list[int]] = field(default_factory=list)
    """[start, end] timestamps of each active stretch; the last end is -1 while active."""
    host_intervals: list[list[int]] = field(default_factory=list)
    """The same stretches on the host's clock (time.time_ns(), as scopes' cpu_time)."""
    nodes: dict[int, dict[str, float]] = field(default_factory=dict)
    """Metrics by path id; exclusive values, as written to the file (data="tree")."""
    events: list[tuple[int, KernelRecord, int | None]] = field(default_factory=list)
    """Every kernel with its path id and its launch call's start (data="trace")."""
    spans: list[ScopeSpan] = field(default_factory=list)
    """Scope entries, on the kernels' clock while collecting, else the host's (data="trace",
    see traces_scopes)."""
    waits: list[tuple[int, int, int, int]] = field(default_factory=list)
    """The CPU blocked on the GPU: (path id, start ns, end ns, thread id) on the kernels' clock
    (data="trace", while a collector runs)."""
    launch: dict[int, dict[int, int]] = field(default_factory=dict)
    """Kernel node -> {launch configuration number: GPU ns} (data="tree")."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    """Set (under `lock`) when finalize takes the data; late kernel records are then ignored."""
    job: Job | None = None
    """The writing process (rank, host, pid), recorded in the file."""
    began: float = field(default_factory=time.time)
    """Wall-clock start: a file of the same name written after it is another process's."""
    flush: str | None = None
    """mode="periodic_flushing": the format each finished phase is written in."""
    only_kernels: dict | None = None
    """The kernel nodes it counts, None: all (an instrumentation session's instrumented
    launches, kept after it ends, as Triton's Proton records only instrumented kernels). A
    session with such a filter traces the kernels' scopes alone (the kernel records only place
    them on the clock)."""
    parts: dict[str, Any] = field(default_factory=dict)
    """The state of each part (runtime/parts) this session asked for, by the part's name."""
    keep_others: bool = False
    """A capture's: a file at its path that this process did not write stays (the profile
    goes beside it)."""
    merged_early: str | None = None
    """"ok" or "failed": its job file was merged before the process group ended (the `proton`
    command, job_merge.before_destroy); its rank file is written at the end."""
    merge: tuple[str, list[int]] | None = None
    """A capture's: the key its ranks' merge meets under (the capture's id) and the ranks
    captured with it; None: every rank of the job, keyed by the profile's name."""
    phase: int = 0
    """The phase being recorded (proton.data.advance_phase starts the next)."""
    phase_starts: list[int] = field(default_factory=lambda: [0])
    """When each phase began (CUPTI's clock); phase 0 from the start."""
    earlier: dict[int, Phase] = field(default_factory=dict)
    """Finished phases not yet written away or cleared: a kernel launched in one may still
    come in."""
    cleared_at: int = -1
    """When the current phase was last cleared (CUPTI's clock): what began before then and
    comes in after (a kernel's record, a scope's judged idle) stays cleared."""

    @property
    def active(self) -> bool:
        return bool(self.intervals) and self.intervals[-1][1] == -1

    def active_at(self, ts: int) -> bool:
        for start, end in reversed(self.intervals):
            if ts >= start:
                return end == -1 or ts <= end
        return False

    def resume(self, now: int) -> None:
        """Record from `now` (the kernels' clock) on."""
        self.intervals.append([now, -1])
        self.host_intervals.append([time.time_ns(), -1])

    def pause(self, now: int) -> None:
        self.intervals[-1][1] = now
        self.host_intervals[-1][1] = time.time_ns()

    def add_cpu_time(self, path_id: int, start_ns: int, end_ns: int) -> None:
        """A frame timed on the host from `start_ns` to `end_ns` (time.time_ns()): the part
        inside this session's active stretches, as cpu_time (a tree's)."""
        if self.data != "tree":
            return
        pieces = _inside(self.host_intervals, start_ns, end_ns)
        if pieces:
            self.add(path_id, {CPU_TIME + EXCLUSIVE: sum(b - a for a, b in pieces),
                               CPU_COUNT + EXCLUSIVE: 1})

    @property
    def traces_scopes(self) -> bool:
        """Its trace shows the scopes' entries (an instrumentation trace holds the kernels'
        scopes alone, as Triton's)."""
        return self.data == "trace" and self.only_kernels is None

    def add_span(self, path_id: int, span: Any, end: int, thread: int, host: bool) -> None:
        """A scope's entry (context/frames.Span) that ended at `end` on `thread`: the part
        inside this session's active stretches, on the host's clock (`host`) or the kernels'."""
        if not self.traces_scopes:
            return
        pieces = _inside(self.host_intervals if host else self.intervals, span.start, end)
        if not pieces:
            return
        metrics = dict(span.metrics) if span.metrics else None
        with self.lock:
            if not self.closed:
                self.spans.extend(ScopeSpan(path_id, a, b, thread, metrics, span.id)
                                  for a, b in pieces)

    @property
    def traces_waits(self) -> bool:
        """Its trace shows the waits: a trace of kernels (an instrumentation trace holds the
        kernels' scopes alone, as Triton's)."""
        return self.data == "trace" and self.only_kernels is None

    def add_wait(self, path_id: int, start: int, end: int, thread: int) -> None:
        """The CPU blocked on the GPU on `thread` from `start` to `end` (CUPTI's clock), in
        the phase it began in (data="trace")."""
        with self.lock:
            phase = self._phase_from(start)
            if phase is not None:
                phase.waits.append((path_id, start, end, thread))

    def add(self, path_id: int, values: Mapping[str, float], fold: bool = True,
            typed: bool = False, at: int | None = None) -> None:
        """`fold`: False on CUPTI's thread, where no GPU work may be launched (see
        data.metrics.DeviceValue). `typed`: user metrics, which keep the type they were first
        given on a node (ScopeError, adding none of `values`, for one that changes it). `at`:
        a CUPTI time, to add to the phase it fell in (None: the current one)."""
        if self.data == "trace":
            return  # a trace holds kernels only
        with self.lock:
            phase = self._phase_from(at)
            if phase is None:
                return
            node = phase.nodes.setdefault(path_id, {})
            if typed:
                self._check_types(node, values)
            for key, value in values.items():
                old = node.get(key)
                node[key] = value if old is None else combine(old, value, key, fold)

    def check_types(self, path_id: int, values: dict) -> None:
        """ScopeError when one of `values` changes the type of a metric the node holds."""
        if self.data == "tree":
            with self.lock:
                self._check_types(self.nodes.get(path_id, {}), values)

    @staticmethod
    def _check_types(node: dict, values: Mapping) -> None:
        for key, value in values.items():
            old = node.get(key)
            if old is not None:
                check_same_type(key, old, value)

    def add_kernel(self, path_id: int, rec: KernelRecord, launch_ts: int | None = None) -> None:
        """One kernel, in the phase its launch was made in (the current one without a time)."""
        if self.only_kernels is not None and path_id not in self.only_kernels:
            return
        with self.lock:
            phase = self._phase_from(launch_ts)
            if phase is None:
                return
            if self.data == "trace":
                phase.events.append((path_id, rec, launch_ts))
                return
            ns = rec.end - rec.start
            if rec.config < 0:  # a copy: its bytes (cupti.records.CopyName)
                self._count(phase.nodes, path_id, rec.device_id, ns, 1, {}, -rec.config)
            else:
                self._count(phase.nodes, path_id, rec.device_id, ns, 1, {rec.config: ns})

    def add_kernel_totals(self, totals: dict[int, list], first: int | None = None) -> None:
        """Kernels summed per path: {path id: [time ns, count, device id, launch configuration,
        {configuration: ns} when its launches differed, else None, bytes copied (copies and
        sets)]} (data="tree"), launched
        from `first` on. The router checked they are all in the current phase; a phase that
        began since (advance_phase on another thread) makes them the previous one's."""
        with self.lock:
            phase = self._phase_from(first)
            if phase is None:
                return
            only = self.only_kernels
            for path_id, (ns, count, device, config, configs, copied) in totals.items():
                if only is None or path_id in only:
                    self._count(phase.nodes, path_id, device, ns, count, configs or {config: ns},
                                copied)

    def _phase_from(self, ts: int | None) -> Phase | None:
        """Where a kernel launched at `ts` goes (the current phase without a time); None when
        the session is closed or that phase was written away or cleared. Under `lock`."""
        if self.closed:
            return None
        if ts is not None and ts < self.phase_starts[-1]:
            return self.earlier.get(self.phase_at(ts))
        if ts is not None and ts < self.cleared_at:
            return None
        return Phase(self.nodes, self.events, self.spans, self.waits)

    def _count(self, nodes: dict, path_id: int, device: int, ns: int, count: int,
               configs: dict[int, int], copied: int = 0) -> None:
        """Kernel time and launches on a node; GPU ns per launch configuration (0: none);
        bytes a copy or set node's calls moved."""
        node = self._kernel_node(path_id, device, nodes)
        node[TIME] += ns
        node[COUNT] += count
        if copied:
            node[BYTES] = node.get(BYTES, 0) + copied
        mine = self.launch.setdefault(path_id, {})
        for config, t in configs.items():
            if config:
                mine[config] = mine.get(config, 0) + t

    def phase_at(self, ts: int) -> int:
        return bisect.bisect_right(self.phase_starts, ts) - 1

    def advance(self, now: int) -> int:
        """Start the next phase at `now`; the finished one waits in `earlier`."""
        with self.lock:
            self.earlier[self.phase] = Phase(self.nodes, self.events, self.spans, self.waits)
            self.nodes, self.events, self.spans, self.waits = {}, [], [], []
            self.phase += 1
            self.phase_starts.append(now)
            return self.phase

    def data_of(self, phase: int) -> Phase | None:
        """A copy of a phase's data (None once written away or cleared)."""
        with self.lock:
            found: Phase | None
            if phase == self.phase:
                found = Phase(self.nodes, self.events, self.spans, self.waits)
            else:
                found = self.earlier.get(phase)
            if found is None:
                return None
            return Phase({p: dict(v) for p, v in found.nodes.items()}, list(found.events),
                         list(found.spans), list(found.waits))

    def clear(self, phase: int, up_to: bool = False, now: int = -1) -> None:
        """Drop a phase's data (every earlier one's too with `up_to`); `now`: the time of the
        clear, before which nothing more is taken into the current phase."""
        with self.lock:
            for p in [p for p in self.earlier if p == phase or (up_to and p <= phase)]:
                del self.earlier[p]
            if phase == self.phase or (up_to and phase >= self.phase):
                self.nodes, self.events, self.spans, self.waits = {}, [], [], []
                self.cleared_at = max(self.cleared_at, now)

    def _kernel_node(self, path_id: int, device_id: int, nodes: dict | None = None) -> dict:
        nodes = self.nodes if nodes is None else nodes
        node = nodes.get(path_id)
        if node is None or TIME not in node:  # an op node may hold only its metadata yet
            node = nodes.setdefault(path_id, {})
            node.update({TIME: 0, DEVICE_ID: device_id, DEVICE_TYPE: DEVICE_CUDA})
            node.setdefault(COUNT, 0)  # a scope's own `count` metric (Triton 3.9 takes one) kept
        return node


def _inside(intervals: list[list[int]], start: int, end: int) -> list[tuple[int, int]]:
    """The parts of [start, end] inside `intervals` ([start, end] stretches, the last end -1
    while open), the latest first."""
    pieces = []
    for a, b in reversed(intervals):  # the latest first: a scope is short
        if b != -1 and b < start:
            break
        if a <= end:
            pieces.append((max(start, a), end if b == -1 else min(end, b)))
    return pieces
