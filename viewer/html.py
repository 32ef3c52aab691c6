"""`proton-viewer --html report.html FILE...`: one self-contained page (no network) with a
flame graph of the call tree, a sortable kernels table, a roofline of the kernels that carry
flops and bytes (measured by hardware counters, or declared), the source heat of sampled
kernels, --diagnose's findings and, for kernels with proton.language scopes, a warp timeline;
with several rank files, the merged tree with each frame's spread over the ranks.

Derive, then render: this module turns a profile into the page's JSON; page.py holds the page.
"""
from __future__ import annotations

import json
import math
import re
from itertools import repeat

import numpy as np
import pandas as pd
from typing import cast

from ..format import COPY_FRAME, CUDA, MEM_ALLOC, MEM_LIVE, MEM_PEAK, NUM_SAMPLES, SYNC_TIME
from .demangle import TOTAL_FLOOR, TOTAL_RATIO, declined, declined_note
from .derive import (DECLARED, DRAM_FLOOR, MEASURED, NO_TENSOR_WORK, NOMINAL_INTENSITY, Column, available,
                     at_id_rows, derive, kernel_mask, kernel_roofs, over_roof, table_rows, unmeasured,
                     unmeasured_text, util_of)
from .errors import ViewerError
from .graph import nodes
from .names import readable
from .page import template
from .reader import Profile
from .select import short_frame
from .render import by_id, plural
from .select import fold_marks, shown_children
from .source_roots import SourceRoots
from .specs import peak

KERNEL_SPECS = ("time/ms", "count", "avg_time/us")
SHARE = "% of GPU time"
UTIL = "util (%)"
"""Achieved over peak, as a percentage."""
SOURCE_KERNELS = 12
"""Sampled kernels whose source the page shows, most samples first."""


