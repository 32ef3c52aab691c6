"""A job's stragglers, from its ranks' profiles merged on one graph (ranks.Merged): the frames
whose time differs over the ranks, the ranks that make the others wait, and what they were doing.

Each rank's time is read per frame: a kernel's GPU time, a CPU-timed scope's host (wall) time,
another scope's GPU time in the kernels under it (communication kernels left out).
A frame is imbalanced when its slowest rank spends over IMBALANCE times the mean; what it costs
the job is the slowest rank's excess over the ranks that are not slow (a synchronous job waits
for its slowest rank every step), as a share of the job's time. A communication kernel (NCCL)
is read the other way round: its time is mostly waiting for the last rank to arrive, so the rank
that spends LEAST time in it arrived last, and what that rank was doing instead is the frame
where it spends the most time over the others. Without the collectives' start times (a tree
profile has none) the last arriver is inferred so, and the finding says it.

A job file (written by the job's own merge) keeps no rank's values, only per frame the sum, min,
max and the ranks of the min and max (rank_merge): there the last arriver at a collective is
its min rank, the cost the others' mean (sum less the min, over the other ranks) less the min,
and its cause the frame where that rank is the max rank with the most over the others' mean.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..format import COUNT, CPU_TIME, TIME
from ..rank_merge import MAX, MAX_RANK, MIN, MIN_RANK, SUM
from .derive import COMM_KERNEL, kernel_mask
from .ranks import Merged

IMBALANCE = 1.2
"""A frame whose slowest rank spends over this times the mean (a collective: whose median rank
spends over this times its fastest) is imbalanced. Ranks doing the same work differ by a few
percent (clocks, a ring's position, the host's noise); 20% is past that, and a frame that costs
little step time is left out anyway by MIN_COST."""
MIN_COST = 0.01
"""An imbalance costing under this share of the job's time is not reported (as --diagnose
leaves out kernels under 1% of the GPU time)."""
NESTED = 0.8
"""A frame whose excess is at least this share of its parent's is the one named (the deeper
frame says more: fwd_bwd rather than the step around it)."""
PART = 1.1
"""A frame under a reported one, with the same worst rank, is left out unless its max/mean is
over this times its ancestor's: a rank slow everywhere is one finding, not one per frame."""
SHOWN = 4
"""Ranks named per finding before '...'."""


@dataclass(slots=True)
class Straggler:
    """One imbalanced frame, or one collective and the rank it waits for."""

    node: Any
    """The frame (a hatchet Node of the merged graph)."""
    what: str
    """'GPU time' or 'cpu time': which of the frame's times differs."""
    slow: list[int]
    """The ranks over IMBALANCE times the mean (a collective's: the last to arrive), worst
    first."""
    values: np.ndarray
    """The frame's time (ns) on each rank, in Merged.labels order."""
    cost_ns: float
    """What the job waits for them: the worst rank's excess over the mean of the others (a
    collective's: its last arriver's excess where it was (cause_ns), which the others wait out
    in the collective; without a cause, the others' mean time in it less the last arriver's:
    that also holds the collective's own spread, 16% under a planted 20 ms on 4 H200s)."""
    ratio: float
    """max/mean of the frame's time over the ranks."""
    collective: bool = False
    cause: Any = None
    """A collective's: the frame where its last arriver spends the most over the others."""
    cause_what: str = ""
    cause_ns: float = 0.0
    """The last arriver's time over the others' mean there."""
    top: int = -1
    """The rank that spends the most in the frame."""
    top_ns: float = 0.0
    low_ns: float = 0.0
    """The most and the least time a rank spends in the frame."""
    calls: float = 0.0
    """The frame's calls (count) a rank, where the profile has them: a collective's steps."""


@dataclass(slots=True)
class Stragglers:
    found: list[Straggler]
    """Most costly first."""
    job_ns: float
    """The job's time: its slowest rank's outermost CPU-timed scopes (its wall time), else
    its kernel time."""
    job_what: str


