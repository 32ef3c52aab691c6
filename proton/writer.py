"""Write a session as a .hatchet file, in the layout Triton's Proton writes (see DESIGN.md).

`[root node, device table]`; every frame has type "function"; a node carries its own (exclusive)
values; names ending in "(exc)" lose the suffix; the root carries a 0 for each inclusive metric,
which is how hatchet and both viewers tell inclusive metrics from exclusive ones.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import TYPE_CHECKING

from . import metrics as m
from .errors import SessionError
from .paths import ROOT, paths
from .pc_samples import NO_LINES

if TYPE_CHECKING:
    from .attribution import KernelRecord
    from .session import Session

FORMATS = {"tree": ("", "hatchet"), "trace": ("", "chrome_trace")}
_NOT_SUMMED = {m.DEVICE_ID, m.DEVICE_TYPE}


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
            if key == m.DEVICE_ID:
                value = str(int(value))
                used_devices.add(value)
            elif key == m.DEVICE_TYPE:
                value = "CUDA"
            elif key.endswith(m.EXCLUSIVE):
                key = key[: -len(m.EXCLUSIVE)].strip()
            else:
                inclusive.add(key)
            out[key] = value
        kids = sorted(children.get(pid, ()), key=lambda k: (frames[k].name, frames[k].kind))
        frame = {"name": frames[pid].name, "type": "function"}
        if pid in notes:
            frame[NO_LINES] = notes[pid]
        return {"frame": frame, "metrics": out, "children": [node(k) for k in kids]}

    root = node(ROOT)
    for key in sorted(inclusive):  # sorted: the same profile always writes the same bytes
        root["metrics"].setdefault(key, 0)
    table = {d: devices[d] for d in sorted(used_devices) if d in devices}
    return [root, {"CUDA": table} if table else {}]


def build_trace(events: list[tuple[int, "KernelRecord"]]) -> dict:
    """A Chrome trace (chrome://tracing, Perfetto): one event per kernel, times in us from the
    first kernel, a process per device and a thread per stream, the call path in args."""
    t0 = min((rec.start for _, rec in events), default=0)
    stacks: dict[int, list[str]] = {}
    out = []
    for path, rec in sorted(events, key=lambda e: e[1].start):
        stack = stacks.get(path) or stacks.setdefault(path, ["ROOT", *paths.names(path)])
        out.append({"name": stack[-1], "cat": "kernel", "ph": "X", "pid": rec.device_id,
                    "tid": rec.stream_id, "ts": (rec.start - t0) / 1e3,
                    "dur": (rec.end - rec.start) / 1e3, "args": {"call_stack": stack}})
    return {"displayTimeUnit": "us", "traceEvents": out}


def check_format(data: str, output_format: str) -> None:
    if output_format not in FORMATS[data]:
        raise SessionError(f"output_format={output_format!r} is not supported for "
                           f"data={data!r}; use {FORMATS[data][1]!r}")


def write(session: "Session", output_format: str, devices: dict[str, dict]) -> str:
    """Write a closed `session` to its file and return the path written.

    When its path cannot be written (a missing permission, a full disk), the profile goes to the
    temporary folder instead and a line on stderr says where: the data is never lost."""
    check_format(session.data, output_format)
    if session.data == "trace":
        doc = build_trace(session.events)
    else:
        doc = build(session.nodes, devices, session.notes)
    try:
        return _dump(doc, session.path)
    except OSError as exc:
        fallback = os.path.join(tempfile.mkdtemp(prefix="proton-"), os.path.basename(session.path))
        _dump(doc, fallback)
        print(f"proton: could not write {session.path} ({exc.strerror or exc}); "
              f"wrote {fallback} instead", file=sys.stderr)
        return fallback


def _dump(doc, path: str) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)  # a reader never sees half a file
    return path