def page(prof: Profile, columns: list[Column], *, title: str, roots: SourceRoots, merged=None,
         visible: set | None = None, depth: int = 100, style: str = "folded",
         folded: set | None = None) -> str:
    """The report for `prof` (the merged total when `merged`), widths from `columns[0]`; the
    code of source files under `roots` only (the page may be shared); runs of `folded`
    frames (select.library_frames) drawn as their first, as the terminal's tree does."""
    columns = columns + _waste_columns(prof, columns)
    budget = NameBudget(prof, style)
    nodes = _nodes(prof, columns, visible, depth, budget, folded)
    cells = nodes.pop("cells")
    kernels = _kernels(prof, merged, cells)
    source = _source(prof, style, roots)
    data = {"summary": " · ".join([_summary(prof, columns, merged), *budget.note()]),
            "columns": [c.header for c in columns],
            "kernels": kernels,
            "nodes": nodes,
            "roofline": _roofline(prof, style, dict(zip(cells.ids, range(len(cells.ids))))),
            "source": source,
            "findings": _findings(prof, style, nodes, kernels, source, merged),
            "warps": _warps(prof, style)}
    # <, > and & as JSON escapes: no text in the data can close the script or open a comment
    text = json.dumps(data, allow_nan=False, separators=(",", ":")).replace(
        "<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    fill = {"TITLE": _escape(title), "DATA": text}
    return re.sub(r"__(TITLE|DATA)__", lambda m: fill[m[1]], template())


WASTE_SPECS = (SYNC_TIME, "gpu_idle/%", MEM_PEAK, MEM_LIVE, MEM_ALLOC)
"""Metrics the page adds to the chosen columns when the profile has them, so the flame graph
can be coloured by them: waits, idle share, the allocator's per scope."""


def _waste_columns(prof: Profile, columns: list[Column]) -> list[Column]:
    have = {c.header for c in columns}
    out = []
    for spec in WASTE_SPECS:
        try:
            column = derive(prof, spec)
        except ViewerError:
            continue
        if column.header not in have:
            out.append(column)
            have.add(column.header)
    return out


def _warps(prof: Profile, style: str) -> list[dict]:
    """The kernels' warp timelines (backend="instrumentation": each kernel's latest launch),
    the kernel named readably, its call path above it; the page's Warps tab draws them."""
    out = []
    for t in prof.timelines:
        *above, name = t["path"]
        out.append({**{k: v for k, v in t.items() if k != "path"},
                    "kernel": readable(name, style), "path": " > ".join(above)})
    return out


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _num(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _short(value: float) -> float:
    return float(f"{value:.6g}")


def _summary(prof: Profile, columns: list[Column], merged) -> str:
    frames = len(prof.gf.dataframe)
    parts = [plural(frames, "frame")]
    if columns:  # its total written by the page, as every other value of the metric
        parts.append(f"widths: {columns[0].header}")
    if merged is not None:
        parts.append(f"{plural(len(merged.labels), 'rank')} merged")
    return " · ".join(parts)


class NameBudget:
    """The flame graph's names, bounded by the names the file holds: each name is bounded
    (demangle.max_length), and so is the text of all distinct names (demangle.TOTAL_RATIO),
    but a name repeated on many frames is on the page once per frame. The frames' names
    (shown and whole) take at most demangle.TOTAL_RATIO x the raw names' length over the
    frames, or demangle.TOTAL_FLOOR characters; past that a name is shown as the file has it
    (mangled), and the page says how many."""

    def __init__(self, prof: Profile, style: str) -> None:
        raw = sum(len(str(node.frame.attrs.get("name", "?"))) for node in nodes(prof.gf.graph))
        self.left = max(TOTAL_FLOOR, TOTAL_RATIO * raw)
        self.style = style
        self.kept: set[str] = set()

    def names(self, raws: list[str]) -> list[tuple[str, str]]:
        """(the name shown, its whole form) of frames named `raws`, in order: the first take
        the budget."""
        out = []
        for raw in raws:
            if "@" not in raw and not raw.startswith("_Z"):  # no python frame, not mangled
                self.left -= len(raw)
                out.append((raw, raw))
            elif self.left <= 0 and raw.startswith("_Z"):
                self.kept.add(raw)
                out.append((raw, raw))
            else:
                out.append(self._name(raw))
        return out

    def _name(self, raw: str) -> tuple[str, str]:
        before = declined()
        name, whole = short_frame(readable(raw, self.style)), readable(raw, "full")
        if declined() != before:
            self.kept.add(raw)
        self.left -= len(name) + (len(whole) if whole != name else 0)
        return name, whole

    def note(self) -> list[str]:
        """The page's note on the names it left mangled (by its bound or the demangler's)."""
        return [declined_note(len(self.kept))] if self.kept else []


def _nodes(prof: Profile, columns: list[Column], visible, depth: int,
           budget: NameBudget, folded: set | None = None) -> dict:
    """The shown frames in pre-order, as columns: name, parent, width value, each metric;
    `full` names only where folding shortened them. Columns, not objects: a 100,000-frame
    page stays small and parses fast. `cells`: _Cells at those frames."""
    order, parents = _shown(prof.gf.graph, visible, depth, folded)
    names: list[str] = []
    full: dict[int, str] = {}
    marks = fold_marks(folded) if folded else {}
    for node, (name, whole) in zip(order, budget.names([n.frame.attrs.get("name", "?")
                                                         for n in order])):
        if marks and node in marks:
            name, whole = name + marks[node], whole + marks[node]
        if whole != name:
            full[len(names)] = whole
        names.append(name)
    cells = _Cells(order, [node._hatchet_nid for node in order])
    metrics = [cells(c.values) for c in columns]
    widths = list(metrics[0]) if metrics else [None] * len(names)
    # widths: at least the children's sum (a scope without its own value still spans them)
    spans = [0.0] * len(names)
    for i in range(len(names) - 1, -1, -1):
        widths[i] = width = max(widths[i] or 0.0, spans[i])
        if parents[i] >= 0:
            spans[parents[i]] += width
    return {"name": names, "parent": parents, "value": widths, "full": full,
            "metrics": metrics, "cells": cells}


def _shown(graph, visible, depth: int, folded: set | None) -> tuple[list, list[int]]:
    """The frames shown (in `visible`, `depth` levels, runs of `folded` frames as their first)
    in pre-order, and each one's parent's number in it (-1 for a root)."""
    order: list = []
    parents: list[int] = []
    every = visible is None and not folded  # shown_children is each frame's children
    stack = [(root, -1, 0) for root in reversed(graph.roots)]
    while stack:
        node, parent, level = stack.pop()
        if visible is not None and node not in visible:
            continue
        if level + 1 < depth:  # Triton's -d: `-d 1` shows ROOT alone
            kids = node.children if every else shown_children(node, visible, folded)
            stack.extend(zip(reversed(kids), repeat(len(order)), repeat(level + 1)))
        order.append(node)
        parents.append(parent)
    return order, parents


def _rate_specs(prof: Profile) -> list[str]:
    """The kernels table's rates: every flop width the profile has, bytes/s, util."""
    have = available(prof)
    return [s for s in ("tflop/s", "tflop8/s", "tflop16/s", "tflop32/s", "tflop64/s", "gbyte/s",
                        "util", "tensor_tflop/s", "dram_gbyte/s", "dram_throughput",
                        "sm_throughput") if s in have]


def _kernels(prof: Profile, merged, cells: _Cells) -> dict:
    """One row per kernel (its frames under every call path folded together): [its frame
    numbers, each frame's time in ms (None for one frame), time, count, avg, rates, util], and
    with several ranks the spread of their time. `cells`: at the shown frames."""
    columns = []
    for spec in [*KERNEL_SPECS, *_rate_specs(prof)]:
        if spec == "util":  # a percentage, as the other shares on the page (_rate_specs: the
            columns.append(Column(UTIL, _util(prof) * 100))  # profile has it)
            continue
        try:
            column = derive(prof, spec)
        except ViewerError:
            continue
        columns.append(column)
    if merged is not None and "time/ms" in available(prof):  # CPU-only ranks have no kernels
        from .ranks import columns as rank_columns

        spread = rank_columns(merged, ["time/ms"])
        columns.append(Column("max/mean over ranks", spread[-1].values))
    order, ids = cells.order, cells.ids
    kernel = kernel_mask(prof, copies=True)  # the table lists copies beside the kernels
    every = [node for node, is_kernel in kernel.items() if is_kernel]
    kernels = {node._hatchet_nid for node in every}
    inside = _inside_kernels([node for node in every if node.children], set(ids))
    groups: dict[str, list[int]] = {}  # name -> its frames
    for i in [i for i, nid in enumerate(ids) if nid in kernels and nid not in inside]:
        groups.setdefault(order[i].frame.attrs.get("name", "?"), []).append(i)
    values = [cells(c.values) for c in columns]  # each as the frames
    headers = [c.header for c in columns]
    time = values[0] if headers and headers[0] == "time (ms)" else [None] * len(ids)
    count = values[headers.index("count")] if "count" in headers else [None] * len(ids)
    rows: list[list] = []
    by_frame = list(zip(*values)) if values else [()] * len(ids)  # each frame's cells
    for frames in groups.values():
        if len(frames) == 1:  # a kernel on one call path: its cells as they are (_fold's)
            rows.append([frames, None, *by_frame[frames[0]]])
            continue
        frames.sort(key=lambda i: -(time[i] or 0.0))
        weights = [time[i] or 0.0 for i in frames]
        sums = (sum(weights), sum(count[i] or 0.0 for i in frames))
        rows.append([frames, weights, *[_fold(h, [v[i] for i in frames], weights, sums)
                                         for h, v in zip(headers, values)]])
    if headers and headers[0] == "time (ms)":  # each kernel's share of the GPU time, beside it
        total = sum(r[2] or 0.0 for r in rows)
        for r in rows:
            r.insert(3, _num(100 * r[2] / total) if total and r[2] is not None else None)
        headers.insert(1, SHARE)
    copies = [j for j, name in enumerate(groups)  # rows, not kernels: the page counts them apart
              if COPY_FRAME.match(name)]
    return {"columns": ["kernel", "call paths", *headers], "rows": rows, "copies": copies}


class _Cells:
    """Columns' cells at the shown frames `order` (hatchet ids `ids`), each as _num makes it:
    by row where the column's table is in id order (reader.load's; checked once a table),
    numpy's where it is of floats."""

    def __init__(self, order: list, ids: list[int]) -> None:
        self.order, self.ids = order, ids
        self.checked: list[tuple[pd.Index, bool]] = []  # each table seen, in id order or not

    def __call__(self, values: pd.Series) -> list:
        ids = self.ids
        if not self._by_row(values.index):
            by_nid = by_id(values)
            return [_num(by_nid.get(i)) for i in ids]
        picked = values.to_numpy()[ids]
        if picked.dtype != np.float64:
            return [_num(v) for v in picked.tolist()]
        cells = picked.tolist()
        for i in np.flatnonzero(~np.isfinite(picked)).tolist():
            cells[i] = None
        return cells

    def _by_row(self, index: pd.Index) -> bool:
        for seen, ok in self.checked:
            if seen is index:
                return ok
        ok = not self.ids or at_id_rows(index, self.order, self.ids)
        self.checked.append((index, ok))
        return ok


def _inside_kernels(kernels: list, shown: set[int]) -> set[int]:
    """The hatchet ids of the `shown` frames under one of `kernels`, through shown frames: a
    kernel's proton.language scopes carry its device but are no kernels of their own (the
    Warps tab shows them)."""
    inside: set[int] = set()
    stack = list(kernels)
    while stack:
        for child in stack.pop().children:
            nid = child._hatchet_nid
            if nid in shown and nid not in inside:
                inside.add(nid)
                stack.append(child)
    return inside


def _fold(header: str, cells: list, weights: list[float], sums: tuple[float, float]):
    """One kernel's value over its frames: times and counts summed, the average time of the
    sums (`sums`: time in ms, count), rates and ratios weighted by each frame's time."""
    if len(cells) == 1:
        return cells[0]
    known = [(c, w) for c, w in zip(cells, weights) if c is not None]
    if not known:
        return None
    if header == "count" or header.startswith("time ("):
        return sum(c for c, _ in known)
    if header == "avg_time (us)":
        return sums[0] * 1e3 / sums[1] if sums[1] else None
    weight = sum(w for _, w in known)
    return sum(c * w for c, w in known) / weight if weight else None


def _util(prof: Profile):
    """Achieved over peak, blank where it means nothing: a kernel with neither flops under a
    known roof nor bytes (a 0 there would read as an idle GPU)."""
    index = prof.gf.dataframe.index
    util = {node: k for node, k in kernel_roofs(prof).items()
            if (k.peak and k.flops) or (k.bandwidth and k.nbytes)}
    out = np.full(len(index), np.nan)
    out[table_rows(index, list(util))] = np.array([util_of(k) for k in util.values()], dtype=float)
    return pd.Series(out, index=index)


SOURCES = (DECLARED, MEASURED, NO_TENSOR_WORK)
"""The roofline points' `s` indexes these: where each point comes from (derive.KernelRoof)."""


def _roofline(prof: Profile, style: str, frame_of: dict) -> dict:
    """Kernels with a place on the roofline (KernelRoof.point: measured by the hardware
    counters, else declared flops and bytes): (FLOP per byte, FLOP/s), each against the roof
    of its precision on its GPU; a roof per (GPU, precision) the kernels need. Points as
    columns (90,000 of them stay a few MB): each names its frame (`i`), or has its name under
    `name` where the page shows no frame; `roof` indexes `kinds`, `s` SOURCES; numbers to 6
    digits. `frame_of`: a frame's number by its hatchet id."""
    kernels, at, overstated, blank = {}, {}, 0, 0  # node -> KernelRoof, node -> its point
    for node, kernel in kernel_roofs(prof).items():
        if over_roof(kernel):  # declared: never blank
            overstated += 1
        elif (point := kernel.point()) is not None:
            kernels[node], at[node] = kernel, point
        else:
            blank += kernel.source != DECLARED
    if not kernels:
        return {"points": {"x": []}, "roofs": [], "note": "No roofline: no kernel carries flops "
                "and bytes, neither measured (hardware counters, mode=\"counters\") nor declared "
                "(Triton kernels give them through launch_metadata, with -k triton)" + (
                    f", but for {overstated:,} whose declared flops or bytes need more time at "
                    "the GPU's roofs than they ran" if overstated else "") + "." + _missed(prof)}
    gpus = prof.devices.get(CUDA, {})
    roofs: dict = {}
    points: dict = {"i": [], "x": [], "y": [], "t": [], "frac": [], "roof": [], "s": [],
                    "lv": [], "kinds": [], "sources": list(SOURCES), "nominal": NOMINAL_INTENSITY,
                    "name": {}, "levels": {}}
    for node, kernel in kernels.items():
        x, y = (_num(v) for v in at[node])
        if not x or not y:  # an intensity or a rate too small (or large) for a float
            continue
        frac, kind = _num(kernel.fraction()), ", ".join(dict.fromkeys(kernel.precisions))
        if kind not in points["kinds"]:
            points["kinds"].append(kind)
        frame = frame_of.get(node._hatchet_nid, -1)
        if frame < 0:
            points["name"][len(points["x"])] = readable(node.frame.get("name", "?"), style)
        level, _, level_bw = kernel.drawn()
        if kernel.levels:  # measured: every level's share of its own roof, for the tooltip
            points["levels"][len(points["x"])] = {k: _short(v) for k, v in kernel.levels.items()}
        for key, value in (("i", frame), ("x", _short(x)), ("y", _short(y)),
                           ("t", _short(kernel.time)),
                           ("frac", None if frac is None else _short(frac)),
                           ("roof", points["kinds"].index(kind)),
                           ("s", SOURCES.index(kernel.source)), ("lv", level)):
            points[key].append(value)
        for name in kernel.precisions if level_bw else ():
            if (kernel.device, name, level) in roofs:  # the first kernel's (as an L2 roof)
                continue
            gpu = gpus[kernel.device]
            top = cast(float, peak(gpu, name))  # known: compute_roof found its roof
            bw = cast(float, level_bw)
            roofs[kernel.device, name, level] = {
                "kind": name, "peak": top, "bw": bw, "ridge": top / bw, "level": level,
                "label": f"GPU {kernel.device} (sm{gpu['arch']}): {name} peak "
                         f"{top / 1e12:,.1f} TFLOP/s, {'L2 ' * (level == 'L2')}{bw / 1e9:,.0f} GB/s"}
    count = {s: points["s"].count(i) for i, s in enumerate(SOURCES)}
    if count[MEASURED] or count[NO_TENSOR_WORK]:
        parts = [f"{count[MEASURED] + count[NO_TENSOR_WORK]:,} measured by hardware counters "
                 f"(filled; tensor FLOPs and DRAM bytes over the time the samples covered)"]
        if count[NO_TENSOR_WORK]:
            parts.append(f"{count[NO_TENSOR_WORK]:,} of them with no tensor work (squares): "
                         f"placed at a nominal {NOMINAL_INTENSITY:g} FLOP/byte, their distance "
                         "to the memory roof is their measured DRAM bandwidth fraction")
        if count[DECLARED]:
            parts.append(f"{count[DECLARED]:,} declared by launch_metadata (hollow)")
        on_l2 = points["lv"].count("L2")
        if on_l2:
            parts.append(f"{on_l2:,} drawn against the L2 roof (dashed) by their L2 bytes: "
                         "nearer it than the DRAM roof (hierarchical roofline: each kernel "
                         "judged by the roof it is nearest, DRAM, L2 or the L1 data pipe)")
        floored = sum(k.floored for k in kernels.values())
        if floored:
            parts.append(f"{floored:,} with under {DRAM_FLOOR / 1e9:g} GB/s of memory traffic "
                         f"measured drawn as if they moved {DRAM_FLOOR / 1e9:g} GB/s")
        if blank:
            parts.append(f"{blank:,} with counters that measured neither DRAM bytes nor "
                         "tensor work not drawn")
        what = f"{len(points['x']):,} kernels: " + "; ".join(parts) + "; "
    else:
        what = f"{len(points['x']):,} kernels with flops and bytes; "
    note = (what + "dots sized by time, each judged against the roof of its flops' precision. " +
            ("Roofs from the file's device table." if roofs else
             "No roof: the device table names no GPU whose peaks are known, or the flops name "
             "no precision (flops8/16/32/64).") + _missed(prof))
    if overstated:
        note += (f" {overstated:,} kernel{'s' * (overstated != 1)} not drawn: declared flops or "
                 "bytes that need more time at the GPU's roofs than the kernel ran "
                 "(launch_metadata overstates the work).")
    return {"points": points, "roofs": [roofs[k] for k in sorted(roofs)], "note": note}


def _missed(prof: Profile) -> str:
    """The roofline's word on kernels with counters the samples did not measure (not drawn)."""
    counted = unmeasured(prof)
    mask = kernel_mask(prof) if counted else {}  # most profiles: none, and no mask to make
    missed = [ns for node, (_, ns) in counted.items() if mask.get(node)]
    return f" Not drawn: {unmeasured_text(len(missed), sum(missed))}." if missed else ""


def _source(prof: Profile, style: str, roots: SourceRoots) -> list:
    """The most-sampled kernels' source lines with samples and their top stall reasons."""
    if NUM_SAMPLES not in prof.gf.dataframe:
        return []
    from .source import _Columns, find_kernel, kernel_nodes, source_files
    from .source_view import window

    roots = roots.beside_profile(prof.gf.graph.roots[0], prof.job)
    columns = _Columns(prof)
    totals: dict[str, float] = {}
    for node in kernel_nodes(prof, columns):
        name = node.frame.get("name", "")
        for n in [node, *node.children]:
            s = columns.of(n)
            if s is not None:
                totals[name] = totals.get(name, 0.0) + s.samples
    out = []
    for name in sorted(totals, key=lambda k: -totals[k])[:SOURCE_KERNELS]:
        try:
            kernel = find_kernel(prof, name)
        except ViewerError:
            continue
        total = kernel.total.samples or 1.0
        files = []
        for sf in source_files(kernel, roots):
            text = sf.text.splitlines() if sf.text is not None else None
            sampled = sorted(sf.lines)
            # the code's window: first to last sampled line, long unsampled runs elided as in
            # --source (a profile may name lines a billion apart); without the code, the
            # sampled lines only
            numbers = [n for n in window(sampled, sampled[-1]) if n is None or n >= sampled[0]] \
                if text is not None else sampled
            lines: list[dict[str, object]] = []
            for number in numbers:
                if number is None:
                    lines.append({"line": None})
                    continue
                ls = sf.lines.get(number)
                line: dict[str, object] = {"line": number}
                if text is not None:
                    line["code"] = text[number - 1] if 0 < number <= len(text) else ""
                if ls:
                    line.update(samples=_num(ls.counts.samples),
                                share=_num(ls.counts.samples / total),
                                stalls=", ".join(f"{r} {share:.0%}" for r, share in
                                                 ls.counts.top_stalls(2)))
                lines.append(line)
            files.append({"path": sf.path, "samples": _num(sf.samples / total),
                          "missing": None if text is not None else
                          f"{cast(str, sf.why)[:1].upper()}{cast(str, sf.why)[1:]}; the sampled "
                          "lines only",
                          "lines": lines})
        stalled = kernel.total.stalled / total
        out.append({"name": readable(name, style), "files": files,
                    "headline": f"{kernel.total.samples:,.0f} samples, {stalled:.0%} stalled, "
                                f"{kernel.paths} call path{'s' * (kernel.paths != 1)}, "
                                f"{kernel.unmapped:,.0f} not mapped to a line"
                                + "".join(f"; {why}" for why in kernel.no_lines)})
    return out


def _findings(prof: Profile, style: str, nodes: dict, kernels: dict, source: list,
              merged=None) -> dict:
    """--diagnose's findings grouped by kernel (or scope), most to save first, or why there
    are none (a profile without kernel times); each finding with the frame to zoom the flame
    graph to (`node`: the kernel's frame at the finding's call path, else its hottest) and
    whether the source view has the kernel."""
    from .diagnose import as_dicts, diagnose

    try:
        found = as_dicts(diagnose(prof, style, merged))  # several ranks: stragglers too
    except ViewerError as exc:
        return {"items": [], "groups": [], "notes": [str(exc)], "rules_run": [], "gpu_time_ns": 0}
    names, parents, full = nodes["name"], nodes["parent"], nodes["full"]
    wanted = {item["kernel"] for item in found["findings"]}  # a few names of many frames
    frames: dict[str, list[int]] = {}  # kernel name -> its frames, hottest first
    for row in kernels["rows"]:
        if names[row[0][0]] in wanted:
            frames.setdefault(names[row[0][0]], []).extend(row[0])
    scopes: dict[str, list[int]] = {}  # "scope NAME" -> its frames (a launch-bound finding's)
    named = {k.removeprefix("scope ") for k in wanted - frames.keys() if k.startswith("scope ")}
    for i, name in enumerate(names) if named else ():
        if (name in named or i in full) and (name := _named(names, full, i)) in named:
            scopes.setdefault(f"scope {name}", []).append(i)  # (_named: names[i] if not in full)
    sampled = {k["name"] for k in source}
    for item in found["findings"]:
        candidates = frames.get(item["kernel"]) or scopes.get(item["kernel"], [])
        at = item["path"].rsplit(", e.g. ", 1)[-1]  # "2 call paths, e.g. ROOT / backward"
        item["node"] = next((i for i in candidates if _path(names, parents, full, i) == at),
                            candidates[0] if candidates else None)
        item["source"] = item["kernel"] in sampled
    return {"items": found["findings"], "groups": found["groups"], "notes": found["notes"],
            "rules_run": found["rules_run"], "gpu_time_ns": found["gpu_time_ns"]}


def _path(names: list, parents: list, full: dict, i: int) -> str:
    """`ROOT / forward`: the call path above frame `i`, as --diagnose writes it (whole
    names)."""
    out = []
    while (i := parents[i]) >= 0:
        out.append(_named(names, full, i))
    return " / ".join(reversed(out))


def _named(names: list, full: dict, i: int) -> str:
    """Frame `i`'s name as --diagnose writes it: a python frame's whole, not shortened."""
    whole = full.get(i)
    return whole if whole is not None and short_frame(whole) == names[i] != whole else names[i]
