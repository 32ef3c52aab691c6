"""Several ranks' profiles as one: frames matched by call path, each metric summed over the
ranks, and per frame its spread (min, mean, max, the rank of the max, imbalance = max / mean).

The files are parsed as JSON and merged as arrays (a node by rank matrix per metric), never as
one GraphFrame per file: 256 ranks of a 5,000-frame profile merge in seconds. Each rank keeps
a GraphFrame over the merged graph with its own values and its own device table, so a derived
metric (tflop/s, util) is computed per rank exactly as for a single file. The totals and the
spread of metrics that scale one file metric (time/ms, count) come from rank_merge, the math a
job uses to merge itself at finalize, so its job file (from_job) shows the same digits.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pandas as pd

from .. import rank_merge
from ..format import DEVICE_ID, DEVICE_TYPE, RANK_FILE, TREE_EXTENSION
from .derive import Column, derive, is_fact, linear
from .errors import ViewerError, listing
from .job_file import JobRanks
from .reader import MAX_CELLS, Profile, no_gc, parse

STATS = ("min", "mean", "max", "max rank", "max/mean")
"""The columns each metric gets besides its total over the ranks."""


@dataclass(slots=True)
class Rank:
    """One rank's file, read onto the merged frames (its tree is not kept)."""

    label: int | None
    """Its rank (from the file, else its name's .rank<R>); None when neither says."""
    path: str
    devices: dict
    job: dict
    inclusive: list[str]
    """The metrics its root lists: summed over subtrees."""
    cols: dict[str, tuple[list[int], list]]
    """Metric -> (merged frame numbers, values) of the frames that have it."""
    has: list[int]
    """The merged frame numbers it has."""
    notes: list[str]
    """Its file's notes (reader.Parsed.notes)."""


@dataclass(slots=True)
class Merged:
    """The ranks' profiles on one graph."""

    total: Profile
    """Every metric summed over the ranks; a kernel's launch configuration where all ranks
    agree; the first rank's device id."""
    ranks: list[Profile]
    """Each rank's own values on the same graph and rows (NaN where it lacks the frame)."""
    labels: list[int]
    present: pd.DataFrame
    """Node -> which ranks have the frame (a bool per rank)."""
    notes: list[str] = field(default_factory=list)
    """What the reader should know: files that could not be read, missing ranks."""
    stats: dict[str, np.ndarray] = field(default_factory=dict)
    """Metric -> per node [sum, min, max, max rank, ranks with it, min rank] over the ranks
    (rank_merge's order; NaN where no rank has it): inclusive metrics over each rank's
    subtree."""
    counts: np.ndarray | None = None
    """Per node, how many ranks have the frame."""
    few: list | None = None
    """Per node, those ranks while at most rank_merge.FEW, else None."""


def expand(paths: list[str], ext: str = TREE_EXTENSION) -> list[str]:
    """The files named, a folder standing for its files ending in `ext`, in rank order."""
    out: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(glob.escape(path), f"*{ext}")), key=_natural)
            if not found:
                raise ViewerError(f"folder {path!r} holds no {ext} file; give the profiles "
                                  f"themselves, e.g. {os.path.join(path, 'NAME.rank0' + ext)}")
            # a job's own merged file beside its rank files: the rank files stand for it
            runs = {_run_name(os.path.basename(f)) for f in found} - {None}
            out += [f for f in found if os.path.basename(f)[:-len(ext)] not in runs
                    or _run_name(os.path.basename(f)) is not None]
        else:
            out.append(path)
    return list(dict.fromkeys(out))


def _name_rank(path: str) -> int:
    """The rank a file's name says (NAME.rank<R>.hatchet); -1 for none."""
    found = RANK_FILE.search(os.path.basename(path))
    return int(found[1]) if found else -1


