"""Machine-readable views: the shown rows as JSON or CSV, in the tree's order."""
from __future__ import annotations

import csv
import io
import json
import math
from itertools import repeat

from .derive import Column
from .render import by_id, sort_values, walk


def rows(gf, columns: list[Column], *, depth: int = 100, visible: set | None = None,
         names: dict | None = None, folded: set | None = None,
         diff: bool = False) -> list[dict]:
    """One dict per shown frame: its path from the root, depth and each metric (None if blank),
    in the tree's order (diff: children by the size of their change)."""
    values = [by_id(c.values) for c in columns]
    tidied = [(c.header, _tidied(v)) for c, v in zip(columns, values)]
    out: list[dict] = []
    path: list[str] = []
    order = sort_values(values[0] if values else {}, diff)
    for node, level, _ in walk(gf, order, depth=depth, visible=visible, folded=folded):
        del path[level:]
        path.append(names[node] if names else node.frame.get("name", "?"))
        row = {"path": list(path), "depth": level}
        nid = node._hatchet_nid
        for header, column in tidied:
            row[header] = column.get(nid)
        out.append(row)
    return out


def _tidied(values: dict) -> dict:
    """Each value of a column (by_id's) that is not blank (None, NaN) to 15 significant
    digits, what a double holds exactly: arithmetic's last-bit noise goes
    (10.799999999999999 -> 10.8), every measured digit stays; infinities stay. The blank ones
    are left out."""
    kept = [k for k, v in values.items() if v is not None and v == v]
    digits = map(format, map(float, map(values.__getitem__, kept)), repeat(".15g"))
    return dict(zip(kept, map(float, digits)))


def to_json(table: list[dict]) -> str:
    """The rows as JSON, json.dumps(table, indent=1)'s text, with an infinite value written
    null (JSON has no infinity). Written here, each text by json's own C encoder: json's
    indenting encoder is pure Python (0.5 s for 100,000 rows)."""
    if not table:
        return "[]"
    heads: dict[str, str] = {}  # key -> its text and colon, made once
    batches = []  # JSON_BATCH rows' text joined at a time: a string per row costs ~50 bytes
    for start in range(0, len(table), JSON_BATCH):
        out = []
        for row in table[start:start + JSON_BATCH]:
            fields = []
            for key, value in row.items():
                head = heads.get(key) or heads.setdefault(key, f"  {_text(key)}: ")
                fields.append(head + _value(value, "  "))
            out.append(" {\n" + ",\n".join(fields) + "\n }")
        batches.append(",\n".join(out))
    return "[\n" + ",\n".join(batches) + "\n]"


JSON_BATCH = 1000


_text = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
"""What json.dumps writes a string as (ensure_ascii)."""


def _value(value, pad: str) -> str:
    """`value` (a row's: text, a number, None, or a list of them) as json.dumps with
    indent=1 writes it `pad` deep; an infinite or NaN float as null."""
    kind = type(value)
    if kind is float:
        return float.__repr__(value) if math.isfinite(value) else "null"
    if kind is str:
        return _text(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is list:
        if not value:
            return "[]"
        inner = pad + " "
        try:  # a path: text alone, each item written by C calls
            items = ",\n".join(map(inner.__add__, map(_text, value)))
        except TypeError:  # not all text
            items = ",\n".join(inner + _value(v, inner) for v in value)
        return "[\n" + items + "\n" + pad + "]"
    raise TypeError(f"a row holds {kind.__name__}")


def to_csv(table: list[dict]) -> str:
    buf = io.StringIO()
    if not table:
        return ""
    metrics = [k for k in table[0] if k not in ("path", "depth")]
    writer = csv.writer(buf, lineterminator="\n")  # csv.DictWriter's rows, in one C call
    writer.writerow(["path", "depth", *metrics])
    writer.writerows([" / ".join(row["path"]), row["depth"],
                      *["" if row[k] is None else row[k] for k in metrics]] for row in table)
    return buf.getvalue()
