"""A job's stragglers, from its ranks' profiles merged on one graph (ranks.Merged): the rank
each step's collectives wait for, the scope where it spent the time, whether its host or its
GPU was slow, and what that costs a step; and frames whose time differs over the ranks.

Steps. A step is a scope the main thread timed (scope_wall, or a cpu_timed_scope's cpu time)
with no timed scope around it; a job with none is one step, its whole run. Where a job has
steps only what runs inside them is judged: DDP's construction, its broadcasts and a warm-up
run outside them, and their collectives say nothing of the steady state.

The last to arrive. A collective (an NCCL kernel) runs on every rank until the last one
arrives, so the rank that spends least in a step's collectives arrived last, and what the others
spend there over it is waiting for it. It is named when the others spend over IMBALANCE times
its time there and it stands apart from them (their mean over it by OUTLIER times their own
spread): in a host-bound job whose ranks take turns being last no rank does (FSDP on 4 H200s,
no rank planted: its mean over the least by 2.7 times their spread).

Host or GPU. A rank late because of its host leaves its GPU idle while the others' GPUs wait
in the collective, busy: its GPU idle in the step (gpu_idle) is over the others' by about its
lateness, at least HOST of the least that can be (each collective waits at most the lateness,
so the others' extra wait shared out over the step's collectives is a lower bound of it). The
scope named is the one under the step where its host time (scope_wall) is most over the
others', and the cost a step its extra GPU idle, the time the job loses (4 H200s, a rank's host
3 ms late a step: +2.3 ms a step idle, the job's step 2.2 ms longer than a balanced job's), no
more than its host's excess in that scope. Without gpu_idle (cpu_timed_scope only) the host is
the cause where a scope's host time is more over the others' than any kernel time. Otherwise
the rank is slow on the GPU: its kernels' time (NCCL's left out) over the others', in the
scope where that is most. The cost is a range. Its kernels' excess is low: the others'
kernels run slower beside the collective that spins waiting for it (4 H200s, a 1.05x batch:
+0.17 ms a step over them, +0.9 ms over a balanced job's). Each collective waits at most the
rank's lateness, so the others' extra wait shared out over the step's collectives (DDP's
all-reduce, 5 buckets) is a lower bound too (0.43 ms), and all of it the upper one (2.2 ms).

Imbalance. Outside the steps a straggler was found in (where the waiting ranks' kernels are
slowed by it), a frame is imbalanced when its slowest rank spends over IMBALANCE times the
mean: a kernel's GPU time, a CPU-timed scope's host time, another scope's GPU time in the
kernels under it (communication kernels left out; a collective is judged as a frame only when
no rank arrived much later than the others: it is slow itself). It costs the slowest rank's
excess over the ranks that are not slow, as a share of the job's time.

A job file (written by the job's own merge) keeps no rank's values, only per frame the sum,
min, max and the ranks of the min and max (rank_merge): there a rank's value is the min or
max where it is that rank, else the mean of the ranks between; the last arriver is the min
rank of the step's biggest collective.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..format import COUNT, CPU_COUNT, CPU_TIME, GPU_IDLE, SCOPE_WALL, TIME
from ..rank_merge import MAX, MAX_RANK, MIN, MIN_RANK, N, SUM
from .derive import COMM_KERNEL, kernel_mask
from .graph import ancestors, under as is_under
from .ranks import Merged

IMBALANCE = 1.2
"""A frame whose slowest rank spends over this times the mean is imbalanced; a step's
collectives wait for a rank when the others spend over this times its time in them. Ranks doing
the same work differ by a few percent (clocks, a ring's position, the host's noise: 1.08 in a
balanced DDP job's all-reduce on 4 H200s)."""
OUTLIER = 3.0
"""The last arriver's gap below the others' mean time in the collectives, over the others'
spread (their max less their mean), past which it stands apart (see the module's docstring)."""
HOST = 0.5
"""The last arriver's GPU idle over the others', as a share of the least its lateness can be
(the others' extra wait shared out over the step's collectives), from which its host is the
cause: a rank late by its host idles about its lateness, one late by its GPU no more than the
others (2 and 4 H200s, DDP: 2.6 to 4.5 times that least with a host planted slow, 0.05 and
below 0 with a GPU)."""
MIN_COST = 0.01
"""An imbalance or straggler costing under this share of the job's (a step's) time is not
reported (as --diagnose leaves out kernels under 1% of the GPU time)."""
NESTED = 0.8
"""A frame whose excess is at least this share of its parent's is the one named (the deeper
frame says more: fwd_bwd rather than the step around it)."""
PART = 1.1
"""A frame under a reported one, with the same worst rank, is left out unless its max/mean is
over this times its ancestor's: a rank slow everywhere is one finding, not one per frame."""
SAME_COUNT = 0.9
"""A step's entries: the greatest common divisor of its kernels' counts (a kernel launched k
times a step has a multiple of the entries), else, where one launched now and then breaks it,
the largest number dividing the counts of this share of them."""
SHOWN = 4
"""Ranks named per finding before '...'."""


@dataclass(slots=True)
class Late:
    """A step whose collectives wait for one rank: who, where, why, and what it costs."""

    step: Any
    """The step scope (a hatchet Node of the merged graph), ROOT for a job without steps."""
    rank: int
    collective: Any
    """The step's collective the others spend most in."""
    steps: int
    """The step's entries (1: unknown, or ROOT)."""
    mine_ns: float
    """Its time in the step's collectives (summed over its entries)."""
    others_ns: float
    """The other ranks' mean time in them."""
    cause: str
    """'host' or 'GPU'."""
    where: Any
    """The scope it spent the time in."""
    where_ns: float
    """Its excess there over the others' mean: host time (host), kernel time (GPU)."""
    idle_ns: float | None
    """Its GPU idle in the step over the others' mean; None where not recorded."""
    cost_ns: float
    """What the job loses to it (host: its extra GPU idle; GPU: a lower bound, its kernels'
    excess or the others' extra wait in one collective, waits_ns the upper one)."""
    step_ns: float
    """The step's wall time on its slowest rank, all entries."""
    where_what: str = "host time"
    """Which time where_ns is: 'host time', 'cpu time' (a cpu_timed_scope's) or 'GPU time'."""
    calls: float = 0.0
    """The step's collectives a step (a rank's)."""

    @property
    def waits_ns(self) -> float:
        """The others' extra time in the collectives: what they wait, at most."""
        return self.others_ns - self.mine_ns


@dataclass(slots=True)
class Straggler:
    """One imbalanced frame."""

    node: Any
    """The frame (a hatchet Node of the merged graph)."""
    what: str
    """'GPU time' or 'cpu time': which of the frame's times differs."""
    slow: list[int]
    """The ranks over IMBALANCE times the mean, worst first."""
    values: np.ndarray
    """The frame's time (ns) on each rank, in Merged.labels order (empty from a job file)."""
    cost_ns: float
    """What the job waits for them: the worst rank's excess over the mean of the others."""
    ratio: float
    """max/mean of the frame's time over the ranks."""
    top: int = -1
    """The rank that spends the most in the frame."""
    top_ns: float = 0.0
    low_ns: float = 0.0
    """The most and the least time a rank spends in the frame."""
    calls: float = 0.0
    """The frame's calls (count) a rank, where the profile has them."""


@dataclass(slots=True)
class Stragglers:
    late: list[Late]
    """The steps whose collectives wait for a rank, most costly first."""
    found: list[Straggler]
    """Imbalanced frames, most costly first."""
    job_ns: float
    """The job's time: its slowest rank's steps (wall time), else its kernel time."""
    job_what: str


def find(merged: Merged) -> Stragglers:
    """The steps' last arrivers and the job's imbalanced frames, most costly first.

    Usage:
        found = find(ranks.merge(*ranks.read(paths)))
        for late in found.late: print(late.rank, late.cause, late.cost_ns / late.steps)
    """
    view = _View(merged)
    steps = view.steps()
    job_ns, job_what = view.job_time(steps)
    if view.size < 2:
        return Stragglers([], [], job_ns, job_what)
    late = [x for x in (_late(view, s, job_ns) for s in (steps or [view.root])) if x is not None]
    late.sort(key=lambda x: -x.cost_ns)
    judged = None
    if steps:  # only inside the steps, and not where a straggler slows the others' kernels
        judged = np.zeros(len(view.index), dtype=bool)
        for s in steps:
            if not any(x.step is s for x in late):
                judged[view.under(s)] = True
    if merged.ranks:
        found = _frames(merged, job_ns, judged)
    else:
        found = _frames_from_stats(merged, job_ns, judged)
    return Stragglers(late, found, job_ns, job_what)


class _View:
    """Each rank's values on the merged frames: exact from rank files, else from a job file's
    statistics (a rank's value: the min or max where it is that rank, else the mean of the
    ranks between)."""

    def __init__(self, merged: Merged) -> None:
        self.merged = merged
        total = merged.total.gf.dataframe
        self.df = total
        self.index = list(total.index)
        self.row = {node: i for i, node in enumerate(self.index)}
        self.labels = list(merged.labels)
        self.size = len(self.labels)
        kernels = kernel_mask(merged.total, copies=True)
        self.kernel = np.array([bool(kernels.get(n, False)) for n in self.index], dtype=bool)
        names = total["name"].astype(str)
        self.comm = self.kernel & names.str.match(COMM_KERNEL).to_numpy(dtype=bool)
        self.root = next((n for n in self.index if not n.parents), self.index[0])
        self._values: dict[str, np.ndarray] = {}

    def has(self, metric: str, node) -> bool:
        return metric in self.df and bool(pd.notna(self.df.at[node, metric]))

    def host_metric(self, node) -> str | None:
        """The metric of a scope's host time: its entries' wall time, else its cpu time."""
        return next((m for m in (SCOPE_WALL, CPU_TIME) if self.has(m, node)), None)

    def steps(self) -> list:
        """The timed scopes with no timed scope around them that hold kernels."""
        out, stack = [], [(c, False) for c in self.root.children]
        while stack:
            node, inside = stack.pop()
            if self.kernel[self.row[node]]:
                continue
            if not inside and self.host_metric(node) is not None:
                if self.kernel[self.under(node)].any():
                    out.append(node)
                continue
            stack.extend((c, inside) for c in node.children)
        return sorted(out, key=self.row.__getitem__)

    def under(self, node) -> list[int]:
        """The rows of `node`'s subtree, itself first."""
        out, stack = [], [node]
        while stack:
            n = stack.pop()
            out.append(self.row[n])
            stack.extend(n.children)
        return out

    def values(self, metric: str) -> np.ndarray:
        """frames x ranks of each rank's own value (NaN where it has none): rank files only."""
        if metric not in self._values:
            self._values[metric] = _matrix(self.merged, metric)
        return self._values[metric]

    def split(self, rows: list[int], metric: str, rank: int) -> tuple[float, float, float]:
        """`rank`'s sum over `rows` of `metric`, the other ranks' mean of it, and their most."""
        if not rows:
            return 0.0, 0.0, 0.0
        if self.merged.ranks:
            x = np.nan_to_num(self.values(metric)[rows]).sum(axis=0)
            at = self.labels.index(rank)
            others = np.delete(x, at)
            return float(x[at]), float(others.mean()), float(others.max())
        stat = self.merged.stats.get(metric)
        if stat is None:
            return 0.0, 0.0, 0.0
        s = np.nan_to_num(stat[rows])
        n = self.size
        between = (s[:, SUM] - s[:, MIN] - s[:, MAX]) / (n - 2) if n > 2 else s[:, MIN]
        mine = np.where(s[:, MAX_RANK] == rank, s[:, MAX],
                        np.where(s[:, MIN_RANK] == rank, s[:, MIN], between))
        others = (s[:, SUM] - mine) / (n - 1)
        top = np.where(s[:, MAX_RANK] == rank, np.maximum(between, others), s[:, MAX])
        return float(mine.sum()), float(others.sum()), float(top.sum())

    def last(self, rows: list[int]) -> int:
        """The rank that spends least GPU time in `rows` (rank files), else the least rank of
        the biggest of them (a job file)."""
        if self.merged.ranks:
            x = np.nan_to_num(self.values(TIME)[rows]).sum(axis=0)
            return self.labels[int(np.argmin(x))]
        stat = np.nan_to_num(self.merged.stats[TIME][rows])
        return int(stat[int(np.argmax(stat[:, SUM])), MIN_RANK])

    def most(self, rows: list[int], metric: str) -> float:
        """The most any rank has of `metric` at a row (the statistics' max)."""
        stat = self.merged.stats.get(metric)
        return float(np.nansum(stat[rows, MAX])) if stat is not None else 0.0

    def entries(self, step) -> int:
        """How many times the step ran: a cpu_timed_scope's count, else from the counts of the
        kernels under it that every rank ran as often (SAME_COUNT); 1 when unknown."""
        i = self.row[step]
        if step is self.root:
            return 1
        cpu = self.merged.stats.get(CPU_COUNT)
        if cpu is not None and not np.isnan(cpu[i, MAX]) and cpu[i, MAX] >= 1:
            return int(cpu[i, MAX])
        stat = self.merged.stats.get(COUNT)
        if stat is None:
            return 1
        rows = [r for r in self.under(step) if self.kernel[r]]
        s = stat[rows]
        same = (s[:, N] == self.size) & (s[:, MIN] == s[:, MAX]) & (s[:, MIN] >= 1)
        counts = s[same, MIN].astype(np.int64)
        if not len(counts):
            return 1
        whole = math.gcd(*map(int, counts))
        if whole > 1:
            return whole
        kinds = np.unique(counts)  # a kernel launched now and then: the most that divide
        for c in sorted({math.gcd(int(a), int(b)) for a in kinds for b in kinds}, reverse=True):
            if (counts % c == 0).mean() >= SAME_COUNT:
                return c
        return 1

    def job_time(self, steps: list) -> tuple[float, str]:
        """The job's time: its steps' wall time on the slowest rank, else its kernel time."""
        walls = [self.most([self.row[s]], m) for s in steps if (m := self.host_metric(s))]
        if walls and sum(walls) > 0:
            return float(sum(walls)), "wall time"
        if self.merged.ranks:
            x = np.nan_to_num(self.values(TIME)[self.kernel]).sum(axis=0)
            return float(x.max(initial=0.0)), "kernel time"
        return self.most([self.row[self.root]], TIME), "kernel time"


def _late(view: _View, step, job_ns: float) -> Late | None:
    """The rank `step`'s collectives wait for, why and where; None when they wait for none."""
    under = view.under(step)
    comm = [r for r in under if view.comm[r]]
    if not comm:
        return None
    rank = view.last(comm)
    mine, others, top = view.split(comm, TIME, rank)
    gap = others - mine
    if others <= IMBALANCE * mine or gap <= OUTLIER * (top - others):
        return None
    metric = view.host_metric(step)
    step_ns = view.most([view.row[step]], metric) if metric else 0.0
    if gap < MIN_COST * (step_ns or job_ns):
        return None
    steps = view.entries(step)
    calls = view.most(comm, COUNT) / steps
    biggest = max(comm, key=lambda r: view.split([r], TIME, rank)[1])
    scopes = [r for r in under if not view.kernel[r]]
    host: dict[int, float] = {}
    gpu: dict[int, float] = {}
    work: dict[int, float] = {}  # its own kernel time in each scope
    for r in scopes:
        m = view.host_metric(view.index[r])
        if m is not None:
            got = view.split([r], m, rank)
            host[r] = got[0] - got[1]
        rows = [k for k in view.under(view.index[r]) if view.kernel[k] and not view.comm[k]]
        got = view.split(rows, TIME, rank)
        gpu[r], work[r] = got[0] - got[1], got[0]
    at = view.row[step]
    idle = None
    if view.has(GPU_IDLE, step):
        got = view.split([at], GPU_IDLE, rank)
        idle = got[0] - got[1]
        # each collective waits at most its lateness: their count a step bounds it below
        least = gap / calls if calls >= 1 else gap
        on_host = idle >= HOST * least and idle > gpu[at]
    else:
        on_host = max(host.values(), default=0.0) > max(max(gpu.values(), default=0.0), 0.0)
    if on_host:
        where = _pick(host, view, at)
        where_ns = host.get(where, 0.0)
        # its GPU's extra idle, what the job loses, but no more than its host's excess there
        # (in a host-bound job every rank's GPU idles: FSDP on 4 H200s, a rank 3.1 ms late a
        # step idled 22.7 ms a step over the others, whose idle turned into waiting)
        cost = max(min(idle, gap, where_ns) if idle is not None else where_ns, 0.0)
        what = "cpu time" if view.host_metric(view.index[where]) == CPU_TIME else "host time"
    else:
        where = _pick(gpu, view, at)
        if where == at:  # no kernel time over the others': where its GPU work is
            where = max((r for r in scopes if r != at), key=work.__getitem__, default=at)
        where_ns = gpu[where]
        cost = max(where_ns, gap / calls if calls >= 1 else 0.0, 0.0)
        what = "GPU time"
        if cost < MIN_COST * (step_ns or job_ns):
            return None
    return Late(step, rank, view.index[biggest], steps, mine, others,
                "host" if on_host else "GPU", view.index[where], where_ns, idle, cost, step_ns,
                what, calls)


def _pick(excess: dict[int, float], view: _View, step: int) -> int:
    """The scope under the step with the most excess (a deeper one holding NESTED of it
    stands for it); the step itself when none has any."""
    inside = {r: v for r, v in excess.items() if r != step and v > 0}
    if not inside:
        return step
    best = max(inside, key=inside.__getitem__)
    while True:
        deeper = [r for r in inside if inside[r] >= NESTED * inside[best]
                  and is_under(view.index[r], view.index[best])]
        if not deeper:
            return best
        best = max(deeper, key=inside.__getitem__)


# -- imbalanced frames --------------------------------------------------------------------
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
            for up in ancestors(index[i]):
                under[row[up]] += gpu[i]
        scopes = ~is_kernel & ~timed & (under > 0).any(axis=1)
        rows_k, rows_c, rows_s = (np.flatnonzero(m) for m in (is_kernel, timed, scopes))
        self.rows = np.concatenate([rows_k, rows_c, rows_s])
        self.nodes = [index[i] for i in self.rows]
        self.what = (["GPU time"] * len(rows_k) + ["cpu time"] * len(rows_c)
                     + ["GPU time"] * len(rows_s))
        self.comm = np.concatenate([comm[rows_k], np.zeros(len(rows_c) + len(rows_s), bool)])
        self.x = np.vstack([gpu[rows_k], np.nan_to_num(cpu[rows_c]), under[rows_s]])


def _matrix(merged: Merged, metric: str) -> np.ndarray:
    index = merged.total.gf.dataframe.index
    cols = []
    for prof in merged.ranks:
        df = prof.gf.dataframe
        cols.append(pd.to_numeric(df[metric], errors="coerce").reindex(index).to_numpy(dtype=float)
                    if metric in df else np.full(len(index), np.nan))
    return np.column_stack(cols) if cols else np.empty((len(index), 0))


def _frames(merged: Merged, job_ns: float, judged: np.ndarray | None) -> list[Straggler]:
    """The imbalanced frames from each rank's values (rank files), among `judged` rows (all
    when None)."""
    times = _Times(merged)
    x = times.x
    labels = list(merged.labels)
    found: list[Straggler] = []
    mean = x.mean(axis=1)
    for j in map(int, np.flatnonzero(x.max(axis=1) > 0)):
        if judged is not None and not judged[times.rows[j]]:
            continue
        row = x[j]
        if times.comm[j] and row.min() * IMBALANCE < np.median(row):
            continue  # a rank came late (the steps' rule judges that): not slow in it itself
        if row.max() <= IMBALANCE * mean[j]:
            continue
        slow = np.flatnonzero(row > IMBALANCE * mean[j])
        rest = np.setdiff1d(np.arange(len(row)), slow)
        cost = float(row.max() - row[rest].mean())
        if cost < MIN_COST * job_ns:
            continue
        order = slow[np.argsort(-row[slow], kind="stable")]
        found.append(Straggler(times.nodes[j], times.what[j], [labels[i] for i in order], row,
                               cost, float(row.max() / mean[j])))
    found = _deepest(found)
    found.sort(key=lambda s: -s.cost_ns)
    counts = _per_rank(merged, COUNT)
    rows = {node: i for i, node in enumerate(merged.total.gf.dataframe.index)}
    for s in found:
        s.top = labels[int(np.argmax(s.values))]
        s.top_ns, s.low_ns = float(s.values.max()), float(s.values.min())
        if counts is not None:
            s.calls = float(counts[rows[s.node]])
    return found


def _per_rank(merged: Merged, metric: str) -> np.ndarray | None:
    """A metric's mean a rank per frame (rank_merge's sum over the job's size)."""
    stat = merged.stats.get(metric)
    if stat is None:
        return None
    return stat[:, SUM] / max(len(merged.labels), 1)


def _frames_from_stats(merged: Merged, job_ns: float,
                       judged: np.ndarray | None) -> list[Straggler]:
    """_frames on a job file: from each frame's sum, min, max and their ranks."""
    total = merged.total.gf.dataframe
    index = list(total.index)
    size = len(merged.labels)
    gpu, cpu = merged.stats.get(TIME), merged.stats.get(CPU_TIME)
    kernels = kernel_mask(merged.total)
    is_kernel = np.array([bool(kernels.get(n, False)) for n in index], dtype=bool)
    comm = is_kernel & total["name"].astype(str).str.match(COMM_KERNEL).to_numpy(dtype=bool)
    own_cpu = pd.to_numeric(total[CPU_TIME], errors="coerce").notna().to_numpy() \
        if CPU_TIME in total else np.zeros(len(index), bool)
    # candidates: kernels (GPU time) and CPU-timed scopes (host time), each row's statistics
    rows = [(i, "GPU time", gpu) for i in np.flatnonzero(is_kernel)] if gpu is not None else []
    rows += [(i, "cpu time", cpu) for i in np.flatnonzero(own_cpu)] if cpu is not None else []
    counts = _per_rank(merged, COUNT)
    found: list[Straggler] = []
    for i, what, stat in rows:
        row = stat[i]
        if (judged is not None and not judged[i]) or np.isnan(row[SUM]) or row[MAX] <= 0:
            continue
        mean = row[SUM] / size
        if comm[i] and row[MIN] * IMBALANCE < (row[SUM] - row[MIN]) / (size - 1):
            continue  # a rank came late: the steps' rule judges that
        if row[MAX] <= IMBALANCE * mean:
            continue
        cost = float(row[MAX] - (row[SUM] - row[MAX]) / (size - 1))
        if cost < MIN_COST * job_ns:
            continue
        found.append(Straggler(index[i], what, [int(row[MAX_RANK])], np.empty(0), cost,
                               float(row[MAX] / mean), top=int(row[MAX_RANK]),
                               top_ns=float(row[MAX]), low_ns=float(row[MIN]),
                               calls=float(counts[i]) if counts is not None else 0.0))
    found = _deepest(found)
    found.sort(key=lambda s: -s.cost_ns)
    return found


def _deepest(found: list[Straggler]) -> list[Straggler]:
    """Leave out a frame whose excess a frame under it (same time, same worst rank) holds
    NESTED or more of; then a frame under a frame left in, with the same worst rank and no
    more imbalanced than it (a part of the same story)."""
    def same(t: Straggler, s: Straggler) -> bool:
        return t is not s and (s.slow[0] in t.slow or t.slow[0] in s.slow)

    keep = [s for s in found if not any(
        same(t, s) and t.what == s.what and is_under(t.node, s.node)
        and t.cost_ns >= NESTED * s.cost_ns for t in found)]
    return [s for s in keep if not any(
        same(t, s) and is_under(s.node, t.node) and s.ratio <= t.ratio * PART for t in keep)]


def ranks_text(slow: list[int], of: int) -> str:
    """'rank 1', 'ranks 3,1 (2 of 4)', 'ranks 7,1,2,3,... (12 of 64)': worst first."""
    if len(slow) == 1:
        return f"rank {slow[0]}"
    shown = ",".join(map(str, slow[:SHOWN])) + (",..." if len(slow) > SHOWN else "")
    return f"ranks {shown} ({len(slow)} of {of})"
