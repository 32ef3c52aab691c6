"""What the GPU did while the main thread's scopes ran: idle time per scope entry, and each
step's GPU time broken down into compute, communication, copies and idle by its cause.

A scope entered on the main thread is one entry, (path, start, end) on CUPTI's clock. The GPU
is busy while any record with an interval runs on any GPU of the process (the collector hands
each buffer's kernels and copies in through `add`, classed as compute kernels, NCCL kernels or
copies and sets): the union of their intervals, so with several streams a stretch two kernels
share counts once. The host's side comes in through `host`: stretches in which the main thread
was in Proton's own work (OWN: start, activate, flushes), in which a launch call held a thread
STEP_SLOW_LAUNCH or more (LAUNCH: a slow launch call), or in which the main thread was
blocked in a synchronizing call (SYNC).

Two figures come out (format.py defines the names):
  * Per entry, over its host interval [enter, exit): the idle time the job caused (GPU_IDLE: no
    record ran and the host was neither in Proton's work nor in a slow launch) and the idle
    time left out of it (GPU_IDLE_EXCLUDED). Each entry is judged on its own (an inner scope's
    busy time is also its outer scope's); a node's values are sums over its own entries.
  * Per step (an entry with no main-thread scope open around it), over its window. A step
    drains where the GPU finished every record launched before its exit (its kernels, copies
    and sets, and any thread's made meanwhile: autograd's, NCCL's), or at its exit if that is
    later. Its window runs from its start to the next step's start when that is an entry of
    the same scope (a loop: HTA's ProfilerStep windows), else to where it drained, past the
    next step's start if its work ran on (the next window then begins there: the GPU runs a
    stream's work in order, so what ran before the drain was this step's). Windows are
    disjoint and in order: each begins at its start or where the one before ended, whichever
    is later. Kernels that outlive the host's interval (asynchronous launches, an all-reduce
    waiting for another rank) are counted where they ran. Each instant of a window is
    counted once, in the first part that holds (format.STEP_PARTS): compute, comm, copy,
    idle while the main thread was in Proton's own work, in a slow launch, blocked in a sync,
    or running. The parts sum to the window.

Every part is a covered length: with sets C (compute kernels), CN (C with NCCL kernels), A (every
record), AO (A with OWN), AOL (with LAUNCH), AOLS (with SYNC), each merged into disjoint
intervals, an interval's parts are differences of what the sets cover in it (compute = C,
comm = CN - C, copy = A - CN, profiler = AO - A, launch = AOL - AO, sync = AOLS - AOL, host =
wall - AOLS). Each item (entry or window) sums the six covered lengths as time passes.

Only the main thread's scopes are timed: a training step's scopes are there, and one clock read
per enter and exit (about 0.1 us) is paid there alone. A worker thread's scope (a data loader's)
would report the GPU idle while it did CPU work: a number with no meaning.

Which step launched a record: `launched` tells each launch call's correlation id and start (the
collector, as it takes them, before their records), `add` each record's correlation id. A
record whose launch call was not told counts as launched when it started.

Memory stays bounded however long the run: records come late (CUPTI's buffers), so busy time is
kept as merged intervals only after `cut`, the watermark up to which every record has come (the
earliest start of a launch still waiting for its kernel; nothing launched before it can still
come). `advance(watermark)` first settles where each step whose exit the watermark passed
drained (every record it launched has come), then folds the covered lengths before the
watermark into every item still waiting, drops those intervals and the launch calls made before
it, and hands back the items that ended before it. A window sums nothing until its beginning is
settled: the step before it drains once the watermark passes its exit, which comes before the
next step's start, so no window needs intervals already dropped. What is held is the open
entries, the entries closed since the last advance, at most a few step windows, and the launch
calls and intervals since the watermark; past MAX_WAITING closed entries the oldest are judged
with what has come (counted in `forced`). A host stretch is logged at its end: a part of it
before the watermark by then (a sync that outlasted a buffer) is not counted.

Pure numpy, no CUPTI (tests replay records through it). Threads: enter, exit and own marks run
on the main thread, add, host and advance on CUPTI's buffer thread (or a flushing thread); one
lock. `launched` may run on a launching thread (the python context's launch callback): it only
appends to a queue, taken under the lock.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence, cast

import numpy as np

from ..cupti.records import Busy
from ..data.paths import SCOPE

MAX_WAITING = 1 << 16
"""Closed entries held at most while their busy time may still come."""

COMPUTE, COMM, COPY = int(Busy.compute), int(Busy.comm), int(Busy.copy)
"""Busy record classes (`add`'s kinds, cupti.records.Busy): a kernel, an NCCL kernel, a copy
or set."""
OWN, LAUNCH, SYNC = 0, 1, 2
"""Host stretch classes (`host`'s kind): Proton's own work, a slow launch call, a wait."""
SETS = 6
"""C, CN, A, AO, AOL, AOLS (module docstring): the sets each item sums covered lengths of."""
_C, _CN, _A, _AO, _AOL, _AOLS = range(SETS)
_BUSY_SETS = {COMPUTE: (_C, _CN, _A, _AO, _AOL, _AOLS), COMM: (_CN, _A, _AO, _AOL, _AOLS),
              COPY: (_A, _AO, _AOL, _AOLS)}
_HOST_SETS = {OWN: (_AO, _AOL, _AOLS), LAUNCH: (_AOL, _AOLS), SYNC: (_AOLS,)}
_NEVER = np.iinfo(np.int64).max
_NONE_COVERED = np.zeros(SETS, dtype=np.int64)
"""What each set covers of an entry or window before any busy time is folded in: one array
shared by all of them (a scope's entry makes none), read-only so that nothing adds to it."""
_NONE_COVERED.flags.writeable = False


def parts(walls: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """The parts of each window (format.STEP_PARTS' order: compute, comm, copy, idle host,
    sync, launch, profiler), from its wall and its six covered lengths (rows)."""
    covs = np.asarray(covs, dtype=np.int64).reshape(-1, SETS)
    c, cn, a, ao, aol, aols = covs.T
    return np.stack((c, cn - c, a - cn, np.maximum(np.asarray(walls) - aols, 0), aols - aol,
                     aol - ao, ao - a), axis=1)


@dataclass(slots=True)
class Steps:
    """Step windows whose parts are final: one row each."""

    paths: np.ndarray
    starts: np.ndarray
    walls: np.ndarray
    parts: np.ndarray
    """(n, 7): format.STEP_PARTS' order; each row sums to its wall."""

    def __len__(self) -> int:
        return len(self.paths)


@dataclass(slots=True)
class Judged:
    """Scope entries whose idle time is final: one row each (and the step windows judged at
    the same time)."""

    paths: np.ndarray
    starts: np.ndarray
    """Entry start (CUPTI ns): which sessions were active."""
    walls: np.ndarray
    idles: np.ndarray
    """The job's idle time (format.GPU_IDLE)."""
    excluded: np.ndarray | None = None
    """Idle time in Proton's work or a slow launch (format.GPU_IDLE_EXCLUDED); None: none."""
    busy: np.ndarray | None = None
    """Time some record ran (None: walls - idles - excluded)."""
    steps: Steps | None = None
    shown: np.ndarray | None = None
    """Which entries say something of the GPU (None: those in which some record ran): also
    an entry inside a step in which the GPU ran nothing, once the GPU ran anything (a data
    loader's scope whose GPU waits), never one of a job whose GPU ran nothing at all."""

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


@dataclass(slots=True, eq=False)
class _Window:
    """A step's window being summed: `main` over [begin, drained) (capped at `limit` in a
    loop), `beyond` over [drained, limit) (used only when the next step is an entry of the
    same scope)."""

    path: int
    start: int
    """Its entry's start (which sessions were active)."""
    exit: int | None = None
    limit: int = _NEVER
    """The next step's start, once it began."""
    loop: bool = False
    """The next step is an entry of the same scope: the window ends at its start."""
    last: int = 0
    """The latest end of the records launched before its exit that have come."""
    drained: int = _NEVER
    """Where the GPU finished what it launched by its exit (or its exit), once all has come."""
    begin: int | None = None
    """Where it begins, once the window before it has an end: its start or that end."""
    # replaced, never added to in place: they start as the one shared _NONE_COVERED
    main: np.ndarray = field(default_factory=lambda: _NONE_COVERED)
    beyond: np.ndarray = field(default_factory=lambda: _NONE_COVERED)

    @property
    def end(self) -> int:
        """Where it ends (_NEVER while not known)."""
        if self.begin is None or self.limit == _NEVER or (not self.loop and
                                                          self.drained == _NEVER):
            return _NEVER
        return max(self.begin, self.limit if self.loop else self.drained)

    def judged(self) -> tuple[int, int, int, np.ndarray]:
        covs = self.main + self.beyond if self.loop else self.main
        return self.path, self.start, self.end - cast(int, self.begin), covs


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
    ran: bool = False
    """Some record has run (on any GPU of the process) since the tracker began."""
    _open: list = field(default_factory=list)
    """[path, start, covs] of each open entry, outermost first."""
    _closed: list = field(default_factory=list)
    """(path, start, end, covs, nested) of entries closed since they were last judged."""
    _windows: list = field(default_factory=list)
    """The step windows not yet judged (_Window), oldest first."""
    _ended: int = 0
    """Where the last window judged ended: the next one begins there at the earliest."""
    _sets: list = field(default_factory=lambda: [(np.zeros(0, dtype=np.int64),
                                                  np.zeros(0, dtype=np.int64))] * SETS)
    _notes: deque = field(default_factory=deque)
    """(correlation ids, starts) of launch calls told by `launched`, not yet taken."""
    _launches: tuple = field(default_factory=lambda: (np.zeros(0, dtype=np.int64),
                                                      np.zeros(0, dtype=np.int64)))
    """(correlation ids, sorted; starts) of the launch calls made since `cut`."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    sink: Callable[[Judged | None], None] = lambda judged: None
    """Where the entries judged at a scope's exit go (the idle part's sessions)."""

    def scope_enter(self, top) -> None:
        """A main-thread frame opened (context/frames.ScopeListener): a scope's entry."""
        if top.kind == SCOPE:
            self.enter(top.path)
            top.timed_by = self

    def scope_exit(self, top) -> None:
        """A main-thread frame closed: the entry this tracker timed is left."""
        if top.timed_by is self:
            self.sink(self.exit())

    def enter(self, path: int, ts: int | None = None) -> None:
        """A scope entered at `ts` (CUPTI ns; None: the clock now, read under the lock so
        that no watermark passed it unseen). With no scope open it begins a step."""
        with self._lock:
            ts = self.clock() if ts is None else ts
            if not self._open:
                self._step(path, max(ts, self.cut))
            self._open.append([path, ts, _NONE_COVERED])

    def _step(self, path: int, ts: int) -> None:
        """A step begins: the one before ends at its start if it is of the same scope, else
        where it drained. Under the lock. Only the newest window can be without its limit
        (each step gives the one before it its limit here): one check a step, not a walk of
        the windows held (up to MAX_WAITING before a CUPTI buffer comes)."""
        if self._windows and (w := self._windows[-1]).limit == _NEVER:
            w.limit, w.loop = ts, w.path == path
        self._windows.append(_Window(path, ts))

    def exit(self, ts: int | None = None) -> Judged | None:
        """The innermost open entry left at `ts` (as enter's); past max_waiting closed
        entries the oldest are judged now and returned (else None)."""
        with self._lock:
            if not self._open:
                return None
            ts = self.clock() if ts is None else ts
            path, start, covs = self._open.pop()
            if ts < self.cut:  # given late (tests): the busy time folded past it is not its
                ts = self.cut
            self._closed.append((path, start, max(ts, start), covs, bool(self._open)))
            if not self._open and self._windows:
                w = self._windows[-1]
                w.exit = max(ts, w.start)
            if len(self._closed) > self.max_waiting or len(self._windows) > self.max_waiting:
                return self._judge_oldest(max(len(self._closed) - self.max_waiting // 2, 0))
        return None

    def launched(self, corrs: Sequence[int] | np.ndarray,
                 starts: Sequence[int] | np.ndarray) -> None:
        """Launch calls (CUPTI correlation ids, start times; sequences kept as given until
        taken, not to be changed): told before their records come, so that a step's window
        knows which records it launched. Any thread; no lock."""
        self._notes.append((corrs, starts))

    def add(self, starts: np.ndarray, ends: np.ndarray, kinds: np.ndarray | None = None,
            corrs: np.ndarray | None = None) -> None:
        """Records that kept the GPU busy from starts[i] to ends[i] (CUPTI ns, any order), of
        class kinds[i] (COMPUTE, COMM or COPY; None: all compute), launched by the call with
        correlation id corrs[i] (None: not known, taken as launched when it started)."""
        starts = np.asarray(starts, np.int64)
        ends = np.asarray(ends, np.int64)
        kinds = np.full(len(starts), COMPUTE) if kinds is None else np.asarray(kinds)
        with self._lock:
            self._last(self._launch_times(starts, corrs), starts, ends)
            self._merge_in({k: (starts[kinds == k], ends[kinds == k]) for k in _BUSY_SETS},
                           _BUSY_SETS)

    def host(self, kind: int, starts, ends) -> None:
        """Stretches of the host's (OWN, LAUNCH or SYNC) from starts[i] to ends[i]."""
        with self._lock:
            self._merge_in({kind: (np.asarray(starts, np.int64), np.asarray(ends, np.int64))},
                           _HOST_SETS)

    def own(self, start: int, end: int) -> None:
        """Proton's own work on the main thread from `start` to `end` (CUPTI ns)."""
        self.host(OWN, [start], [end])

    def _take_notes(self) -> None:
        """The launch calls told since the last take, into `_launches`. Under the lock."""
        notes = []
        while self._notes:
            notes.append(self._notes.popleft())
        if not notes:
            return
        corrs, starts = self._launches
        corrs = np.concatenate([corrs] + [np.asarray(c, np.int64).ravel() for c, _ in notes])
        starts = np.concatenate([starts] + [np.asarray(s, np.int64).ravel() for _, s in notes])
        order = np.argsort(corrs, kind="stable")
        self._launches = corrs[order], starts[order]

    def _launch_times(self, starts: np.ndarray, corrs: np.ndarray | None) -> np.ndarray:
        """When each record's launch call was made (its start where that is not known).
        Under the lock."""
        self._take_notes()
        known, at = self._launches
        if corrs is None or not len(known):
            return starts
        corrs = np.asarray(corrs, np.int64)
        i = np.minimum(np.searchsorted(known, corrs), len(known) - 1)
        return np.where(known[i] == corrs, np.minimum(at[i], starts), starts)

    def _last(self, launches: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        """The latest end of the records each step still draining launched before its exit
        (while its exit has not come, every record that comes was). Under the lock."""
        ran = ends > starts
        launches, ends = launches[ran], ends[ran]
        if not len(ends):
            return
        for w in self._windows:
            if w.drained != _NEVER:
                continue
            mine = ends if w.exit is None else ends[launches < w.exit]
            if len(mine):
                w.last = max(w.last, int(mine.max()))

    def _merge_in(self, by_kind: dict, into: dict) -> None:
        """Intervals by kind into the sets `into` names for each. Under the lock."""
        cut = self.cut
        for kind, (s, e) in by_kind.items():
            if not len(s):
                continue
            self.ran |= into is _BUSY_SETS
            s = np.maximum(s, cut)
            for i in into[kind]:
                bs, be = self._sets[i]
                self._sets[i] = merge(np.concatenate((bs, s)), np.concatenate((be, e)))

    def advance(self, watermark: int) -> Judged:
        """Every record that starts before `watermark` has come: fold the busy time before
        it into the entries, drop it, and return the entries that ended by it."""
        with self._lock:
            if watermark > self.cut:
                self._fold(watermark)
            done = [c for c in self._closed if c[2] <= self.cut]
            self._closed = [c for c in self._closed if c[2] > self.cut]
            return self._judged(done, self._windows_done())

    def held(self) -> int:
        """Entries, windows, launches and intervals held now (what memory the tracker takes
        grows with)."""
        return len(self._open) + len(self._closed) + len(self._windows) + \
            max(len(self._launches[0]), max(len(bs) for bs, _ in self._sets))

    def _covers(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(len(a), SETS): what each set covers of each [a, b)."""
        return np.stack([covered(bs, be, a, b) for bs, be in self._sets], axis=1)

    def _sum_windows(self, windows: list, cut: int, to: int) -> None:
        """Add to each window (begun) what each set covers of it in [cut, to): `main` over
        [begin, drained) (capped at `limit` in a loop), `beyond` over [drained, limit) when it
        ends at the next step or has none yet. Two _covers calls for all of them: a fold
        comes once a CUPTI buffer, with up to MAX_WAITING windows held."""
        if not windows:
            return
        begin, drained, limit, loop = (np.array(c, dtype=np.int64) for c in zip(*(
            (w.begin, w.drained, w.limit, w.loop) for w in windows)))
        loop = loop.astype(bool)
        a = np.maximum(begin, cut)
        main = self._covers(a, np.minimum(np.minimum(to, drained),
                                          np.where(loop, limit, _NEVER)))
        beyond_rows = (drained != _NEVER) & (loop | (limit == _NEVER))
        beyond = self._covers(np.maximum(drained, a), np.minimum(to, limit))
        for w, m, b, more in zip(windows, main, beyond, beyond_rows.tolist()):
            w.main = w.main + m
            if more:
                w.beyond = w.beyond + b

    def _settle(self) -> None:
        """Each window whose beginning is not settled begins at its start or where the one
        before it ended, whichever is later, once that end is known. Under the lock."""
        before = self._ended
        for w in self._windows:
            if w.begin is None:
                if before == _NEVER:
                    return
                w.begin = max(w.start, before)
            before = w.end

    def _fold(self, to: int) -> None:
        """Covered lengths in [cut, to) into every open and closed entry and window; cut = to.
        Under the lock."""
        cut = self.cut
        if self._open:
            starts = np.array([o[1] for o in self._open], dtype=np.int64)
            got = self._covers(np.maximum(starts, cut), np.full(len(starts), to))
            for o, g in zip(self._open, got):
                o[2] = o[2] + g
        if self._closed:
            arr = np.array([c[1:3] for c in self._closed], dtype=np.int64).reshape(-1, 2)
            got = self._covers(np.maximum(arr[:, 0], cut), np.minimum(arr[:, 1], to))
            self._closed = [(c[0], c[1], c[2], c[3] + g, c[4]) for c, g in zip(self._closed, got)]
        self._take_notes()
        for w in self._windows:  # every record launched before `to` has come
            if w.exit is not None and w.drained == _NEVER and w.exit <= to:
                w.drained = max(w.exit, w.last)
        self._settle()
        begun = 0
        for w in self._windows:
            if w.begin is None:
                break
            begun += 1
        self._sum_windows(self._windows[:begun], cut, to)
        for i, (bs_i, be_i) in enumerate(self._sets):
            keep = be_i > to
            self._sets[i] = (np.maximum(bs_i[keep], to), be_i[keep])
        corrs, starts = self._launches
        later = starts >= to  # no record launched before `to` can still come
        self._launches = corrs[later], starts[later]
        self.cut = to

    def _windows_done(self) -> list:
        """The step windows that ended by `cut`, oldest first, taken out. Under the lock."""
        n = 0
        for w in self._windows:
            if w.end > self.cut:
                break
            n += 1
        done, self._windows = self._windows[:n], self._windows[n:]
        if done:
            self._ended = done[-1].end
        return [w.judged() for w in done]

    def _judge_oldest(self, n: int) -> Judged:
        """The n oldest closed entries judged with the busy time that has come (under the
        lock): their covered lengths after `cut` are added from the intervals held."""
        self._closed.sort(key=lambda c: c[2])
        done, self._closed = self._closed[:n], self._closed[n:]
        if done:
            arr = np.array([c[1:3] for c in done], dtype=np.int64)
            got = self._covers(np.maximum(arr[:, 0], self.cut), arr[:, 1])
            done = [(c[0], c[1], c[2], c[3] + g, c[4]) for c, g in zip(done, got)]
        self.forced += len(done)
        windows = []
        if len(self._windows) > self.max_waiting:  # those whose end is known, likewise
            ended = [w for w in self._windows if w.limit != _NEVER]
            ended = ended[:len(self._windows) - self.max_waiting // 2]
            for w in ended:  # drained as far as what has come says (its exit is past cut)
                if w.drained == _NEVER:
                    w.drained = max(cast(int, w.exit), w.last)
            self._settle()
            self._sum_windows(ended, self.cut, _NEVER)
            windows = [w.judged() for w in ended]
            self._windows = self._windows[len(ended):]
            self._ended = ended[-1].end
        return self._judged(done, windows)

    def _judged(self, done: list, windows: list) -> Judged:
        paths = np.array([d[0] for d in done], dtype=np.int64)
        starts = np.array([d[1] for d in done], dtype=np.int64)
        walls = np.array([d[2] - d[1] for d in done], dtype=np.int64)
        covs = np.array([d[3] for d in done], dtype=np.int64).reshape(-1, SETS)
        steps = None
        if windows:
            w_walls = np.array([w[2] for w in windows], dtype=np.int64)
            steps = Steps(np.array([w[0] for w in windows], dtype=np.int64),
                          np.array([w[1] for w in windows], dtype=np.int64), w_walls,
                          parts(w_walls, np.array([w[3] for w in windows])))
        nested = np.array([d[4] for d in done], dtype=bool)
        return Judged(paths, starts, walls, np.maximum(walls - covs[:, _AOL], 0),
                      covs[:, _AOL] - covs[:, _A], covs[:, _A], steps,
                      (covs[:, _A] > 0) | (nested & self.ran))

    def end_steps(self) -> Judged:
        """The sessions end (finalize, after the last advance): each step the host has left
        and no next step began after ends where it drained (or at `cut`, the last time every
        record had come, if the GPU ran on past it); returns those judged."""
        with self._lock:
            for w in self._windows:
                if w.exit is not None and w.limit == _NEVER:
                    drained = max(w.exit, w.last) if w.drained == _NEVER else w.drained
                    w.drained = w.limit = min(drained, max(self.cut, w.exit))
            self._settle()
            return self._judged([], self._windows_done())
