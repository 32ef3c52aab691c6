"""Read a .hatchet file (ours or Triton's Proton's) into a hatchet GraphFrame."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..format import LAUNCH_METADATA
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


def load(path: str) -> Profile:
    """Parse and check `path`; raise ViewerError with a one-line reason when it is not a profile."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ViewerError(f"no such file {path!r}; give the .hatchet file a profile wrote") from None
    except IsADirectoryError:
        raise ViewerError(f"{path!r} is a folder; give a .hatchet file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ViewerError(f"{path!r} is not a profile: not valid JSON ({exc}); the file may be "
                          "truncated, re-run the profile") from None
    if not (isinstance(doc, list) and len(doc) >= 1 and _is_node(doc[0])):
        raise ViewerError(f"{path!r} is JSON but not a .hatchet profile; expected "
                          "[root node, device table] as proton writes")
    devices = doc[1] if len(doc) > 1 and isinstance(doc[1], dict) else {}
    root = doc[0]
    _check_tree(root, path)
    _drop_launch_metadata(root)
    import hatchet as ht  # heavy (pandas, matplotlib): only once a file is known good

    gf = ht.GraphFrame.from_literal([root])
    inclusive = sorted(m for m in root.get("metrics", {}) if "(inc)" not in m)
    _add_inclusive_columns(gf, [m for m in inclusive if m in gf.dataframe])
    exclusive = [c for c in gf.dataframe.columns
                 if c != "name" and c not in inclusive and not c.endswith(" (inc)")]
    return Profile(gf, inclusive, exclusive, devices)


def _add_inclusive_columns(gf, metrics: list[str]) -> None:
    """hatchet's update_inclusive_columns in one pass per metric (hatchet does pandas work per
    node: 26 s on 100k nodes). Same rule: a node's "X (inc)" is the sum of its own X and its
    children's, NaN only when all of those are NaN."""
    import pandas as pd

    order = list(gf.graph.traverse(order="post"))
    df = gf.dataframe
    for metric in metrics:
        own = pd.to_numeric(df[metric], errors="coerce").to_dict()
        inc: dict = {}
        for node in order:
            total = own.get(node, float("nan"))
            for child in node.children:
                value = inc[child]
                if value == value:  # not NaN
                    total = value if total != total else total + value
            inc[node] = total
        df[f"{metric} (inc)"] = pd.Series(inc)
    gf.inc_metrics = [f"{metric} (inc)" for metric in metrics]


def _is_node(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("frame"), dict) and "name" in obj["frame"]


def _check_tree(root: dict, path: str) -> None:
    stack = [root]
    while stack:
        node = stack.pop()
        if not _is_node(node) or not isinstance(node.get("metrics", {}), dict) \
                or not isinstance(node.get("children", []), list):
            raise ViewerError(f"{path!r} has a malformed node {str(node)[:80]!r}; each node "
                              "needs frame.name, metrics and children")
        node.setdefault("metrics", {})
        node.setdefault("children", [])
        stack.extend(node["children"])


def _drop_launch_metadata(node: dict) -> None:
    node["children"] = [c for c in node["children"] if c["frame"]["name"] != LAUNCH_METADATA]
    for child in node["children"]:
        _drop_launch_metadata(child)
