"""The one merge math of a job's ranks: per frame, each metric summed over the ranks and its
min, max and the ranks of the min and max, kept as partial aggregates that combine associatively.

`proton-viewer` merging rank files and a job merging in memory at `proton.finalize()` (a tree
reduction over torch.distributed) run the same numpy code in the same binary-tree order over
the ranks (ranks r and r + 2^k at level k, a lone last block passing through: `rounds`,
`Reducer`), so their numbers agree to the last digit. The viewer has every rank at once: it
reduces a frames x ranks matrix per metric level by level (`reduce`: `join` on the even and
odd columns); the job has one rank a process: it `join`s two partials per round (`combine`).
Both make each rank's values with `values` (subtree sums, cpu time) from the same columns.
Why numpy: the pure-Python version cost the viewer ~40 ms a file (256 ranks x 5,000 frames:
16.6 s, against 6.0 s before it; bench/RESULTS.md).

A frame is its path of (name, nth) from the root (nth: which of its parent's children of that
name it is). A rank that lacks a frame, or a metric on a frame others have, counts 0 there (a
metric's sum, min, max and mean are over every rank of the partial; the rank of a 0 so counted
is the lowest of the ranks that lack it); ties keep the lower rank. A vector metric of numbers
("lens": [3, 5]) is merged element by element as the viewer shows it, each element a metric of
its own ("lens[0]"; a rank whose vector is shorter lacks the elements past its end), kept only
for the frames that have it (a long vector on one frame costs that frame alone).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .format import (BLOCK_THREADS, CHILDREN_KEY, CPU_TIME, DEVICE_ID, DEVICE_TYPE, DOT_NO_TENSOR_CORES,
                     DOT_NO_WGMMA, FRAME_KEY, GRID_BLOCKS, JOB_KEYS, LAUNCH_CONFIGS,
                     METRICS_KEY, NAME_KEY, RANKS_KEY, REGISTERS, SASS_PREFIX, SHARED_MEMORY,
                     TL_DOT, VECTOR_SHOWN, with_job)

FACTS = {DEVICE_ID, DEVICE_TYPE, GRID_BLOCKS, BLOCK_THREADS, REGISTERS, SHARED_MEMORY,
         LAUNCH_CONFIGS, TL_DOT, DOT_NO_TENSOR_CORES, DOT_NO_WGMMA}
"""A kernel's own facts (where it ran, its launch configuration, its machine code), not
quantities: never added up over frames or ranks, and no share of a whole."""
FIRST = (DEVICE_ID, DEVICE_TYPE)
"""Facts that may differ between ranks (cuda:0, cuda:1): the lowest rank's stands for all."""
FEW = 4
"""A frame on at most this many ranks keeps which ones (the viewer's ` [ranks 0,2 of 4]`)."""

Path = tuple[tuple[str, int], ...]
Stat = list[np.ndarray]
"""A metric's statistics, one array each (per frame, or frames x partials): SUM, MIN, MAX,
MAX_RANK, N (ranks that have it), MIN_RANK: the order of a job file's "stats" lists."""
SUM, MIN, MAX, MAX_RANK, N, MIN_RANK = range(6)


def is_fact(metric: str) -> bool:
    """Whether `metric` is one of FACTS or a machine code count (`sass_ffma`)."""
    return metric in FACTS or metric.startswith(SASS_PREFIX)


def is_number(value: Any) -> bool:
    """A value that is a quantity (bools, text and lists are facts)."""
    return type(value) in (int, float)


def is_vector(value: Any) -> bool:
    """A vector metric: a list of quantities (a list of anything else is a fact)."""
    return type(value) is list and bool(value) and all(type(e) in (int, float) for e in value)


# -- the math, shared -----------------------------------------------------------------------------
def values(own: dict[str, np.ndarray], up: np.ndarray, depth: np.ndarray,
           inclusive: list[str]) -> dict[str, np.ndarray]:
    """Each rank's value per frame of each metric (frames x ranks, NaN where it has none):
    an inclusive metric's sum over the frame's subtree (own value first, then the children's
    in order; missing only where the whole subtree lacks it), another metric its own; and an
    exclusive CPU_TIME where the frame is not timed itself, the sum over the timed frames
    inside it (the viewer's cpu_time/ms).

    Args:
        own: metric -> each frame's own value on each rank (frames x ranks, NaN: none).
        up: each frame's parent (-1 for the root); depth: its depth (the root 0).
        inclusive: the metrics summed over subtrees (what the roots list).
    """
    out = dict(own)
    levels = _levels(depth)
    for metric in inclusive:
        if metric in own:
            out[metric] = _subtree(own[metric], up, levels, fill=False)
    if CPU_TIME in own and CPU_TIME not in inclusive:
        out[CPU_TIME] = _subtree(own[CPU_TIME], up, levels, fill=True)
    return out


