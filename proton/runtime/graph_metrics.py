"""Metrics given where kernels are launched, copied without a sync; inside a CUDA graph capture,
recorded into the graph so that each replay counts them, as Triton 3.9's Proton does.

Where metrics are added to a node (a scope's, or a launch's op), `place` does the GPU work they
need, never counted among the user's kernels:
  * eagerly, a GPU tensor is copied on the GPU (data/metrics.DeviceValue, read when the profile
    is written): no sync; the copy is counted nowhere (paths.OWN), as Triton's copy to the host
    is not;
  * while the current stream is captured into a CUDA graph, nothing is added then: one metric
    kernel per GPU tensor (runtime/metric_kernel.py; one alone for plain numbers) goes into the
    graph under the node's METRIC_FRAME (`<node>/__proton_launch_metadata/<metric>` for a
    scope, `<parent>/__proton_launch_metadata/<kernel>/<metric>` for a launch, Triton's
    frames), its graph node noted with a tag (cupti/graphs.GraphCaptures). Its runs are not
    counted (as in Triton's Proton); each replay shows the frame, empty. At each replay the
    kernel appends `[tag, values]` to its device's ring, and its kernel record names the replay
    (the graph launch's path and time, attribution.Attributor.on_metric). The numbers are added
    then, under launch / <captured_at> / the node's captured path, to each session active at
    that launch, in the phase it fell in; a tensor's values when the ring is read: after each
    flush of the collector (finalize, advance_phase, deactivate(flushing=True), snapshots), one
    device sync and one copy for all the replays since the last read, never one per launch.
Each metric kernel's executions run in order (a graph's launches are ordered), so the ring's
records of a tag and the kernel records of its node pair up first to first.

Threads: `place` and `read` run on the threads that add metrics and flush; `executed` on
CUPTI's; the queues they share are under `_lock`.
"""
from __future__ import annotations

import itertools
import sys
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from .. import settings
from ..context.stack import per_thread
from ..data.metrics import DeviceTensor
from ..data.paths import OP, OWN, ROOT, STATE, paths
from ..format import LAUNCH_METADATA, METRIC_FRAME
from ..report import warn

RING_WORDS = "PROTON_GRAPH_METRIC_WORDS"
"""The setting of the 64-bit words of each device's ring (default 2**21, 16 MiB), read as the
ring is made: the tensor values of the replays between two reads. Kept for the process once
made: captured graphs write into it at every replay."""
OWN_WORK = paths.intern(ROOT, "<proton>", OWN)
"""Where the profiler's own GPU work goes (eager copies, the ring's reads): counted nowhere."""


@dataclass(slots=True)
class Spec:
    """What one metric kernel in a graph stands for."""

    target: int
    """The node the metrics were given to, as captured (each replay: under its CAPTURED_AT)."""
    frame: int
    """Its metric frame, as captured."""
    numbers: dict[str, Any]
    """Plain values, added at each replay."""
    name: str | None = None
    """The GPU tensor metric the kernel records, if any."""
    count: int = 0
    """Values it writes per replay (a vector's length)."""
    floats: bool = True
    """Read its words as float64 bits (else int64)."""


@dataclass(slots=True)
class Ring:
    """A device's ring and where reading stopped."""

    words: Any
    """torch int64 tensor of `size` words (RING_WORDS)."""
    counter: Any
    """torch int64 tensor of one word: words reserved so far (it only grows)."""
    read_to: int = 0

    @property
    def size(self) -> int:
        return int(self.words.numel())


class launching:
    """Launches made inside (kernels and copies) go to `path`, whatever this thread's frames
    are, as an op's do (context's launch_path reads the op, shadow's CUPTI id is pushed)."""

    __slots__ = ("path", "collector", "_saved")

    def __init__(self, path: int, collector) -> None:
        self.path, self.collector = path, collector

    def __enter__(self) -> "launching":
        st = per_thread.stacks
        self._saved = (st.op_path, st.op)
        st.op_path, st.op = self.path, None
        if self.collector is not None and self.collector.pushes_ids:
            self.collector.push(self.path)
        return self

    def __exit__(self, *exc) -> None:
        if self.collector is not None and self.collector.pushes_ids:
            self.collector.pop()
        st = per_thread.stacks
        st.op_path, st.op = self._saved


