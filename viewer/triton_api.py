"""Triton's viewer API (`triton.profiler.viewer`, 3.6 through 3.9), as `proton.viewer`: the same
functions, signatures, return types and numbers, on our reader (`get_raw_metrics` takes what
either version takes: a path or open file, 3.6's, or the loaded profile, 3.9's).

A script written for Triton's module runs unchanged: `read` gives (GraphFrame, inclusive metric
names, exclusive metric names, device table); `derive_metrics` adds Triton's columns to the
GraphFrame's dataframe (`time/ms (inc)`, `tflop16/s (inc)`, `avg_time/us (inc)`, `util`,
`time/% (inc)`) and returns their names; `filter_frames` returns a GraphFrame of the kept frames
with raw inclusive metrics summed again over them (derived columns keep their values, as in
Triton's); `util` uses Triton's peaks (specs.triton_peak_flops). Where Triton crashes (a missing
column, an unknown metric) these raise ViewerError with one line saying what to do. Our own
viewer (`proton-viewer` without `--output triton`) keeps its own numbers (docs/compatibility.md).
"""
from __future__ import annotations

import json
import os
import re
import sys
import warnings
from typing import IO, Any

import numpy as np
import pandas as pd

from ..format import FLOPS_WIDTHS
from . import deep
from .derive import RATE, cpu_specs, timed_or_inside
from .diff import match_by_what
from .errors import ViewerError, did_you_mean
from .reader import add_inclusive_columns, no_gc, parse as parse_file, parse_data, read_stream
from .select import FORMATS, shorten, visible_nodes
from .specs import triton_peak_bandwidth, triton_peak_flops
from .triton_text import not_a_number

SECONDS = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
"""Seconds per time unit: Triton multiplies a time by its file unit's and divides by the asked
one's (kept as Triton computes, so the floats are the same to the last bit)."""
RATE_DIVISOR = {"": 1, "g": 1e9, "t": 1e12}
_TIME = re.compile(r"(?P<avg>avg_)?(?P<cpu>cpu_)?time/(?P<unit>s|ms|us|ns)")
"""time, avg_time, cpu_time and avg_cpu_time in a unit; like Triton's, case-sensitive."""


def get_raw_metrics(file: str | os.PathLike | IO | list) -> tuple[Any, list[str], list[str], dict]:
    """(GraphFrame, inclusive metric names, exclusive metric names, device table) of a profile,
    without inclusive columns. `file`: a path, an open file (Triton 3.6 takes one), or the
    profile already loaded, `[root node, device table]` as `proton.data.get(sid)` returns it
    (Triton 3.9 takes that); the loaded profile is read as a file would be, and left unchanged.

    Usage:
        gf, inclusive, exclusive, devices = get_raw_metrics("run.hatchet")
        gf, *_ = get_raw_metrics(proton.data.get(sid))   # a live session's data
    """
    with no_gc():
        return _raw_metrics(file)


def _raw_metrics(file) -> tuple[Any, list[str], list[str], dict]:
    from .graph import from_tree

    if isinstance(file, (str, os.PathLike)):
        parsed = parse_file(os.fspath(file), prune_empty=True)
    elif isinstance(file, list):
        parsed = parse_data(_as_json(file), "the profile data given", prune_empty=True)
    elif callable(getattr(file, "read", None)):
        name = repr(getattr(file, "name", "the file"))
        parsed = parse_data(read_stream(file, name), name, prune_empty=True)
    else:
        raise ViewerError(f"get_raw_metrics takes a .hatchet path, an open file or the list "
                          f"proton.data.get() returns, not {type(file).__name__}")
    for note in parsed.notes:
        warnings.warn(note, stacklevel=4)
    gf = from_tree(parsed.root)
    inclusive = [*gf.exc_metrics, *gf.inc_metrics]  # what ROOT carries
    exclusive = [c for c in gf.dataframe.columns if c not in inclusive]  # "name" first
    return gf, inclusive, exclusive, parsed.devices