def _natural(path: str) -> list:
    """Sort key: run.rank10 after run.rank9."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


def read(paths: list[str]) -> tuple[list[Rank], rank_merge.Frames, list[str]]:
    """Read each file onto one set of frames, one file at a time (256 parsed trees would not
    fit in memory); a file that cannot be read is left out with its one-line reason."""
    ranks: list[Rank] = []
    errors: list[str] = []
    frames = rank_merge.Frames()
    with no_gc():
        for i, path, parsed in _parsed(sorted(paths, key=_name_rank), errors):
            root, job = parsed.root, parsed.job
            inclusive = [m for m in root["metrics"] if "(inc)" not in m]
            cols, has = frames.add(root)
            label = rank_of(path, job)
            ranks.append(Rank(label, path, parsed.devices, job, inclusive, cols, has,
                              parsed.notes))
    if not ranks:
        raise ViewerError(f"none of the {len(paths)} files could be read: " + "; ".join(errors))
    why = not_one_job([(r.path, r.job) for r in ranks])
    if why:
        raise ViewerError(f"the {len(ranks)} files are not one job's ranks: {why}; give one "
                          "file, or the NAME.rank<R>.hatchet files of one run")
    ranks.sort(key=lambda r: cast(int, r.label))  # not_one_job: every file names its rank
    return ranks, frames, errors


def not_one_job(files: list[tuple[str, dict]]) -> str | None:
    """Why the files, each a (path, job facts it records), are not one job's ranks; None when
    they are: each names its rank (in the file, or as NAME.rank<R>), none differ in NAME or in
    the world size or launcher they record, and no two name the same rank."""
    names = [os.path.basename(path) for path, _ in files]
    labels = [rank_of(path, job) for path, job in files]
    unranked = [name for name, label in zip(names, labels) if label is None]
    if unranked:
        return f"{listing(unranked, 4)} record{'s' * (len(unranked) == 1)} no rank"
    runs = {"NAME": [_run_name(name) for name in names],
            "world size": [job.get("world_size") for _, job in files],
            "launcher": [job.get("launcher") for _, job in files]}
    for what, values in runs.items():
        known: dict = {}
        for name, value in zip(names, values):
            if value is not None:
                known.setdefault(value, []).append(name)
        if len(known) > 1:
            return f"their {what} differs (" + "; ".join(
                f"{value}: {listing(files_of, 3)}" for value, files_of in known.items()) + ")"
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup is not None:
        return (f"several files say they are rank {dup} "
                f"({listing([p for (p, _), x in zip(files, labels) if x == dup], 4, 200)})")
    return None


def _run_name(filename: str) -> str | None:
    """NAME of NAME.rank<R>.hatchet; None for a file not named so."""
    found = RANK_FILE.search(filename)
    return filename[:found.start()] if found else None


def _parsed(paths: list[str], errors: list[str]):
    """(place, path, parse(path)) for each file that reads; the others' one-line reasons go
    to `errors`."""
    for i, path in enumerate(paths):
        try:
            yield i, path, parse(path)
        except ViewerError as exc:
            errors.append(str(exc))


def rank_of(path: str, job: dict) -> int | None:
    """A file's rank: the one it records, else its name's .rank<R>; None when neither."""
    rank = job.get("rank")
    if isinstance(rank, int):
        return rank
    found = RANK_FILE.search(os.path.basename(path))
    return int(found[1]) if found else None


def pick(paths: list[str], rank: int) -> tuple[str, list[str]]:
    """The file of rank `rank` among `paths` (proton-viewer --rank R), and one line per file
    that could not be read on the way."""
    labels: list[int] = []
    errors: list[str] = []
    for i, path, parsed in _parsed(paths, errors):
        label = rank_of(path, parsed.job)
        labels.append(i if label is None else label)  # unranked files: by their place
        if labels[-1] == rank:
            return path, errors
    raise ViewerError(f"no file of rank {rank} among the {len(paths)} given; they hold ranks "
                      f"{span(labels) or 'none'}" + ("; " + "; ".join(errors) if errors else ""))


def merge(ranks: list[Rank], frames: rank_merge.Frames) -> Merged:
    """One graph over all ranks' frames (matched by their names from the root); each rank's
    metrics as columns over it."""
    with no_gc():
        return _merge(ranks, frames)


def _merge(ranks: list[Rank], union: rank_merge.Frames) -> Merged:
    from .graph import from_parents

    frames, parents = union.frames, union.parents
    # frames were numbered as met: put them in pre-order for the graph (parents first)
    order = union.preorder()
    renumber = np.empty(len(order), dtype=np.int64)
    renumber[order] = np.arange(len(order))
    graph, nodes = from_parents([frames[i] for i in order],
                                [int(renumber[parents[i]]) if parents[i] >= 0 else -1
                                 for i in order])
    index = pd.Index(nodes, name="node")
    names = pd.Series([n.frame.get("name", "") for n in nodes], index=index)
    metrics = list(dict.fromkeys(m for rank in ranks for m in rank.cols))
    if len(nodes) * len(metrics) > MAX_CELLS:  # each rank's table: every frame by every metric
        raise ViewerError(f"the {len(ranks)} ranks have {len(nodes):,} frames and "
                          f"{len(metrics):,} distinct metrics together, "
                          f"{len(nodes) * len(metrics):,} cells a rank; the viewer holds up to "
                          f"{MAX_CELLS:,}: merge fewer files, or show one with --rank R")
    inclusive = dict.fromkeys(m for rank in ranks for m in rank.inclusive)
    incl = [m for m in inclusive if m in metrics]
    depth = np.array([n._depth for n in nodes])
    up = np.array([renumber[parents[i]] if parents[i] >= 0 else -1 for i in order])
    present = np.zeros((len(nodes), len(ranks)), dtype=bool)
    per_rank: list[dict[str, np.ndarray]] = [{} for _ in ranks]
    for r, rank in enumerate(ranks):
        present[renumber[rank.has], r] = True
        for metric, (at, vals) in rank.cols.items():
            per_rank[r][metric] = _array(renumber[at], vals, len(nodes),
                                         text=metric in (DEVICE_ID, DEVICE_TYPE))
        rank.cols = {}  # read into the arrays: free the lists
    # rank_merge's statistics (the job's own math and order) from every rank's columns at once
    own = {m: np.column_stack([_numeric(per_rank[r].get(m), len(nodes))
                               for r in range(len(ranks))])
           for m in metrics if not rank_merge.is_fact(m)}
    stats, own_sums = rank_merge.merge_columns(own, up, depth, incl,
                                               [cast(int, r.label) for r in ranks])
    del own
    ranks_out = []
    sums: dict[str, np.ndarray] = {}
    for r, rank in enumerate(ranks):
        data = {"name": names}
        for metric in metrics:
            column = per_rank[r].get(metric)
            if column is None:
                column = np.full(len(nodes), np.nan)
            data[metric] = pd.Series(column, index=index)
        inc_cols = rank_merge.subtree_sums(np.column_stack(
            [_numeric(per_rank[r].get(m), len(nodes)) for m in incl]), up, depth) if incl \
            else np.empty((len(nodes), 0))
        for j, metric in enumerate(incl):
            data[f"{metric} (inc)"] = pd.Series(inc_cols[:, j], index=index)
            sums[metric] = _nansum(sums.get(metric), inc_cols[:, j])
        ranks_out.append(_profile(graph, data, incl, metrics, rank.devices, rank.job))
    total = _total(graph, index, names, ranks_out, metrics, incl, sums, ranks)
    labels = [cast(int, r.label) for r in ranks]  # read() refused files naming no rank
    notes = [note for rank in ranks for note in rank.notes] + _missing(ranks)
    counts = present.sum(axis=1)
    lab = np.asarray(labels)
    few = [lab[row].tolist() if c <= rank_merge.FEW else None
           for row, c in zip(present, counts.tolist())]
    stats_out = {m: np.column_stack(st) for m, st in stats.items()}
    _put(total, stats_out, own_sums)
    return Merged(total, ranks_out, labels,
                  pd.DataFrame(present, index=index, columns=labels), notes, stats_out, counts,
                  few)


def _put(total: Profile, stats: dict[str, np.ndarray], own: dict[str, np.ndarray]) -> None:
    """rank_merge's sums in place of `total`'s summed columns, so a job file and its rank
    files show the same digits."""
    df = total.gf.dataframe
    for metric, column in own.items():
        if metric in df.columns:
            df[metric] = column
    for metric in total.inclusive:
        if metric in stats and f"{metric} (inc)" in df.columns:
            df[f"{metric} (inc)"] = stats[metric][:, rank_merge.SUM]


def from_job(profile: Profile) -> Merged:
    """A job file (written by the job's own merge): its statistics as a Merged of no rank
    files, the numbers its rank files would show."""
    job = cast(JobRanks, profile.job_ranks)
    stats, counts, few = job.arrays(cast(np.ndarray, profile.job_rows))
    _put(profile, stats, {})
    index = profile.gf.dataframe.index
    present = pd.DataFrame(np.zeros((len(index), 0), dtype=bool), index=index)
    return Merged(profile, [], list(job.labels), present, [], stats, counts, few)


def _array(at: np.ndarray, vals: list, n: int, text: bool = False) -> np.ndarray:
    """A metric's column over the merged nodes: numbers as floats, device ids and types (and
    any value that is not a number) as the file has them; missing as NaN."""
    if not text:
        try:
            col = np.full(n, np.nan)
            col[at] = np.array(vals, dtype=float)
            return col
        except (TypeError, ValueError):
            pass
    col = np.full(n, np.nan, dtype=object)
    col[at] = vals
    return col


def _numeric(col: np.ndarray | None, n: int) -> np.ndarray:
    if col is None:
        return np.full(n, np.nan)
    if col.dtype.kind == "f":  # _array's numbers: already floats, NaN where missing
        return col
    return pd.to_numeric(pd.Series(col), errors="coerce").to_numpy(dtype=float)


def _nansum(total: np.ndarray | None, column: np.ndarray) -> np.ndarray:
    if total is None:
        return column.copy()
    both = np.isnan(total) & np.isnan(column)
    out = np.nan_to_num(total) + np.nan_to_num(column)
    out[both] = np.nan
    return out


def _profile(graph, data: dict, incl: list[str], metrics: list[str], devices: dict,
             job: dict) -> Profile:
    from hatchet import GraphFrame

    df = pd.DataFrame(data)
    gf = GraphFrame(graph, df, [m for m in metrics if m not in incl],
                    [f"{m} (inc)" for m in incl])
    exclusive = [m for m in metrics if m not in incl]
    return Profile(gf, list(incl), exclusive, devices, job)


def _total(graph, index, names, ranks: list[Profile], metrics, incl, sums, files) -> Profile:
    """Every metric summed over the ranks; a device id or type where all ranks agree."""
    data = {"name": names}
    for metric in metrics:
        if metric in (DEVICE_ID, DEVICE_TYPE):
            # ranks on different GPUs of one kind (cuda:0, cuda:1): the first rank's stands for
            # them, so the rules that need a GPU's figures still run on the merged tree
            data[metric] = pd.Series(_first([p.gf.dataframe[metric].to_numpy()
                                             for p in ranks]), index=index)
        elif is_fact(metric):  # a kernel's own: the same on every rank that agrees
            data[metric] = pd.Series(_common([p.gf.dataframe[metric].to_numpy()
                                              for p in ranks]), index=index)
        else:
            own = [pd.to_numeric(p.gf.dataframe[metric], errors="coerce").to_numpy(dtype=float)
                   for p in ranks]
            total = own[0].copy()
            for column in own[1:]:
                total = _nansum(total, column)
            data[metric] = pd.Series(total, index=index)
    for metric in incl:
        data[f"{metric} (inc)"] = pd.Series(sums[metric], index=index)
    devices: dict = {}
    for f in files:  # each GPU entry from the first rank that lists it
        for kind, table in (f.devices or {}).items():
            if isinstance(table, dict):
                for dev, entry in table.items():
                    devices.setdefault(kind, {}).setdefault(dev, entry)
    return _profile(graph, data, incl, metrics, devices, {})


def _first(columns: list[np.ndarray]) -> np.ndarray:
    """Per row, the first column's value that is there."""
    out = np.full(len(columns[0]), np.nan, dtype=object)
    for col in columns:
        fresh = ~pd.isna(col) & pd.isna(out)
        out[fresh] = col[fresh]
    return out


