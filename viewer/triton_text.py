"""The text Triton 3.6's proton-viewer prints, byte for byte: hatchet's console tree as Triton
asks for it (`gf.tree(metric_column=metrics, expand_name=True, depth=depth,
render_header=False)`) and its --print-sorted lines.

Drawn here rather than by hatchet: its renderer looks each frame up in the dataframe and
recurses, which took Triton's viewer 991 s on a 100,000-frame profile (bench/RESULTS.md); this
reads each column once and walks with a stack. tests/test_triton_text.py compares the two.
"""
from __future__ import annotations

import math
import reprlib

from .errors import ViewerError

BANDS = ((0.9, 1.0), (0.7, 0.9), (0.5, 0.7), (0.3, 0.5), (0.1, 0.3), (0.0, 0.1))
"""hatchet's colour bands of the first metric, as shares of its range, top first."""
ARROWS = {1: "◀ ", 2: "▶ "}
"""A diff's frames only in the left (1) or right (2) profile (`_missing_node`)."""
GUIDES = {"├": "├─ ", "│": "│  ", "└": "└─ ", " ": "   "}


class _Plain:
    """No colour: every escape is empty."""

    colormap = [""] * 6

    def __getattr__(self, _name: str) -> str:
        return ""


def _palette(color: bool):
    """hatchet's own escapes (its RdYlGn colormap) when colouring, else empty ones."""
    if not color:
        return _Plain()
    from hatchet.external.console import ConsoleRenderer
    from hatchet.util.colormaps import ColorMaps

    palette = ConsoleRenderer.colors_enabled()
    palette.colormap = ColorMaps().get_colors("RdYlGn", False)
    return palette


def tree(gf, metrics: list[str], *, depth: int = 100, color: bool = False) -> str:
    """hatchet's tree text of gf: per frame `<m1> <m2>... <name>` with 3 decimals, under
    guides, children by hatchet id, frames of depth below `depth` (ROOT's is 0)."""
    df = gf.dataframe
    for metric in metrics:
        if metric not in df.columns:
            raise ViewerError(f"no column {metric!r} to print; derive it first "
                              "(derive_metrics or parse)")
    c = _palette(color)
    values = [df[m].to_dict() for m in metrics]
    names = df["name"].to_dict()
    sides = df["_missing_node"].to_dict() if "_missing_node" in df.columns else None
    files = df["file"].to_dict() if "file" in df.columns else None
    low, high = _range(df[metrics[0]]) if color else (0.0, 0.0)
    out = []
    visited: set = set()
    stack = [(root, "", "") for root in sorted(gf.graph.roots, key=_nid, reverse=True)]
    while stack:
        node, indent, below = stack.pop()
        if not node._depth < depth:
            continue
        first = _number(values[0][node], metrics[0], names[node])
        band = _band(c, values[0][node], low, high) if color else ""
        line = indent + band + first + c.end
        for metric, column in zip(metrics[1:], values[1:]):
            line += f" {c.faint}{_number(column[node], metric, names[node])}{c.end}"
        line += f" {names[node]}{c.end}"
        if sides is not None and sides[node] in ARROWS:
            line += f" {c.left if sides[node] == 1 else c.right}{ARROWS[sides[node]]}{c.end}"
        out.append(line + (f" {c.faint}{files[node]}{c.end}\n" if files is not None else "\n"))
        if node in visited:  # a graph may reach a node twice: its children once
            continue
        visited.add(node)
        kids = sorted(node.children, key=_nid)
        for i, kid in reversed(list(enumerate(kids))):
            last = i == len(kids) - 1
            stack.append((kid, below + GUIDES["└" if last else "├"],
                          below + GUIDES[" " if last else "│"]))
    text = "".join(out)
    return text + _legend(c, metrics[0], low, high) if color else text


def _nid(node) -> int:
    return node._hatchet_nid


def _number(value, metric: str, name) -> str:
    try:
        return f"{value:.3f}"
    except (TypeError, ValueError):
        raise not_a_number(metric, name, value, "Triton's viewer prints numbers only") from None


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 2, 60, 60


def not_a_number(metric: str, name, value, why: str) -> ViewerError:
    """One line: frame `name`'s `metric` is `value` (text, a map, a list), and `why` that
    matters; both shown short, whatever their length."""
    return ViewerError(f"{metric!r} of frame {_SHORT.repr(name)} is {_SHORT.repr(value)}, not "
                       f"a number; {why}")


def _range(series) -> tuple[float, float]:
    """The least and greatest finite value of the first metric (NaN when none)."""
    finite = [v for v in series.tolist() if isinstance(v, (int, float)) and math.isfinite(v)]
    return (min(finite), max(finite)) if finite else (math.nan, math.nan)


def _band(c, value, low: float, high: float) -> str:
    """hatchet's colour of a value: its band by share of the range (by the value itself when
    all are equal), blue for what falls in none (NaN, negative)."""
    span = high - low
    share = (value - low) / span if span != 0 else value / 1
    for color, (bottom, _top) in zip(c.colormap, BANDS):
        if share > bottom or (bottom == 0.0 and share >= 0):
            return color
    return c.blue


def _legend(c, metric: str, low: float, high: float) -> str:
    span = high - low
    text = f"\n\033[4mLegend{c.end} (Metric: {metric} Min: {low:.2f} Max: {high:.2f})\n"
    for color, (bottom, top) in zip(c.colormap, BANDS):
        text += f"{color}█ {c.end}{bottom * span + low:.2f} - {top * span + low:.2f}\n"
    return (text + f"\nname{c.end} User code    {c.left}{ARROWS[1]}{c.end} Only in left graph"
            f"    {c.right}{ARROWS[2]}{c.end} Only in right graph\n")


def sorted_lines(gf, metric: str) -> list[str]:
    """Triton's --print-sorted lines: every frame but the first after sorting (ROOT, the
    largest), `name` padded to 105 (cut at 100 with ...) and the value to 4 significant
    digits. Sorted by pandas as Triton sorts, so ties fall in the same order."""
    ranked = gf.dataframe.sort_values(by=[metric], ascending=False)
    out = []
    for name, value in list(zip(ranked["name"].tolist(), ranked[metric].tolist()))[1:]:
        name = name[:100] + "..." if len(name) > 100 else name
        try:
            out.append(f"{name:105} {value:.4}")
        except (TypeError, ValueError):
            if isinstance(value, int):  # Triton's f"{value:.4}" takes no integer either
                raise ViewerError(f"{metric!r} of frame {_SHORT.repr(name)} is the integer "
                                  f"{value}, which Triton's --print-sorted cannot print (it "
                                  "fails the same way); sort by a derived metric such as "
                                  f"{metric.split(' ')[0]}/%") from None
            raise not_a_number(metric, name, value, "--print-sorted sorts numbers") from None
    return out
