"""A job's stragglers, from its ranks' profiles merged on one graph (ranks.Merged): the frames
whose time differs over the ranks, the ranks that make the others wait, and what they were doing.

Each rank's time is read per frame: a kernel's GPU time, a CPU-timed scope's host (wall) time.
A frame is imbalanced when its slowest rank spends over IMBALANCE times the mean; what it costs
the job is the slowest rank's excess over the ranks that are not slow (a synchronous job waits
for its slowest rank every step), as a share of the job's time. A communication kernel (NCCL)
is read the other way round: its time is mostly waiting for the last rank to arrive, so the rank
that spends LEAST time in it arrived last, and what that rank was doing instead is the frame
where it spends the most time over the others. Without the collectives' start times (a tree
profile has none) the last arriver is inferred so, and the finding says it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..format import CPU_TIME, TIME
from .derive import COMM_KERNEL, kernel_mask
from .ranks import Merged, span

IMBALANCE = 1.2
"""A frame whose slowest rank spends over this times the mean (a collective: whose others spend
over this times its fastest rank) is imbalanced. Ranks doing the same work differ by a few
percent (clocks, a ring's position, the host's noise); 20% is past that, and a frame that costs
little step time is left out anyway by MIN_COST."""
MIN_COST = 0.01
"""An imbalance costing under this share of the job's time is not reported (as --diagnose
leaves out kernels under 1% of the GPU time)."""
NESTED = 0.8
"""A frame whose excess is at least this share of its parent's is the one named (the deeper
frame says more: fwd_bwd rather than the step around it)."""
SHOWN = 4
"""Ranks named per finding before '...'."""


@dataclass(slots=True)
class Straggler:
    """One imbalanced frame, or one collective and the rank it waits for."""

    node: object
    """The frame (a hatchet node of the merged graph)."""
    what: str
    """'GPU time' or 'cpu time': which of the frame's times differs."""
    slow: list[int]
    """The ranks over IMBALANCE times the mean (a collective's: the last to arrive), worst
    first."""
    values: np.ndarray
    """The frame's time (ns) on each rank, in Merged.labels order."""
    cost_ns: float
    """What the job waits for them: the worst rank's excess over the mean of the others (a
    collective's: the others' mean time in it less the last arriver's)."""
    ratio: float
    """max/mean of the frame's time over the ranks."""
    collective: bool = False
    cause: object | None = None
    """A collective's: the frame where its last arriver spends the most over the others."""
    cause_what: str = ""
    cause_ns: float = 0.0
    """The last arriver's time over the others' mean there."""


@dataclass(slots=True)
class Stragglers:
    found: list[Straggler]
    """Most costly first."""
    job_ns: float
    """The job's time: its slowest rank's outermost CPU-timed scopes (its wall time), else
    its kernel time."""
    job_what: str


class _Times:
    """Each candidate frame's time per rank (frames by ranks), kernels by GPU time and
    CPU-timed scopes by host time; 0 where a rank lacks a frame another has."""

    def __init__(self, merged: Merged) -> None:
        total = merged.total.gf.dataframe
        self.index = total.index
        kernels = kernel_mask(merged.total)
        self.kernel = pd.Series([bool(kernels.get(n, False)) for n in self.index],
                                index=self.index)
        self.comm = self.kernel & total["name"].astype(str).str.match(COMM_KERNEL)
        self.gpu = _matrix(merged, TIME)
        self.cpu = _matrix(merged, CPU_TIME)
        self.timed = ~np.isnan(self.cpu).all(axis=1)
        self.gpu = np.nan_to_num(self.gpu)
        self.cpu = np.nan_to_num(self.cpu)
        self.row = {node: i for i, node in enumerate(self.index)}

    def candidates(self):
        """(node, what, times per rank) of every kernel and CPU-timed scope."""
        for i, node in enumerate(self.index):
            if self.kernel.iloc[i]:
                yield node, "GPU time", self.gpu[i]
            if self.timed[i]:
                yield node, "cpu time", self.cpu[i]


def _matrix(merged: Merged, metric: str) -> np.ndarray:
    index = merged.total.gf.dataframe.index
    cols = []
    for prof in merged.ranks:
        df = prof.gf.dataframe
        cols.append(pd.to_numeric(df[metric], errors="coerce").reindex(index).to_numpy(dtype=float)
                    if metric in df else np.full(len(index), np.nan))
    return np.column_stack(cols) if cols else np.empty((len(index), 0))