class _Times:
    """Each candidate's time per rank (candidates by ranks): a kernel's GPU time, a CPU-timed
    scope's host time, another scope's GPU time in its kernels but the communication ones
    (their waiting is another rank's lateness); 0 where a rank lacks a frame another has."""

    def __init__(self, merged: Merged) -> None:
        total = merged.total.gf.dataframe
        index = list(total.index)
        kernels = kernel_mask(merged.total)
        is_kernel = np.array([bool(kernels.get(n, False)) for n in index], dtype=bool)
        comm = is_kernel & total["name"].astype(str).str.match(COMM_KERNEL).to_numpy(dtype=bool)
        gpu, cpu = np.nan_to_num(_matrix(merged, TIME)), _matrix(merged, CPU_TIME)
        timed = ~np.isnan(cpu).all(axis=1)
        row = {node: i for i, node in enumerate(index)}
        under = np.zeros_like(gpu)  # each frame's non-communication kernel time below it
        for i in np.flatnonzero(is_kernel & ~comm):
            for up in _ancestors(index[i]):
                under[row[up]] += gpu[i]
        scopes = ~is_kernel & ~timed & (under > 0).any(axis=1)
        rows_k, rows_c, rows_s = (np.flatnonzero(m) for m in (is_kernel, timed, scopes))
        self.nodes = [index[i] for rows in (rows_k, rows_c, rows_s) for i in rows]
        self.what = (["GPU time"] * len(rows_k) + ["cpu time"] * len(rows_c)
                     + ["GPU time"] * len(rows_s))
        self.comm = np.concatenate([comm[rows_k], np.zeros(len(rows_c) + len(rows_s), bool)])
        self.x = np.vstack([gpu[rows_k], np.nan_to_num(cpu[rows_c]), under[rows_s]])
        self.timed = {index[i] for i in rows_c}
        self.outer = [j for j, node in enumerate(self.nodes) if self.what[j] == "cpu time"
                      and not any(a in self.timed for a in _ancestors(node))]
        """The CPU-timed scopes under no other: together, a rank's wall time."""
        self.kernels = np.arange(len(rows_k))


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
    if not merged.ranks:
        return _from_stats(merged)
    times = _Times(merged)
    x = times.x
    labels = list(merged.labels)
    if times.outer:
        job_ns, job_what = float(x[times.outer].sum(axis=0).max()), "wall time"
    else:
        job_ns, job_what = float(x[times.kernels].sum(axis=0).max(initial=0.0)), "kernel time"
    found: list[Straggler] = []
    if x.shape[1] < 2:
        return Stragglers(found, job_ns, job_what)
    mean = x.mean(axis=1)
    causes: set = set()
    for j in map(int, np.flatnonzero(x.max(axis=1) > 0)):
        node, what, row = times.nodes[j], times.what[j], x[j]
        if times.comm[j]:
            s = _collective(j, mean[j], labels, times)
            if s is not None:
                if s.cost_ns >= MIN_COST * job_ns:
                    found.append(s)
                    causes.add((s.cause, s.cause_what))
                continue  # else: judged as any frame (slow in the collective itself)
        if row.max() <= IMBALANCE * mean[j]:
            continue
        slow = np.flatnonzero(row > IMBALANCE * mean[j])
        rest = np.setdiff1d(np.arange(len(row)), slow)
        cost = float(row.max() - row[rest].mean())
        if cost < MIN_COST * job_ns:
            continue
        order = slow[np.argsort(-row[slow], kind="stable")]
        found.append(Straggler(node, what, [labels[i] for i in order], row, cost,
                               float(row.max() / mean[j])))
    return _finish(found, causes, job_ns, job_what, merged)


def _finish(found: list[Straggler], causes: set, job_ns: float, job_what: str,
            merged: Merged) -> Stragglers:
    found = [s for s in found if s.collective or (s.node, s.what) not in causes]
    found = _deepest(found)
    found.sort(key=lambda s: -s.cost_ns)
    counts = _per_rank(merged, COUNT)
    rows = {node: i for i, node in enumerate(merged.total.gf.dataframe.index)}
    for s in found:
        if not len(s.values):
            continue
        s.top = merged.labels[int(np.argmax(s.values))]
        s.top_ns = float(s.values.max())
        s.low_ns = float(s.values[merged.labels.index(s.slow[0])]) if s.collective else \
            float(s.values.min())
        if counts is not None:
            s.calls = float(counts[rows[s.node]])
    return Stragglers(found, job_ns, job_what)


