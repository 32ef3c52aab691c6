"""Draw a profile for people: the call tree, the sorted flat table, the legend.

Rows are built as plain strings and written line by line: rich's Table measures and renders every
cell through several layers (70 s for 100k rows); here a row costs a few string operations. rich
still decides the colours (its Style renders the escape codes for the console's colour system).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Callable

from rich.color import ColorSystem
from rich.style import Style
from rich.text import Text

from .derive import Column
from .select import python_frame, shown_children

if TYPE_CHECKING:
    from hatchet.node import Node

# Share of the root's value on the first metric -> style; the legend prints these bands.
BANDS = [(0.9, "bold red"), (0.6, "red"), (0.3, "yellow"), (0.1, "green"), (0.01, "cyan"),
         (0.0, "blue")]
# In a diff: slower (more of the metric) in red, faster in green, share of the root's |change|.
DIFF_BANDS = [(0.1, "bold red", "bold green"), (0.01, "red", "green"), (0.0, "", "")]
GAP = "  "
MIN_NAME = 24  # narrower than this, a name overflows the width rather than fold into slivers


def fmt(value, integer: bool = False, spec: str | None = None) -> str:
    """A cell: blank where the metric has no meaning (not nan), integers for counting columns,
    else `spec` (the column's, from `column_spec`), by default three decimals (scientific
    below 0.001)."""
    if type(value) is float:  # most cells: no isinstance, isnan and isfinite calls
        if value != value:
            return ""
        if value in _INFINITE:
            return str(value)
    elif value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    elif not math.isfinite(value):
        return str(value)
    if integer:
        return f"{int(value):,}"
    if spec is None:
        spec = ",.3f" if value == 0 or abs(value) >= 1e-3 else ".3e"
    return format(value, spec)


_INFINITE = (math.inf, -math.inf)


MAX_DECIMALS = 6
"""A column whose smallest value needs more decimals than this is written in scientific form."""


def column_spec(values: dict) -> str:
    """One format for a whole column, so its numbers line up and compare at a glance: three
    decimals, or where a nonzero value is below 0.001 enough decimals to give it three
    significant digits, or scientific for every cell when that takes more than MAX_DECIMALS."""
    finite = [abs(v) for v in values.values()
              if v is not None and v == v and math.isfinite(v) and v != 0]
    smallest = min(finite, default=1.0)
    if smallest >= 1e-3:
        return ",.3f"
    decimals = 2 - math.floor(math.log10(smallest))
    return f",.{decimals}f" if decimals <= MAX_DECIMALS else ".3e"


def plural(count: int, word: str) -> str:
    """`1 rank`, `2 ranks`: the count and the word, with an s unless the count is one."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def size(nbytes: int) -> str:
    """A byte count for people: `512 B`, `31 KB`, `4.2 MB`, `1.3 GB` (powers of 1000)."""
    if nbytes < 1000:
        return f"{nbytes} B"
    value, unit = nbytes / 1e3, "KB"
    for bigger in ("MB", "GB"):
        if value < 999.5:
            break
        value, unit = value / 1e3, bigger
    return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"


def _integral(values: dict) -> bool:
    finite = [v for v in values.values() if v is not None and v == v and math.isfinite(v)]
    return bool(finite) and all(v == int(v) and abs(v) < 1e15 for v in finite)


def band(value, top, diff: bool = False) -> str:
    """The style of a first-column cell: its share of the root's value."""
    if value is None or not top or math.isnan(value) or not math.isfinite(top):
        return ""
    share = abs(value / top)
    if diff:
        for bound, up, down in DIFF_BANDS:
            if share >= bound:
                return up if value > 0 else down
    for bound, style in BANDS:
        if share >= bound or bound == 0.0:
            return style
    return ""


def by_id(values) -> dict:
    """A column's values (a Series by node) keyed by its frames' hatchet ids, the key Node
    hashes and compares by: the same look-ups as a dict keyed by node (Series.to_dict), without
    a call of Node.__hash__, a Python function, at each of them."""
    return dict(zip([node._hatchet_nid for node in values.index], values.tolist()))


