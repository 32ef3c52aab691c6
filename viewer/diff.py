"""`--diff-profile OTHER`: this profile minus another, frame by frame, with the change in percent.

hatchet's unify matches frames by their path from the root and gives both profiles one graph, so
each metric is derived on each profile as usual and then subtracted: a frame missing on one side
counts as 0 there (a kernel that appeared shows its whole time as the change).

hatchet matches frames on every key of their frame, and a profile's ROOT records where it ran
(host, pid, rank: format.JOB_KEYS) and a kernel may say why it has no lines: two runs of one
script would share no frame. Frames are matched by what they are, their name and type, instead;
their other keys stay on them (match_by_what).
"""
from __future__ import annotations

from .derive import Column, derive
from .reader import Profile

WHAT = ("name", "type")
"""The frame keys that say what a frame is; the others say where or how it ran."""


def match_by_what(*gfs) -> None:
    """Make the frames of each hatchet GraphFrame equal (for unify and sub) when their name and
    type are, whatever else they carry."""
    from hatchet.frame import Frame

    class What(Frame):
        @property
        def tuple_repr(self) -> tuple:
            return tuple((k, self.attrs.get(k, "")) for k in WHAT)

    for gf in gfs:
        for node in gf.graph.traverse():
            if not isinstance(node.frame, What):
                node.frame = What(node.frame.attrs)


def diff_columns(this: Profile, other: Profile, specs: list[str]) -> list[Column]:
    """For each spec: `<metric> Δ` (this - other) and `<metric> Δ%` (change over other's value,
    blank where other has none)."""
    match_by_what(this.gf, other.gf)
    this.gf.unify(other.gf)
    columns = []
    for spec in specs:
        mine, theirs = derive(this, spec), derive(other, spec)
        # unify adds the frames only OTHER has to this profile's rows, not always the reverse
        index = list(dict.fromkeys([*mine.values.index, *theirs.values.index]))
        a, b = mine.values.reindex(index), theirs.values.reindex(index)
        change = a.fillna(0) - b.fillna(0)
        change[a.isna() & b.isna()] = float("nan")
        base = b.where(b.abs() > 0)
        columns += [Column(f"{mine.header} Δ", change),
                    Column(f"{mine.header} Δ%", change / base.abs() * 100)]
    return columns
