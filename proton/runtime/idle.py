"""GPU idle time within scopes: each scope entry's wall time against the time the GPU was busy.

A scope entered on the main thread is one entry, (path, start, end) on CUPTI's clock. The GPU
is busy while any kernel (or copy: any record with an interval goes in through `add`) runs on
any device of the process: the union of the records' intervals, so with several streams a
stretch two kernels share counts once, and with one stream it is exactly the time kernels
ran. An entry's idle time is its wall time minus the busy time inside it; each entry is
judged on its own (an inner scope's busy time is also its outer scope's), and a node's
`gpu_idle (ns)` and `scope_wall (ns)` are the sums over its own entries, never over its
children.

Only the main thread's scopes are timed: a training step's scopes are there, and one clock
read per enter and exit (about 0.1 us) is paid there alone. A worker thread's scope (a data
loader's) would report the GPU idle while it did CPU work: a number with no meaning.

Memory stays bounded however long the run: records come late (CUPTI's buffers), so busy time
is kept as merged intervals only after `cut`, the watermark up to which every record has come
(the earliest start of a launch still waiting for its kernel; nothing that starts before it
can still come). `advance(watermark)` folds the busy time before the watermark into every
entry still waiting, drops those intervals, and hands back the entries that ended before it.
What is held is the open entries, the entries closed since the last advance, and the busy
intervals since the watermark; past MAX_WAITING closed entries the oldest are judged with what
has come (counted in `forced`).

Pure numpy, no CUPTI (tests replay records through it). Threads: enter and exit run on the main
thread, add and advance on CUPTI's buffer thread (or a flushing thread); one lock.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

MAX_WAITING = 1 << 16
"""Closed entries held at most while their busy time may still come."""


@dataclass(slots=True)
class Judged:
    """Scope entries whose idle time is final: one row each."""

    paths: np.ndarray
    starts: np.ndarray
    """Entry start (CUPTI ns): which sessions were active."""
    walls: np.ndarray
    idles: np.ndarray

    def __len__(self) -> int:
        return len(self.paths)


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as sorted disjoint intervals."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts.astype(np.int64), ends.astype(np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order].astype(np.int64), ends[order].astype(np.int64)
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def covered(bs: np.ndarray, be: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each [a, b), the length of it that the disjoint sorted intervals (bs, be) cover."""
    if not len(bs) or not len(a):
        return np.zeros(len(a), dtype=np.int64)
    lengths = be - bs
    before = np.concatenate(([0], np.cumsum(lengths)))

    def upto(x: np.ndarray) -> np.ndarray:  # covered length below x
        i = np.searchsorted(bs, x, side="right") - 1
        j = np.maximum(i, 0)
        inside = np.clip(x - bs[j], 0, lengths[j])
        return np.where(i >= 0, before[j] + inside, 0)

    return np.where(b > a, upto(b) - upto(a), 0)


