"""A job's per-rank Chrome traces (proton -d trace) as one trace for Perfetto: every rank's GPUs
and host on their own process tracks ("rank 1 GPU 1"), shifted onto one clock. A process is
named by its "process_name" event, else by its pid when that is text (as the traces we and
Triton's Proton write name them).

Each trace records the clock at its time 0 (format.T0_NS). CUPTI's timestamps, and the host
clock without a GPU, are one clock for all processes of a host, so a host's ranks line up to
the microsecond; ranks on different hosts are as close as the hosts' clocks. A flow's id (a
launch->kernel arrow, a kernel scope's event handed between warps) is its file's own: each
file's ids are moved apart from the others', so no arrow joins two ranks.

Each file is read as text and gone through one event at a time (json's raw_decode at each
event; any other value of the document whole), twice: first to check every file whole and
take its facts, then to write the merged events as they come, a batch at a time. A bad file is
left out, never cut in half, and memory is the files' text plus one event (and an entry per
process): the merged trace is never held whole. Measured (docs/safety.md): 28 MB of 800,000
events, each its own process, took 1.57 GB and 11.9 s held whole, 238 MB and 9.6 s so.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from json.decoder import JSONDecodeError
from typing import Callable, Iterator

from ..format import JOB_KEYS, OTHER_DATA, T0_NS, TRACE_EXTENSION
from .errors import ViewerError
from .reader import STDIN, _job_value, read_text


def merge_traces(paths: list[str]) -> tuple[str, list[str], list[str]]:
    """The merged trace as JSON text, one line per file that could not be read, and notes
    (write_merged, held whole: for tests and scripts; the command streams it)."""
    pieces: list[str] = []
    errors, notes = write_merged(paths, pieces.append)
    return "".join(pieces), errors, notes


def write_merged(paths: list[str], write: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """Write the merged trace as JSON text to `write`, in pieces of about 1 MB; return one
    line per file that could not be read, and notes. Nothing is written when no file can be
    read (ViewerError), or when the files are not one job's ranks.

    Usage:
        errors, notes = write_merged(["run.rank0.chrome_trace", "run.rank1.chrome_trace"],
                                     sys.stdout.write)
    """
    from .ranks import expand, not_one_job, rank_of

    traces, errors = [], []
    for place, path in enumerate(expand(paths, TRACE_EXTENSION)):
        try:
            traces.append(_read_trace(path, place))
        except ViewerError as exc:
            errors.append(str(exc))
    if not traces:
        raise ViewerError("no trace could be read: " + "; ".join(errors))
    why = not_one_job([(t.path, t.facts) for t in traces]) if len(traces) > 1 else None
    if why:
        raise ViewerError(f"the {len(traces)} traces are not one job's ranks: {why}; give "
                          "the NAME.rank<R>.chrome_trace files of one run")
    starts = [t.facts[T0_NS] for t in traces if T0_NS in t.facts]
    t0 = min(starts, default=0)
    unaligned = [t.path for t in traces if T0_NS not in t.facts]
    notes = []
    if starts and unaligned:  # written by Triton's Proton or an older Proton: time 0 unknown
        notes.append(f"{', '.join(unaligned)} record no t0_ns (written by another profiler?): "
                     "merged as they are, not aligned with the others")
    traces.sort(key=lambda t: rank_of(t.path, t.facts) or 0)
    ranks = []
    for t in traces:
        rank = rank_of(t.path, t.facts)
        ranks.append(t.place if rank is None else rank)  # a lone trace need not be a rank's
    out = _Pieces(write)
    out.text(f'{{"{OTHER_DATA}": {json.dumps({"ranks": ranks, T0_NS: t0})}, '
             '"displayTimeUnit": "us", "traceEvents": [')
    processes = 0  # merged process ids, one count over all files: no two files share one
    for number, (trace, rank) in enumerate(zip(traces, ranks), 1):
        shift = (trace.facts[T0_NS] - t0) / 1e3 if T0_NS in trace.facts else 0.0
        pids: dict = {}  # this file's process id -> the merged one
        named = set()
        for event in _events(_At(trace.text, trace.events)):
            pid = event.get("pid", 0)
            pid = pid if isinstance(pid, (int, float, str)) else str(pid)  # a key of pids
            new = pids.get(pid)
            if new is None:
                processes += 1
                new = pids[pid] = processes
                out.event({"name": "process_sort_index", "ph": "M", "pid": new,
                           "args": {"sort_index": new}})
            event["pid"] = new
            for key in _FLOW_IDS.intersection(event):
                event[key] = _own_id(event[key], number)
            if event.get("ph") == "M" and event.get("name") == "process_name":
                args = event.get("args")
                label = str(args.get("name", pid) if isinstance(args, dict) else pid)
                if not label.startswith("rank "):
                    label = f"rank {rank} {label}"
                event["args"] = {"name": label}
                named.add(new)
            elif "ts" in event and isinstance(event["ts"], (int, float)):
                event["ts"] = _shifted(event["ts"], shift)
            out.event(event)
        for pid, new in pids.items():
            if new not in named:  # ours and Triton's name a process by its pid ("GPU 0")
                label = pid if isinstance(pid, str) else f"process {pid}"
                if not label.startswith("rank "):
                    label = f"rank {rank} {label}"
                out.event({"name": "process_name", "ph": "M", "pid": new,
                           "args": {"name": label}})
    out.text("]}")
    out.flush()
    return errors, notes


def _shifted(ts, shift: float):
    """A time moved onto the merged clock; one past any float is kept as the file has it."""
    try:
        moved = ts + shift
    except OverflowError:
        return ts
    return ts if isinstance(moved, float) and not math.isfinite(moved) else moved


class _Pieces:
    """The merged trace's text, handed on in pieces: events encoded a batch at a time."""

    BATCH = 4096

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write, self.first = write, True
        self.batch: list[dict] = []

    def text(self, text: str) -> None:
        self.flush()
        self.write(text)

    def event(self, event: dict) -> None:
        self.batch.append(event)
        if len(self.batch) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            # "[e1, e2, ...]" less its brackets; NaN and the infinities were read as null
            # (_finite), and the encoder refuses any that came another way
            text = _ENCODER.encode(self.batch)[1:-1]
            self.write(text if self.first else ", " + text)
            self.batch, self.first = [], False