def walk(gf, first: dict, *, depth: int = 100, visible: set | None = None,
         folded: set | None = None):
    """Yield (node, level, lasts) in drawing order: children sorted by `first` (by_id's),
    largest first; `lasts` says, for each level down to this node, whether it was its parent's
    last child.

    folded: frames drawn only through their first: a folded frame under another folded frame
    is skipped and its children take its place (see select.library_frames)."""

    key = hottest_first(first)

    for root in gf.graph.roots:
        stack: list[tuple[Node, int, tuple[bool, ...]]] = [(root, 0, ())]
        while stack:  # explicit stack: a tree may be deeper than Python's recursion limit
            node, level, lasts = stack.pop()
            yield node, level, lasts
            if level + 1 >= depth:  # Triton's -d: ROOT is level 0, `-d 1` shows ROOT alone
                continue
            kids = sorted(node.children if visible is None and not folded
                          else shown_children(node, visible, folded), key=key)
            if kids:  # pushed last first: the first child is drawn next
                down = level + 1
                stack.append((kids[-1], down, lasts + (True,)))
                stack += zip(reversed(kids[:-1]), repeat(down), repeat(lasts + (False,)))


def sort_values(first: dict, diff: bool) -> dict:
    """The values rows sort by: `first`, or in a diff the size of the change (a frame 2 ms
    faster comes before one 1 ms slower)."""
    return {n: abs(v) for n, v in first.items() if v is not None} if diff else first


def hottest_first(first: dict) -> Callable:
    """A sort key: largest value of `first` (by_id's) first; frames where it is blank after them, PC-sample
    lines and python frames among those by file and line number (see `line_order`)."""

    def key(node):
        v = first.get(node._hatchet_nid)
        blank = v is None or v != v
        return (blank, 0 if blank else -v, line_order(node) if blank else ("", -1))

    return key


def line_order(node) -> tuple[str, int]:
    """A `file:line@function` frame (a PC-sample line, a python call path) by file, then line
    number as a number (9 before 10); other frames keep their place before them."""
    match = python_frame(node.frame.get("name", ""))
    return (match["file"], int(match["line"])) if match else ("", -1)


@dataclass(slots=True)
class Row:
    cells: list[str]
    style: str
    """Style of the first cell (its colour band)."""
    guide: str
    """Tree guides and branch drawn before the name."""
    more: str
    """Guides for the lines a long name folds onto."""
    name: str


class _Rows:
    """The columns as dicts by node id (by_id), and the Row of any node: its cells, its first
    cell's colour band (share of the root), its guides and name."""

    def __init__(self, gf, columns: list[Column], names: dict | None, diff: bool) -> None:
        self.values = [by_id(c.values) for c in columns]
        self.first = self.values[0] if self.values else {}
        self.order = sort_values(self.first, diff)
        """What rows sort by: the first metric, or in a diff the size of its change."""
        self.formats = [(_integral(v), column_spec(v)) for v in self.values]
        """Each column's fmt arguments (integer, spec), chosen once."""
        self.top = self.first.get(gf.graph.roots[0]._hatchet_nid) if gf.graph.roots else None
        self.names = {node._hatchet_nid: name for node, name in names.items()} if names \
            else None
        """The names by node id: no Node.__hash__ (a Python function) per row."""
        self.diff = diff

    def row(self, node, guide: str = "", more: str = "") -> Row:
        nid = node._hatchet_nid
        cells = [fmt(v.get(nid), integer, spec)
                 for (integer, spec), v in zip(self.formats, self.values)]
        name = self.names[nid] if self.names else node.frame.get("name", "?")
        if not name.isprintable():
            name = printable(name)
        return Row(cells, band(self.first.get(nid), self.top, self.diff), guide, more, name)


_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(32), *range(127, 160))} | {
    0x2028: "\\u2028", 0x2029: "\\u2029", ord("\n"): "\\n", ord("\r"): "\\r",
    ord("\t"): "\\t"}


def printable(name: str) -> str:
    """`name` on one line: newlines, tabs and other control characters written as escapes
    (\\n, \\t, \\x1b), so a row stays one row and a name cannot drive the terminal."""
    return name.translate(_ESCAPES)


def tree_rows(gf, columns: list[Column], *, depth: int = 100, visible: set | None = None,
              names: dict | None = None, diff: bool = False,
              folded: set | None = None) -> list[Row]:
    """One row per shown node (see `walk`), the first cell styled by its share of the root."""
    table = _Rows(gf, columns, names, diff)
    rows, levels = [], []
    under = [""]  # under[level]: the guides a child of the last frame drawn at `level` gets
    for node, level, lasts in walk(gf, table.order, depth=depth, visible=visible,
                                   folded=folded):
        if level == 0:
            row = table.row(node, "", "")
        else:
            above = under[level - 1]
            row = table.row(node, above + ("└─ " if lasts[-1] else "├─ "),
                            above + ("   " if lasts[-1] else "│  "))
        del under[level:]
        under.append(row.more)
        rows.append(row)
        levels.append(level)
    for i, row in enumerate(rows):  # a folded name keeps its children's guide line going
        has_kids = i + 1 < len(rows) and levels[i + 1] > levels[i]
        row.more += "│ " if has_kids else "  "
    return rows


