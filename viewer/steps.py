"""A step's GPU time broken down by what the GPU did, per rank: the rows --diagnose prints and
its idle rule judges (format.py defines the step metrics; proton/runtime/idle.py measures them).

A step is an entry of a scope the main thread opened with no scope open around it; its window
runs from its start to the next step's start (a loop of the same scope), else until the GPU
finished what the step launched (past the next step's start, which then begins there). Each
instant counts once, in the first part that holds: compute, NCCL communication, copies and sets,
then GPU idle while the host was in Proton's own work, in a slow launch call (a kernel's first
launch), blocked in a synchronizing call, or running (the GPU waited for the host). The parts
sum to the window, so no share is over 100%.

Derive, then render: `breakdown` returns rows, `lines` the text.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..format import (STEP_COMM, STEP_COMPUTE, STEP_COPY, STEP_COUNT, STEP_IDLE_HOST,
                      STEP_IDLE_LAUNCH, STEP_IDLE_PROFILER, STEP_IDLE_SYNC, STEP_PARTS, STEP_WALL)
from ..rank_merge import MAX, MAX_RANK, MIN, MIN_RANK
from .reader import Profile

if TYPE_CHECKING:
    from .ranks import Merged

LABELS = {STEP_COMPUTE: "compute", STEP_COMM: "communication (NCCL)", STEP_COPY: "copies",
          STEP_IDLE_HOST: "idle, waiting on the host", STEP_IDLE_SYNC: "idle, host in a sync",
          STEP_IDLE_LAUNCH: "idle, slow launch calls",
          STEP_IDLE_PROFILER: "idle, Proton's own work"}
"""Each part's words, in the order shown."""
NOT_THE_JOBS = (STEP_IDLE_LAUNCH, STEP_IDLE_PROFILER)
"""Parts that are no steady-state cost of the job: left out of its idle time."""


@dataclass(slots=True)
class Step:
    """One step scope's windows on one rank (or on a single process's profile)."""

    node: object
    """The hatchet node of the step scope (the same row in every rank's frame)."""
    name: str
    rank: int | None
    """None: a single process's profile."""
    steps: float
    wall_ns: float
    parts: dict[str, float] = field(default_factory=dict)
    """format.STEP_PARTS -> ns summed over the windows."""

    def share(self, part: str) -> float:
        return self.parts.get(part, 0.0) / self.wall_ns if self.wall_ns else 0.0

    @property
    def idle_ns(self) -> float:
        """The job's idle time: waiting on the host or in a sync (never Proton's, never the
        first launches')."""
        return self.parts.get(STEP_IDLE_HOST, 0.0) + self.parts.get(STEP_IDLE_SYNC, 0.0)


@dataclass(slots=True)
class Spread:
    """A job file's step scope: per part, its lowest and highest rank (the file keeps the
    sum, min and max of each metric over the ranks, not every rank's value)."""

    node: object
    name: str
    ranks: int
    steps: float
    """A rank's windows (the most of any rank)."""
    low: dict[str, tuple[float, int]]
    """Part -> (ns, rank) of the rank with least of it."""
    high: dict[str, tuple[float, int]]


def breakdown(prof: Profile, merged: Merged | None = None) -> list[Step]:
    """Each step scope's windows per rank: from each rank's profile when `merged` has them
    (rank files), else from `prof` (one process's file). Empty when no step was measured.

    Usage:
        for step in breakdown(load("run.hatchet")):
            print(step.name, step.share("step_comm (ns)"))
    """
    if merged is not None and merged.ranks:
        return [s for label, rank in zip(merged.labels, merged.ranks)
                for s in _rows(rank, label)]
    rank = prof.job.get("rank") if isinstance(prof.job, dict) else None
    return _rows(prof, rank if isinstance(rank, int) and not isinstance(rank, bool) else None)


def spreads(merged: Merged) -> list[Spread]:
    """A job file's step scopes with each part's lowest and highest rank (from_job)."""
    stats = merged.stats
    wall = stats.get(STEP_WALL)
    if wall is None:
        return []
    index = list(merged.total.gf.dataframe.index)
    out = []
    for i, node in enumerate(index):
        if not (wall[i, MAX] > 0):
            continue
        low, high = {}, {}
        for part in (STEP_WALL, *STEP_PARTS):
            st = stats.get(part)
            if st is None or np.isnan(st[i, MAX]):
                continue
            low[part] = (float(st[i, MIN]), int(st[i, MIN_RANK]))
            high[part] = (float(st[i, MAX]), int(st[i, MAX_RANK]))
        count = stats.get(STEP_COUNT)
        steps = float(count[i, MAX]) if count is not None and not np.isnan(count[i, MAX]) else 0
        out.append(Spread(node, str(node.frame.get("name", "?")), len(merged.labels), steps,
                          low, high))
    return out


def _rows(prof: Profile, rank: int | None) -> list[Step]:
    df = prof.gf.dataframe
    if STEP_WALL not in df:
        return []
    out = []
    for node in df.index:
        wall = _num(df.at[node, STEP_WALL])
        if not wall:
            continue
        parts = {p: _num(df.at[node, p]) if p in df else 0.0 for p in STEP_PARTS}
        count = _num(df.at[node, STEP_COUNT]) if STEP_COUNT in df else 0.0
        out.append(Step(node, str(node.frame.get("name", "?")), rank, count, wall, parts))
    return out


def _num(value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def lines(rows: list[Step], spread: list[Spread] | None = None) -> list[str]:
    """The breakdown as text: one line per step scope and rank, ms a step and the share of
    the step for each part that is not 0."""
    if not rows and not spread:
        return []
    out = ["GPU time per step, by what the GPU did (each step from its start to the next "
           "entry of its scope, else until the GPU finished what it launched; the parts sum "
           "to the step; idle time while the host was in Proton's own work is the "
           "profiler's, not the job's):"]
    for s in rows:
        n = s.steps or 1
        who = f"rank {s.rank}: " if s.rank is not None else ""
        whole = whole_percents(list(s.parts.values()), s.wall_ns)
        parts = ", ".join(f"{LABELS[p]} {_ms(v / n)} ({pct}%)"
                          for (p, v), pct in zip(s.parts.items(), whole) if v / s.wall_ns >= 0.005)
        out.append(f"  {who}{s.name}: {s.steps:,.0f} steps of {_ms(s.wall_ns / n)}: {parts}")
    for sp in spread or ():
        n = sp.steps or 1
        out.append(f"  {sp.name} over {sp.ranks} ranks ({sp.steps:,.0f} steps a rank), a step's "
                   "least and most:")
        for p in (STEP_WALL, *STEP_PARTS):
            if p not in sp.high or not sp.high[p][0]:
                continue
            (lo, lo_rank), (hi, hi_rank) = sp.low[p], sp.high[p]
            label = "step" if p == STEP_WALL else LABELS[p]
            out.append(f"    {label}: {_ms(lo / n)} (rank {lo_rank}) to {_ms(hi / n)} "
                       f"(rank {hi_rank})")
    return out


def whole_percents(parts: list[float], total: float) -> list[int]:
    """Each part's share of `total` in whole percent, rounded so that parts which sum to the
    total read 100 (largest remainders round up): 0.7/88.6/10.6 reads 1/89/10, not 1/89/11."""
    if total <= 0:
        return [0] * len(parts)
    exact = [100 * p / total for p in parts]
    whole = [int(e) for e in exact]
    short = round(min(100.0, sum(exact))) - sum(whole)
    for i in sorted(range(len(parts)), key=lambda i: whole[i] - exact[i])[:max(0, short)]:
        whole[i] += 1
    return whole


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"