def _as_json(database: list) -> str:
    """A loaded profile as the JSON text its file would hold (its own copy, at any depth)."""
    try:
        return deep.call(json.dumps, database)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ViewerError(f"the profile data given is not a profile as proton.data.get() "
                          f"returns it ({exc})") from None


def read(filename: str | os.PathLike) -> tuple[Any, list[str], list[str], dict]:
    """get_raw_metrics with each inclusive metric summed over subtrees (`time (ns) (inc)`).

    Usage:
        gf, inclusive, exclusive, devices = read("run.hatchet")
        derive_metrics(gf, ["time/ms"], inclusive, exclusive, devices)
    """
    gf, inclusive, exclusive, devices = get_raw_metrics(filename)
    _sum_inclusive(gf)
    return gf, inclusive, exclusive, devices


def _sum_inclusive(gf) -> None:
    """hatchet's update_inclusive_columns: `m (inc)` (`m` for `m (exc)`) per exclusive metric
    of the GraphFrame, summed over subtrees; the older inclusive columns stay."""
    if not gf.exc_metrics:
        return
    names = [m[:-len("(exc)")].strip() if m.endswith("(exc)") else f"{m} (inc)"
             for m in gf.exc_metrics]
    add_inclusive_columns(gf, list(gf.exc_metrics), names)
    gf.inc_metrics = list(dict.fromkeys(names + list(gf.inc_metrics)))


def match_available_metrics(metrics: str | list[str], inclusive_metrics: list[str],
                            exclusive_metrics: list[str]) -> list[str]:
    """The dataframe column of each metric name (any case, with or without its unit):
    `time` -> `time (ns) (inc)`; names not found are left out, and none found is an error."""
    found = []
    for metric in metrics if isinstance(metrics, list) else [metrics]:
        want = metric.lower()
        for raw in inclusive_metrics + exclusive_metrics:
            if want in (raw, raw.split("(")[0].strip().lower()):
                found.append(raw + (" (inc)" if raw in inclusive_metrics else ""))
                break
    if not found:
        raise _unknown(str(metrics), None, inclusive_metrics + exclusive_metrics)
    return found


def _unknown(metric: str, needs: str | None, names: list[str]) -> ViewerError:
    have = [m.split("(")[0].strip().lower() for m in names if m != "name"]
    what = f"{metric!r} needs {needs!r}, which" if needs else f"metric {metric!r}"
    return ViewerError(f"{what} is not in this profile{did_you_mean(needs or metric, have)}; "
                       f"it has {', '.join(have) or 'none'} (see proton-viewer -l FILE)")


def derive_metrics(gf, metrics: list[str], inclusive_metrics: list[str],
                   exclusive_metrics: list[str], device_info: dict) -> list[str]:
    """Add each metric's column to gf.dataframe, as Triton names it, and return the names:
    `time/ms` -> `time/ms (inc)` (also avg_time, cpu_time, avg_cpu_time in s/ms/us/ns),
    `[g|t]flop[8|16|32|64]/s` and `[g|t]byte/s` -> `... (inc)`, `util`, `<metric>/%` ->
    `<metric>/% (inc)` (of ROOT; of the sum for an exclusive metric), a raw metric -> its own
    column (`time` -> `time (ns) (inc)`). The names join gf.inc_metrics or gf.exc_metrics.
    In a profile without kernel time but with CPU time (a run without a GPU), `time/ms`,
    `count`, `gflop/s` ... mean the scopes' `cpu_time/ms`, `cpu_count`, `cpu_gflop/s` (as
    proton-viewer maps them, with the same note as a warning; Triton's raises), and ROOT's
    and each untimed frame's cpu_time is that of the timed scopes inside it.

    Usage:
        gf, inc, exc, devices = read("run.hatchet")
        derive_metrics(gf, ["time/ms", "util"], inc, exc, devices)  # ["time/ms (inc)", "util"]
    """
    metrics, notes = cpu_specs(inclusive_metrics + exclusive_metrics, metrics)
    for note in notes:
        warnings.warn(note, stacklevel=2)
    filled = _fill_cpu_time(gf, inclusive_metrics, exclusive_metrics) if notes else None
    with warnings.catch_warnings():
        # a column added to a table of over ~100 columns: pandas' advice is for the caller
        warnings.simplefilter("ignore", pd.errors.PerformanceWarning)
        derived = [_derive(gf.dataframe, metric, inclusive_metrics, exclusive_metrics,
                           device_info, filled) for metric in metrics]
    for name in derived:
        (gf.inc_metrics if name.endswith("(inc)") else gf.exc_metrics).append(name)
    return derived


