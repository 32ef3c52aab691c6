"""Kernel records onto the sessions' trees: each kernel on its node, in every session that was
active when its launch call started (so deactivated regions stay out, whichever thread launched).
The profiler's own GPU work (paths.OWN: reading its metric ring) is counted nowhere.

Runs on CUPTI's thread (see profiler.py, Threads).
"""
from __future__ import annotations

from operator import itemgetter
from typing import Protocol

from ..cupti.attribution import Kernel, KernelRecord, each
from ..cupti.records import Sunk, unpacks
from ..data.paths import KERNEL, OP, OWN, paths
from ..format import CAPTURED_AT, COPY_NAMES, TIME
from .session import Session



class KernelListener(Protocol):
    """A part that takes each buffer's kernels (the counters' sampler): per device, their
    starts, ends and (kernel node, launch time)."""

    def kernels(self, device: int, starts: list, ends: list, meta: list) -> None: ...


NOWHERE = -1
"""kernel_path's node for the profiler's own work: counted on no node."""
_START = itemgetter(int(Sunk.launch))
"""A Kernel's launch start."""
unpacks(Sunk, "path launch correlation_id name device start end stream config")
# the loops below unpack attribution.Kernel (records.Sunk) in this order: unpacking a tuple
# costs 40 ns a kernel, picking its columns with an itemgetter 110


