"""A job file's ranks statistics (format.RANKS_KEY, what rank_merge.document writes), taken out
of its tree and checked: a file from anyone gets one line naming the bad entry, never a
traceback, and costs what it holds (its ranks are those it lists; see reader.memory_cost).

Each frame's entry is read in the order graph.from_tree makes the frames (pre-order, children
in file order), so a frame is matched to its statistics by position: linear in the frames,
however many siblings share a name.
"""
from __future__ import annotations

import reprlib
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ..format import CHILDREN_KEY, FRAME_KEY, NAME_KEY, RANKS_KEY
from ..rank_merge import FEW, MAX_RANK, MIN_RANK, N
from .errors import ViewerError

LARGEST_RANK = (1 << 31) - 1
"""The highest rank label read (as format.JOB_KEYS' rank in a rank file)."""
STAT_WIDTH = 6
"""A "stats" list: sum, min, max, max rank, ranks with it, min rank (files written before the
min rank was kept have the first five)."""


@dataclass(slots=True)
class JobRanks:
    """A job file's statistics, per frame in file pre-order (from_tree's order)."""

    size: int
    """Ranks merged."""
    labels: list[int] | range
    """Which ranks: the file's list, else (files written before the ranks were listed)
    lo .. lo + size - 1."""
    listed: bool
    """Whether the file lists its ranks (else `labels` is a range the file does not pay for)."""
    counts: list[int]
    """Per frame, ranks that have it (0 where the frame has no entry)."""
    few: list[list[int] | None]
    """Per frame, those ranks while at most rank_merge.FEW, else None."""
    stats: dict[str, tuple[list[int], list[list]]] = field(default_factory=dict)
    """Metric -> (frames that have it, their STAT_WIDTH numbers each, rank_merge's order)."""
    entries: int = 0
    """Frames with an entry."""
    values: int = 0
    """Metrics' statistics over all frames (the lists in `stats`)."""

    def arrays(self, rows: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, list]:
        """The statistics on the data frame's rows (`rows`: each frame's row, in file order):
        metric -> rows x STAT_WIDTH (NaN where a frame lacks it), counts and few per row."""
        n = len(rows)
        stats = {}
        for metric, (frames, values) in self.stats.items():
            table = np.full((n, STAT_WIDTH), np.nan)
            table[rows[frames]] = np.array(values, dtype=float)
            stats[metric] = table
        counts = np.zeros(n, dtype=np.int64)
        counts[rows] = self.counts
        few: list = [None] * n
        for frame, row in enumerate(rows.tolist()):
            few[row] = self.few[frame]
        return stats, counts, few


def read(root: dict, name: str) -> JobRanks | None:
    """The statistics of the job file whose checked tree is `root` (None for a file of one
    rank), each frame's entry removed from its node; ViewerError naming the first entry that
    is not what the job's merge writes."""
    top = root.get(RANKS_KEY)
    if not isinstance(top, dict):
        return None

    def bad(where: str, what: str) -> ViewerError:
        return ViewerError(f"{name} is a job file whose ranks entry {where} {what}; give the "
                           "job file a job wrote, or its rank files (NAME.rank<R>.hatchet)")

    size, lo = top.get("size"), top.get("lo", 0)
    if not _whole(size, 1, LARGEST_RANK + 1):
        raise bad("of the root", f"has size {_short(size)}, not a number of ranks from 1 to "
                                 f"{LARGEST_RANK + 1:,}")
    size = cast(int, size)
    if not _whole(lo, 0, LARGEST_RANK + 1 - size):
        raise bad("of the root", f"has lo {_short(lo)}, not a rank from 0 to "
                                 f"{LARGEST_RANK + 1 - size:,}")
    listed = top.get("ranks")
    labels: list[int] | range = range(lo, lo + size)  # written before the ranks were listed
    if listed is not None:
        if not (isinstance(listed, list) and len(listed) == size
                and all(_whole(r, 0, LARGEST_RANK) for r in listed)):
            raise bad("of the root", f"lists ranks {_short(listed)}, not its {size:,} rank "
                                     "numbers")
        labels = listed
    out = JobRanks(size, labels, listed is not None, [], [])
    stack = [root]
    frame = 0
    while stack:
        node = stack.pop()
        entry = node.pop(RANKS_KEY, None)
        if entry is None:
            out.counts.append(0)
            out.few.append(None)
        else:
            where = "of the root" if node is root else \
                f"of frame {_short(node[FRAME_KEY][NAME_KEY])}"
            why = _check_entry(entry, size)
            if why:
                raise bad(where, why)
            out.counts.append(entry.get("n", 0))
            out.few.append(entry.get("few"))
            out.entries += 1
            for metric, values in (entry.get("stats") or {}).items():
                frames, rows = out.stats.setdefault(str(metric), ([], []))
                frames.append(frame)
                rows.append(values)
                out.values += 1
        frame += 1
        stack.extend(reversed(node[CHILDREN_KEY]))
    return out


def _check_entry(entry, size: int) -> str | None:
    """Why a frame's entry is not what the job's merge writes; None when it is. A "stats"
    list of five gets its sixth (the min rank) as NaN."""
    if not isinstance(entry, dict):
        return f"is {_short(entry)}, not a map"
    n = entry.get("n", 0)
    if not _whole(n, 0, size):
        return f"has n {_short(n)}, not a number of ranks from 0 to {size:,}"
    few = entry.get("few")
    if few is not None and not (isinstance(few, list) and len(few) <= FEW
                                and all(_whole(r, 0, LARGEST_RANK) for r in few)):
        return f"has few {_short(few)}, not null or a list of at most {FEW} ranks"
    stats = entry.get("stats")
    if stats is None:
        return None
    if not isinstance(stats, dict):
        return f"has stats {_short(stats)}, not a map of metric to numbers"
    for metric, values in stats.items():
        if not (isinstance(values, list) and len(values) in (STAT_WIDTH - 1, STAT_WIDTH)):
            return (f"has stats {_short(metric)}: {_short(values)}, not a list of "
                    f"{STAT_WIDTH} numbers")
        for i, value in enumerate(values):
            ok = (_whole(value, 0, size) if i == N else
                  _whole(value, 0, LARGEST_RANK) if i in (MAX_RANK, MIN_RANK) else
                  _finite(value))
            if not ok:
                return (f"has stats {_short(metric)}: {_short(values)}, whose item {i} is "
                        "not " + ("a number of ranks" if i == N else "a rank" if i in
                                  (MAX_RANK, MIN_RANK) else "a finite number"))
        if len(values) < STAT_WIDTH:
            values.append(float("nan"))
    return None


def _whole(value, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _finite(value) -> bool:
    if type(value) is int:
        return -(1 << 1023) < value < 1 << 1023  # a float holds it
    return type(value) is float and value - value == 0  # neither infinite nor NaN


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 2, 40, 40


def _short(value) -> str:
    return _SHORT.repr(value)[:80]
