"""The one merge math of a job's ranks: per frame, each metric summed over the ranks and its
min, max and max rank, kept as partial aggregates that combine associatively.

`proton-viewer` merging rank files and a job merging in memory at `proton.finalize()` (a tree
reduction over torch.distributed) both build a `leaf` per rank and `combine` them in the same
binary-tree order (`Reducer`), so their numbers agree to the last digit. Pure Python, imports
only the file format: the runtime and the viewer may both import it.

A frame is its path of (name, nth) from the root (nth: which of its parent's children of that
name it is). A rank that lacks a frame, or a metric on a frame others have, counts 0 there (a
metric's sum, min, max and mean are over every rank of the partial).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .format import (BLOCK_THREADS, CHILDREN_KEY, CPU_TIME, DEVICE_ID, DEVICE_TYPE, DOT_NO_TENSOR_CORES,
                     DOT_NO_WGMMA, FRAME_KEY, GRID_BLOCKS, JOB_KEYS, LAUNCH_CONFIGS,
                     METRICS_KEY, NAME_KEY, RANKS_KEY, REGISTERS, SASS_PREFIX, SHARED_MEMORY,
                     TL_DOT)

FACTS = {DEVICE_ID, DEVICE_TYPE, GRID_BLOCKS, BLOCK_THREADS, REGISTERS, SHARED_MEMORY,
         LAUNCH_CONFIGS, TL_DOT, DOT_NO_TENSOR_CORES, DOT_NO_WGMMA}
"""A kernel's own facts (where it ran, its launch configuration, its machine code), not
quantities: never added up over frames or ranks, and no share of a whole."""
FIRST = (DEVICE_ID, DEVICE_TYPE)
"""Facts that may differ between ranks (cuda:0, cuda:1): the lowest rank's stands for all."""
FEW = 4
"""A frame on at most this many ranks keeps which ones (the viewer's ` [ranks 0,2 of 4]`)."""

Path = tuple[tuple[str, int], ...]


def is_fact(metric: str) -> bool:
    """Whether `metric` is one of FACTS or a machine code count (`sass_ffma`)."""
    return metric in FACTS or metric.startswith(SASS_PREFIX)


@dataclass(slots=True)
class Frame:
    """One frame over the ranks of a partial."""

    frame: dict
    """The lowest rank's frame (JOB_KEYS left out)."""
    own: dict[str, Any] = field(default_factory=dict)
    """Metric -> its own (exclusive) values summed: numbers that are not facts."""
    stats: dict[str, list] = field(default_factory=dict)
    """Metric -> [sum, min, max, max rank, ranks that have it] of each rank's value: inclusive
    metrics over the rank's subtree, the others the frame's own; an exclusive CPU_TIME where
    the frame is not timed itself, the sum over the outermost timed frames inside it (the
    viewer's cpu_time/ms)."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Fact -> the value the ranks agree on (FIRST: the lowest rank's)."""
    clash: set[str] = field(default_factory=set)
    """Facts the ranks disagree on (left out)."""
    count: int = 0
    """Ranks that have the frame."""
    few: list[int] | None = None
    """Those ranks while at most FEW, else None."""


@dataclass(slots=True)
class Partial:
    """Ranks [lo .. the last) of a job merged (labels ascending, not necessarily contiguous)."""

    lo: int
    """The lowest rank label."""
    size: int
    """Ranks merged."""
    frames: dict[Path, Frame]
    inclusive: list[str]
    """Metrics summed over subtrees (what the ranks' roots list), first seen first."""
    devices: dict
    job: dict
    """The lowest rank's JOB_KEYS."""


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    return None


def leaf(root: dict, rank: int, devices: dict | None = None, job: dict | None = None) -> Partial:
    """One rank's tree (a .hatchet root node) as a partial of one rank."""
    inclusive = [m for m in root.get(METRICS_KEY, {}) if "(inc)" not in m]
    incl = set(inclusive)
    order: list[tuple[dict, Path, list[int]]] = []  # pre-order: node, path, children's places
    stack: list[tuple[dict, Path, int]] = [(root, (), -1)]
    while stack:
        node, path, parent = stack.pop()
        if parent >= 0:
            order[parent][2].append(len(order))
        order.append((node, path, []))
        seen: dict[str, int] = {}
        here = len(order) - 1
        kids = []
        for child in node.get(CHILDREN_KEY) or []:
            name = child[FRAME_KEY][NAME_KEY]
            nth = seen[name] = seen.get(name, -1) + 1
            kids.append((child, path + ((name, nth),), here))
        stack.extend(reversed(kids))
    inc: list[dict[str, Any]] = [{} for _ in order]
    filled: dict[int, Any] = {}  # CPU_TIME of a frame, or of the timed frames inside it
    frames: dict[Path, Frame] = {}
    fill = CPU_TIME not in incl
    fact: dict[str, bool] = {}  # metric -> is_fact (asked once a metric)
    for i in range(len(order) - 1, -1, -1):  # children before parents
        node, path, children = order[i]
        frame = node[FRAME_KEY]  # shared, never changed; the root's without the job's keys
        own: dict[str, Any] = {}
        stats: dict[str, list] = {}
        facts: dict[str, Any] = {}
        total: dict[str, Any] = {}
        for metric, value in (node.get(METRICS_KEY) or {}).items():
            is_f = fact.get(metric)
            if is_f is None:
                is_f = fact[metric] = is_fact(metric)
            if is_f or type(value) not in (int, float):  # text, lists, bools: as facts
                facts[metric] = value
                continue
            own[metric] = value
            if metric in incl:
                total[metric] = value
            else:
                stats[metric] = [value, value, value, rank, 1]
        for c in children:  # the reader's subtree sums: missing only where all are
            for metric, value in inc[c].items():
                total[metric] = total[metric] + value if metric in total else value
        inc[i] = total
        for metric, value in total.items():
            stats[metric] = [value, value, value, rank, 1]
        if fill:  # an exclusive cpu_time as the viewer shows it: what an untimed frame holds
            value = own.get(CPU_TIME)
            if value is None:
                inside = [filled[c] for c in children if c in filled]
                value = float(sum(inside)) if inside else None
            if value is not None:
                filled[i] = value
                stats[CPU_TIME] = [value, value, value, rank, 1]
        frames[path] = Frame(frame if path else {k: v for k, v in frame.items()
                                                 if k not in JOB_KEYS},
                             own, stats, facts, set(), 1, [rank])
    frames = dict(reversed(frames.items()))  # pre-order: parents first
    return Partial(rank, 1, frames, inclusive, dict(devices or {}),
                   {k: v for k, v in (job or {}).items() if k in JOB_KEYS})


