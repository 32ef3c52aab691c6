"""Read a .hatchet file (ours or Triton's Proton's), or one piped into stdin, into a hatchet
GraphFrame; a tree of any depth (see deep.py and graph.py)."""
from __future__ import annotations

import json
import reprlib
import sys
from dataclasses import dataclass, field

from ..format import JOB_KEYS, LAUNCH_METADATA
from . import deep
from .errors import ViewerError


@dataclass(slots=True)
class Profile:
    """A profile ready to derive metrics from."""

    gf: object
    """hatchet.GraphFrame with inclusive columns ("X (inc)") computed."""
    inclusive: list[str]
    """Metrics summed over subtrees (those the file lists on its root)."""
    exclusive: list[str]
    """Metrics that belong to one node only (device_id, cpu_time (ns), "(exc)" user metrics)."""
    devices: dict = field(default_factory=dict)
    """The file's device table: {"CUDA": {"0": {"arch", "num_sms", ...}}}."""
    job: dict = field(default_factory=dict)
    """The writing process: rank, world_size, local_rank, host, pid (format.JOB_KEYS)."""


STDIN = "-"
"""The FILE that means standard input (`cat run.hatchet | proton-viewer -`)."""


def load(path: str) -> Profile:
    """Parse and check `path` (`-`: standard input); raise ViewerError with a one-line reason
    when it is not a profile. Reads trees of any depth (see deep.py, graph.py).

    Usage:
        prof = load("run.hatchet")
        prof.gf.dataframe["time (ns) (inc)"]
    """
    root, devices, job = parse(path)
    from .graph import from_tree  # hatchet is heavy (pandas, matplotlib): only for a good file

    deep.keep_limit()
    gf = from_tree(root)
    inclusive = sorted(m for m in root.get("metrics", {}) if "(inc)" not in m)
    _add_inclusive_columns(gf, [m for m in inclusive if m in gf.dataframe])
    exclusive = [c for c in gf.dataframe.columns
                 if c != "name" and c not in inclusive and not c.endswith(" (inc)")]
    return Profile(gf, inclusive, exclusive, devices, job)


def parse(path: str) -> tuple[dict, dict, dict]:
    """The checked tree (root node, launch metadata frames dropped), device table and writing
    process (format.JOB_KEYS; {} for older files) of the profile at `path`; ViewerError with a
    one-line reason when it is not one."""
    name = "stdin" if path == STDIN else repr(path)
    if path != STDIN and path.endswith(MSGPACK_EXTENSION):
        doc = _read_msgpack(path, name)
    else:
        text = read_text(path)
        if not text.strip():
            raise ViewerError(f"{name} is empty; give the .hatchet file a profile wrote"
                              + (", e.g. cat run.hatchet | proton-viewer -" if path == STDIN
                                 else ""))
        try:
            doc = deep.call(json.loads, text)
        except json.JSONDecodeError as exc:
            raise ViewerError(f"{name} is not a profile: not valid JSON ({exc}); the file may "
                              "be truncated, re-run the profile") from None
        except RecursionError:
            raise ViewerError(f"{name} nests deeper than the {deep.MAX_LEVELS:,} levels the "
                              "viewer reads") from None
    if not (isinstance(doc, list) and len(doc) >= 1 and _is_node(doc[0])):
        raise ViewerError(f"{name} is JSON but not a .hatchet profile; expected "
                          "[root node, device table] as proton writes")
    devices = doc[1] if len(doc) > 1 and isinstance(doc[1], dict) else {}
    root = doc[0]
    job = {k: v for k in JOB_KEYS if isinstance(v := root["frame"].get(k), (int, str))}
    _check_tree(root, name)
    _drop_launch_metadata(root)
    _expand_vectors(root)
    return root, devices, job


MSGPACK_EXTENSION = ".hatchet_msgpack"
"""A profile in MessagePack (Triton's Proton's output_format="hatchet_msgpack")."""


def _read_msgpack(path: str, name: str):
    from ..format_msgpack import MsgpackError, unpackb

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ViewerError(f"cannot read {name}: {exc.strerror or exc}; give the file a profile "
                          "wrote") from None
    try:
        return unpackb(data)
    except (MsgpackError, UnicodeDecodeError) as exc:
        raise ViewerError(f"{name} is not a profile: not valid MessagePack ({exc}); the file "
                          "may be truncated, re-run the profile") from None