@dataclass(slots=True)
class IdleTracker:
    """The main thread's scope entries and the GPU's busy intervals, reduced as they come."""

    cut: int = 0
    """Busy time before this CUPTI time is folded into the entries (every record has come)."""
    forced: int = 0
    """Entries judged before all their records could have come (MAX_WAITING)."""
    max_waiting: int = MAX_WAITING
    clock: Callable[[], int] = lambda: 0
    """CUPTI's clock (the collector's timestamp)."""
    _open: list = field(default_factory=list)
    """[path, start, busy] of each open entry, outermost first."""
    _closed: list = field(default_factory=list)
    """(path, start, end, busy) of entries closed since they were last judged."""
    _bs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _be: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, path: int, ts: int | None = None) -> None:
        """A scope entered at `ts` (CUPTI ns; None: the clock now, read under the lock so
        that no watermark passed it unseen)."""
        with self._lock:
            self._open.append([path, self.clock() if ts is None else ts, 0])

    def exit(self, ts: int | None = None) -> Judged | None:
        """The innermost open entry left at `ts` (as enter's); past max_waiting closed
        entries the oldest are judged now and returned (else None)."""
        with self._lock:
            if not self._open:
                return None
            ts = self.clock() if ts is None else ts
            path, start, busy = self._open.pop()
            if ts < self.cut:  # given late (tests): the busy time folded past it is not its
                ts = self.cut
            self._closed.append((path, start, max(ts, start), busy))
            if len(self._closed) > self.max_waiting:
                return self._judge_oldest(len(self._closed) - self.max_waiting // 2)
        return None

    def add(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Records that kept the GPU busy from starts[i] to ends[i] (CUPTI ns, any order)."""
        with self._lock:
            s = np.concatenate((self._bs, np.maximum(np.asarray(starts, np.int64), self.cut)))
            e = np.concatenate((self._be, np.asarray(ends, np.int64)))
            self._bs, self._be = merge(s, e)

    def advance(self, watermark: int) -> Judged:
        """Every record that starts before `watermark` has come: fold the busy time before
        it into the entries, drop it, and return the entries that ended by it."""
        with self._lock:
            if watermark > self.cut:
                self._fold(watermark)
            done = [c for c in self._closed if c[2] <= self.cut]
            self._closed = [c for c in self._closed if c[2] > self.cut]
            return self._judged(done)

    def held(self) -> int:
        """Entries and intervals held now (what memory the tracker takes grows with)."""
        return len(self._open) + len(self._closed) + len(self._bs)

    def _fold(self, to: int) -> None:
        """Busy time in [cut, to) into every open and closed entry; cut = to. Under the lock."""
        bs, be, cut = self._bs, self._be, self.cut
        if self._open:
            starts = np.array([o[1] for o in self._open], dtype=np.int64)
            got = covered(bs, be, np.maximum(starts, cut), np.full(len(starts), to))
            for o, g in zip(self._open, got.tolist()):
                o[2] += g
        if self._closed:
            arr = np.array([c[1:4] for c in self._closed], dtype=np.int64).reshape(-1, 3)
            a, b = np.maximum(arr[:, 0], cut), np.minimum(arr[:, 1], to)
            busy = arr[:, 2] + covered(bs, be, a, b)
            self._closed = [(c[0], c[1], c[2], g) for c, g in zip(self._closed, busy.tolist())]
        keep = be > to
        self._bs, self._be = np.maximum(bs[keep], to), be[keep]
        self.cut = to

    def _judge_oldest(self, n: int) -> Judged:
        """The n oldest closed entries judged with the busy time that has come (under the
        lock): their busy time after `cut` is added from the intervals held."""
        self._closed.sort(key=lambda c: c[2])
        done, self._closed = self._closed[:n], self._closed[n:]
        if done:
            arr = np.array([c[1:4] for c in done], dtype=np.int64)
            busy = arr[:, 2] + covered(self._bs, self._be, np.maximum(arr[:, 0], self.cut),
                                       arr[:, 1])
            done = [(c[0], c[1], c[2], g) for c, g in zip(done, busy.tolist())]
        self.forced += len(done)
        return self._judged(done)

    @staticmethod
    def _judged(done: list) -> Judged:
        arr = np.array(done, dtype=np.int64).reshape(-1, 4)
        walls = arr[:, 2] - arr[:, 1]
        return Judged(arr[:, 0], arr[:, 1], walls, np.maximum(walls - arr[:, 3], 0))

    def close_all(self, ts: int) -> Judged:
        """At the end (every record has come): the open entries as if left at `ts` are
        judged with the rest (they stay open), everything held is judged."""
        with self._lock:
            self._fold(max(ts, self.cut))
            done = self._closed + [(p, s, max(ts, s), b) for p, s, b in self._open]
            self._closed = []
            for o in self._open:  # what was judged now is not counted again
                o[1], o[2] = max(ts, o[1]), 0
            return self._judged(done)