class KernelRouter:
    """The collector's sink: kernels of one buffer at a time, for the live `sessions`."""

    def __init__(self, sessions: dict[int, Session]) -> None:
        self._sessions = sessions
        """The profiler's own dict of live sessions (read, never changed here)."""
        self._kernel_paths: dict[tuple[int, str, int], int] = {}
        """(path id, kernel name, device) -> the node its kernels count on."""
        self._grafts: dict[tuple[int, int], int] = {}
        """(graph launch path, capture path) -> the path its kernels go under."""
        self.listener: KernelListener | None = None
        """A part that takes each kernel's node and times (the counters' sampler, while a
        counters session is live: runtime/parts/counters.py)."""

    def graft(self, launch: int, captured: int) -> int:
        """attribution.Graft: the path of a graph kernel launched at `launch` and captured at
        `captured` (launch / CAPTURED_AT / the capture's frames)."""
        key = (launch, captured)
        path = self._grafts.get(key)
        if path is None:
            path = self._grafts[key] = paths.graft(launch, captured, CAPTURED_AT)
        return path

    def kernel_path(self, path_id: int, name: str, device: int) -> int:
        """The node a kernel of `name` on `device` launched at `path_id` is counted on: a child
        of the path named after the kernel, or the path itself when the Triton hook made it an
        op for this launch (never for a copy or set: its own node); NOWHERE for the profiler's
        own work."""
        key = (path_id, name, device)
        kernel = self._kernel_paths.get(key)
        if kernel is None:
            kind = paths.frames[path_id].kind
            if kind == OWN:
                kernel = NOWHERE
            elif kind == OP and name not in COPY_NAMES:
                kernel = path_id
            else:
                kernel = paths.intern(path_id, name, f"{KERNEL}{device}")
            self._kernel_paths[key] = kernel
        return kernel

    def on_kernel(self, path_id: int, rec: KernelRecord, launch_ts: int) -> None:
        """One kernel launched at `launch_ts` from `path_id`."""
        kernel = self.kernel_path(path_id, rec.name, rec.device_id)
        if kernel == NOWHERE:
            return
        for s in list(self._sessions.values()):
            if s.active_at(launch_ts):
                s.add_kernel(kernel, rec, launch_ts)

    def on_kernels(self, kernels: list[Kernel]) -> None:
        """One buffer's kernels (see attribution.Kernel). When every session is a tree that
        has been active since before the first launch, they are summed per path first and each
        session takes the sums under one lock: this runs on CUPTI's thread holding the GIL, so
        it must be short."""
        if self.listener is not None:
            self._to_listener(kernels)
        sessions = list(self._sessions.values())
        first = min(map(_START, kernels))
        if not _summable(sessions, first):
            each(self.on_kernel)(kernels)
            return
        totals: dict[int, list] = {}
        memo, slow = self._kernel_paths.get, self.kernel_path
        for path_id, _, _, name, device, start, end, _, config in kernels:
            kernel = memo((path_id, name, device))
            if kernel is None:
                kernel = slow(path_id, name, device)
            if kernel != NOWHERE:
                _add(totals, kernel, end - start, 1, device, config)
        for s in sessions:
            s.add_kernel_totals(totals, first)

    def on_groups(self, groups: list[tuple], first: int, rows) -> None:
        """attribution.GroupSink: a buffer's kernels summed per (path, name, device,
        configuration) by the C join; one by one (`rows()`) when a session needs each."""
        sessions = list(self._sessions.values())
        if not _summable(sessions, first) or self.listener is not None:
            self.on_kernels(rows())
            return
        totals: dict[int, list] = {}
        for path_id, name, device, config, ns, count in groups:
            kernel = self.kernel_path(path_id, name, device)
            if kernel != NOWHERE:
                _add(totals, kernel, ns, count, device, config)
        for s in sessions:
            s.add_kernel_totals(totals, first)

    def _to_listener(self, kernels: list[Kernel]) -> None:
        """Each kernel's node, launch and times, per device, to the listener (the counters'
        join); copies and sets too (the copy engines' DRAM traffic is in the samples: theirs, not a neighbour's)."""
        by_device: dict[int, tuple[list, list, list]] = {}
        memo, slow = self._kernel_paths.get, self.kernel_path
        for path_id, launch, _, name, device, start, end, _, _ in kernels:
            kernel = memo((path_id, name, device))
            if kernel is None:
                kernel = slow(path_id, name, device)
            if kernel == NOWHERE:
                continue
            starts, ends, meta = by_device.get(device) or by_device.setdefault(device,
                                                                               ([], [], []))
            starts.append(start)
            ends.append(end)
            meta.append((kernel, launch))
        listener = self.listener
        if listener is None:  # the last counters session ended meanwhile
            return
        for device, (starts, ends, meta) in by_device.items():
            listener.kernels(device, starts, ends, meta)

    def kernel_times(self, session: Session) -> dict[str, list[tuple[int, float]]]:
        """{kernel name: [(kernel node, GPU ns in `session`)]} (for PC samples' placement)."""
        out: dict[str, list[tuple[int, float]]] = {}
        for (_, name, _), node in list(self._kernel_paths.items()):
            ns = session.nodes.get(node, {}).get(TIME)
            if ns:
                out.setdefault(name, []).append((node, ns))
        return out

    def clear(self) -> None:
        """Forget the memo (no session is live)."""
        self.listener = None
        self._kernel_paths = {}


def _summable(sessions: list[Session], first: int) -> bool:
    """Kernels launched from `first` on may be summed per node: every session is a tree that
    has been active, in its current phase and since it was last cleared, since before then."""
    return all(s.data == "tree" and s.active and s.intervals[-1][0] <= first
               and s.phase_starts[-1] <= first and s.cleared_at <= first for s in sessions)


def _add(totals: dict[int, list], kernel: int, ns: int, count: int, device: int,
         config: int) -> None:
    """Add `count` launches taking `ns` on `kernel` to Session.add_kernel_totals' `totals`;
    a negative config is a copy's bytes (cupti.records.CopyName), counted, not a
    configuration."""
    copied = 0
    if config < 0:
        copied, config = -config * count, 0
    total = totals.get(kernel)
    if total is None:
        totals[kernel] = [ns, count, device, config, None, copied]
        return
    total[0] += ns
    total[1] += count
    total[5] += copied
    if config != total[3] or total[4] is not None:  # launches that differ
        configs = total[4]
        if configs is None:  # all so far had the first one's
            configs = total[4] = {total[3]: total[0] - ns}
        configs[config] = configs.get(config, 0) + ns