def subtree_sums(own: np.ndarray, up: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Each frame's own value plus its descendants', per column (frames x anything: ranks, or
    a rank's metrics), NaN only where the whole subtree has none; values()'s inclusive sums."""
    return _subtree(own, up, _levels(depth), fill=False)


def _levels(depth: np.ndarray) -> list[np.ndarray]:
    """The frames at each depth, the root's first."""
    return [np.flatnonzero(depth == d) for d in range(int(depth.max(initial=0)) + 1)]


def _subtree(own: np.ndarray, up: np.ndarray, levels: list[np.ndarray],
             fill: bool) -> np.ndarray:
    """fill=False: own + each child's subtree sum; fill=True: own where there, else the sum of
    the children's (each the same way). Children are added in their order (np.add.at), from
    0.0 where the frame has no own value: a rank's single tree walked in Python gives these
    digits too."""
    has = ~np.isnan(own)
    acc = np.where(has, own, 0.0)
    got = has.copy()
    out = own.copy()
    kids_acc = np.zeros_like(acc)
    kids_got = np.zeros_like(has)
    for level in range(len(levels) - 1, -1, -1):
        at = levels[level]
        if fill:  # this level's values are final once its children have reported
            here = np.where(has[at], own[at], np.where(kids_got[at], kids_acc[at], np.nan))
            out[at] = here
            acc[at], got[at] = np.nan_to_num(here), ~np.isnan(here)
        if level == 0:
            break
        parents = up[at]
        if fill:
            np.add.at(kids_acc, parents, np.where(got[at], acc[at], 0.0))
            np.logical_or.at(kids_got, parents, got[at])
        else:
            np.add.at(acc, parents, acc[at])
            np.logical_or.at(got, parents, got[at])
    if not fill:
        out = np.where(got, acc, np.nan)
    return out


def join(a: Stat, b: Stat) -> Stat:
    """The statistics of a's ranks and b's together (every rank of b above every rank of a),
    elementwise: any shape, the same for both. A tie keeps a's rank."""
    low = b[MIN] < a[MIN]
    high = b[MAX] > a[MAX]
    return [a[SUM] + b[SUM], np.where(low, b[MIN], a[MIN]), np.where(high, b[MAX], a[MAX]),
            np.where(high, b[MAX_RANK], a[MAX_RANK]), a[N] + b[N],
            np.where(low, b[MIN_RANK], a[MIN_RANK])]


def leaves(vals: np.ndarray, labels: np.ndarray) -> Stat:
    """Each rank's statistics alone (frames x ranks): NaN (missing) counted 0."""
    has = ~np.isnan(vals)
    v = np.where(has, vals, 0.0)
    rank = np.broadcast_to(labels.astype(np.int64), v.shape)
    return [v, v, v, rank, has.astype(np.int64), rank]


def reduce(stat: Stat, op=join) -> Stat:
    """Statistics over the ranks (axis 1, in rank order) in the job's tree order: at each
    level the columns pair up (0 with 1, 2 with 3, ...), a lone last one passing through."""
    while stat[0].shape[1] > 1:
        width = stat[0].shape[1]
        pairs = width // 2
        joined = op([s[:, 0:2 * pairs:2] for s in stat], [s[:, 1:2 * pairs:2] for s in stat])
        if width % 2:
            joined = [np.concatenate([j, s[:, -1:]], axis=1) for j, s in zip(joined, stat)]
        stat = joined
    return [s[:, 0] for s in stat]


def _sum(a: Stat, b: Stat) -> Stat:
    return [a[0] + b[0]]


def merge_columns(own: dict[str, np.ndarray], up: np.ndarray, depth: np.ndarray,
                  inclusive: list[str], labels: list[int]
                  ) -> tuple[dict[str, Stat], dict[str, np.ndarray]]:
    """Every rank at once (the viewer): per metric the statistics over the ranks
    (NaN where no rank has it), and each metric's own values summed (NaN: no rank has it).

    Args:
        own: metric -> frames x ranks of each frame's own numbers (NaN: none), ranks in
            ascending label order; facts left out.
        labels: the ranks' labels, ascending.
    """
    lab = np.asarray(labels, dtype=np.int64)
    stats: dict[str, Stat] = {}
    for metric, vals in values(own, up, depth, inclusive).items():
        stats[metric] = _masked(reduce(leaves(vals, lab)))
    sums: dict[str, np.ndarray] = {}
    for metric, vals in own.items():
        has = ~np.isnan(vals).all(axis=1)
        sums[metric] = np.where(has, reduce([np.nan_to_num(vals)], _sum)[0], np.nan)
    return stats, sums


def _masked(stat: Stat) -> Stat:
    """NaN statistics where no rank has the metric."""
    none = stat[N] == 0
    return [np.where(none, np.nan, s) if i not in (N,) else s for i, s in enumerate(stat)]


# -- a job's partials -----------------------------------------------------------------------------
@dataclass(slots=True)
class Partial:
    """Ranks [lo .. the last) of a job merged (labels ascending, not necessarily contiguous):
    per frame (paths in pre-order, parents first) arrays of its statistics."""

    lo: int
    """The lowest rank label."""
    size: int
    """Ranks merged."""
    paths: list[Path]
    frames: list[dict]
    """Each frame's frame dict, the lowest rank's (the root's without JOB_KEYS)."""
    count: np.ndarray
    """Per frame, ranks that have it."""
    few: list[list[int] | None]
    """Per frame, those ranks while at most FEW, else None."""
    own: dict[str, list[np.ndarray]]
    """Metric -> [its own (exclusive) values summed, ranks that have it] per frame."""
    stats: dict[str, Stat]
    """Metric -> its statistics per frame of each rank's value (values())."""
    vectors: dict[str, dict[int, Stat]]
    """Vector metric -> frame -> its statistics element by element (over its longest rank's
    length), for the frames that have it."""
    facts: list[dict[str, Any]]
    """Per frame, fact -> the value its ranks agree on (FIRST: the lowest rank's)."""
    clash: list[set[str]]
    """Per frame, facts its ranks disagree on (left out)."""
    ints: set[str]
    """Metrics every value of which is an int (written as ints)."""
    inclusive: list[str]
    """Metrics summed over subtrees (what the ranks' roots list), first seen first."""
    devices: dict
    job: dict
    """The lowest rank's JOB_KEYS."""
    members: list[int] = field(default_factory=list)
    """Its ranks' labels, ascending."""
    index: dict[Path, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {p: i for i, p in enumerate(self.paths)}


class Frames:
    """The frames of one or more trees (a job's ranks), numbered as met: a frame is its parent's
    number, its name, and which of its parent's children of that name it is (a kernel on two
    GPUs: Path's (name, nth)). The first tree's root is frame 0, its frame without JOB_KEYS.
    The viewer numbers its rank files' frames here, a rank its own tree (walk)."""

    def __init__(self) -> None:
        self.key_of: dict[tuple[int, str, int], int] = {}
        """(parent, name, nth) -> the frame's number; insertion order: parents first."""
        self.frames: list[dict] = []
        self.parents: list[int] = []

    def add(self, root: dict) -> tuple[dict[str, tuple[list[int], list]], list[int]]:
        """Number `root`'s frames (visited in pre-order); its metrics as (numbers, values)
        per metric, first seen first, and the numbers it has."""
        if not self.frames:
            self.frames.append({k: v for k, v in root[FRAME_KEY].items() if k not in JOB_KEYS})
            self.parents.append(-1)
        key_of, frames, parents = self.key_of, self.frames, self.parents
        cols: dict[str, tuple[list[int], list]] = {}
        has: list[int] = []
        stack = [(root, 0)]
        while stack:
            node, at = stack.pop()
            has.append(at)
            for metric, value in node[METRICS_KEY].items():
                col = cols.get(metric)
                if col is None:
                    col = cols[metric] = ([], [])
                col[0].append(at)
                col[1].append(value)
            children = node[CHILDREN_KEY]
            if not children:
                continue
            seen: dict[str, int] = {}
            kids = []
            for child in children:
                name = child[FRAME_KEY][NAME_KEY]
                nth = seen[name] = seen.get(name, -1) + 1
                key = (at, name, nth)
                index = key_of.get(key)
                if index is None:
                    index = key_of[key] = len(frames)
                    frames.append(child[FRAME_KEY])
                    parents.append(at)
                kids.append((child, index))
            stack.extend(reversed(kids))  # the first child next: pre-order
        return cols, has

    def preorder(self) -> list[int]:
        """The frame numbers in pre-order (parents first, siblings as first met)."""
        kids: list[list[int]] = [[] for _ in self.parents]
        for i, p in enumerate(self.parents):
            if p >= 0:
                kids[p].append(i)
        out, stack = [], [0]
        while stack:
            i = stack.pop()
            out.append(i)
            stack.extend(reversed(kids[i]))
        return out

    def paths(self) -> list[Path]:
        """Each frame's Path, by number."""
        out: list[Path] = [()] * len(self.frames)
        for (parent, name, nth), index in self.key_of.items():
            out[index] = out[parent] + ((name, nth),)
        return out


def walk(root: dict) -> tuple[list[Path], list[dict], np.ndarray, np.ndarray,
                              dict[str, tuple[list[int], list]], list[dict],
                              dict[str, dict[int, list]]]:
    """A tree's frames in pre-order (numbered by Frames): paths, frame dicts, parents,
    depths, metric -> (frame numbers, numbers), per frame its facts, and vector metric ->
    frame number -> vector."""
    numbered = Frames()
    raw, _ = numbered.add(root)
    order = numbered.preorder()
    n = len(order)
    renumber = [0] * n
    for i, number in enumerate(order):
        renumber[number] = i
    by_number, parents = numbered.paths(), numbered.parents
    paths = [by_number[i] for i in order]
    frames = [numbered.frames[i] for i in order]
    up = [renumber[parents[i]] if i else -1 for i in order]
    depth = [0] * n
    for i in range(1, n):  # pre-order: a parent's depth is known before its children's
        depth[i] = depth[up[i]] + 1
    cols: dict[str, tuple[list[int], list]] = {}
    facts: list[dict] = [{} for _ in range(n)]
    vectors: dict[str, dict[int, list]] = {}
    for metric, (numbers, values) in raw.items():
        fact = is_fact(metric)
        for here, value in zip([renumber[i] for i in numbers], values):
            if fact or not is_number(value):
                if not fact and is_vector(value):
                    vectors.setdefault(metric, {})[here] = value
                else:
                    facts[here][metric] = value
                continue
            col = cols.get(metric)
            if col is None:
                col = cols[metric] = ([], [])
            col[0].append(here)
            col[1].append(value)
    return (paths, frames, np.asarray(up, dtype=np.int64), np.asarray(depth, dtype=np.int64),
            cols, facts, vectors)


def leaf(root: dict, rank: int, devices: dict | None = None, job: dict | None = None) -> Partial:
    """One rank's tree (a .hatchet root node) as a partial of one rank."""
    inclusive = [m for m in root.get(METRICS_KEY, {}) if "(inc)" not in m]
    paths, frames, up, depth, cols, facts, vecs = walk(root)
    n = len(paths)
    own: dict[str, np.ndarray] = {}
    ints: set[str] = set()
    for metric, (at, vals) in cols.items():
        col = np.full((n, 1), np.nan)
        col[at, 0] = vals
        own[metric] = col
        if all(type(v) is int for v in vals):
            ints.add(metric)
    lab = np.array([rank], dtype=np.int64)
    stats = {m: [s[:, 0] for s in leaves(v, lab)]
             for m, v in values(own, up, depth, inclusive).items()}
    vectors = {m: {at: [s[:, 0] for s in leaves(np.asarray(v, dtype=float)[:, None], lab)]
                   for at, v in rows.items()} for m, rows in vecs.items()}
    ints |= {m for m, rows in vecs.items()
             if all(type(e) is int for v in rows.values() for e in v)}
    frames[0] = {k: v for k, v in frames[0].items() if k not in JOB_KEYS}
    return Partial(rank, 1, paths, frames, np.ones(n, dtype=np.int64), [[rank]] * n,
                   {m: [np.nan_to_num(v[:, 0]), (~np.isnan(v[:, 0])).astype(np.int64)]
                    for m, v in own.items()},
                   stats, vectors, facts, [set() for _ in range(n)], ints, inclusive,
                   dict(devices or {}), {k: v for k, v in (job or {}).items() if k in JOB_KEYS},
                   [rank])


def combine(a: Partial, b: Partial) -> Partial:
    """The partial of `a`'s ranks and `b`'s (every rank of `b` above every rank of `a`): `join`
    over the union of their frames, a's first (then b's new ones in b's order). Both are used
    up. A metric one side lacks counts 0 on each of its ranks, the lowest of them its rank."""
    index = a.index
    fresh = [p for p in b.paths if p not in index]
    for p in fresh:
        index[p] = len(index)
    n, na = len(index), len(a.paths)
    at = np.fromiter((index[p] for p in b.paths), dtype=np.int64, count=len(b.paths))
    bmap = {p: i for i, p in enumerate(b.paths)}
    a.paths += fresh
    a.frames += [b.frames[bmap[p]] for p in fresh]
    a.facts += [{} for _ in fresh]
    a.clash += [set() for _ in fresh]
    a.few += [[] for _ in fresh]
    count = np.zeros(n, dtype=np.int64)
    count[:na] = a.count
    for i, j in enumerate(at.tolist()):  # which ranks have each frame, and the facts they agree on
        fb = b.few[i]
        fa = a.few[j]
        a.few[j] = fa + fb if fa is not None and fb is not None and len(fa) + len(fb) <= FEW \
            else None
        if b.facts[i] or b.clash[i]:
            facts, clash = a.facts[j], a.clash[j]
            clash |= b.clash[i]
            for metric, value in b.facts[i].items():
                if metric not in facts:
                    if metric not in clash:
                        facts[metric] = value
                elif facts[metric] != value and metric not in FIRST:
                    del facts[metric]
                    clash.add(metric)
    count[at] += b.count
    a.count = count
    for metric in dict.fromkeys([*a.own, *b.own]):
        left, right = _spread(a.own.get(metric), na, n, None), _spread(b.own.get(metric), None,
                                                                        n, at)
        a.own[metric] = [left[0] + right[0], left[1] + right[1]]
    for metric in dict.fromkeys([*a.stats, *b.stats]):
        left = _spread_stat(a.stats.get(metric), a.lo, na, n, None)
        right = _spread_stat(b.stats.get(metric), b.lo, None, n, at)
        a.stats[metric] = join(left, right)
    for metric in dict.fromkeys([*a.vectors, *b.vectors]):
        mine = a.vectors.get(metric, {})
        theirs = {int(at[i]): stat for i, stat in b.vectors.get(metric, {}).items()}
        for j in dict.fromkeys([*mine, *theirs]):
            one, other = mine.get(j), theirs.get(j)
            width = max(len(s[SUM]) for s in (one, other) if s is not None)
            mine[j] = join(_spread_stat(one, a.lo, _length(one), width, None),
                           _spread_stat(other, b.lo, _length(other), width, None))
        a.vectors[metric] = mine
    for kind, table in b.devices.items():  # each GPU entry from the lowest rank that lists it
        if isinstance(table, dict):
            for dev, entry in table.items():
                a.devices.setdefault(kind, {}).setdefault(dev, entry)
    a.ints = (a.ints & b.ints) | (a.ints - set(b.own) - set(b.stats) - set(b.vectors)) \
        | (b.ints - set(a.own) - set(a.stats) - set(a.vectors))
    a.size += b.size
    a.members += b.members
    a.inclusive = list(dict.fromkeys(a.inclusive + b.inclusive))
    a.job = a.job or b.job
    return a


def _spread(arrays: list[np.ndarray] | None, na: int | None, n: int,
            at: np.ndarray | None) -> list[np.ndarray]:
    """Arrays over a side's frames put on the union's n frames (0 elsewhere)."""
    return _place([np.zeros(n), np.zeros(n, dtype=np.int64)], arrays, na, at)


def _place(out: list[np.ndarray], arrays, na: int | None, at: np.ndarray | None
           ) -> list[np.ndarray]:
    """Each of `arrays` (a side's frames) into `out` (the union's): the first na frames, or at
    `at`; `out` as it is without arrays."""
    if arrays is not None:
        for o, x in zip(out, arrays):
            if at is None:
                o[:na] = x
            else:
                o[at] = x
    return out


def _length(stat: Stat | None) -> int | None:
    return None if stat is None else len(stat[SUM])


def _spread_stat(stat: Stat | None, lo: int, na: int | None, n: int,
                 at: np.ndarray | None) -> Stat:
    """A side's statistics on the union's n frames: where it lacks a frame or the metric, 0 on
    each of its ranks, the lowest of them (lo) the rank."""
    return _place([np.zeros(n), np.zeros(n), np.zeros(n), np.full(n, lo, dtype=np.int64),
                   np.zeros(n, dtype=np.int64), np.full(n, lo, dtype=np.int64)], stat, na, at)


class Reducer:
    """Combines partials given in ascending rank order in the tree a job's reduction takes
    (ranks r and r + 2^k, k = 0, 1, ...; a binary counter), keeping log2(P) of them."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, Partial]] = []  # (level, partial)

    def add(self, partial: Partial) -> None:
        level = 0
        while self.stack and self.stack[-1][0] == level:
            partial = combine(self.stack.pop()[1], partial)
            level += 1
        self.stack.append((level, partial))

    def result(self) -> Partial:
        if not self.stack:
            raise ValueError("no rank to merge")
        out = self.stack.pop()[1]
        while self.stack:
            out = combine(self.stack.pop()[1], out)
        return out


def rounds(rank: int, size: int) -> tuple[list[int], int | None]:
    """A rank's part of the tree reduction: the ranks it receives from, in order, then the one
    it sends its partial to (None for rank 0). Matches Reducer's and reduce's order."""
    sources: list[int] = []
    step = 1
    while step < size:
        if rank % (2 * step):
            return sources, rank - step
        if rank + step < size:
            sources.append(rank + step)
        step *= 2
    return sources, None


def document(merged: Partial, world_size: int | None = None) -> list:
    """The job file: a .hatchet tree of the summed own values (and agreed facts), each node
    carrying its RANKS_KEY statistics; the root also the job's size and lowest rank."""
    nodes: list[dict] = []
    ints = merged.ints
    owns = {m: (v[0].tolist(), v[1].tolist(), m in ints) for m, v in merged.own.items()}
    stats = {m: ([s.tolist() for s in st], m in ints) for m, st in merged.stats.items()}
    for i, path in enumerate(merged.paths):
        metrics: dict[str, Any] = {}
        for m, (total, has, whole) in owns.items():
            if has[i]:
                metrics[m] = int(total[i]) if whole else total[i]
        metrics.update(merged.facts[i])
        mine = {}
        for m, (st, whole) in stats.items():
            if st[N][i]:
                mine[m] = _entry(st, i, whole)
        for m, rows in merged.vectors.items():
            if (vec := rows.get(i)) is not None:
                columns, whole = [s.tolist() for s in vec], m in ints
                metrics[m] = [int(x) for x in columns[SUM]] if whole else columns[SUM]
                for k in range(min(len(columns[SUM]), VECTOR_SHOWN)):
                    if columns[N][k]:
                        mine[f"{m}[{k}]"] = _entry(columns, k, whole)
        node = {FRAME_KEY: dict(merged.frames[i]), METRICS_KEY: metrics, CHILDREN_KEY: [],
                RANKS_KEY: {"n": int(merged.count[i]), "few": merged.few[i], "stats": mine}}
        nodes.append(node)
        if path:
            nodes[merged.index[path[:-1]]][CHILDREN_KEY].append(node)
    if not nodes:
        raise ValueError("no root frame")
    root = nodes[0]
    job = {k: v for k, v in merged.job.items() if k in ("launcher", "script")}
    job["world_size"] = world_size if world_size is not None else merged.size
    root = nodes[0] = with_job(root, job)
    root[RANKS_KEY].update(size=merged.size, lo=merged.lo, ranks=merged.members)
    for metric in merged.inclusive:  # hatchet reads the inclusive metrics from the root
        root[METRICS_KEY].setdefault(metric, 0)
    return [root, merged.devices]


def _entry(st: list[list], i: int, whole: bool) -> list:
    """A metric's RANKS_KEY statistics at `i` (lists of the Stat's arrays): [sum, min, max,
    max rank, ranks with it, min rank], the values as ints where the metric is `whole`."""
    value = int if whole else float
    return [value(st[SUM][i]), value(st[MIN][i]), value(st[MAX][i]), int(st[MAX_RANK][i]),
            int(st[N][i]), int(st[MIN_RANK][i])]
