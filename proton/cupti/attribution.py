"""Match CUPTI records to call paths, with no Python on the launch path (no CUPTI import here:
tests replay recorded buffers into it).

Each launch yields up to three records that share a CUPTI correlation id:
  * an EXTERNAL_CORRELATION record carrying the path id pushed by the innermost open scope
    (none when the launching thread had no scope open),
  * a DRIVER or RUNTIME API record for the launch call (its start time says which sessions
    were active),
  * one KERNEL record per kernel it ran (several for a graph launch, each naming its graph
    node: a node whose capture was seen goes under the launch's path, then CAPTURED_AT, then
    the path it was captured at, through `graft`; one captured while no session recorded is
    no session's; one never seen (the graph was made before the collector started) goes under
    the launch, said once per graph; a metric kernel's run is told to `on_metric`, and not
    counted, as Triton's Proton leaves its metric kernels out).
Records arrive in buffers in no fixed order across buffers, so each side waits for the other;
matched entries are dropped at once and memory stays flat however long the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, cast

from ..data.paths import ROOT
from ..report import warn
from .records import External, Launch, Placed, Sunk, unpacks


@dataclass(slots=True)
class ApiRecord:
    """A launch call on the host."""

    correlation_id: int
    start: int
    """CUPTI timestamp (ns) of the call's start."""
    graph: bool = False
    """A graph launch: many kernels share its correlation id."""
    thread_id: int = 0
    """The launching thread: the low 32 bits of pthread_self (threading.get_ident())."""


@dataclass(slots=True)
class KernelRecord:
    """A kernel that ran on a device."""

    correlation_id: int
    name: str
    device_id: int
    start: int
    end: int
    stream_id: int = 0
    config: int = 0
    """Its launch configuration's number in LaunchConfigs (0: not recorded)."""
    graph_node: int = 0
    """CUPTI's id of the graph node that ran it (0: not launched through a graph)."""


@dataclass(slots=True)
class ExternalRecord:
    """The path id a scope pushed when the launch call was made."""

    correlation_id: int
    external_id: int


UNRECORDED = -1
"""Attributor.captured's path for a graph node created while no session recorded: its
kernels are dropped, as Triton's Proton leaves out what was captured while inactive."""
GRAPH_HORIZON_NS = 60_000_000_000
"""A graph launch is forgotten once kernels a minute younger than it have come."""

Kernel = tuple
"""A kernel as the sink gets it (records.Sunk): (path id, launch start, correlation id, name,
device id, start, end, stream id, config); the last seven are KernelRecord's first seven
fields (records.Placed up to config)."""
_CORR, _START, _END, _NODE = map(int, (Placed.correlation_id, Placed.start, Placed.end,
                                       Placed.graph_node))  # plain ints: indexed per kernel
_PATH, _LAUNCH, _RECORD = map(int, (Sunk.path, Sunk.launch, Sunk.correlation_id))
unpacks(External, "correlation_id path")  # add_columns zips and unpacks these per launch
unpacks(Launch, "correlation_id start graph thread")
# sink(kernels of one buffer)
KernelSink = Callable[[list[Kernel]], None]
# groups(sums, first, rows): a buffer's kernels summed, each sum (path id, kernel name, device
# id, configuration number, GPU ns, count); `first` the earliest launch start among them;
# rows() the same kernels one by one (Kernel tuples), for sessions that need each
GroupSink = Callable[[list[tuple], int, Callable[[], list[Kernel]]], None]
# unscoped(thread id, launch start time) -> path id for a launch made with no scope open
Unscoped = Callable[[int, int], int]


class LaunchConfigs:
    """The launch configurations seen, numbered from 1 as they come: (grid blocks, threads per
    block, registers per thread, shared memory bytes per block). Kernels carry the number."""

    def __init__(self) -> None:
        self.table: list[tuple[int, int, int, int] | None] = [None]
        self._ids: dict[tuple[int, int, int, int], int] = {}

    def number(self, config: tuple[int, int, int, int]) -> int:
        found = self._ids.get(config)
        if found is None:
            found = self._ids[config] = len(self.table)
            self.table.append(config)
        return found

    def get(self, number: int) -> tuple[int, int, int, int] | None:
        return self.table[number] if 0 < number < len(self.table) else None


# graft(launch path, capture path) -> the path of a graph kernel captured at `capture path`
Graft = Callable[[int, int], int]


def each(sink: Callable[[int, KernelRecord, int], None]) -> KernelSink:
    """A KernelSink calling sink(path id, KernelRecord, launch start) once per kernel."""
    def per_kernel(kernels: list[Kernel]) -> None:
        for k in kernels:
            sink(k[_PATH], KernelRecord(*k[_RECORD:]), k[_LAUNCH])

    return per_kernel


