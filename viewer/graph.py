"""hatchet's GraphFrame built and walked without recursion, for trees of any depth.

hatchet's literal reader, traversal, depth numbering and union recurse once per tree level (a
RecursionError past ~1000 levels; a generator chain whose every step costs the depth, so a
traversal of a 10,000-level chain takes seconds). `Graph` is hatchet's Graph with those four
done with explicit stacks, in the same order (children sorted by frame, as hatchet does), so
node ids, the data frame and hatchet's own methods that call them (unify, enumerate_traverse,
len) give what they gave before.
"""
from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from itertools import repeat
from typing import Any


def _trees_to_dot(*args, **kwargs):
    """hatchet's trees_to_dot (GraphFrame.to_dot), its module (and matplotlib) imported at
    the first call."""
    from hatchet.util.dot import trees_to_dot

    return trees_to_dot(*args, **kwargs)


def _import_hatchet() -> None:
    """Import hatchet without the two packages it loads for what the viewer never uses:
    IPython (for Roundtrip, a notebook widget hatchet itself turns down with IPython 8+) and
    matplotlib (for to_dot's colours). Measured on the 2-core machine: hatchet's import took
    1.2-1.4 s of CPU, 0.5 of it IPython's and 0.3 matplotlib's, most of a 10,000-frame view.
    Where either is already loaded (a notebook) nothing is held back; to_dot still works."""
    if "hatchet" in sys.modules:
        return
    held: dict[str, Any] = {}  # a module, or None: its import fails
    if "IPython" not in sys.modules:
        held["IPython"] = None  # `import IPython` fails: hatchet goes on without Roundtrip
    if "matplotlib" not in sys.modules:
        dot = types.ModuleType("hatchet.util.dot", "stands in until to_dot is called")
        dot.trees_to_dot = _trees_to_dot  # type: ignore[attr-defined]
        held["hatchet.util.dot"] = dot
    sys.modules.update(held)
    try:
        import hatchet  # noqa: F401
    finally:
        for name, module in held.items():
            if name in sys.modules and sys.modules[name] is module:
                del sys.modules[name]


_import_hatchet()

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from hatchet import GraphFrame  # noqa: E402
from hatchet.frame import Frame  # noqa: E402
from hatchet.graph import Graph as _HatchetGraph  # noqa: E402
from hatchet.node import Node, node_traversal_order  # noqa: E402


class Graph(_HatchetGraph):
    """hatchet's Graph with iterative traverse, enumerate_depth and union. The graphs
    from_tree, from_parents and union make also list their nodes, and from_tree's its frame
    keys: a graph's nodes are not changed once it is made (hatchet's operations and union
    make new graphs)."""

    every: list | None = None
    """Every node once, each after its parent, where the maker listed them (see nodes)."""
    keys: frozenset | None = None
    """Every key any frame has (see frame_keys)."""

    def traverse(self, order="pre", attrs=None, visited=None):
        """Nodes depth-first, children sorted as hatchet sorts them; `visited` counts each
        node's arrivals (in-degree), as in hatchet."""
        if order not in ("pre", "post"):
            raise ValueError("order must be one of 'pre' or 'post'")
        key = node_traversal_order if self.node_ordering else frame_order
        if visited is None:
            visited = {}
        stack = [(root, False) for root in reversed(sorted(self.roots, key=key))]
        while stack:
            node, done = stack.pop()
            if not done:
                nid = id(node)
                if nid in visited:
                    visited[nid] += 1
                    continue
                visited[nid] = 1
                if order == "post":
                    stack.append((node, True))
                if node.children:
                    stack.extend((c, False) for c in reversed(sorted(node.children, key=key)))
                if order == "post":
                    continue
            yield node if attrs is None else node.frame.values(attrs)

    def node_order_traverse(self, order="pre", attrs=None, visited=None):
        return self.traverse(order=order, attrs=attrs, visited=visited)

    def enumerate_depth(self):
        visited = set()
        for root in self.roots:
            root._depth = 0
            stack = [root]
            while stack:
                node = stack.pop()
                for child in node.children:
                    if child not in visited:
                        visited.add(child)
                        child._depth = node._depth + 1
                        stack.append(child)

    def union(self, other, old_to_new=None):
        """A new Graph with the nodes of both, matched by frame along their paths from the
        roots (hatchet's merge: each list of children sorted, equal frames paired in order)."""
        if old_to_new is None:
            old_to_new = {}

        def key(n):  # a frame's order is its tuple_repr's (Frame.__lt__), compared in C here
            return n._hatchet_nid if self.node_ordering else frame_key(n)

        new_roots: list = []
        made: list = []  # each new node once, after its parent (Graph.every)
        todo = [(sorted(self.roots, key=key), sorted(other.roots, key=key), None)]
        while todo:
            mine, theirs, parent = todo.pop()
            mine_keys, their_keys = list(map(frame_key, mine)), list(map(frame_key, theirs))
            i = j = 0
            while i < len(mine) or j < len(theirs):
                if j == len(theirs) or (i < len(mine) and mine_keys[i] < their_keys[j]):
                    a, b, i = mine[i], None, i + 1
                elif i == len(mine) or mine_keys[i] > their_keys[j]:
                    a, b, j = None, theirs[j], j + 1
                else:
                    a, b, i, j = mine[i], theirs[j], i + 1, j + 1
                # each side's node already placed (a graph's node reached twice), or None
                was_a = old_to_new.get(id(a)) if a is not None else None
                was_b = old_to_new.get(id(b)) if b is not None else None
                new = was_a if was_a is not None else was_b
                if new is None:
                    new = (a if a is not None else b).copy()
                    made.append(new)
                kids_a = kids_b = ()
                if a is not None and was_a is None:
                    old_to_new[id(a)] = new
                    kids_a = sorted(a.children, key=key)
                if b is not None and was_b is None:
                    old_to_new[id(b)] = new
                    kids_b = sorted(b.children, key=key)
                if kids_a or kids_b:
                    todo.append((kids_a, kids_b, new))
                if parent is not None:
                    parent.add_child(new)
                    new.add_parent(parent)
                else:
                    new_roots.append(new)
        graph = Graph(new_roots, node_ordering=self.node_ordering)
        graph.enumerate_traverse()
        graph.every = made
        return graph


