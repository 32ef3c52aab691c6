"""Which frames to show, and under what names: include/exclude/threshold filters, name formats.

Filters only choose what is shown; every value stays what was measured (a parent keeps its full
inclusive time even when some children are hidden).
"""
from __future__ import annotations

import math
import re

from ..format import LIBRARY_FILE, PYTHON_FRAME
from .errors import ViewerError
from .names import readable

FORMATS = ("full", "file_function_line", "function_line", "file_function")


def _regex(pattern: str | None, option: str):
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ViewerError(f"{option} {pattern!r} is not a valid regular expression: {exc}") from None


def visible_nodes(gf, first: dict | None = None, *, include: str | None = None,
                  exclude: str | None = None, threshold: float | None = None,
                  names: dict | None = None, anchor: bool = True) -> set:
    """The nodes to draw. Names match at their start, as in Triton's viewer (`.*attn` searches).

    include: frames whose name matches, with their ancestors and descendants.
    exclude: drops frames whose name matches, with their descendants.
    threshold: drops frames whose first metric is below it, unless a descendant is kept.
    names: node -> the name to match (default: the frame's name).
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
            included = ancestor_included or inc is None or bool(inc.match(name))
            if not done:
                if exc is None or not exc.match(name):
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
    """A `file:line@function` frame name shortened as Triton's -f formats do (FORMATS)."""
    if fmt == "file_function_line":
        return name.split("/")[-1]
    if fmt == "function_line":
        return name.split(":")[-1]
    if fmt == "file_function":
        return f"{name.split('/')[-1].split(':')[0]}@{name.split('@')[-1].split(':')[0]}"
    return name


def display_names(gf, fmt: str = "full", style: str = "folded") -> dict:
    """Frame names shortened as Triton's -f formats do (for `file:line@function` frames), C++
    kernel names demangled as `style` says (names.STYLES), in the tree's order: the first
    names take the demangler's budget (demangle.TOTAL_RATIO)."""
    return {node: shorten(readable(node.frame.get("name", "?"), style), fmt)
            for node in gf.graph.traverse()}


def library_frames(gf) -> set:
    """Python frames in installed packages or the standard library: the launch machinery of
    torch and Triton between the user's code and a kernel."""
    from .graph import nodes

    out = set()
    for node in nodes(gf.graph):
        match = PYTHON_FRAME.match(node.frame.get("name", ""))
        if match and LIBRARY_FILE.search(match["file"]):
            out.add(node)
    return out


def fold_names(gf, names: dict, folded: set) -> dict:
    """The first frame of each run of library frames, named with how many it stands for."""
    out = dict(names)
    for node in folded:
        if not any(p in folded for p in node.parents):
            hidden, stack = 0, [node]  # folded frames in the run under it
            while stack:
                kids = [c for c in stack.pop().children if c in folded]
                hidden += len(kids)
                stack.extend(kids)
            if hidden:
                out[node] = f"{names[node]} [+{hidden} library frame{'s' * (hidden > 1)}]"
    return out