def _common(columns: list[np.ndarray]) -> np.ndarray:
    """Per row, the value all columns that have one agree on; NaN where they differ."""
    out = np.full(len(columns[0]), np.nan, dtype=object)
    clash = np.zeros(len(out), dtype=bool)
    for col in columns:
        has = ~pd.isna(col)
        fresh = has & pd.isna(out)
        out[fresh] = col[fresh]
        clash |= has & ~fresh & (col != out)
    out[clash] = np.nan
    return out


def _missing(ranks: list[Rank]) -> list[str]:
    """A note when the files say the job had ranks that are not here."""
    sizes = {r.job.get("world_size") for r in ranks} - {None}
    if len(sizes) != 1:
        return []
    size = sizes.pop()
    if not isinstance(size, int):
        return []
    # the gaps between the ranks here, not every rank of the job: a file may claim billions
    have = sorted({r.label for r in ranks if r.label is not None and 0 <= r.label < size})
    gaps = [(a + 1, b - 1) for a, b in zip([-1, *have], [*have, size]) if b - a > 1]
    if not gaps:
        return []
    count = sum(b - a + 1 for a, b in gaps)
    return [f"{len(ranks)} of the job's {size} ranks merged; missing rank{'s' * (count > 1)} "
            + ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in gaps)]


