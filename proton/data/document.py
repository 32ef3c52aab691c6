"""A profile's data as the .hatchet document (the layout of proton/format.py): plain data
(metrics by path id), never a session. A node carries its own (exclusive) values; names ending
in "(exc)" or "(pty)" lose the suffix; the root carries a 0 for each inclusive metric, which is
how hatchet and both viewers tell inclusive metrics from exclusive ones. Vectors (lists) are
written as JSON arrays, always exclusive. writer.py writes the document to its file.
"""
from __future__ import annotations

import math
from typing import Any

from ..format import (CHILDREN_KEY, CUDA, DEVICE_ID, DEVICE_TYPE, EXCLUSIVE, FRAME_KEY,
                      FRAME_TYPE, METRICS_KEY, NAME_KEY, NO_LINES, PROPERTY, TYPE_KEY,
                      WARP_TIMELINE, with_job)
from ..report import warn
from .metrics import DeviceValue, base_name, real_number
from .paths import ROOT, paths


def build(nodes: dict[int, dict[str, float]], devices: dict[str, dict],
          notes: dict[int, str] | None = None, job: dict | None = None,
          own: dict[int, dict[str, int]] | None = None,
          timelines: dict[int, str] | None = None) -> list:
    """The JSON document for aggregated `nodes` (metrics by path id). `notes`: why a kernel's
    PC samples have no source lines, written as its frame's "no_lines" (hatchet keeps extra
    frame keys; both viewers read the file as before). `job`: the writing process (job.Job's
    fields), written as the root's JOB_KEY. `own`: more metrics of a node's own, written as
    exclusive ones (a kernel's launch configuration, its SASS instruction mix). `timelines`:
    a kernel's warp timeline (JSON text), its frame's WARP_TIMELINE. Built without
    recursion: a tree may be as deep as the program's scopes."""
    notes = notes or {}
    own = own or {}
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
    dropped: set[str] = set()

    def number(key: str, value: Any) -> int | float | None:
        try:
            return finite_or_none(real_number(value))
        except (TypeError, ValueError, OverflowError):  # checked when given; a bug costs one value
            dropped.add(key)
            return None

    def node(pid: int) -> dict:
        out: dict[str, Any] = {}
        value: Any
        for key, value in nodes.get(pid, {}).items():
            if key == DEVICE_ID:
                value = str(int(value))
                used_devices.add(value)
            elif key == DEVICE_TYPE:
                value = CUDA
            else:
                if isinstance(value, DeviceValue):
                    value = value.value()  # GPU tensors: read now, once
                if isinstance(value, list) or key.endswith((EXCLUSIVE, PROPERTY)):
                    key = base_name(key)  # a vector is its node's own too, never summed up
                else:
                    inclusive.add(key)
                if isinstance(value, list):
                    value = [number(key, v) for v in value]
                elif not isinstance(value, str):  # text: a property's or exclusive metric's
                    value = number(key, value)
            out[key] = value
        out.update(own.get(pid, ()))
        frame = {NAME_KEY: frames[pid].name, TYPE_KEY: FRAME_TYPE}
        if pid in notes:
            frame[NO_LINES] = notes[pid]
        if timelines and pid in timelines:
            frame[WARP_TIMELINE] = timelines[pid]
        return {FRAME_KEY: frame, METRICS_KEY: out, CHILDREN_KEY: []}

    root = node(ROOT)
    if job:
        root = with_job(root, dict(job))
    todo = [(ROOT, root)]
    while todo:
        pid, out = todo.pop()
        for kid in sorted(children.get(pid, ()), key=lambda k: (frames[k].name, frames[k].kind)):
            child = node(kid)
            out[CHILDREN_KEY].append(child)
            todo.append((kid, child))
    for key in sorted(inclusive):  # sorted: the same profile always writes the same bytes
        root[METRICS_KEY].setdefault(key, 0)
    if dropped:
        warn(f"metrics {', '.join(sorted(dropped))} held values that are not real numbers; "
             "written as null")
    table = {d: devices[d] for d in sorted(used_devices) if d in devices}
    return [root, {CUDA: table} if table else {}]


def finite_or_none(value: int | float) -> int | float | None:
    """JSON has no NaN or infinity: such a metric is written as null (the viewer shows it
    blank); every other number as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
