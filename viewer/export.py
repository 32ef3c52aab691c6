"""Machine-readable views: the shown rows as JSON or CSV, in the tree's order."""
from __future__ import annotations

import csv
import io
import json
import math

from .derive import Column
from .render import by_id, sort_values, walk


def rows(gf, columns: list[Column], *, depth: int = 100, visible: set | None = None,
         names: dict | None = None, folded: set | None = None,
         diff: bool = False) -> list[dict]:
    """One dict per shown frame: its path from the root, depth and each metric (None if blank),
    in the tree's order (diff: children by the size of their change)."""
    values = [by_id(c.values) for c in columns]
    out: list[dict] = []
    path: list[str] = []
    order = sort_values(values[0] if values else {}, diff)
    for node, level, _ in walk(gf, order, depth=depth, visible=visible, folded=folded):
        del path[level:]
        path.append(names[node] if names else node.frame.get("name", "?"))
        row = {"path": list(path), "depth": level}
        nid = node._hatchet_nid
        for column, vals in zip(columns, values):
            v = vals.get(nid)
            row[column.header] = None if v is None or (isinstance(v, float) and math.isnan(v)) \
                else _tidy(float(v))
        out.append(row)
    return out


def _tidy(value: float) -> float:
    """`value` to 15 significant digits, what a double holds exactly: arithmetic's last-bit
    noise goes (10.799999999999999 -> 10.8), every measured digit stays."""
    return float(f"{value:.15g}") if math.isfinite(value) else value


def to_json(table: list[dict]) -> str:
    """The rows as JSON (json.dumps(table, indent=1)'s text); an infinite value is written
    null, as JSON has no infinity. JSON_BATCH rows at a time: json's indenting encoder holds
    every piece of its text until it joins them (100k rows: 102 MB at once, 31 in batches,
    and no slower)."""
    if not table:
        return "[]"
    return "[\n" + ",\n".join(_rows_json(table[i:i + JSON_BATCH])[2:-2]
                               for i in range(0, len(table), JSON_BATCH)) + "\n]"


JSON_BATCH = 1000


def _rows_json(rows: list[dict]) -> str:
    try:
        return json.dumps(rows, indent=1, allow_nan=False)
    except ValueError:
        return json.dumps([{k: None if isinstance(v, float) and not math.isfinite(v) else v
                            for k, v in row.items()} for row in rows], indent=1)


def to_csv(table: list[dict]) -> str:
    buf = io.StringIO()
    if not table:
        return ""
    fields = ["path", "depth"] + [k for k in table[0] if k not in ("path", "depth")]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow({**row, "path": " / ".join(row["path"]),
                         **{k: "" if row[k] is None else row[k] for k in fields[2:]}})
    return buf.getvalue()