def _fill_cpu_time(gf, inclusive: list[str], exclusive: list[str]) -> str | None:
    """The file's per-scope cpu_time column with its untimed frames (ROOT, python frames)
    given the time of the timed scopes inside them (derive.timed_or_inside), as
    proton-viewer shows them, where Triton's shows nan; the column's name, None if it was
    summed already."""
    column = match_available_metrics("cpu_time", inclusive, exclusive)[0]
    if column.endswith("(inc)"):
        return None
    values = pd.to_numeric(gf.dataframe[column], errors="coerce")
    gf.dataframe[column] = timed_or_inside(gf.graph, values)
    return column


def _derive(df: pd.DataFrame, metric: str, inclusive: list[str], exclusive: list[str],
            devices: dict, filled: str | None = None) -> str:
    """One metric's column added to df; its name. `filled`: the cpu_time column
    _fill_cpu_time filled, whose whole is ROOT's (a scope's time holds its children's)."""
    def column(name: str) -> str:
        try:
            found = match_available_metrics(name, inclusive, exclusive)[0]
        except ViewerError:
            raise _unknown(metric, name if name != metric else None,
                           inclusive + exclusive) from None
        _check_numbers(df, found, metric)
        return found

    def seconds(name: str) -> pd.Series:
        col = column(name)
        unit = col.split("(")[1].split(")")[0] if "(" in col else ""
        if unit not in SECONDS:
            raise ViewerError(f"metric {col!r} has no time unit (s, ms, us, ns) in its name; "
                              "Triton's time metrics are named like 'time (ns)'")
        return df[col] * SECONDS[unit]

    if metric == "util":
        df["util"] = _util(df, devices, seconds("time"))
        return "util"
    rate = RATE.fullmatch(metric)
    if rate:
        raw = "bytes" if rate["what"] == "byte" else f"flops{rate['width'] or ''}"
        name = f"{metric} (inc)"
        time = seconds("cpu_time" if rate["cpu"] else "time")
        df[name] = df[column(raw)] / time / RATE_DIVISOR[rate["prefix"]]
        return name
    time = _TIME.fullmatch(metric)
    if time:
        value = seconds("cpu_time" if time["cpu"] else "time")
        if time["avg"]:
            # a run without a GPU has no kernel counts: its scopes' own entries (cpu_count)
            counts = "count (inc)" if "count (inc)" in df or not time["cpu"] else \
                next((c for c in exclusive if c == "cpu_count"), None)
            if counts not in df:
                raise ViewerError(f"{metric} divides by kernel counts and the profile has none "
                                  "on its ROOT; use time/... instead")
            value = value / df[counts]
        name = f"{metric} (inc)"
        df[name] = value / SECONDS[time["unit"]]
        return name
    base, *unit = metric.split("/")
    if not unit:
        return column(base)
    if unit[0] != "%":
        raise ViewerError(f"unknown metric {metric!r}: {unit[0]!r} is no unit Triton's viewer "
                          "derives; e.g. time/ms, tflop16/s, gbyte/s, util, time/%")
    col = column(base)
    inclusive_col = "(inc)" in col
    # ROOT's, or all frames'
    total = df[col].iloc[0] if inclusive_col or col == filled else df[col].sum()
    name = metric + (" (inc)" if inclusive_col else "")
    df[name] = df[col] / total * 100.0
    return name