def read_text(path: str) -> str:
    """The text of `path`, or of standard input for `-`."""
    if path == STDIN:
        if sys.stdin is None or sys.stdin.isatty():
            raise ViewerError("FILE is '-' but nothing is piped into stdin; e.g. "
                              "cat run.hatchet | proton-viewer -")
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        try:
            return data.decode("utf-8") if isinstance(data, bytes) else data
        except UnicodeDecodeError as exc:
            raise ViewerError(f"stdin is not a profile: not UTF-8 text ({exc}); pipe a "
                              ".hatchet file") from None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise ViewerError(f"no such file {path!r}; give the .hatchet file a profile wrote") from None
    except IsADirectoryError:
        raise ViewerError(f"{path!r} is a folder; give a .hatchet file") from None
    except PermissionError:
        raise ViewerError(f"cannot read {path!r}: permission denied; make it readable "
                          f"(chmod u+r {path}) or run as a user who may read it") from None
    except UnicodeDecodeError as exc:
        raise ViewerError(f"{path!r} is not a profile: not valid JSON ({exc}); the file may be "
                          "truncated, re-run the profile") from None
    except OSError as exc:
        raise ViewerError(f"cannot read {path!r}: {exc.strerror or exc}; check the file and "
                          "its disk") from None


def _add_inclusive_columns(gf, metrics: list[str]) -> None:
    """hatchet's update_inclusive_columns in one pass per metric (hatchet does pandas work per
    node: 26 s on 100k nodes). Same rule as subtree_sums."""
    import pandas as pd

    order = list(gf.graph.traverse(order="post"))
    df = gf.dataframe
    for metric in metrics:
        own = pd.to_numeric(df[metric], errors="coerce").to_dict()
        df[f"{metric} (inc)"] = pd.Series(subtree_sums(order, own))
    gf.inc_metrics = [f"{metric} (inc)" for metric in metrics]


def subtree_sums(post_order: list, own: dict) -> dict:
    """Node -> its own value (`own`, NaN where missing) plus its descendants', NaN only when
    all of those are NaN; `post_order`: the graph's nodes, children before parents."""
    inc: dict = {}
    for node in post_order:
        total = own.get(node, float("nan"))
        for child in node.children:
            value = inc[child]
            if value == value:  # not NaN
                total = value if total != total else total + value
        inc[node] = total
    return inc


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring = 2, 40  # a node's repr, not its subtree's


def _is_node(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("frame"), dict) and "name" in obj["frame"]


def _check_tree(root: dict, name: str) -> None:
    """Every node has frame.name, metrics and children; names and frame keys become text (a
    name may be any text; hatchet sorts frames, so mixed types could not be compared)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if _is_node(node):
            if node.get("metrics") is None:
                node["metrics"] = {}
            if node.get("children") is None:
                node["children"] = []
        if not _is_node(node) or not isinstance(node["metrics"], dict) \
                or not isinstance(node["children"], list):
            raise ViewerError(f"{name} has a malformed node {_SHORT.repr(node)[:80]}; each node "
                              "needs frame.name, metrics and children")
        frame = node["frame"]
        for key, value in frame.items():
            if not isinstance(value, str):
                frame[key] = "" if value is None else str(value)
        stack.extend(node["children"])


def _expand_vectors(root: dict) -> None:
    """A vector metric ("lens": [3, 5]) becomes one exclusive metric per element ("lens[0]",
    "lens[1]"), which every view can show, sort and export like any number."""
    stack = [root]
    while stack:
        node = stack.pop()
        metrics = node["metrics"]
        if any(isinstance(v, list) for v in metrics.values()):
            node["metrics"] = {
                k: v for key, value in metrics.items()
                for k, v in ([(f"{key}[{i}]", e) for i, e in enumerate(value)]
                             if isinstance(value, list) else [(key, value)])}
        stack.extend(node["children"])


def _drop_launch_metadata(root: dict) -> None:
    stack = [root]
    while stack:
        node = stack.pop()
        # Triton's newer Proton names it per kernel: __proton_launch_metadata:<kernel>
        node["children"] = [c for c in node["children"]
                            if not str(c["frame"]["name"]).startswith(LAUNCH_METADATA)]
        stack.extend(node["children"])