def combine(a: Partial, b: Partial) -> Partial:
    """The partial of `a`'s ranks and `b`'s (every rank of `b` above every rank of `a`), made
    in place of `a`: both are used up. A metric one side lacks counts 0 on each of its ranks,
    the lowest of them its max rank."""
    af, bf, a_lo, b_lo = a.frames, b.frames, a.lo, b.lo
    for path, lone in af.items():
        if path not in bf:  # b's ranks lack the frame
            for s in lone.stats.values():
                s[0] = s[0] + 0
                if 0 < s[1]:
                    s[1] = 0
                if 0 > s[2]:
                    s[2], s[3] = 0, b_lo
    for path, fb in bf.items():
        found = af.get(path)
        if found is None:  # a's ranks lack the frame
            for s in fb.stats.values():
                _left_zero(s, a_lo)
            af[path] = fb
            continue
        fa = found
        own = fa.own
        for metric, value in fb.own.items():
            own[metric] = own[metric] + value if metric in own else value
        stats, tstats = fa.stats, fb.stats
        matched = 0
        for metric, s in stats.items():
            t = tstats.get(metric)
            if t is None:
                s[0] = s[0] + 0
                if 0 < s[1]:
                    s[1] = 0
                if 0 > s[2]:
                    s[2], s[3] = 0, b_lo
                continue
            s[0] = s[0] + t[0]
            if t[1] < s[1]:
                s[1] = t[1]
            if t[2] > s[2]:
                s[2], s[3] = t[2], t[3]
            s[4] = s[4] + t[4]
            matched += 1
        if matched < len(tstats):
            for metric, t in tstats.items():
                if metric not in stats:
                    _left_zero(t, a_lo)
                    stats[metric] = t
        if fb.facts or fb.clash:
            facts = fa.facts
            fa.clash |= fb.clash
            for metric, value in fb.facts.items():
                if metric not in facts:
                    if metric not in fa.clash:
                        facts[metric] = value
                elif facts[metric] != value and metric not in FIRST:
                    del facts[metric]
                    fa.clash.add(metric)
        if fa.few is not None:
            fa.few = fa.few + fb.few if fb.few is not None \
                and len(fa.few) + len(fb.few) <= FEW else None
        fa.count += fb.count
    devices = a.devices
    for kind, table in b.devices.items():  # each GPU entry from the lowest rank that lists it
        if isinstance(table, dict):
            for dev, entry in table.items():
                devices.setdefault(kind, {}).setdefault(dev, entry)
    a.size += b.size
    a.inclusive = list(dict.fromkeys(a.inclusive + b.inclusive))
    a.job = a.job or b.job
    return a


def _left_zero(s: list, a_lo: int) -> None:
    """`s` of a metric the lower side's ranks lack (0 on each, the lowest a_lo) joined."""
    s[0] = 0 + s[0]
    if not s[1] < 0:
        s[1] = 0
    if not s[2] > 0:
        s[2], s[3] = 0, a_lo


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
    it sends its partial to (None for rank 0). Matches Reducer's order."""
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
    nodes: dict[Path, dict] = {}
    root: dict | None = None
    for path, f in merged.frames.items():
        node = {FRAME_KEY: dict(f.frame), METRICS_KEY: {**f.own, **f.facts}, CHILDREN_KEY: [],
                RANKS_KEY: {"n": f.count, "few": f.few, "stats": f.stats}}
        nodes[path] = node
        if path:
            nodes[path[:-1]][CHILDREN_KEY].append(node)
        else:
            root = node
    if root is None:
        raise ValueError("no root frame")
    job = {k: v for k, v in merged.job.items() if k in ("launcher", "script")}
    job["world_size"] = world_size if world_size is not None else merged.size
    root[FRAME_KEY].update(job)
    root[RANKS_KEY].update(size=merged.size, lo=merged.lo)
    for metric in merged.inclusive:  # hatchet reads the inclusive metrics from the root
        root[METRICS_KEY].setdefault(metric, 0)
    return [root, merged.devices]


def from_document(root: dict) -> tuple[int, int, dict[Path, dict]] | None:
    """A job file's (size, lowest rank, path -> its RANKS_KEY entry); None for a file of one
    rank."""
    top = root.get(RANKS_KEY)
    if not isinstance(top, dict) or not isinstance(top.get("size"), int):
        return None
    out: dict[Path, dict] = {}
    stack: list[tuple[dict, Path]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        entry = node.get(RANKS_KEY)
        if isinstance(entry, dict):
            out[path] = entry
        seen: dict[str, int] = {}
        for child in node.get(CHILDREN_KEY) or []:
            name = child[FRAME_KEY][NAME_KEY]
            nth = seen[name] = seen.get(name, -1) + 1
            stack.append((child, path + ((name, nth),)))
    return top["size"], int(top.get("lo", 0)), out
