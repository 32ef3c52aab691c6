"""Write a profile's data as a .hatchet file (the layout of proton/format.py) or a Chrome trace.

Takes plain data (metrics by path id, kernel events), never a session. A node carries its own
(exclusive) values; names ending in "(exc)" lose the suffix; the root carries a 0 for each
inclusive metric, which is how hatchet and both viewers tell inclusive metrics from exclusive ones.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from ..errors import SessionError
from ..format import CUDA, DEVICE_ID, DEVICE_TYPE, EXCLUSIVE, FRAME_TYPE, NO_LINES, ROOT_NAME
from ..report import warn
from .paths import ROOT, paths

FORMATS = {"tree": ("", "hatchet"), "trace": ("", "chrome_trace")}


def build(nodes: dict[int, dict[str, float]], devices: dict[str, dict],
          notes: dict[int, str] | None = None) -> list:
    """The JSON document for aggregated `nodes` (metrics by path id). `notes`: why a kernel's
    PC samples have no source lines, written as its frame's "no_lines" (hatchet keeps extra
    frame keys; both viewers read the file as before)."""
    notes = notes or {}
    frames = paths.frames
    children: dict[int, set[int]] = {}
    for pid in nodes:
        while pid != ROOT:
            parent = frames[pid].parent
            kids = children.setdefault(parent, set())
            if pid in kids:
                break
            kids.add(pid)
            pid = parent
    inclusive: set[str] = set()
    used_devices: set[str] = set()

    def node(pid: int) -> dict:
        out = {}
        for key, value in nodes.get(pid, {}).items():
            if key == DEVICE_ID:
                value = str(int(value))
                used_devices.add(value)
            elif key == DEVICE_TYPE:
                value = CUDA
            elif key.endswith(EXCLUSIVE):
                key = key[: -len(EXCLUSIVE)].strip()
            else:
                inclusive.add(key)
            out[key] = value
        kids = sorted(children.get(pid, ()), key=lambda k: (frames[k].name, frames[k].kind))
        frame = {"name": frames[pid].name, "type": FRAME_TYPE}
        if pid in notes:
            frame[NO_LINES] = notes[pid]
        return {"frame": frame, "metrics": out, "children": [node(k) for k in kids]}

    root = node(ROOT)
    for key in sorted(inclusive):  # sorted: the same profile always writes the same bytes
        root["metrics"].setdefault(key, 0)
    table = {d: devices[d] for d in sorted(used_devices) if d in devices}
    return [root, {CUDA: table} if table else {}]


def build_trace(events: list[tuple[int, Any]]) -> dict:
    """A Chrome trace (chrome://tracing, Perfetto) of (path id, kernel) events, a kernel being
    any record with name, device_id, stream_id, start and end (ns): one event per kernel, times
    in us from the first kernel, a process per device and a thread per stream, the call path in
    args."""
    t0 = min((rec.start for _, rec in events), default=0)
    stacks: dict[int, list[str]] = {}
    out = []
    for path, rec in sorted(events, key=lambda e: e[1].start):
        stack = stacks.get(path) or stacks.setdefault(path, [ROOT_NAME, *paths.names(path)])
        out.append({"name": stack[-1], "cat": "kernel", "ph": "X", "pid": rec.device_id,
                    "tid": rec.stream_id, "ts": (rec.start - t0) / 1e3,
                    "dur": (rec.end - rec.start) / 1e3, "args": {"call_stack": stack}})
    return {"displayTimeUnit": "us", "traceEvents": out}


def check_format(data: str, output_format: str) -> None:
    if output_format not in FORMATS[data]:
        raise SessionError(f"output_format={output_format!r} is not supported for "
                           f"data={data!r}; use {FORMATS[data][1]!r}")


def write(doc: Any, path: str) -> str:
    """Write a document built above to `path` and return the path written.

    When `path` cannot be written (a missing permission, a full disk), the profile goes to the
    temporary folder instead and a line on stderr says where: the data is never lost."""
    try:
        return _dump(doc, path)
    except OSError as exc:
        fallback = os.path.join(tempfile.mkdtemp(prefix="proton-"), os.path.basename(path))
        _dump(doc, fallback)
        warn(f"could not write {path} ({exc.strerror or exc}); wrote {fallback} instead")
        return fallback


def _dump(doc, path: str) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)  # a reader never sees half a file
    return path