def span(labels: list[int]) -> str:
    """0-3,5,7-8."""
    out: list[str] = []
    labels = sorted(labels)
    start = prev = labels[0] if labels else None
    for x in [*labels[1:], None]:
        if x is not None and prev is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = x
    return ",".join(out)


def columns(merged: Merged, specs: list[str]) -> list[Column]:
    """For each metric spec, its value over all ranks (additive metrics summed, ratios such as
    avg_time or tflop/s of the sums, util weighted by each rank's kernel time), then its min,
    mean and max over the ranks, the rank of the max, and max/mean. For an additive metric a
    rank without the frame counts 0 there."""
    out = []
    index = merged.total.gf.dataframe.index
    times = None
    size = len(merged.labels)
    for spec in specs:
        whole = derive(merged.total, spec)  # an unknown spec fails here, with the choices
        line = linear(merged.total, spec)
        if line is not None and line[0] in merged.stats:  # rank_merge's, as the job's file
            agg, factor = merged.stats[line[0]], line[1]
            mean = whole.values.to_numpy(dtype=float) / size
            with np.errstate(invalid="ignore", divide="ignore"):
                imbalance = np.where(mean > 0, agg[:, 2] * factor / mean, np.nan)
            out.append(whole)
            out += [Column(f"{whole.header} {name}", pd.Series(v, index=index)) for name, v in
                    zip(STATS, (agg[:, 1] * factor, mean, agg[:, 2] * factor, agg[:, 3],
                                imbalance))]
            continue
        if not merged.ranks:  # a job file keeps no rank's values: no spread for this spec
            out.append(whole)
            out += [Column(f"{whole.header} {name}", pd.Series(np.nan, index=index))
                    for name in STATS]
            continue
        per = np.column_stack([_rank_values(p, spec, index) for p in merged.ranks])
        if whole.additive:
            some = ~np.isnan(per).all(axis=1)
            per = np.where(np.isnan(per) & some[:, None], 0.0, per)
        if spec.strip().lower() == "util":
            if times is None:
                times = np.column_stack([_rank_values(p, "time/ns", index)
                                         for p in merged.ranks])
            weight = np.where(np.isnan(per), 0.0, np.nan_to_num(times))
            with np.errstate(invalid="ignore", divide="ignore"):
                util = np.nansum(per * weight, axis=1) / weight.sum(axis=1)
            whole = Column(whole.header, pd.Series(util, index=index))
        out.append(whole)
        out += _stats(whole.header, per, merged.labels, index)
    return out