def _check_numbers(df: pd.DataFrame, column: str, metric: str) -> None:
    """Raise one line naming the first frame whose `column` holds text, a map or a list, which
    `metric` cannot be computed from (Triton's viewer fails there with a pandas TypeError)."""
    values = df[column]
    if values.dtype != object:
        return
    for node, value in values.items():
        if value is not None and not isinstance(value, (int, float, np.number)):
            raise not_a_number(column, df["name"].get(node, node), value,
                               f"Triton's viewer derives {metric!r} from numbers only "
                               "(proton-viewer without --output triton shows such a cell blank)")


def _util(df: pd.DataFrame, devices: dict, seconds: pd.Series) -> pd.Series:
    """Triton's util: the longer of the flops' and the bytes' least time at its peaks, over
    the kernel's time; NaN for frames that are not kernels (no device)."""
    for column in ("bytes", *(f"flops{width}" for width in FLOPS_WIDTHS)):
        if column in df:
            _check_numbers(df, column, "util")
    flops = get_min_time_flops(df, devices)["min_time"].to_numpy()
    nbytes = get_min_time_bytes(df, devices)["min_time"].to_numpy()
    # Python's max(flops, bytes) as Triton takes it: the first unless the second is larger
    util = pd.Series(np.where(nbytes > flops, nbytes, flops), index=df.index) / seconds
    if "device_id" in df:
        util[df["device_id"].isna()] = np.nan
    return util


def _on_device(df: pd.DataFrame, index: str) -> pd.Series:
    """Rows of kernels on device `index` of the device table (ids as text or numbers)."""
    if "device_id" not in df:
        return pd.Series(False, index=df.index)
    ids = df["device_id"]
    same = ids.astype(str) == str(index)
    try:
        same |= pd.to_numeric(ids, errors="coerce") == float(index)
    except ValueError:
        pass
    return same


def _figure(gpu: dict, key: str, index: str):
    if key not in gpu:
        raise ViewerError(f"device {index} of the device table has no {key!r}; Triton's peaks "
                          "need it (re-record the profile)")
    return gpu[key]


def get_min_time_flops(df: pd.DataFrame, device_info: dict) -> pd.DataFrame:
    """Per frame (column `min_time`), the seconds its flops8..flops64 take at Triton's peaks
    for its GPU (specs.triton_peak_flops); 0 where it did none.

    Usage:
        gf, _, _, devices = read("run.hatchet")
        get_min_time_flops(gf.dataframe, devices)["min_time"]
    """
    out = pd.DataFrame(0.0, index=df.index, columns=["min_time"])
    for device_type, gpus in device_info.items():
        for index, gpu in gpus.items():
            on = _on_device(df, index)
            for width in FLOPS_WIDTHS:
                if f"flops{width}" not in df.columns:
                    continue
                peak = triton_peak_flops(device_type, str(_figure(gpu, "arch", index)), width,
                                         _figure(gpu, "num_sms", index),
                                         _figure(gpu, "clock_rate", index))
                out.loc[on, "min_time"] += df.loc[on, f"flops{width}"].fillna(0) / peak
    return out


def get_min_time_bytes(df: pd.DataFrame, device_info: dict) -> pd.DataFrame:
    """Per frame (column `min_time`), the seconds its bytes take at Triton's peak bandwidth
    for its GPU; NaN where it has no bytes.

    Usage:
        gf, _, _, devices = read("run.hatchet")
        get_min_time_bytes(gf.dataframe, devices)["min_time"]
    """
    out = pd.DataFrame(0.0, index=df.index, columns=["min_time"])
    nbytes = df["bytes"] if "bytes" in df else pd.Series(np.nan, index=df.index)
    for device_type, gpus in device_info.items():
        for index, gpu in gpus.items():
            on = _on_device(df, index)
            peak = triton_peak_bandwidth(device_type, str(_figure(gpu, "arch", index)),
                                         _figure(gpu, "bus_width", index),
                                         _figure(gpu, "memory_clock_rate", index))
            out.loc[on, "min_time"] += nbytes[on] / peak
    return out