def frame_key(node: Node) -> tuple:
    """The tuple the node's Frame compares by (its tuple_repr): the one from_tree or
    diff.match_by_what made, else hatchet's property makes it."""
    frame = node.frame
    return frame._tuple_repr or frame.tuple_repr


def frame_order(node: Node) -> tuple:
    """hatchet's traversal_order, (frame, id), as the tuples Frame compares (its tuple_repr):
    the same order, compared in C rather than through Frame's __eq__ and __lt__ (3x faster)."""
    return (frame_key(node), id(node))


def from_tree(root: dict, made: list | None = None) -> GraphFrame:
    """hatchet's GraphFrame.from_literal([root]) for a checked tree (every node with frame,
    metrics and children), without recursion: the same nodes, ids and data frame. Each node
    of the tree is emptied once read (its frame dict goes to the graph): the tree and the
    graph are never both whole in memory. `made`, when given, gets the nodes in the order
    they were made: pre-order, children in file order (job_file's order)."""
    inc = [m for m in root["metrics"] if "(inc)" in m]
    exc = [m for m in root["metrics"] if "(inc)" not in m]
    # the table built column by column (8 bytes a cell while built; a list of row dicts took
    # ~100): each metric's values in row order, NaN where a frame lacks it, as pandas fills
    columns: dict[str, list] = {}
    names: list[str] = []
    made_here: list[Node] = []
    keys = {"name", "type"}
    nan = float("nan")
    rows = 0
    todo = [(root, None)]
    while todo:  # pre-order in file order, as hatchet's reader: the columns keep its order
        item, parent = todo.pop()
        frame = Frame(item["frame"])
        if len(frame.attrs) > 2:  # more than name and type
            keys.update(frame.attrs)
        # hatchet's tuple_repr (what frames sort and compare by), made now and without its
        # property's generator: numbering sorts by it (frame_order)
        frame._tuple_repr = tuple(sorted(frame.attrs.items()))
        node = Node(frame, parent, hnid=rows)  # its row in file order, until numbered
        if parent is not None:
            parent.children.append(node)  # Node.add_child, less its isinstance assert
        made_here.append(node)
        names.append(frame.attrs.get("name") or item.get("name", ""))
        for key, value in item["metrics"].items():
            column = columns.get(key)
            if column is None:
                if key in _OWN_COLUMNS:  # a metric named so cannot take the frame's own column
                    continue
                column = columns[key] = []
            if len(column) < rows:
                column += [nan] * (rows - len(column))
            column.append(value)
        rows += 1
        kids = item["children"]
        if kids:
            todo += zip(reversed(kids), repeat(node, len(kids)))
        item.clear()
    for column in columns.values():
        column += [nan] * (rows - len(column))
    top = made_here[0]
    graph = Graph([top])
    graph.every, graph.keys = made_here, frozenset(keys)
    order = _number(top, rows)
    if made is not None:
        made += made_here
    index = pd.Index(_objects(made_here)[order], name="node", dtype=object, copy=False)
    # hatchet's rows: sorted by node, that is by id (each node has its own)
    table = {"name": _objects(names)[order]}
    for key in list(columns):  # one column's list and array at a time
        table[key] = _column(columns.pop(key))[order]
    df = pd.DataFrame(table, index=index, copy=False)
    return GraphFrame(graph, df, exc, inc)


