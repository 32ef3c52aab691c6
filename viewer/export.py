"""Machine-readable views: the shown rows as JSON or CSV, in the tree's order."""
from __future__ import annotations

import csv
import io
import json
import math

from .derive import Column
from .render import walk


def rows(gf, columns: list[Column], *, depth: int = 100, visible: set | None = None,
         names: dict | None = None, folded: set | None = None) -> list[dict]:
    """One dict per shown frame: its path from the root, depth and each metric (None if blank)."""
    values = [c.values.to_dict() for c in columns]
    out, path = [], []
    for node, level, _ in walk(gf, values[0] if values else {}, depth=depth, visible=visible,
                               folded=folded):
        del path[level:]
        path.append(names[node] if names else node.frame.get("name", "?"))
        row = {"path": list(path), "depth": level}
        for column, vals in zip(columns, values):
            v = vals.get(node)
            row[column.header] = None if v is None or (isinstance(v, float) and math.isnan(v)) \
                else float(v)
        out.append(row)
    return out


def to_json(table: list[dict]) -> str:
    """The rows as JSON; an infinite value is written null, as JSON has no infinity."""
    try:
        return json.dumps(table, indent=1, allow_nan=False)
    except ValueError:
        return json.dumps([{k: None if isinstance(v, float) and not math.isfinite(v) else v
                            for k, v in row.items()} for row in table], indent=1)


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