_ENCODER = json.JSONEncoder(allow_nan=False)


_FLOW_IDS = {"id", "bind_id"}
"""The keys that tie a flow's events together (Chrome's "s"/"f" events; flow_out/flow_in)."""


def _own_id(value, file: int):
    """A flow id of the `file`th trace (from 1), apart from every other file's ids."""
    if type(value) is int and 0 <= value < 1 << 32:
        return (file << 32) | value
    return f"{file}:{value}"


@dataclass(slots=True)
class _Trace:
    """A trace file read and checked: its text, where its events start, its facts."""

    path: str
    text: str
    events: int
    """The index of the traceEvents list's "[" in text."""
    facts: dict
    """The writing process (format.JOB_KEYS) and T0_NS, those of the kinds they should be."""
    place: int
    """Its place among the files given (the rank of a lone trace)."""


def _read_trace(path: str, place: int) -> _Trace:
    name = "stdin" if path == STDIN else repr(path)
    text = read_text(path)
    try:
        events, facts = _top(text)
    except JSONDecodeError as exc:
        raise ViewerError(f"{name} is not a trace: not valid JSON ({exc}); the file may be "
                          "truncated, re-run the profile") from None
    except (RecursionError, ValueError):  # nested past Python's limit; an int of 4,300+ digits
        raise ViewerError(f"{name} is not a trace: it nests too deep or holds a number too long "
                          "to read") from None
    if events is None:
        raise ViewerError(f"{name} is not a Chrome trace (no traceEvents list); --output trace "
                          "merges the .chrome_trace files of proton -d trace")
    return _Trace(path, text, events, facts, place)