def format_frames(gf, format: str | None):  # noqa: A002 - Triton's argument name
    """Shorten `file:line@function` names in gf.dataframe's `name` column (one of
    select.FORMATS; None or "full" leaves them); returns gf."""
    if format in FORMATS and format != "full":
        gf.dataframe["name"] = gf.dataframe["name"].map(lambda name: shorten(str(name), format))
    return gf


def filter_frames(gf, include: str | None = None, exclude: str | None = None,
                  threshold: float | None = None, metric: str | None = None):
    """The frames on paths through one whose name matches `include` (re.match on the
    dataframe's names); then without those matching `exclude` and everything under them;
    then those whose `metric` column is >= `threshold`, with their callers. A new GraphFrame
    whenever a filter is given (each is skipped when empty or 0, as in Triton's), its raw
    inclusive metrics summed again over the frames left.

    Usage:
        gf, metrics = parse(["time/ms"], "run.hatchet")
        filter_frames(gf, include=".*attn", threshold=0.05, metric=metrics[0])
    """
    if include:
        gf = _keep(gf, visible_nodes(gf, include=include, names=_names(gf), anchor=False),
                   f"include {include!r}")
    if exclude:
        gf = _keep(gf, visible_nodes(gf, exclude=exclude, names=_names(gf), anchor=False),
                   f"exclude {exclude!r}")
    if threshold:
        if metric not in gf.dataframe:
            raise ViewerError(f"a threshold needs the metric column it applies to; {metric!r} "
                              "is none (pass metric=, e.g. the first name derive_metrics gave)")
        values = pd.to_numeric(gf.dataframe[metric], errors="coerce").to_dict()
        gf = _keep(gf, visible_nodes(gf, values, threshold=threshold, anchor=False),
                   f"threshold {threshold:g} on {metric!r}")
    return gf


def _names(gf) -> dict:
    return gf.dataframe["name"].to_dict()


def _keep(gf, keep: set, what: str):
    """hatchet's squash (as Triton's filters call it) of the frames `keep`, which hold the
    callers of each: the kept nodes copied, numbered and given depths again, inclusive columns
    summed again."""
    if not keep:
        raise ViewerError(f"no frame matches {what}: the filter leaves nothing to show")
    from .graph import Graph

    if _twins(gf, keep):  # hatchet merges same-named siblings; rare enough for its own code
        rows = gf.dataframe[gf.dataframe.index.isin(keep)].copy()
        for column in {*gf.exc_metrics, *gf.inc_metrics}.intersection(rows):  # squash sums them
            if rows[column].dtype == object:  # text or a map in a file: blank, as in the sums
                rows[column] = pd.to_numeric(rows[column], errors="coerce")
        return type(gf)(gf.graph, rows, gf.exc_metrics, gf.inc_metrics, gf.default_metric,
                        gf.metadata).squash()
    copies: dict = {}
    roots = []
    stack = list(reversed(gf.graph.roots))
    while stack:  # the children in their own order, as hatchet's squash links them
        node = stack.pop()
        if node not in keep:
            continue
        copy = node.copy()
        copy._hatchet_nid = node._hatchet_nid
        copies[node] = copy
        parent = copies.get(node.parents[0]) if node.parents else None
        if parent is None:
            roots.append(copy)
        else:
            parent.add_child(copy)
            copy.add_parent(parent)
        stack.extend(reversed(node.children))
    graph = Graph(roots, node_ordering=gf.graph.node_ordering)
    graph.enumerate_traverse()
    df = gf.dataframe[gf.dataframe.index.isin(keep)].copy()
    df.index = pd.Index([copies[n] for n in df.index], name=df.index.name)
    df.sort_index(inplace=True)
    out = type(gf)(graph, df, list(gf.exc_metrics), list(gf.inc_metrics), gf.default_metric,
                   gf.metadata)
    _sum_inclusive(out)
    return out