def _per_rank(merged: Merged, metric: str) -> np.ndarray | None:
    """A metric's mean a rank per frame (rank_merge's sum over the job's size)."""
    stat = merged.stats.get(metric)
    if stat is None:
        return None
    return stat[:, SUM] / max(len(merged.labels), 1)


def _from_stats(merged: Merged) -> Stragglers:
    """find() on a job file: from each frame's sum, min, max and their ranks."""
    total = merged.total.gf.dataframe
    index = list(total.index)
    size = len(merged.labels)
    found: list[Straggler] = []
    gpu, cpu = merged.stats.get(TIME), merged.stats.get(CPU_TIME)
    root = next((i for i, node in enumerate(index) if not node.parents), 0)
    if cpu is not None and not np.isnan(cpu[root, MAX]) and cpu[root, MAX] > 0:
        job_ns, job_what = float(cpu[root, MAX]), "wall time"  # the outermost timed scopes
    elif gpu is not None and not np.isnan(gpu[root, MAX]):
        job_ns, job_what = float(gpu[root, MAX]), "kernel time"
    else:
        return Stragglers([], 0.0, "kernel time")
    if size < 2:
        return Stragglers([], job_ns, job_what)
    kernels = kernel_mask(merged.total)
    is_kernel = np.array([bool(kernels.get(n, False)) for n in index], dtype=bool)
    comm = is_kernel & total["name"].astype(str).str.match(COMM_KERNEL).to_numpy(dtype=bool)
    own_cpu = pd.to_numeric(total[CPU_TIME], errors="coerce").notna().to_numpy() \
        if CPU_TIME in total else np.zeros(len(index), bool)
    # candidates: kernels (GPU time) and CPU-timed scopes (host time), each row's statistics
    rows = [(i, "GPU time", gpu) for i in np.flatnonzero(is_kernel)] if gpu is not None else []
    rows += [(i, "cpu time", cpu) for i in np.flatnonzero(own_cpu)] if cpu is not None else []
    causes: set = set()
    counts = _per_rank(merged, COUNT)
    for i, what, stat in rows:
        row = stat[i]
        if np.isnan(row[SUM]) or row[MAX] <= 0:
            continue
        node = index[i]
        mean = row[SUM] / size
        if comm[i]:
            others = (row[SUM] - row[MIN]) / (size - 1)
            if row[MIN] * IMBALANCE < others:  # its least-waiting rank came last
                last = int(row[MIN_RANK])
                s = Straggler(node, what, [last], np.empty(0), float(others - row[MIN]),
                              float(row[MAX] / mean), collective=True, top=int(row[MAX_RANK]),
                              top_ns=float(row[MAX]), low_ns=float(row[MIN]),
                              calls=float(counts[i]) if counts is not None else 0.0)
                _cause(s, last, rows, comm, index, size)
                _cost_from_cause(s)
                if s.cost_ns >= MIN_COST * job_ns:
                    found.append(s)
                    causes.add((s.cause, s.cause_what))
                continue
        if row[MAX] <= IMBALANCE * mean:
            continue
        cost = float(row[MAX] - (row[SUM] - row[MAX]) / (size - 1))
        if cost < MIN_COST * job_ns:
            continue
        found.append(Straggler(node, what, [int(row[MAX_RANK])], np.empty(0), cost,
                               float(row[MAX] / mean), top=int(row[MAX_RANK]),
                               top_ns=float(row[MAX]), low_ns=float(row[MIN]),
                               calls=float(counts[i]) if counts is not None else 0.0))
    found = [s for s in found if s.collective or (s.node, s.what) not in causes]
    found = _deepest(found)
    found.sort(key=lambda s: -s.cost_ns)
    return Stragglers(found, job_ns, job_what)