def _objects(items: list) -> np.ndarray:
    """`items` as a numpy array of objects (pandas' conversion of a list checks each item:
    ~0.18 s for 100,000 nodes, against a few ms here)."""
    return np.fromiter(items, dtype=object, count=len(items))


def _column(values: list) -> np.ndarray:
    """The array pandas makes of `values` (pd.Series(values).to_numpy()); numbers alone (with
    NaN for the frames without) straight to float64, as pandas makes them, without its
    conversion of every value to an object first (~30 ms a column of 100,000 frames)."""
    kinds = set(map(type, values))
    if kinds == {float} or kinds == {int, float}:
        return np.array(values, dtype=np.float64)
    return pd.Series(values).to_numpy()


def _number(top: Node, rows: int) -> np.ndarray:
    """Give the nodes under `top` hatchet's ids (pre-order, children sorted by frame_order)
    and depths, one walk; each node's _hatchet_nid held its row in file order before: the
    rows in id order are returned."""
    order = np.empty(rows, dtype=np.int64)
    top._depth = 0
    stack = [top]
    nid = 0
    while stack:
        node = stack.pop()
        order[nid] = node._hatchet_nid
        node._hatchet_nid = nid
        nid += 1
        kids = node.children
        if kids:
            depth = node._depth + 1
            for kid in kids:
                kid._depth = depth
            stack += sorted(kids, key=frame_order, reverse=True) if len(kids) > 1 else kids
    return order


_OWN_COLUMNS = ("node", "name")
"""The table's columns of each frame's node and name, besides its metrics."""


def ancestors(node: Node) -> Iterator[Node]:
    """Each frame above `node`, nearest first (a tree's: each frame's first parent)."""
    while node.parents:
        node = node.parents[0]
        yield node


def under(node: Node, above: Node) -> bool:
    """Whether `above` is a frame above `node`."""
    return any(up is above for up in ancestors(node))


def nodes(graph) -> list[Node]:
    """Every node of `graph` once, each after its parent, in no sorted order: for work whose
    result does not depend on the order (a dict or set of nodes), without traverse's sort of
    every node's children (a third of a 100,000-frame view's walks). The list is the graph's
    own where its maker kept one (Graph.every): read it, do not change it."""
    if getattr(graph, "every", None) is not None:
        return graph.every
    out: list[Node] = []
    seen: set[int] = set()
    stack = list(graph.roots)
    while stack:
        node = stack.pop()
        if len(node.parents) > 1 or not node.parents:  # a root, or reached once per parent
            if id(node) in seen:
                continue
            seen.add(id(node))
        out.append(node)
        stack += node.children
    return out


def post_order(graph) -> list[Node]:
    """Every node of `graph` once, each after all of its children, in no sorted order: for
    sums up the tree, whose result does not depend on the order (traverse(order="post")
    sorts every node's children)."""
    every = nodes(graph)
    if all(len(node.parents) <= 1 for node in every):  # a tree: nodes() reversed
        return every[::-1]
    out: list[Node] = []
    done: set[int] = set()
    for root in graph.roots:
        stack = [(root, False)]
        while stack:
            node, children_done = stack.pop()
            if children_done:
                out.append(node)
            elif id(node) not in done:
                done.add(id(node))
                stack.append((node, True))
                stack += [(child, False) for child in node.children]
    return out


def frame_keys(graph) -> frozenset:
    """Every key any frame of `graph` has: a view asks before it walks every frame for one."""
    if getattr(graph, "keys", None) is None:
        graph.keys = frozenset(k for node in nodes(graph) for k in node.frame.attrs)
    return graph.keys


def numbered(graph: Graph) -> Graph:
    """Give the nodes hatchet's ids (pre-order, children sorted) and depths."""
    for i, node in enumerate(graph.traverse()):
        node._hatchet_nid = i
    graph.enumerate_depth()
    return graph


def from_parents(frames: list[dict], parents: list[int]) -> tuple[Graph, list[Node]]:
    """A graph of nodes given in pre-order (each parent before its children) as frames and
    parent indices (-1 for the root); the nodes in the same order."""
    nodes: list[Node] = []
    for frame, parent in zip(frames, parents):
        up = nodes[parent] if parent >= 0 else None
        node = Node(Frame(frame), up, hnid=-1)
        if up is not None:
            up.add_child(node)
        nodes.append(node)
    graph = numbered(Graph([nodes[0]]))
    graph.every = nodes
    return graph, nodes