def _twins(gf, keep: set) -> bool:
    """Whether two kept children of one node have the same frame."""
    for node in keep:
        frames = [c.frame for c in node.children if c in keep]
        if len(set(frames)) != len(frames):
            return True
    return len({r.frame for r in gf.graph.roots if r in keep}) != sum(
        r in keep for r in gf.graph.roots)


def parse(metrics: list[str], filename: str | os.PathLike, include: str | None = None,
          exclude: str | None = None, threshold: float | None = None) -> tuple[Any, list[str]]:
    """read, derive_metrics, then filter_frames on the first metric: (GraphFrame, the derived
    metric names).

    Usage:
        gf, metrics = parse(["time/ms", "tflop16/s"], "run.hatchet")
        print_tree(gf, metrics)
    """
    if not metrics:
        raise ViewerError("parse needs at least one metric, e.g. parse(['time/ms'], FILE)")
    gf, inclusive, exclusive, devices = read(filename)
    derived = derive_metrics(gf, metrics, inclusive, exclusive, devices)
    return filter_frames(gf, include, exclude, threshold, derived[0]), derived


def apply_diff_profile(gf, derived_metrics: list[str], diff_file: str | os.PathLike,
                       metrics: list[str], include: str | None, exclude: str | None,
                       threshold: float | None):
    """gf minus the profile `diff_file` (parsed with the same metrics and filters), frames
    matched by call path of names and types (not by the host or pid a root records): hatchet's
    GraphFrame.sub on the derived metrics.

    Usage:
        gf, derived = parse(["time/ms"], "after.hatchet")
        print_tree(apply_diff_profile(gf, derived, "before.hatchet", ["time/ms"], None,
                                      None, None), derived)
    """
    other, _ = parse(metrics, diff_file, include, exclude, threshold)
    inclusive = [m for m in derived_metrics if m.endswith("(inc)")]
    exclusive = [m for m in derived_metrics if not m.endswith("(inc)")]
    for frame in (gf, other):
        frame.inc_metrics, frame.exc_metrics = list(inclusive), list(exclusive)
    match_by_what(gf, other)  # two runs' roots differ in host and pid: match by name and type
    return gf.sub(other)


def print_tree(gf, metrics: list[str], depth: int = 100, format: str | None = None,  # noqa: A002
               print_sorted: bool = False) -> None:
    """Print the tree as Triton's viewer does (hatchet's console text, coloured on a
    terminal or in a notebook): each frame's metrics with 3 decimals, then its name; with
    print_sorted, the frames by the first metric, largest first.

    Usage:
        gf, metrics = parse(["time/ms"], "run.hatchet")
        print_tree(gf, metrics, depth=3)
    """
    from .triton_text import sorted_lines, tree

    gf = format_frames(gf, format)
    print(tree(gf, metrics, depth=depth, color=_color()))
    if print_sorted:
        print("Sorted kernels by metric " + metrics[0])
        for line in sorted_lines(gf, metrics[0]):
            print(line)
    if "bytes (inc)" in metrics:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all NaN
            least = np.nanmin(pd.to_numeric(gf.dataframe["bytes (inc)"], errors="coerce"))
        if least < 0:
            print("Warning: Negative byte values detected, this is usually the result of a "
                  "datatype overflow\n")


def _color() -> bool:
    """As hatchet decides: on a terminal, or in a Jupyter kernel (IPython already loaded)."""
    if sys.stdout.isatty():
        return True
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def show_metrics(file_name: str | os.PathLike) -> None:
    """Print the profile's metrics as Triton's `proton-viewer -l` does: names without
    units, lower case, inclusive then exclusive."""
    _, inclusive, exclusive, _ = get_raw_metrics(file_name)
    for title, names in (("inclusive", inclusive), ("exclusive", exclusive)):
        print(f"Available {title} metrics:")
        for name in names:
            print(f"- {name.split('(')[0].strip().lower()}")


__all__ = ["apply_diff_profile", "derive_metrics", "filter_frames", "format_frames",
           "get_min_time_bytes", "get_min_time_flops", "get_raw_metrics",
           "match_available_metrics", "parse", "print_tree", "read", "show_metrics"]