def sorted_rows(gf, columns: list[Column], *, visible: set | None = None,
                names: dict | None = None, diff: bool = False) -> list[Row]:
    """Every shown frame but the root, hottest first on the first metric (in a diff: largest
    change first, slower or faster)."""
    table = _Rows(gf, columns, names, diff)
    first, roots = table.order, set(gf.graph.roots)
    nodes = [n for n in gf.graph.traverse() if n not in roots and (visible is None or n in visible)]
    nodes.sort(key=hottest_first(first))
    return [table.row(n) for n in nodes]


_BREAK = re.compile(r"[^_/ .:@,<>()\[\]-]+[_/ .:@,<>()\[\]-]*|[_/ .:@,<>()\[\]-]+")


def fold(name: str, width: int) -> list[str]:
    """`name` in pieces of at most `width`, broken after separators (_ / . : @ , < > ...) so a
    kernel name folds between its words; a word longer than the width is split."""
    if len(name) <= width:
        return [name]
    lines, line = [], ""
    for word in _BREAK.findall(name):
        while len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if len(line) + len(word) > width:
            lines.append(line)
            line = ""
        line += word
    if line:
        lines.append(line)
    return lines


def draw(rows: list[Row], headers: list[str], write: Callable[[str], object], *,
         width: int | None = None, color: ColorSystem | None = None) -> None:
    """Write the rows as aligned lines: right-justified metric columns, then the name.

    width: fold names to fit this many columns (None: one line per row, for pipes and grep).
    color: the terminal's colour system (None: plain text)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row.cells):
            if len(cell) > widths[i]:
                widths[i] = len(cell)
    lead = sum(w + len(GAP) for w in widths)
    gap = GAP if headers else ""  # no metric columns: the names alone
    paint = _painter(color)
    head = GAP.join(h.rjust(w) for h, w in zip(headers, widths)) + gap + "name"
    out = [paint(head, "bold")]
    blank = " " * lead
    for row in rows:
        cells = [c.rjust(w) for c, w in zip(row.cells, widths)]
        if cells:
            cells[0] = paint(cells[0], row.style)
        room = None if width is None else max(MIN_NAME, width - lead - len(row.more))
        pieces = [row.name] if room is None else fold(row.name, room)
        out.append(GAP.join(cells) + gap + paint(row.guide, "dim") + pieces[0])
        for piece in pieces[1:]:
            out.append(blank + paint(row.more, "dim") + piece)
        if len(out) >= 4096:
            write("\n".join(out) + "\n")
            out.clear()
    if out:
        write("\n".join(out) + "\n")


def _painter(color: ColorSystem | None) -> Callable[[str, str], str]:
    if color is None:
        return lambda text, style: text
    cache: dict[str, tuple[str, str]] = {}

    def paint(text: str, style: str) -> str:
        if not style or not text:
            return text
        if style not in cache:
            start, _, end = Style.parse(style).render("\0", color_system=color).partition("\0")
            cache[style] = (start, end)
        start, end = cache[style]
        return start + text + end

    return paint


def top_known(root_value) -> bool:
    """Whether ROOT's value can scale the colour bands (a finite number, not 0)."""
    return root_value is not None and root_value == root_value and bool(root_value) \
        and math.isfinite(root_value)


def legend(columns: list[Column], root_value, diff: bool = False) -> Text:
    """What the colours mean: the first metric's share of the root, with its range."""
    values = [v for v in columns[0].values.tolist() if v == v and v is not None] if columns else []
    if not top_known(root_value):
        text = Text().append(f"{columns[0].header}: ROOT has no total for it; rows are not "
                             "coloured", style="dim")
    elif diff:
        text = Text().append(f"{columns[0].header}: change as a share of ROOT's "
                             f"({fmt(root_value)}) ", style="dim")
        for bound, up, down in DIFF_BANDS[:-1]:
            text.append("■", style=up)
            text.append("■ ", style=down)
            text.append(f"≥{bound:.0%} slower/faster ", style="dim")
    else:
        text = Text().append(f"{columns[0].header}: share of ROOT ({fmt(root_value)}) ",
                             style="dim")
        for bound, style in BANDS:
            text.append("■ ", style=style)
            text.append(f"≥{bound:.0%} " if bound else "<1% ", style="dim")
    if values:
        spec = column_spec(dict(enumerate(values)))
        text.append(f"  min {fmt(min(values), spec=spec)}  max {fmt(max(values), spec=spec)}",
                    style="dim")
    return text