def _rank_values(profile: Profile, spec: str, index) -> np.ndarray:
    try:
        values = derive(profile, spec).values
    except ViewerError:  # this rank lacks what the spec needs (no kernels, say)
        return np.full(len(index), np.nan)
    return pd.to_numeric(values.reindex(index), errors="coerce").to_numpy(dtype=float)


def _stats(header: str, per: np.ndarray, labels: list[int], index) -> list[Column]:
    known = ~np.isnan(per)
    some = known.any(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(some, np.nanmin(np.where(known, per, np.inf), axis=1), np.nan)
        high = np.where(some, np.nanmax(np.where(known, per, -np.inf), axis=1), np.nan)
        mean = np.where(some, np.nansum(per, axis=1) / known.sum(axis=1), np.nan)
        imbalance = np.where(mean > 0, high / mean, np.nan)
    at = np.where(some, np.argmax(np.where(known, per, -np.inf), axis=1), 0)
    who = np.where(some, np.asarray(labels, dtype=float)[at], np.nan)
    return [Column(f"{header} {name}", pd.Series(v, index=index)) for name, v in
            zip(STATS, (low, mean, high, who, imbalance))]


def markers(merged: Merged) -> dict:
    """Node -> how a frame on some ranks only is marked: ` [rank 1 only]`, ` [ranks 0,2 of
    4]`, ` [3 of 64 ranks]` (rank_merge's counts, the same from rank files and a job file)."""
    out = {}
    total = len(merged.labels)
    for node, count, have in zip(merged.total.gf.dataframe.index,
                                 cast(np.ndarray, merged.counts), cast(list, merged.few)):
        if count >= total or count == 0:
            continue
        if count == 1 and have:
            out[node] = f" [rank {have[0]} only]"
        elif have and count <= rank_merge.FEW:
            out[node] = f" [ranks {span(have)} of {total}]"
        else:
            out[node] = f" [{count} of {total} ranks]"
    return out
