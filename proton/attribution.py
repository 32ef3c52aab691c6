"""Match CUPTI records to call paths, with no Python on the launch path.

Each launch yields up to three records that share a CUPTI correlation id:
  * an EXTERNAL_CORRELATION record carrying the path id pushed by the innermost open scope
    (none when the launching thread had no scope open),
  * a DRIVER or RUNTIME API record for the launch call (its start time says which sessions
    were active),
  * one KERNEL record per kernel it ran (several for a graph launch).
Records arrive in buffers in no fixed order across buffers, so each side waits for the other;
matched entries are dropped at once and memory stays flat however long the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .paths import ROOT


@dataclass(slots=True)
class ApiRecord:
    """A launch call on the host."""

    correlation_id: int
    start: int
    """CUPTI timestamp (ns) of the call's start."""
    graph: bool = False
    """A graph launch: many kernels share its correlation id."""
    thread_id: int = 0
    """The launching thread (pthread_self, as threading.get_ident() gives it)."""


@dataclass(slots=True)
class KernelRecord:
    """A kernel that ran on a device."""

    correlation_id: int
    name: str
    device_id: int
    start: int
    end: int
    stream_id: int = 0


@dataclass(slots=True)
class ExternalRecord:
    """The path id a scope pushed when the launch call was made."""

    correlation_id: int
    external_id: int


@dataclass(slots=True)
class _Launch:
    path: int
    start: int
    graph: bool


GRAPH_HORIZON_NS = 60_000_000_000
"""A graph launch is forgotten once kernels a minute younger than it have come."""

# sink(path id, kernel record, launch start time)
KernelSink = Callable[[int, KernelRecord, int], None]
# unscoped(thread id, launch start time) -> path id for a launch made with no scope open
Unscoped = Callable[[int, int], int]


class Attributor:
    """Joins the three record kinds by correlation id and hands each kernel to `sink` once."""

    def __init__(self, sink: KernelSink, unscoped: Unscoped | None = None) -> None:
        self._sink = sink
        self._unscoped = unscoped
        self._external: dict[int, int] = {}
        self._launches: dict[int, _Launch] = {}
        self._early: dict[int, list[KernelRecord]] = {}
        self._graphs: dict[int, _Launch] = {}
        """Graph launches: kept until well after their kernels, since any number may follow."""
        self.waiting_kernels = 0
        """Launch calls whose kernel record has not come yet (graph launches excluded)."""
        self.launches = 0
        """API launch records seen (a graph launch counts once)."""
        self.kernels = 0
        """Kernel records handed to the sink."""

    def add_buffer(self, external: list[ExternalRecord], api: list[ApiRecord],
                   kernels: list[KernelRecord]) -> None:
        """Add one CUPTI buffer's records; external ids first, since a launch's external record
        and API record always share a buffer but their order within it is not promised."""
        for rec in external:
            self._external[rec.correlation_id] = rec.external_id
        for rec in api:
            self._add_api(rec)
        for rec in kernels:
            self._add_kernel(rec)
        if self._graphs and kernels:
            horizon = max(rec.end for rec in kernels) - GRAPH_HORIZON_NS
            for corr in [c for c, g in self._graphs.items() if g.start < horizon]:
                del self._graphs[corr]

    def _add_api(self, rec: ApiRecord) -> None:
        self.launches += 1
        path = self._external.pop(rec.correlation_id, None)
        if path is None:
            path = self._unscoped(rec.thread_id, rec.start) if self._unscoped else ROOT
        launch = _Launch(path, rec.start, rec.graph)
        early = self._early.pop(rec.correlation_id, None)
        if early:
            for kernel in early:
                self._deliver(launch, kernel)
            if not launch.graph:
                return
        if launch.graph:
            self._graphs[rec.correlation_id] = launch
        else:
            self._launches[rec.correlation_id] = launch
            self.waiting_kernels += 1

    def _add_kernel(self, rec: KernelRecord) -> None:
        launch = self._launches.pop(rec.correlation_id, None)
        if launch is not None:
            self.waiting_kernels -= 1
        else:
            launch = self._graphs.get(rec.correlation_id)
        if launch is None:
            self._early.setdefault(rec.correlation_id, []).append(rec)
            return
        self._deliver(launch, rec)

    def _deliver(self, launch: _Launch, rec: KernelRecord) -> None:
        self.kernels += 1
        self._sink(launch.path, rec, launch.start)

    def finish(self) -> int:
        """Give kernels whose launch record never came to the root; return how many there were."""
        orphans = 0
        for corr, kernels in self._early.items():
            path = self._external.pop(corr, ROOT)
            for kernel in kernels:
                orphans += 1
                self._deliver(_Launch(path, kernel.start, False), kernel)
        self._early.clear()
        self._launches.clear()
        self._graphs.clear()
        self._external.clear()
        self.waiting_kernels = 0
        return orphans
