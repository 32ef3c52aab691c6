"""Which frames to show, and under what names: include/exclude/threshold filters, name formats.

Filters only choose what is shown; every value stays what was measured (a parent keeps its full
inclusive time even when some children are hidden).
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable

from ..format import LIBRARY_FILE, PYTHON_FRAME
from .errors import ViewerError
from .names import readable

FORMATS = ("full", "file_function_line", "function_line", "file_function")
"""Triton's -f formats of `file:line@function` frame names."""
SHORT = "short"
"""Our own format, the tree's default and the --html page's: `step (train.py:40)`."""


def _regex(pattern: str | None, option: str):
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ViewerError(f"{option} {pattern!r} is not a valid regular expression: {exc}") from None


def visible_nodes(gf, first: dict | None = None, *, include: str | None = None,
                  exclude: str | None = None, threshold: float | None = None,
                  names: dict | None = None, displayed: dict | None = None,
                  anchor: bool = True) -> set:
    """The nodes to draw. Names match at their start, as in Triton's viewer (`.*attn` searches).

    include: frames whose name matches, with their ancestors and descendants.
    exclude: drops frames whose name matches, with their descendants.
    threshold: drops frames whose first metric is below it, unless a descendant is kept.
    names: node -> the name to match (default: the frame's name).
    displayed: node -> the name as a view shows it (demangled, shortened), matched as well: a
        frame matches when either name does (`-e 'at::'` hides `_ZN2at...` kernels, and a
        regex written for the raw names still works).
    anchor: keep the roots whatever the filters say.
    """
    inc, exc = _regex(include, "--include"), _regex(exclude, "--exclude")
    shown = set()
    for root in gf.graph.roots:
        # (node, its ancestors matched include, its children done): each node is decided
        # after its children, without recursion (a tree may be any depth)
        stack = [(root, False, False)]
        while stack:
            node, ancestor_included, done = stack.pop()
            name = node.frame.get("name", "") if names is None else str(names.get(node, ""))
            other = name if displayed is None else str(displayed.get(node, name))
            included = ancestor_included or inc is None or bool(inc.match(name)) or (
                other != name and bool(inc.match(other)))
            if not done:
                if exc is None or not (exc.match(name) or other != name and exc.match(other)):
                    stack.append((node, ancestor_included, True))
                    stack.extend((child, included, False) for child in node.children)
                continue
            value = first.get(node) if first is not None else None
            passes = threshold is None or (value is not None and not math.isnan(value)
                                           and value >= threshold)
            if (included and passes) or any(c in shown for c in node.children):
                shown.add(node)
        if anchor:
            shown.add(root)  # the root always anchors the tree
    return shown


def shorten(name: str, fmt: str) -> str:
    """A `file:line@function` frame name shortened as Triton's -f formats do (FORMATS), or
    as short_frame does (SHORT)."""
    if fmt == SHORT:
        return short_frame(name)
    if fmt == "file_function_line":
        return name.split("/")[-1]
    if fmt == "function_line":
        return name.split(":")[-1]
    if fmt == "file_function":
        return f"{name.split('/')[-1].split(':')[0]}@{name.split('@')[-1].split(':')[0]}"
    return name


def python_frame(name: str) -> re.Match | None:
    """PYTHON_FRAME's match of `name`: None at once for a name with no `@` (a kernel's, which
    the pattern would scan and backtrack over at each `:`)."""
    return PYTHON_FRAME.match(name) if "@" in name else None


def short_frame(name: str) -> str:
    """A python frame `/abs/dir/train.py:40@step` as `step (train.py:40)`: the function is what
    a reader looks for; the path is in the page's frame details, and `-f full` prints it."""
    m = python_frame(name)
    file = m["file"].replace("\\", "/") if m else ""
    if m is None or "/" not in file:
        return name
    return f"{m['function']} ({file.rsplit('/', 1)[-1]}:{m['line']})"


def display_names(gf, fmt: str = "full", style: str = "folded") -> dict:
    """Frame names shortened as `fmt` says (SHORT or one of Triton's -f FORMATS, for
    `file:line@function` frames), C++ kernel names demangled as `style` says (names.STYLES),
    in the tree's order where there are mangled names: the first names take the demangler's
    budget (demangle.TOTAL_RATIO). Without any, in any order (no sort of every node's
    children)."""
    from .graph import nodes

    every: Iterable = nodes(gf.graph)
    if style != "raw" and any(n.frame.attrs.get("name", "?").startswith("_Z") for n in every):
        every = gf.graph.traverse()
    if fmt in (SHORT, "full"):  # a name with no `@` (no python frame) and not mangled stays
        return {node: name if "@" not in name and not name.startswith("_Z")
                else shorten(readable(name, style), fmt)
                for node in every for name in (node.frame.attrs.get("name", "?"),)}
    return {node: shorten(readable(node.frame.attrs.get("name", "?"), style), fmt)
            for node in every}


def library_frames(gf) -> set:
    """Python frames in installed packages or the standard library: the launch machinery of
    torch and Triton between the user's code and a kernel."""
    from .graph import nodes

    out = set()
    for node in nodes(gf.graph):
        match = python_frame(node.frame.attrs.get("name", ""))
        if match and LIBRARY_FILE.search(match["file"]):
            out.add(node)
    return out


def shown_children(node, visible: set | None = None, folded: set | None = None) -> list:
    """A frame's children as every view draws them (the terminal's tree, the --html page):
    those in `visible` (all when None); a library frame under another (`folded`, from
    library_frames) is skipped and its children take its place, however long the run."""
    out, runs = [], [(node, iter(node.children))]
    while runs:
        parent, kids = runs[-1]
        child = next(kids, None)
        if child is None:
            runs.pop()
        elif visible is not None and child not in visible:
            continue
        elif folded and child in folded and parent in folded:
            runs.append((child, iter(child.children)))
        else:
            out.append(child)
    return out


def fold_marks(folded: set) -> dict:
    """The first frame of each run of library frames -> ` [+N library frames]`: how many
    frames it stands for."""
    out = {}
    for node in folded:
        if not any(p in folded for p in node.parents):
            hidden, stack = 0, [node]  # folded frames in the run under it
            while stack:
                kids = [c for c in stack.pop().children if c in folded]
                hidden += len(kids)
                stack.extend(kids)
            if hidden:
                out[node] = f" [+{hidden} library frame{'s' * (hidden > 1)}]"
    return out


def fold_names(gf, names: dict, folded: set) -> dict:
    """The first frame of each run of library frames, named with how many it stands for."""
    out = dict(names)
    for node, mark in fold_marks(folded).items():
        out[node] = f"{names[node]}{mark}"
    return out