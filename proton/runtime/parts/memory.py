"""memory=True as a part: torch's caching allocator read at the main thread's scope enters
and exits (runtime/memory.py measures), each entry onto the active memory sessions' nodes.

The tracker is a scope listener (frames.listeners) from the first memory session's start to
the last one's end; `add` runs on the main thread at a scope's exit, under each session's lock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from ...data.paths import paths
from ...format import EXCLUSIVE, KEPT_METRICS, MEMORY_METRICS
from ...report import warn
from .base import Part

if TYPE_CHECKING:
    from ...options import SessionOptions
    from ..memory import Kept, Measured, MemoryTracker
    from ..session import Session

_MEM_KEYS = tuple(name + EXCLUSIVE for name in MEMORY_METRICS if name not in KEPT_METRICS)
"""The allocator metrics as a node holds them: own values, never summed up the tree."""
_MEM_ALLOC, _MEM_FREED, _MEM_PEAK, _MEM_LIVE, _MEM_LIVE_FIRST, _MEM_COUNT, _MEM_GREW = _MEM_KEYS
_MEM_KEPT, _MEM_KEPT_COUNT, _MEM_JUDGED, _MEM_DEVICE = (name + EXCLUSIVE for name in KEPT_METRICS)


@dataclass(slots=True)
class MemoryState:
    """A memory session's own (session.parts["memory"])."""

    marks: dict[int, int] = field(default_factory=dict)
    """Scope path -> its entries closed when this session's phase was last judged for what
    they keep (runtime/memory.MemoryTracker.judge)."""
    peak: tuple[int, int] | None = None
    """(scope path, bytes): the highest peak of any entry, over every phase (the deepest scope
    among equal peaks: an outer scope's peak covers its children's), named at finalize."""


class MemoryPart(Part):
    """Each entry of a main-thread scope that closed while a memory session was active adds its
    allocator metrics to its node in the session's current phase."""

    name = "memory"

    def __init__(self, profiler) -> None:
        super().__init__(profiler)
        self.tracker: MemoryTracker | None = None

    def wants(self, opts: SessionOptions) -> bool:
        return opts.memory

    def attach(self, session: Session, opts: SessionOptions) -> None:
        """torch's allocator read at the main thread's scope enters and exits (once for the
        live memory sessions); `session` judges the entries closed from now on."""
        if self.tracker is None:
            from ..memory import MemoryTracker

            self.tracker = self.listener = MemoryTracker(self.add)
        session.parts[self.name] = MemoryState(dict(self.tracker.closed))

    def add(self, path_id: int, measured: Measured) -> None:
        """One scope entry measured (runtime/memory.py): for the active memory sessions."""
        for s in list(self.profiler.sessions.values()):
            if self.name in s.parts and s.active:
                _add_measured(s, path_id, measured)

    def phase_ends(self, session: Session) -> None:
        """What the scopes' entries of `session`'s current phase keep, onto its nodes."""
        tracker = self.tracker
        if tracker is not None:
            _add_kept(session, tracker.judge(session.parts[self.name].marks),
                      tracker.device_bytes)

    def finish(self, session: Session, last: bool, devices: dict) -> None:
        """The last memory session ends: stop reading; say where the job's peak was, or why
        nothing was measured."""
        self.phase_ends(session)
        tracker = self.tracker
        if tracker is not None and last:
            self._close()
        if tracker is None:
            return
        found = session.parts[self.name].peak
        if tracker.failed is not None:
            warn(f"memory=True: torch's allocator could not be read ({tracker.failed}); the "
                 "profile has no memory metrics after that")
        elif found is None or not found[1]:
            warn("memory=True: no scope allocated CUDA memory through torch in this session "
                 "(torch's caching allocator is what is measured)")
        if tracker.failed is None and tracker.no_history is not None and tracker.measuring:
            warn("memory=True: " + ("leaks judged only until the allocator's history "
                                    "stopped" if tracker.ceiling is not None else
                                    "leaks not judged") + f" ({tracker.no_history})")
        if tracker.gaps:
            warn(f"memory=True: torch's allocator history dropped events {tracker.gaps} "
                 "time(s) (a job's own history keeps its last max_entries events); leaks "
                 "are judged on the scope entries begun after the last drop")
        if found is not None and found[1]:
            path, peak = found
            warn(f"memory: the peak, {peak:,} bytes allocated ({peak / 2**30:.2f} GiB), was "
                 f"reached in {' / '.join(paths.names(path))}")

    def discard(self, session: Session, last: bool) -> None:
        if last and self.tracker is not None:
            self._close()

    def _close(self) -> None:
        tracker, self.tracker, self.listener = self.tracker, None, None
        self.profiler.parts.listen()  # no scope reads it from now on
        if tracker is not None:
            tracker.close()

    def after_fork_in_child(self) -> None:
        self.tracker = self.listener = None


def _add_measured(s: Session, path_id: int, m: Measured) -> None:
    """One entry of a scope measured by runtime/memory.py (the main thread's), onto its node in
    `s`'s current phase: sums of bytes allocated and freed and of entries, the highest peak,
    the live bytes at the last exit and at the first, and the exits at which live bytes grew."""
    with s.lock:
        if s.closed:
            return
        node = s.nodes.setdefault(path_id, {})
        live = node.get(_MEM_LIVE)
        if live is None:
            node.update(zip(_MEM_KEYS, (m.alloc, m.freed, m.peak, m.live, m.live, 1, 0)))
        else:
            node[_MEM_ALLOC] += m.alloc
            node[_MEM_FREED] += m.freed
            node[_MEM_PEAK] = max(node[_MEM_PEAK], m.peak)
            node[_MEM_GREW] += m.live > live
            node[_MEM_LIVE] = m.live
            node[_MEM_COUNT] += 1
        state = s.parts["memory"]
        top = state.peak
        if top is None or m.peak > top[1] or (
                m.peak == top[1] and len(paths.names(path_id)) > len(paths.names(top[0]))):
            state.peak = (path_id, m.peak)


def _add_kept(s: Session, kept: Mapping[int, Kept], device_bytes: int | None) -> None:
    """What each scope's entries judged now keep, onto `s`'s current phase (judged at its end,
    and before a job's ranks merge; each judgment takes the entries closed since the last, so
    they add up)."""
    with s.lock:
        if s.closed:
            return
        for path_id, k in kept.items():
            node = s.nodes.setdefault(path_id, {})
            for key, value in ((_MEM_KEPT, k.bytes), (_MEM_KEPT_COUNT, k.entries),
                               (_MEM_JUDGED, k.judged)):
                node[key] = node.get(key, 0) + value
            if device_bytes:
                node[_MEM_DEVICE] = device_bytes
