"""`proton-viewer --html report.html FILE...`: one self-contained page (no network) with a
flame graph of the call tree, a sortable kernels table, a roofline of the kernels that carry
flops and bytes, the source heat of sampled kernels and --diagnose's findings; with several
rank files, the merged tree with each frame's spread over the ranks.

Derive, then render: this module turns a profile into the page's JSON; page.py holds the page.
"""
from __future__ import annotations

import json
import math
import re

from ..format import CUDA, NUM_SAMPLES
from .derive import Column, available, derive, kernel_mask, kernel_roofs
from .errors import ViewerError
from .names import readable
from .page import TEMPLATE
from .reader import Profile
from .render import plural
from .source_roots import SourceRoots
from .specs import peak

KERNEL_SPECS = ("time/ms", "count", "avg_time/us")
SOURCE_KERNELS = 12
"""Sampled kernels whose source the page shows, most samples first."""


def page(prof: Profile, columns: list[Column], *, title: str, roots: SourceRoots, merged=None,
         visible: set | None = None, depth: int = 100, style: str = "folded") -> str:
    """The report for `prof` (the merged total when `merged`), widths from `columns[0]`; the
    code of source files under `roots` only (the page may be shared)."""
    nodes = _nodes(prof, columns, visible, depth, style)
    data = {"summary": _summary(prof, columns, merged),
            "columns": [c.header for c in columns],
            "kernels": _kernels(prof, merged, nodes.pop("order")),
            "nodes": nodes,
            "roofline": _roofline(prof, style),
            "source": _source(prof, style, roots),
            "findings": _findings(prof, style)}
    # <, > and & as JSON escapes: no text in the data can close the script or open a comment
    text = json.dumps(data, allow_nan=False, separators=(",", ":")).replace(
        "<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    fill = {"TITLE": _escape(title), "DATA": text}
    return re.sub(r"__(TITLE|DATA)__", lambda m: fill[m[1]], TEMPLATE)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _num(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _summary(prof: Profile, columns: list[Column], merged) -> str:
    frames = len(prof.gf.dataframe)
    root = prof.gf.graph.roots[0]
    parts = [plural(frames, "frame")]
    if columns:
        total = _num(columns[0].values.get(root))
        parts.append(f"widths: {columns[0].header}" + (f", total {total:,.3f}" if total else ""))
    if merged is not None:
        parts.append(f"{plural(len(merged.labels), 'rank')} merged")
    return " · ".join(parts)


def _nodes(prof: Profile, columns: list[Column], visible, depth: int, style: str) -> dict:
    """The shown frames in pre-order, as columns: name, parent, width value, each metric;
    `full` names only where folding shortened them. Columns, not objects: a 100,000-frame
    page stays small and parses fast."""
    graph = prof.gf.graph
    values = [c.values.to_dict() for c in columns]
    names, parents, widths, full, order = [], [], [], {}, []
    stack = [(root, -1, 0) for root in reversed(graph.roots)]
    while stack:
        node, parent, level = stack.pop()
        if visible is not None and node not in visible:
            continue
        raw = node.frame.get("name", "?")
        name = readable(raw, style)
        whole = readable(raw, "full")
        if whole != name:
            full[len(names)] = whole
        at = len(names)
        names.append(name)
        parents.append(parent)
        widths.append(_num(values[0].get(node)) if values else None)
        order.append(node)
        if level < depth:
            stack.extend((child, at, level + 1) for child in reversed(node.children))
    # widths: at least the children's sum (a scope without its own value still spans them)
    spans = [0.0] * len(names)
    for i in range(len(names) - 1, -1, -1):
        widths[i] = max(widths[i] or 0.0, spans[i])
        if parents[i] >= 0:
            spans[parents[i]] += widths[i]
    return {"name": names, "parent": parents, "value": widths, "full": full,
            "metrics": [[_num(v.get(node)) for node in order] for v in values],
            "order": order}


def _rate_specs(prof: Profile) -> list[str]:
    """The kernels table's rates: every flop width the profile has, bytes/s, util."""
    have = available(prof)
    return [s for s in ("tflop/s", "tflop8/s", "tflop16/s", "tflop32/s", "tflop64/s", "gbyte/s",
                        "util") if s in have]


def _kernels(prof: Profile, merged, order: list) -> dict:
    """Kernel frames among the shown ones: [frame number, time, count, avg, rates, util], and
    with several ranks the spread of their time."""
    columns = []
    for spec in [*KERNEL_SPECS, *_rate_specs(prof)]:
        try:
            columns.append(derive(prof, spec))
        except ViewerError:
            continue
    if merged is not None and "time/ms" in available(prof):  # CPU-only ranks have no kernels
        from .ranks import columns as rank_columns

        spread = rank_columns(merged, ["time/ms"])
        columns.append(Column("max/mean over ranks", spread[-1].values))
    kernel = kernel_mask(prof)
    values = [c.values.to_dict() for c in columns]
    rows = [[i] + [_num(v.get(node)) for v in values]
            for i, node in enumerate(order) if kernel.get(node)]
    return {"columns": ["kernel"] + [c.header for c in columns], "rows": rows}


def _roofline(prof: Profile, style: str) -> dict:
    """Kernels with flops and bytes: (FLOP per byte, FLOP/s), each against the roof of its
    precision on its GPU; a roof per (GPU, precision) the kernels need."""
    kernels = {n: k for n, k in kernel_roofs(prof).items() if k.flops and k.nbytes}
    if not kernels:
        return {"points": [], "roofs": [], "note": "No roofline: no kernel carries both flops "
                "and bytes (Triton kernels give them through launch_metadata, with -k triton)."}
    gpus = prof.devices.get(CUDA, {})
    roofs, points = {}, []
    for node, kernel in kernels.items():
        x, y = _num(kernel.intensity), _num(kernel.flops / kernel.seconds)
        if not x or not y:  # an intensity or a rate too small (or large) for a float
            continue
        points.append({"name": readable(node.frame.get("name", "?"), style), "x": x, "y": y,
                       "t": kernel.seconds, "frac": _num(kernel.fraction()),
                       "roof": ", ".join(dict.fromkeys(kernel.precisions))})
        gpu = gpus[kernel.device]
        for name in kernel.precisions if kernel.bandwidth else ():
            top = peak(gpu, name)
            roofs.setdefault((kernel.device, name), {
                "peak": top, "bw": kernel.bandwidth, "ridge": top / kernel.bandwidth,
                "label": f"GPU {kernel.device} (sm{gpu['arch']}): {name} peak "
                         f"{top / 1e12:,.1f} TFLOP/s, {kernel.bandwidth / 1e9:,.0f} GB/s"})
    note = (f"{len(points)} kernels with flops and bytes; dots sized by time, each judged "
            "against the roof of its flops' precision. " +
            ("Roofs from the file's device table." if roofs else
             "No roof: the device table names no GPU whose peaks are known, or the flops name "
             "no precision (flops8/16/32/64)."))
    return {"points": points, "roofs": [roofs[k] for k in sorted(roofs)], "note": note}


def _source(prof: Profile, style: str, roots: SourceRoots) -> list:
    """The most-sampled kernels' source lines with samples and their top stall reasons."""
    if NUM_SAMPLES not in prof.gf.dataframe:
        return []
    from .source import _Columns, find_kernel, kernel_nodes, source_files
    from .source_view import window

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
            text = sf.text.splitlines() if sf.text else []
            sampled = sorted(sf.lines)
            lines = []
            # first to last sampled line, long unsampled runs elided as in --source (a profile
            # may name lines a billion apart)
            for number in window(sampled, sampled[-1]):
                if number is None:
                    lines.append({"line": "...", "code": "", "samples": 0, "share": 0,
                                  "stalls": ""})
                    continue
                if number < sampled[0]:
                    continue
                ls = sf.lines.get(number)
                code = text[number - 1] if 0 < number <= len(text) else ""
                stalls = ", ".join(f"{r} {share:.0%}" for r, share in
                                   ls.counts.top_stalls(2)) if ls else ""
                lines.append({"line": number, "code": code,
                              "samples": _num(ls.counts.samples) if ls else 0,
                              "share": _num(ls.counts.samples / total) if ls else 0,
                              "stalls": stalls})
            files.append({"path": sf.path + (f" ({sf.why})" if sf.why else ""),
                          "lines": lines})
        stalled = kernel.total.stalled / total
        out.append({"name": readable(name, style), "files": files,
                    "headline": f"{kernel.total.samples:,.0f} samples, {stalled:.0%} stalled, "
                                f"{kernel.paths} call path{'s' * (kernel.paths != 1)}, "
                                f"{kernel.unmapped:,.0f} not mapped to a line"
                                + "".join(f"; {why}" for why in kernel.no_lines)})
    return out


def _findings(prof: Profile, style: str) -> dict:
    """--diagnose's findings, or why there are none (a profile without kernel times)."""
    from .diagnose import as_dicts, diagnose

    try:
        found = as_dicts(diagnose(prof, style))
    except ViewerError as exc:
        return {"items": [], "notes": [str(exc)], "rules_run": []}
    return {"items": found["findings"], "notes": found["notes"], "rules_run": found["rules_run"]}