def capturing() -> bool:
    """The calling thread's current CUDA stream is being captured into a graph (torch's view;
    False where torch never started CUDA)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    return bool(torch.cuda.is_current_stream_capturing())


def metric_frame(node: int, kernel: str | None = None, parent: int | None = None) -> int:
    """The METRIC_FRAME a node's metric work goes to: a scope's under itself, a launch's
    (`kernel`, its op's `parent`) under the parent's metadata state for that kernel."""
    if kernel is None:
        meta = paths.intern(node, LAUNCH_METADATA, STATE)
    else:
        meta = paths.intern(paths.intern(ROOT if parent is None else parent, LAUNCH_METADATA,
                                         STATE), kernel, STATE)
    return paths.intern(meta, METRIC_FRAME, OP)


class GraphMetrics:
    """The process's metric kernels, their rings, and the pairing of their records."""

    def __init__(self, sessions: dict, graft: Callable[[int, int], int]) -> None:
        self._sessions = sessions
        """The profiler's live sessions (read)."""
        self._graft = graft
        self.specs: dict[int, Spec] = {}
        """Tag -> what its metric kernel stands for (every tag of the process: a ring's
        records are read by their tag's length)."""
        self._live: set[int] = set()
        """Tags recorded while this collector runs: records of others are dropped (a graph
        captured under an earlier collector, whose nodes this one does not know)."""
        self.rings: dict[int, Ring] = {}
        self._tags = itertools.count(1)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._runs: dict[int, deque] = {}
        """Tag -> (node, launch time) of each replay whose values are not read yet."""
        self._values: dict[int, deque] = {}
        """Tag -> values read from the ring whose replay's kernel record has not come yet."""
        self._unavailable: str | None = None
        """Why metric kernels cannot run here (said once): then metrics in a capture count once."""
        self._overflowed = False

    # -- the thread that adds metrics --------------------------------------------------------
    def tag(self) -> int | None:
        """The tag of the metric kernel this thread is launching (GraphCaptures reads it as the
        kernel's graph node is created, on this thread)."""
        return getattr(self._local, "tag", None)

    def place(self, node: int, values: dict, where: int, collector) -> dict | None:
        """`values` for `node` as sessions take them now, GPU tensors copied (counted
        nowhere); None when they went into the CUDA graph being captured, under `where`
        (metric_frame), and each replay adds them."""
        captured = capturing()
        if captured and self._record(node, values, where, collector):
            return None
        with launching(OWN_WORK, collector):
            out = {}
            for k, v in values.items():
                if isinstance(v, DeviceTensor):
                    device = v.tensor.device.index
                    if not captured and collector is not None and device not in self.rings:
                        self._ready(device)
                    v = v.copy()
                out[k] = v
            return out

    def _record(self, node: int, values: dict, where: int, collector) -> bool:
        """One metric kernel per GPU tensor of `values` (the first also adds the numbers; with
        no tensor, one kernel for the numbers) into the graph being captured. False when
        metric kernels cannot run (then the values count once, now)."""
        if collector is None:
            return False
        try:
            import torch

            from . import metric_kernel
        except Exception as exc:  # no Triton: metric kernels are Triton's
            self._say_unavailable(f"{type(exc).__name__}: {exc}; pip install triton")
            return False
        numbers = {k: v for k, v in values.items() if not isinstance(v, DeviceTensor)}
        tensors: list[tuple[str | None, DeviceTensor | None]] = [
            (k, v) for k, v in values.items() if isinstance(v, DeviceTensor)] or [(None, None)]
        try:
            with launching(where, collector):
                for i, (name, given) in enumerate(tensors):
                    if given is None:
                        device, src = torch.cuda.current_device(), None
                    else:
                        device = given.tensor.device.index
                        with launching(OWN_WORK, collector):  # its cast: counted nowhere
                            src = given.tensor.to(torch.float64 if given.floats
                                                  else torch.int64).contiguous().reshape(-1)
                    with launching(OWN_WORK, collector):  # made at first use: not the user's
                        ring = self._ring(device, torch)
                    tag = next(self._tags)
                    self.specs[tag] = Spec(node, where, numbers if i == 0 else {}, name,
                                           0 if src is None else src.numel(),
                                           True if given is None else given.floats)
                    self._live.add(tag)
                    self._local.tag = tag
                    try:
                        metric_kernel.launch(ring.words, ring.counter, tag, src,
                                             self.specs[tag].floats)
                    finally:
                        self._local.tag = None
        except Exception as exc:
            self._say_unavailable(f"{type(exc).__name__}: {exc}")
            return False
        return True

    def _ready(self, device: int) -> None:
        """Make the device's ring and kernels now, outside any capture, for a later one (a
        failure is said when a capture needs them)."""
        try:
            self._ring(device, sys.modules["torch"])
        except Exception:
            self.rings.pop(device, None)

    def _say_unavailable(self, why: str) -> None:
        if self._unavailable is None:
            self._unavailable = why
            warn(f"metrics given inside a CUDA graph capture are counted once, at the "
                 f"capture, not at each replay: the metric kernel could not run ({why})")

    def _ring(self, device: int, torch) -> Ring:
        """The device's ring and its loaded kernels, made at first use (eagerly, where a GPU
        tensor metric is first given). Inside a capture: on a stream of its own, so it comes
        from the caching allocator's pool, not the graph's, with the thread's capture mode
        relaxed for that once."""
        ring = self.rings.get(device)
        if ring is None:
            from ..cupti.gpu import relaxed_capture
            from . import metric_kernel

            with relaxed_capture(), torch.cuda.device(device):
                side = torch.cuda.Stream(device)
                with torch.cuda.stream(side):
                    words = torch.empty(settings.value(RING_WORDS), dtype=torch.int64,
                                        device=device)
                    counter = torch.zeros(1, dtype=torch.int64, device=device)
                    side.synchronize()  # zeroed before any replay can add to it
                    metric_kernel.prepare(words, counter)
            ring = self.rings[device] = Ring(words, counter)
        return ring

    # -- CUPTI's thread ----------------------------------------------------------------------
    def executed(self, tag: int, launch: int, start: int, record: Any = None) -> None:
        """A metric kernel of a graph launched at path `launch` at time `start` ran
        (attribution.Attributor.on_metric); `record`: its kernel, an event of the traces (as
        in Triton's, named METRIC_FRAME), never counted on a tree."""
        spec = self.specs.get(tag)
        if spec is None or tag not in self._live:
            return
        node = self._graft(launch, spec.target)
        frame = self._graft(launch, spec.frame)
        self._add(frame, {}, start)  # Triton's frame, shown empty
        if record is not None:
            for s in list(self._sessions.values()):
                if s.data == "trace" and s.active_at(start):
                    s.add_kernel(frame, record, start)
        if spec.numbers:
            self._add(node, spec.numbers, start)
        if spec.count:
            with self._lock:
                self._runs.setdefault(tag, deque()).append((node, start))
                ready = self._pair(tag)
            self._add_all(ready)

    # -- the flushing thread -----------------------------------------------------------------
    def read(self, collector=None) -> None:
        """Read every ring's records since the last read (one sync and one copy per device
        that has any) and pair them with their replays. After a flush of `collector`, whose
        records of this copy are counted nowhere (OWN_WORK)."""
        if not self.rings:
            return
        import torch

        ready: list = []
        for device, ring in list(self.rings.items()):
            with launching(OWN_WORK, collector):
                torch.cuda.synchronize(device)
                end = int(ring.counter.item())
                start = ring.read_to
                if end == start:
                    continue
                if end - start > ring.size:
                    ring.read_to = end
                    self._lost(end - start, ring.size)
                    continue
                a, b = start % ring.size, end % ring.size
                words = ring.words[a:b].cpu() if a < b else \
                    torch.cat([ring.words[a:], ring.words[:b]]).cpu()
            ring.read_to = end
            ready += self.take_words(words.numpy())
        self._add_all(ready)

    def take_words(self, words) -> list:
        """A ring's records (numpy int64), queued by tag; returns the pairs now complete (for
        _add_all). A record of an unknown tag ends the read (its length is unknown)."""
        import numpy as np

        at, n = 0, len(words)
        got: list[tuple[int, Any]] = []
        while at < n:
            tag = int(words[at])
            spec = self.specs.get(tag)
            if spec is None or spec.count == 0:
                warn(f"the metric ring holds an unknown record (tag {tag}); the rest of this "
                     "read is dropped")
                break
            raw = words[at + 1: at + 1 + spec.count]
            values = raw.view(np.float64) if spec.floats else raw
            got.append((tag, values.tolist() if spec.count > 1 else values[0].item()))
            at += 1 + spec.count
        ready: list = []
        with self._lock:
            for tag, value in got:
                if tag in self._live:
                    self._values.setdefault(tag, deque()).append(value)
                    ready += self._pair(tag)
        return ready

    def _lost(self, words: int, size: int) -> None:
        if not self._overflowed:
            self._overflowed = True
            warn(f"{words} words of CUDA graph metric values were written over before they "
                 f"were read (the ring holds {size}); those replays' tensor metrics are "
                 f"left out: advance phases more often or set {RING_WORDS} higher")

    # -- pairing -----------------------------------------------------------------------------
    def _pair(self, tag: int) -> list:
        """Replays of `tag` and their values, first to first. Under `_lock`."""
        runs, values = self._runs.get(tag), self._values.get(tag)
        out = []
        spec = self.specs[tag]
        while runs and values:
            node, start = runs.popleft()
            out.append((node, {spec.name: values.popleft()}, start))
        return out

    def _add_all(self, ready: list) -> None:
        for node, values, start in ready:
            self._add(node, values, start)

    def _add(self, node: int, values: dict, start: int) -> None:
        """To each session active when the replay was launched, in that launch's phase."""
        for s in list(self._sessions.values()):
            if s.active_at(start):
                s.add(node, values, fold=False, at=start)

    def reset(self) -> None:
        """The collector stopped: its graphs' nodes are forgotten, and so are their records
        (the rings stay: graphs captured before write into them at every replay)."""
        with self._lock:
            self._runs.clear()
            self._values.clear()
            self._live.clear()
