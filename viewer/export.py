"""Machine-readable views: the shown rows as JSON or CSV, in the tree's order."""
from __future__ import annotations

import csv
import io
import json
import math
from itertools import repeat
from operator import itemgetter

from .derive import Column
from .render import by_id, sort_values, walk


def rows(gf, columns: list[Column], *, depth: int = 100, visible: set | None = None,
         names: dict | None = None, folded: set | None = None,
         diff: bool = False) -> list[dict]:
    """One dict per shown frame: its path from the root, depth and each metric (None if blank),
    in the tree's order (diff: children by the size of their change)."""
    values = [by_id(c.values) for c in columns]
    order = sort_values(values[0] if values else {}, diff)
    paths, levels, nids = [], [], []
    path: list[str] = []
    for node, level, _ in walk(gf, order, depth=depth, visible=visible, folded=folded):
        del path[level:]
        path.append(names[node] if names else node.frame.get("name", "?"))
        paths.append(list(path))
        levels.append(level)
        nids.append(node._hatchet_nid)
    cells = [list(map(_tidied(v).get, nids)) for v in values]  # a column at a time, in C
    keys = ["path", "depth", *(c.header for c in columns)]
    return list(map(dict, map(zip, repeat(keys), zip(paths, levels, *cells))))


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
    null (JSON has no infinity). Written here, a column at a time by C calls where its values
    allow (json's indenting encoder is pure Python: 0.5 s for 100,000 rows), JSON_BATCH rows
    at a time (a string per row costs ~50 bytes)."""
    if not table:
        return "[]"
    batches = []
    for start in range(0, len(table), JSON_BATCH):
        batch = table[start:start + JSON_BATCH]
        keys = list(batch[0])
        if all(row.keys() == batch[0].keys() for row in batch):  # rows() makes them so
            row_text = _row_template(keys).format
            columns = [_texts(list(map(itemgetter(key), batch)), "  ") for key in keys]
            batches.append(",\n".join(map(row_text, *columns)))
        else:
            batches.append(",\n".join(_row(row) for row in batch))
    return "[\n" + ",\n".join(batches) + "\n]"


def _row_template(keys: list[str]) -> str:
    """A row's text with a `{}` for each key's value (braces of the keys' text doubled)."""
    fields = (f"  {_text(key)}: ".replace("{", "{{").replace("}", "}}") + "{}" for key in keys)
    return " {{\n" + ",\n".join(fields) + "\n }}"


def _row(row: dict) -> str:
    return " {\n" + ",\n".join(f"  {_text(k)}: {_value(v, '  ')}" for k, v in row.items()) + "\n }"


_NOT_JSON = frozenset(("None", "inf", "-inf", "nan"))
"""repr's text of the numbers' values JSON writes as null."""


def _texts(values: list, pad: str) -> list[str]:
    """Each of a column's values as _value writes it: numbers and text by one C call each
    where the column holds only those."""
    kinds = set(map(type, values))
    if kinds <= _NUMBERS:
        return [t if t not in _NOT_JSON else "null" for t in map(repr, values)]
    if kinds == {str}:
        return list(map(_text, values))
    if kinds == {list}:
        inner = pad + " "
        try:  # paths: text alone
            return ["[\n" + ",\n".join(map(inner.__add__, map(_text, v))) + "\n" + pad + "]"
                    if v else "[]" for v in values]
        except TypeError:  # not all text
            pass
    return [_value(v, pad) for v in values]


_NUMBERS = frozenset((float, int, type(None)))


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