def _cause(s: Straggler, last: int, rows: list, comm: np.ndarray, index: list,
           size: int) -> None:
    """The frame where `last` is the rank that spends most, by the most over the others'
    mean (a deeper one when it holds NESTED of that)."""
    excess: dict[int, tuple[float, str]] = {}
    for i, what, stat in rows:
        row = stat[i]
        if comm[i] or np.isnan(row[SUM]) or int(row[MAX_RANK]) != last:
            continue
        over = float(row[MAX] - (row[SUM] - row[MAX]) / (size - 1))
        if over > 0 and over > excess.get(i, (0.0, ""))[0]:
            excess[i] = (over, what)
    if not excess:
        return
    best = max(excess, key=lambda k: excess[k][0])
    while True:
        inner = [k for k in excess if excess[k][0] >= NESTED * excess[best][0]
                 and _under(index[k], index[best])]
        if not inner:
            break
        best = max(inner, key=lambda k: excess[k][0])
    s.cause, s.cause_what, s.cause_ns = index[best], excess[best][1], excess[best][0]


def _collective(j: int, mean: float, labels: list[int], times: _Times) -> Straggler | None:
    """The ranks that arrive last at collective `j` (they spend least in it) and what the
    first of them was doing meanwhile; None when no rank spends much less than the median."""
    x = times.x[j]
    last = np.flatnonzero(x * IMBALANCE < np.median(x))  # not the mean: one slow rank raises it
    if not len(last):
        return None
    waiting = np.setdiff1d(np.arange(len(x)), last)
    order = last[np.argsort(x[last], kind="stable")]
    first = order[0]
    found = Straggler(times.nodes[j], "GPU time", [labels[i] for i in order], x,
                      float(x[waiting].mean() - x[first]), float(x.max() / mean),
                      collective=True)
    # what the first of them spends over the ranks that wait, frame by frame
    excess = np.where(times.comm, -np.inf, times.x[:, first] - times.x[:, waiting].mean(axis=1))
    best = int(np.argmax(excess)) if len(excess) else -1
    while best >= 0 and excess[best] > 0:  # a frame under it that holds most of it says more
        inner = [int(k) for k in np.flatnonzero(excess >= NESTED * excess[best])
                 if _under(times.nodes[k], times.nodes[best])]
        if not inner:
            found.cause, found.cause_what = times.nodes[best], times.what[best]
            found.cause_ns = float(excess[best])
            break
        best = max(inner, key=lambda k: excess[k])
    _cost_from_cause(found)
    return found


def _cost_from_cause(s: Straggler) -> None:
    """A collective's cost is its last arriver's excess in what it was doing, where known: the
    time in the collective also holds its own spread over ranks (4 H200s, a rank planted 20 ms
    late 5 times: +99.99 ms in its scope, 83.5 ms from the waits)."""
    if s.cause is not None and s.cause_ns > 0:
        s.cost_ns = s.cause_ns


def _under(node, ancestor) -> bool:
    up = node
    while up.parents:
        up = up.parents[0]
        if up is ancestor:
            return True
    return False


def _deepest(found: list[Straggler]) -> list[Straggler]:
    """Leave out a frame whose excess a frame under it (same time, same worst rank) holds
    NESTED or more of; then a frame under a frame left in, with the same worst rank and no
    more imbalanced than it (a part of the same story)."""
    def same(t: Straggler, s: Straggler) -> bool:
        return t is not s and not t.collective and not s.collective \
            and (s.slow[0] in t.slow or t.slow[0] in s.slow)

    keep = [s for s in found if not any(
        same(t, s) and t.what == s.what and _under(t.node, s.node)
        and t.cost_ns >= NESTED * s.cost_ns for t in found)]
    return [s for s in keep if not any(
        same(t, s) and _under(s.node, t.node) and s.ratio <= t.ratio * PART for t in keep)]


def _ancestors(node):
    up = node
    while up.parents:
        up = up.parents[0]
        yield up


def ranks_text(slow: list[int], of: int) -> str:
    """'rank 1', 'ranks 3,1 (2 of 4)', 'ranks 7,1,2,3,... (12 of 64)': worst first."""
    if len(slow) == 1:
        return f"rank {slow[0]}"
    shown = ",".join(map(str, slow[:SHOWN])) + (",..." if len(slow) > SHOWN else "")
    return f"ranks {shown} ({len(slow)} of {of})"
