"""A job's per-rank Chrome traces (proton -d trace) as one trace for Perfetto: every rank's GPUs
and host on their own process tracks ("rank 1 GPU 1"), shifted onto one clock. A process is
named by its "process_name" event, else by its pid when that is text (as the traces we and
Triton's Proton write name them).

Each trace records the clock at its time 0 (format.T0_NS). CUPTI's timestamps, and the host
clock without a GPU, are one clock for all processes of a host, so a host's ranks line up to
the microsecond; ranks on different hosts are as close as the hosts' clocks. A flow's id (a
launch->kernel arrow, a kernel scope's event handed between warps) is its file's own: each
file's ids are moved apart from the others', so no arrow joins two ranks.
"""
from __future__ import annotations

import json
import math

from ..format import JOB_KEYS, OTHER_DATA, T0_NS, TRACE_EXTENSION
from .errors import ViewerError
from .reader import STDIN, _job_value, read_text


def merge_traces(paths: list[str]) -> tuple[str, list[str], list[str]]:
    """The merged trace as JSON text, one line per file that could not be read, and notes."""
    from .ranks import expand, not_one_job, rank_of

    traces, errors = [], []
    for place, path in enumerate(expand(paths, TRACE_EXTENSION)):
        try:
            traces.append((*_read_trace(path), path, place))
        except ViewerError as exc:
            errors.append(str(exc))
    if not traces:
        raise ViewerError("no trace could be read: " + "; ".join(errors))
    why = not_one_job([(path, facts) for _, facts, path, _ in traces]) if len(traces) > 1 \
        else None
    if why:
        raise ViewerError(f"the {len(traces)} traces are not one job's ranks: {why}; give "
                          "the NAME.rank<R>.chrome_trace files of one run")
    starts = [facts[T0_NS] for _, facts, _, _ in traces if isinstance(facts.get(T0_NS), int)]
    t0 = min(starts, default=0)
    unaligned = [path for _, facts, path, _ in traces if not isinstance(facts.get(T0_NS), int)]
    notes = []
    if starts and unaligned:  # written by Triton's Proton or an older Proton: time 0 unknown
        notes.append(f"{', '.join(unaligned)} record no t0_ns (written by another profiler?): "
                      "merged as they are, not aligned with the others")
    out: list[dict] = []
    ranks = []
    for events, facts, path, place in sorted(traces, key=lambda t: rank_of(t[2], t[1]) or 0):
        rank = rank_of(path, facts)
        rank = place if rank is None else rank  # a lone trace need not be a rank's
        ranks.append(rank)
        shift = (facts[T0_NS] - t0) / 1e3 if isinstance(facts.get(T0_NS), int) else 0.0
        pids: dict = {}  # this file's process id -> the merged one
        named = set()
        for event in events:
            pid = event.get("pid", 0)
            pid = pid if isinstance(pid, (int, float, str)) else str(pid)  # a key of pids
            new = pids.get(pid)
            if new is None:
                new = pids[pid] = len(pids) + 1 + 1000 * len(ranks)
                out.append({"name": "process_sort_index", "ph": "M", "pid": new,
                            "args": {"sort_index": new}})
            event = dict(event, pid=new)
            for key in _FLOW_IDS.intersection(event):
                event[key] = _own_id(event[key], len(ranks))
            if event.get("ph") == "M" and event.get("name") == "process_name":
                args = event.get("args")
                label = str(args.get("name", pid) if isinstance(args, dict) else pid)
                if not label.startswith("rank "):
                    label = f"rank {rank} {label}"
                event["args"] = {"name": label}
                named.add(new)
            elif "ts" in event and isinstance(event["ts"], (int, float)):
                try:
                    ts = event["ts"] + shift
                except OverflowError:  # a time past any float: kept as the file has it
                    ts = event["ts"]
                event["ts"] = event["ts"] if isinstance(ts, float) and not math.isfinite(ts) \
                    else ts
            out.append(event)
        for pid, new in pids.items():
            if new not in named:  # ours and Triton's name a process by its pid ("GPU 0")
                label = pid if isinstance(pid, str) else f"process {pid}"
                if not label.startswith("rank "):
                    label = f"rank {rank} {label}"
                out.append({"name": "process_name", "ph": "M", "pid": new,
                            "args": {"name": label}})
    doc = {OTHER_DATA: {"ranks": ranks, T0_NS: t0}, "displayTimeUnit": "us", "traceEvents": out}
    return json.dumps(doc, allow_nan=False), errors, notes


_FLOW_IDS = {"id", "bind_id"}
"""The keys that tie a flow's events together (Chrome's "s"/"f" events; flow_out/flow_in)."""


def _own_id(value, file: int):
    """A flow id of the `file`th trace (from 1), apart from every other file's ids."""
    if type(value) is int and 0 <= value < 1 << 32:
        return (file << 32) | value
    return f"{file}:{value}"


def _read_trace(path: str) -> tuple[list, dict]:
    name = "stdin" if path == STDIN else repr(path)
    try:
        doc = json.loads(read_text(path), parse_constant=lambda _: None, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise ViewerError(f"{name} is not a trace: not valid JSON ({exc}); the file may be "
                          "truncated, re-run the profile") from None
    except (RecursionError, ValueError):  # nested past Python's limit; an int of 4,300+ digits
        raise ViewerError(f"{name} is not a trace: it nests too deep or holds a number too long "
                          "to read") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ViewerError(f"{name} is not a Chrome trace (no traceEvents list); --output trace "
                          "merges the .chrome_trace files of proton -d trace")
    facts = doc.get(OTHER_DATA)
    facts = facts if isinstance(facts, dict) else {}
    # the writing process, as the tree reader keeps it: a list or map there is no rank's
    facts = {k: v for k, v in facts.items() if k not in JOB_KEYS or _job_value(v)}
    if not _clock(facts.get(T0_NS)):
        facts.pop(T0_NS, None)  # merged as it is, as a trace without one
    return events, facts


def _finite(text: str):
    """A number of the trace as JSON can hold it: NaN and the infinities (which JSON has no
    words for: Perfetto and json.loads elsewhere refuse the merged trace) become null."""
    value = float(text)
    return value if math.isfinite(value) else None


def _clock(value) -> bool:
    """A host clock in ns: a whole number a 64-bit clock can hold."""
    return type(value) is int and 0 <= value < 1 << 63