def find(merged: Merged) -> Stragglers:
    """The job's imbalanced frames and the collectives' last arrivers, most costly first.

    Usage:
        found = find(ranks.merge(*ranks.read(paths)))
        for s in found.found: print(s.slow, s.cost_ns)
    """
    times = _Times(merged)
    job_ns, job_what = _job_time(merged, times)
    labels = list(merged.labels)
    found: list[Straggler] = []
    causes: set = set()
    for node, what, x in times.candidates():
        if len(x) < 2 or not x.any():
            continue
        mean = x.mean()
        if times.comm.loc[node] and what == "GPU time":
            s = _collective(node, x, mean, labels, times)
            if s is not None and s.cost_ns >= MIN_COST * job_ns:
                found.append(s)
                causes.add((s.cause, s.cause_what))
            continue
        if x.max() <= IMBALANCE * mean:
            continue
        slow = np.flatnonzero(x > IMBALANCE * mean)
        rest = np.setdiff1d(np.arange(len(x)), slow)
        cost = float(x.max() - x[rest].mean())
        if cost < MIN_COST * job_ns:
            continue
        order = slow[np.argsort(-x[slow], kind="stable")]
        found.append(Straggler(node, what, [labels[i] for i in order], x, cost,
                               float(x.max() / mean)))
    found = [s for s in found if s.collective or (s.node, s.what) not in causes]
    found = _deepest(found)
    found.sort(key=lambda s: -s.cost_ns)
    return Stragglers(found, job_ns, job_what)


def _collective(node, x: np.ndarray, mean: float, labels: list[int],
                times: _Times) -> Straggler | None:
    """The ranks that arrive last at a collective (they spend least in it) and what the
    first of them was doing meanwhile."""
    last = np.flatnonzero(x * IMBALANCE < mean)
    if not len(last):
        return None
    waiting = np.setdiff1d(np.arange(len(x)), last)
    order = last[np.argsort(x[last], kind="stable")]
    first = order[0]
    cost = float(x[waiting].mean() - x[first])
    found = Straggler(node, "GPU time", [labels[i] for i in order], x, cost,
                      float(x.max() / mean), collective=True)
    excess = [(other, what, float(y[first] - y[waiting].mean()))
              for other, what, y in times.candidates()
              if not (times.comm.loc[other] and what == "GPU time")]
    best = max(excess, key=lambda e: e[2], default=None)
    while best is not None and best[2] > 0:  # a frame under it that holds most of it says more
        inner = [e for e in excess if _under(e[0], best[0]) and e[2] >= NESTED * best[2]]
        if not inner:
            found.cause, found.cause_what, found.cause_ns = best
            break
        best = max(inner, key=lambda e: e[2])
    return found


def _under(node, ancestor) -> bool:
    up = node
    while up.parents:
        up = up.parents[0]
        if up is ancestor:
            return True
    return False


def _deepest(found: list[Straggler]) -> list[Straggler]:
    """Leave out a frame whose slow ranks' excess a frame under it (same time, same worst rank)
    accounts for NESTED or more of."""
    keep = []
    for s in found:
        covered = any(t is not s and not t.collective and t.what == s.what
                      and t.slow[:1] == s.slow[:1] and _under(t.node, s.node)
                      and t.cost_ns >= NESTED * s.cost_ns for t in found)
        if not covered:
            keep.append(s)
    return keep


def _job_time(merged: Merged, times: _Times) -> tuple[float, str]:
    """The slowest rank's wall time (its outermost CPU-timed scopes summed), else its kernel
    time."""
    if times.timed.any():
        outer = [i for i, node in enumerate(times.index)
                 if times.timed[i] and not any(times.timed[times.row[a]]
                                               for a in _ancestors(node))]
        return float(times.cpu[outer].sum(axis=0).max()), "wall time"
    return float(times.gpu[times.kernel.to_numpy()].sum(axis=0).max()), "kernel time"


def _ancestors(node):
    up = node
    while up.parents:
        up = up.parents[0]
        yield up


def ranks_text(slow: list[int], of: int) -> str:
    """'rank 1', 'ranks 1,3', 'ranks 1-3,7,... (12 of 64)'."""
    if len(slow) == 1:
        return f"rank {slow[0]}"
    shown = span(slow[:SHOWN]) + (",..." if len(slow) > SHOWN else "")
    return f"ranks {shown} ({len(slow)} of {of})"