def _finite(text: str):
    """A number of the trace as JSON can hold it: NaN and the infinities (which JSON has no
    words for: Perfetto and json.loads elsewhere refuse the merged trace) become null."""
    value = float(text)
    return value if math.isfinite(value) else None


_DECODER = json.JSONDecoder(parse_constant=lambda _: None, parse_float=_finite)
_SPACE = re.compile(r"[ \t\n\r]*")


class _At:
    """A place in a document's text, moved on as it is read."""

    __slots__ = ("text", "i")

    def __init__(self, text: str, i: int) -> None:
        self.text, self.i = text, i

    def space(self) -> None:
        self.i = _SPACE.match(self.text, self.i).end()  # type: ignore[union-attr]

    def expect(self, mark: str, what: str) -> None:
        if not self.text.startswith(mark, self.i):
            raise JSONDecodeError(f"Expecting {what}", self.text, self.i)
        self.i += 1
        self.space()

    def value(self):
        """The value here, decoded whole."""
        value, self.i = _DECODER.raw_decode(self.text, self.i)
        return value


def _members(at: _At) -> Iterator[str]:
    """Each key of the object at at.i ("{"), with at.i at its value: the reader moves at.i
    past the value before the next. at.i ends past the "}". (The document's top level: its
    traceEvents are read one at a time.)"""
    at.expect("{", "'{'")
    if at.text.startswith("}", at.i):
        at.i += 1
        return
    while True:
        if not at.text.startswith('"', at.i):
            raise JSONDecodeError("Expecting property name enclosed in double quotes",
                                  at.text, at.i)
        key = at.value()  # a string: it starts with '"'
        at.space()
        at.expect(":", "':' delimiter")
        yield key
        at.space()
        if at.text.startswith("}", at.i):
            at.i += 1
            return
        at.expect(",", "',' delimiter")


_AFTER_ITEM = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")


def _events(at: _At) -> Iterator:
    """The items of the list at at.i, decoded one at a time; at.i ends past the list. (Once
    per event, twice per file: the delimiters are one regular expression's match.)"""
    text, decode, after = at.text, _DECODER.raw_decode, _AFTER_ITEM.match
    at.expect("[", "'['")
    if text.startswith("]", at.i):
        at.i += 1
        return
    i = at.i
    while True:
        event, i = decode(text, i)
        yield event
        found = after(text, i)
        if found is None:
            at.i = i
            at.space()
            raise JSONDecodeError("Expecting ',' delimiter", text, at.i)
        i = found.end()
        if found[1] == "]":
            at.i = i
            return


def _top(text: str) -> tuple[int | None, dict]:
    """Check the whole document (JSONDecodeError where it is not JSON; RecursionError or
    ValueError past Python's limits) and return where its traceEvents list starts (None when
    it has none, or one that is not all objects) and its facts; the last of a key counts, as
    in json.loads. The events are decoded one at a time, every other value whole."""
    at = _At(text, 0)
    at.space()
    events: int | None = None
    facts: dict = {}
    if not text.startswith("{", at.i):
        at.value()
    else:
        for key in _members(at):
            if key == "traceEvents" and text.startswith("[", at.i):
                start = at.i
                others = sum(not isinstance(event, dict) for event in _events(at))
                events = None if others else start
            else:
                value = at.value()
                events = None if key == "traceEvents" else events
                facts = _facts(value) if key == OTHER_DATA else facts
    at.space()
    if at.i != len(text):
        raise JSONDecodeError("Extra data", text, at.i)
    return events, facts


def _facts(found) -> dict:
    """The writing process, as the tree reader keeps it (a list or map there is no rank's),
    and T0_NS when it is a host clock."""
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items()
            if (k in JOB_KEYS and _job_value(v)) or (k == T0_NS and _clock(v))}


def _clock(value) -> bool:
    """A host clock in ns: a whole number a 64-bit clock can hold."""
    return type(value) is int and 0 <= value < 1 << 63
