"""Draw a profile for people: the call tree as a rich table, the sorted flat table, the legend.

hatchet's own tree() looks up the dataframe once per node (minutes on 100k nodes); here every
column is a plain dict first, so drawing is one pass over the graph.
"""
from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from .derive import Column

# Share of the root's value on the first metric -> style; the legend prints these bands.
BANDS = [(0.9, "bold red"), (0.6, "red"), (0.3, "yellow"), (0.1, "green"), (0.01, "cyan"),
         (0.0, "blue")]


def fmt(value, integer: bool = False) -> str:
    """A cell: blank where the metric has no meaning (not nan), integers for counting columns,
    else three decimals (scientific below 0.001)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if not math.isfinite(value):
        return str(value)
    if integer:
        return f"{int(value):,}"
    return f"{value:,.3f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.3e}"


def _integral(values: dict) -> bool:
    finite = [v for v in values.values() if v is not None and v == v and math.isfinite(v)]
    return bool(finite) and all(v == int(v) and abs(v) < 1e15 for v in finite)


def _style(value, top) -> str:
    if value is None or not top or math.isnan(value) or not math.isfinite(top):
        return ""
    share = value / top
    return next(style for bound, style in BANDS if share >= bound or bound == 0.0)


def walk(gf, first: dict, *, depth: int = 100, visible: set | None = None):
    """Yield (node, level, lasts) in drawing order: children sorted by `first`, largest first;
    `lasts` says, for each level down to this node, whether it was its parent's last child."""

    def key(node):
        v = first.get(node)
        return (v is None or v != v, -(v or 0) if v == v else 0)

    def visit(node, level, lasts):
        yield node, level, lasts
        if level >= depth:
            return
        kids = sorted((c for c in node.children if visible is None or c in visible), key=key)
        for i, child in enumerate(kids):
            yield from visit(child, level + 1, lasts + (i == len(kids) - 1,))

    for root in gf.graph.roots:
        yield from visit(root, 0, ())


def tree_table(gf, columns: list[Column], *, depth: int = 100, visible: set | None = None,
               names: dict | None = None, nbsp: bool = True) -> Table:
    """One row per shown node (see `walk`), the first column coloured by its share of the root.

    nbsp: join tree guides to names with non-breaking spaces (for a terminal that folds)."""
    values = [c.values.to_dict() for c in columns]
    sp = "\u00a0" if nbsp else " "
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.header, justify="right", no_wrap=True)
    table.add_column("name", overflow="fold")
    first = values[0] if values else {}
    ints = [_integral(v) for v in values]
    top = first.get(gf.graph.roots[0]) if gf.graph.roots else None
    for node, level, lasts in walk(gf, first, depth=depth, visible=visible):
        guides = "".join(sp * 3 if last else "│" + sp * 2 for last in lasts[:-1])
        branch = "" if level == 0 else ("└─" if lasts[-1] else "├─") + sp
        label = Text()
        label.append(guides + branch, style="dim")
        label.append(names[node] if names else node.frame.get("name", "?"))
        cells = [Text(fmt(v.get(node), ints[i]), style=_style(v.get(node), top) if i == 0 else "")
                 for i, v in enumerate(values)]
        table.add_row(*cells, label)
    return table


def legend(columns: list[Column], root_value) -> Text:
    """What the colours mean: the first metric's share of the root, with its range."""
    values = [v for v in columns[0].values.tolist() if v == v and v is not None] if columns else []
    text = Text(f"{columns[0].header}: share of ROOT ({fmt(root_value)}) ", style="dim")
    for bound, style in BANDS:
        text.append("■ ", style=style)
        text.append(f"≥{bound:.0%} " if bound else "<1% ", style="dim")
    if values:
        text.append(f"  min {fmt(min(values))}  max {fmt(max(values))}", style="dim")
    return text


def sorted_table(gf, columns: list[Column], *, visible: set | None = None,
                 names: dict | None = None) -> Table:
    """Every shown frame but the root, hottest first on the first metric."""
    values = [c.values.to_dict() for c in columns]
    roots = set(gf.graph.roots)
    nodes = [n for n in gf.graph.traverse() if n not in roots and (visible is None or n in visible)]
    first = values[0] if values else {}
    nodes.sort(key=lambda n: -(first.get(n) or 0) if first.get(n) == first.get(n) else 0)
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.header, justify="right", no_wrap=True)
    table.add_column("name", overflow="fold")
    ints = [_integral(v) for v in values]
    for node in nodes:
        table.add_row(*(fmt(v.get(node), ints[i]) for i, v in enumerate(values)),
                      names[node] if names else node.frame.get("name", "?"))
    return table
