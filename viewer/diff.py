"""`--diff-profile OTHER`: this profile minus another, frame by frame, with the change in percent.

hatchet's unify matches frames by their path from the root and gives both profiles one graph, so
each metric is derived on each profile as usual and then subtracted: a frame missing on one side
counts as 0 there (a kernel that appeared shows its whole time as the change).

hatchet matches frames on every key of their frame, and a profile's ROOT records where it ran
(host, pid, rank: format.JOB_KEYS) and a kernel may say why it has no lines: two runs of one
script would share no frame. Frames are matched by what they are, their name and type, instead;
their other keys stay on them (match_by_what). A root is the whole run whatever its name: the
roots of two files always match (FILE's name is shown), so the diff stays one tree with one
ROOT to take shares of.
"""
from __future__ import annotations

from .derive import Column, derive
from .reader import Profile

WHAT = ("name", "type")
"""The frame keys that say what a frame is; the others say where or how it ran."""


def match_by_what(*gfs) -> None:
    """Make the frames of each hatchet GraphFrame equal (for unify and sub) when their name and
    type are, whatever else they carry; and every root equal to every other. A frame compares
    by its tuple_repr (hatchet's Frame), set here: (name, type), or ROOT's for a root. Only
    for graphs about to be unified: their frames are in no dict or set keyed by frame."""
    from .graph import nodes

    for gf in gfs:
        for node in nodes(gf.graph):
            attrs = node.frame.attrs
            node.frame._tuple_repr = tuple([(k, attrs.get(k, "")) for k in WHAT]) \
                if node.parents else _ROOT


_ROOT = (("root", ""),)
"""What every root's frame compares as."""


def diff_columns(this: Profile, other: Profile, specs: list[str]) -> list[Column]:
    """For each spec: `<metric> Δ` (this - other) and `<metric> Δ%` (change over other's value,
    blank where other has none)."""
    match_by_what(this.gf, other.gf)
    for profile in (this, other):
        _blank_when_missing(profile)
    this.gf.unify(other.gf)
    for profile in (this, other):  # their graphs changed: nothing derived before holds
        profile.derived.clear()
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


def _blank_when_missing(profile: Profile) -> None:
    """Name every metric of the profile to hatchet as one: unify blanks only those in a frame
    this profile lacks, and copies the other's values into the rest (a CPU run's cpu_time, an
    exclusive metric hatchet does not list, showed OTHER's time on this side too)."""
    gf = profile.gf
    gf.exc_metrics = list(dict.fromkeys(
        [*gf.exc_metrics, *(m for m in profile.inclusive + profile.exclusive
                            if m in gf.dataframe.columns)]))
