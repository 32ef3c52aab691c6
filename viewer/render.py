"""Draw a profile's call tree as a rich table: metric columns, then the indented frame name.

hatchet's own tree() looks up the dataframe once per node (minutes on 100k nodes); here every
column becomes a dict first, so drawing is one pass over the graph.
"""
from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from .derive import Column


def _fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""  # a metric with no meaning at this node shows blank, not nan
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:,.3f}" if abs(value) >= 1e-3 else f"{value:.3e}"


def tree_table(gf, columns: list[Column], *, depth: int = 100, nbsp: bool = True) -> Table:
    """A table with one row per node (children sorted by the first column, largest first).

    nbsp: join tree guides to names with non-breaking spaces (for a terminal that folds)."""
    sp = "\u00a0" if nbsp else " "
    values = [c.values.to_dict() for c in columns]
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.header, justify="right", no_wrap=True)
    table.add_column("name", overflow="fold")
    first = values[0] if values else {}

    def key(node):
        v = first.get(node)
        return (v is None or math.isnan(v), -(v or 0) if v == v else 0)

    def visit(node, prefix: str, last: bool, level: int) -> None:
        # non-breaking spaces: a long name folds within itself, not away from its branch
        branch = "" if level == 0 else ("└─" if last else "├─") + sp
        name = Text()
        name.append(prefix + branch, style="dim")
        name.append(node.frame.get("name", "?"))
        table.add_row(*(_fmt(v.get(node)) for v in values), name)
        if level >= depth:
            return
        kids = sorted(node.children, key=key)
        inner = prefix + ("" if level == 0 else (sp * 3 if last else "│" + sp * 2))
        for i, child in enumerate(kids):
            visit(child, inner, i == len(kids) - 1, level + 1)

    for root in gf.graph.roots:
        visit(root, "", True, 0)
    return table