class Attributor:
    """Joins the three record kinds by correlation id and hands each kernel to `sink` once.

    Records come as columns (one list per field) so a buffer of thousands costs a few passes of
    dict operations on CUPTI's thread, which holds the GIL while it works."""

    def __init__(self, sink: KernelSink, unscoped: Unscoped | None = None,
                 graft: Graft | None = None) -> None:
        self._sink = sink
        self._unscoped = unscoped
        self._graft = graft
        self.captured: dict[int, int] = {}
        """Graph node id -> the path id where it was captured (from CUPTI's graph node
        callbacks, on the capturing thread)."""
        self.capturing: dict[int, list[list[int]]] = {}
        """Thread id -> its CUDA stream captures, [begin, end] (end -1 while open): a launch
        made then runs nothing (a graph replays it later), so no kernel record will come."""
        self.captured_launches = 0
        """Launch calls made inside a stream capture (not waited for)."""
        self.metric_nodes: dict[int, int] = {}
        """Graph node id -> the tag of the metric kernel it runs (graphs.GraphCaptures): its
        kernels are told to on_metric, not counted."""
        self.on_metric: Callable[[int, int, int, KernelRecord], None] | None = None
        """on_metric(tag, graph launch's path, its start, the kernel): a metric kernel ran at a
        replay (runtime/graph_metrics.GraphMetrics.executed)."""
        self._unknown: set[int] = set()
        """Graph nodes whose creation was not seen (their graph was said)."""
        self._said: set[int] = set()
        """Correlation ids of graph launches said to have unseen nodes."""
        self.external: dict[int, int] = {}
        """Correlation id -> path id: from EXTERNAL_CORRELATION records (shadow context) or
        written by the launch callback (python context) before the launch record comes."""
        self._launches: dict[int, tuple[int, int]] = {}
        """Launch calls waiting for their kernel: correlation id -> (path id, start)."""
        self._early: dict[int, list[tuple]] = {}
        """Kernels whose launch record has not come yet, by correlation id."""
        self._graphs: dict[int, tuple[int, int]] = {}
        """Graph launches: kept until well after their kernels, since any number may follow."""
        self.launches = 0
        """API launch records seen (a graph launch counts once)."""
        self.kernels = 0
        """Kernel records handed to the sink."""

    @property
    def waiting_kernels(self) -> int:
        """Launch calls whose kernel record has not come yet (graph launches excluded)."""
        return len(self._launches)

    def waiting_before(self, ts: int, since: int = 0) -> int:
        """Launch calls made from `since` to `ts` whose kernel record has not come yet."""
        return sum(1 for _, start in list(self._launches.values()) if since <= start <= ts)

    def oldest(self, since: int, none: int) -> int:
        """The earliest start from `since` on of the launch calls whose kernel record has not
        come yet (`none` when none waits)."""
        return min((start for _, start in list(self._launches.values()) if start >= since),
                   default=none)

    def in_capture(self, thread: int, ts: int) -> bool:
        """Thread `thread` was capturing a CUDA graph at `ts`."""
        for begin, end in reversed(self.capturing.get(thread, ())):
            if ts >= begin:
                return end == -1 or ts <= end
        return False

    def capture_span(self) -> tuple[int, int] | None:
        """(first begin, last end) of the stream captures seen on any thread (the end of an
        open one: the largest timestamp); None when none was."""
        span = None
        for windows in list(self.capturing.values()):
            for begin, end in list(windows):
                end = (1 << 63) - 1 if end == -1 else end
                span = (begin, end) if span is None else (min(span[0], begin),
                                                          max(span[1], end))
        return span

    def early_ids(self) -> list[int]:
        """Correlation ids of kernels whose launch record has not come."""
        return list(self._early)

    def register_launch(self, corr: int, path: int, start: int, graph: bool) -> None:
        """The python context's launch callback, on the launching thread, at the call's enter:
        the launch stands for its API record, with its path and start time. It comes before any
        record of its kernels can exist; a dict store is atomic under the GIL, so CUPTI's
        thread may be reading the tables meanwhile."""
        (self._graphs if graph else self._launches)[corr] = (path, start)

    def launch_path(self, corr: int) -> int | None:
        """The path registered for launch `corr` while it is waiting for its kernel."""
        launch = self._launches.get(corr) or self._graphs.get(corr)
        return launch[0] if launch else None

    def cancel_launch(self, corr: int) -> None:
        """The launch call failed: no kernel will come."""
        self._launches.pop(corr, None)
        self._graphs.pop(corr, None)

    def add_buffer(self, external: list[ExternalRecord], api: list[ApiRecord],
                   kernels: list[KernelRecord]) -> None:
        """add_columns for records as objects (replays, tests)."""
        self.add_columns(
            ([r.correlation_id for r in external], [r.external_id for r in external]),
            ([r.correlation_id for r in api], [r.start for r in api], [r.graph for r in api],
             [r.thread_id for r in api]),
            cast("tuple[list, ...]", tuple(zip(*[  # tuples serve as the columns
                (r.correlation_id, r.name, r.device_id, r.start, r.end, r.stream_id, r.config,
                 r.graph_node) for r in kernels])))
            or ([], [], [], [], [], [], [], []))

    def add_columns(self, external: tuple[list, list], api: tuple[list, list, list, list],
                    kernels: tuple[list, ...]) -> None:
        """Add one CUPTI buffer's records, as columns:
        external (records.External), api (records.Launch), kernels (records.Placed; its
        graph node column only when some kernel of the buffer ran in a graph).
        External ids go first: a launch's external record and API record always share a
        buffer, but their order within it is not promised."""
        self.external.update(zip(*external))
        out: list[tuple] = []
        self._add_api(*api, out)
        self._add_kernels(kernels, out)
        if self._graphs and kernels[_CORR]:
            horizon = max(kernels[_END]) - GRAPH_HORIZON_NS
            # a copy first: the python context's launch callback adds to it from other threads
            for corr in [c for c, g in list(self._graphs.items()) if g[1] < horizon]:
                self._graphs.pop(corr, None)
        if out:
            self.kernels += len(out)
            self._sink(out)

    def _add_api(self, corrs, starts, graph_flags, threads, out: list) -> None:
        pop_path, unscoped = self.external.pop, self._unscoped
        launches, graphs, early = self._launches, self._graphs, self._early
        capturing = self.capturing
        for corr, start, graph, thread in zip(corrs, starts, graph_flags, threads):
            path = pop_path(corr, None)
            if capturing and not graph and self.in_capture(thread, start):
                self.captured_launches += 1  # recorded into a graph: no kernel to wait for
                continue
            if path is None:
                path = unscoped(thread, start) if unscoped else ROOT
            if early:  # kernels that came before their launch record
                kernels = early.pop(corr, None)
                if kernels:
                    out.extend(p for p in (self._placed((path, start), k) for k in kernels)
                               if p is not None)
                    if not graph:
                        continue
            if graph:
                graphs[corr] = (path, start)
            else:
                launches[corr] = (path, start)
        self.launches += len(corrs)

    def _add_kernels(self, kernels: tuple[list, ...], out: list) -> None:
        pop_launch, graphs, early = self._launches.pop, self._graphs, self._early
        placed = self._placed if len(kernels) > _NODE else None  # graph nodes: may be grafted
        for kernel in zip(*kernels):
            launch = pop_launch(kernel[_CORR], None)
            if launch is None:
                launch = graphs.get(kernel[_CORR])
                if launch is None:
                    early.setdefault(kernel[_CORR], []).append(kernel)
                    continue
            if placed is None:
                out.append(launch + kernel)
            elif (got := placed(launch, kernel)) is not None:
                out.append(got)

    def _placed(self, launch: tuple[int, int], kernel: tuple) -> tuple | None:
        """The sink's tuple for `kernel` of `launch`: under where its graph node was captured,
        when that was seen; None for a node captured while no session recorded."""
        if len(kernel) > _NODE:
            node, kernel = kernel[_NODE], kernel[:_NODE]
            if node:
                captured = self.captured.get(node)
                if captured is None:
                    self._not_seen(node, kernel[_CORR])
                elif captured == UNRECORDED:
                    return None
                else:
                    tag = self.metric_nodes.get(node)
                    if tag is not None:  # the profiler's own kernel: told, never counted
                        if self.on_metric is not None:
                            record = KernelRecord(*kernel)
                            record.graph_node = node
                            self.on_metric(tag, launch[0], launch[1], record)
                        return None
                    if self._graft is not None:
                        return (self._graft(launch[0], captured), launch[1]) + kernel
        return launch + kernel

    def _not_seen(self, node: int, corr: int) -> None:
        """A graph kernel whose node's creation was not seen: said once per graph (its later
        launches run the same nodes), in Triton's words first."""
        if node in self._unknown:
            return
        self._unknown.add(node)
        if corr not in self._said:
            self._said.add(corr)
            warn(f"Cannot find graph for graphExecId: unknown (its launch has CUPTI "
                 f"correlation id {corr}): the CUDA graph was created before the profiler "
                 "started, so its kernels go under its launch, not where they were "
                 "captured; start profiling before the graph is created")

    def finish(self, since: int = 0, until: int | None = None) -> int:
        """Give kernels whose launch record never came to the root; return how many of them
        started from `since` to `until` (None: no bound). One that started before `since`
        (kernel activity on) is a record an earlier CUPTI session left undelivered; one that
        started after `until` may have been launched after every session's window."""
        out: list[tuple] = []
        for corr, kernels in self._early.items():
            path = self.external.pop(corr, ROOT)
            out.extend((path, kernel[_START]) + kernel[:_NODE] for kernel in kernels)
        self._early.clear()
        self._launches.clear()
        self._graphs.clear()
        self.external.clear()
        if out:
            self.kernels += len(out)
            self._sink(out)
        # each stands in its own start for its launch's
        return sum(1 for k in out
                   if since <= k[_LAUNCH] and (until is None or k[_LAUNCH] <= until))
