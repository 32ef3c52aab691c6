"""One profile being recorded: its options, when it was active, and the metrics it holds."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..cupti.attribution import KernelRecord
from ..data.job import Job
from ..data.metrics import DEVICE_CUDA
from ..format import COUNT, DEVICE_ID, DEVICE_TYPE, TIME


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
    pc: bool = False
    """mode="pcsampling": kernels get instruction samples and source-line children."""
    intervals: list[list[int]] = field(default_factory=list)
    """[start, end] timestamps of each active stretch; the last end is -1 while active."""
    nodes: dict[int, dict[str, float]] = field(default_factory=dict)
    """Metrics by path id; exclusive values, as written to the file (data="tree")."""
    events: list[tuple[int, KernelRecord]] = field(default_factory=list)
    """Every kernel with its path id (data="trace")."""
    spans: list[tuple[int, int, int, int]] = field(default_factory=list)
    """Scopes timed on the host: (path id, start ns, end ns, thread id) (data="trace")."""
    launch: dict[int, dict[int, int]] = field(default_factory=dict)
    """Kernel node -> {launch configuration number: GPU ns} (data="tree")."""
    notes: dict[int, str] = field(default_factory=dict)
    """Path id -> why its PC samples have no source lines (the file's frame "no_lines")."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    """Set (under `lock`) when finalize takes the data; late kernel records are then ignored."""
    job: Job | None = None
    """The writing process (rank, host, pid), recorded in the file."""
    began: float = field(default_factory=time.time)
    """Wall-clock start: a file of the same name written after it is another process's."""

    @property
    def active(self) -> bool:
        return bool(self.intervals) and self.intervals[-1][1] == -1

    def active_at(self, ts: int) -> bool:
        for start, end in reversed(self.intervals):
            if ts >= start:
                return end == -1 or ts <= end
        return False

    def add(self, path_id: int, values: dict[str, float]) -> None:
        if self.data == "trace":
            return  # a trace holds kernels only
        with self.lock:
            if self.closed:
                return
            node = self.nodes.setdefault(path_id, {})
            for key, value in values.items():
                node[key] = node.get(key, 0) + value

    def add_kernel(self, path_id: int, rec: KernelRecord) -> None:
        with self.lock:
            if self.closed:
                return
            if self.data == "trace":
                self.events.append((path_id, rec))
                return
            node = self._kernel_node(path_id, rec.device_id)
            node[TIME] += rec.end - rec.start
            node[COUNT] += 1
            if rec.config:
                configs = self.launch.setdefault(path_id, {})
                configs[rec.config] = configs.get(rec.config, 0) + rec.end - rec.start

    def add_kernel_totals(self, totals: dict[int, list]) -> None:
        """Kernels summed per path: {path id: [time ns, count, device id, launch configuration,
        {configuration: ns} when its launches differed, else None]} (data="tree")."""
        with self.lock:
            if self.closed:
                return
            for path_id, (ns, count, device, config, configs) in totals.items():
                node = self._kernel_node(path_id, device)
                node[TIME] += ns
                node[COUNT] += count
                if configs is None:
                    configs = {config: ns}
                mine = self.launch.get(path_id)
                if mine is None:
                    self.launch[path_id] = {c: t for c, t in configs.items() if c}
                else:
                    for c, t in configs.items():
                        if c:
                            mine[c] = mine.get(c, 0) + t

    def _kernel_node(self, path_id: int, device_id: int) -> dict:
        node = self.nodes.get(path_id)
        if node is None or COUNT not in node:  # an op node may hold only its metadata yet
            node = self.nodes.setdefault(path_id, {})
            node.update({TIME: 0, COUNT: 0, DEVICE_ID: device_id, DEVICE_TYPE: DEVICE_CUDA})
        return node
