"""A profile's Chrome trace (chrome://tracing, Perfetto): its kernels, scopes and waits, laid out
as the installed Triton's Proton lays them out (triton_version asks which), from plain data.

Triton 3.6 (`lanes=False`): the kernels alone, on a process per device ("GPU 0") and a thread
per stream; without a GPU, the scopes on a process "host"; no metadata events.

Newer (Triton 3.9, `lanes=True`): one process, "Trace", whose threads are lanes, each named by a
"thread_name" event (ph "M") and sorted by its id: "CPU Thread N" (tid N: a thread's scope
entries, "scope" events, or "metric" events named "scope: <m, 1.000000>" for a scope given
metrics, the values as text in args), "Graph: Stream S" (100000 + S: the scopes a CUDA graph's
kernels were captured in, each as long as a replay's kernels under it ran), "GPU Stream S"
(200000 + S: the kernels); a flow "launch->kernel" (ph "s" then "f", one id) from the entry of
the scope that launched a kernel to the kernel (one per graph replay and stream). Without
kernels, the scope events alone (and waits), as Triton's: no lane is named.

Ours beside Triton's in both: a kernel's device on its lanes (a device's own range past
device 0), copies and sets on their stream ("cat": "memcpy"/"memset", args.bytes), waits (the
CPU blocked on the GPU, "cat": "wait") on the thread that waited, and OTHER_DATA (the job,
T0_NS), which lines up a job's ranks when proton-viewer --output trace merges their traces.
"""
from __future__ import annotations

import bisect
from typing import Any, Callable, NamedTuple, Sequence

from .. import triton_version
from ..format import BYTES, CAPTURED_AT, CYCLES, OTHER_DATA, ROOT_NAME, T0_NS
from .metrics import DeviceValue
from .paths import ROOT, SCOPE, paths

PID = 0
"""The lanes layout's one process."""
CPU_LANES, GRAPH_LANES, GPU_LANES = 0, 100_000, 200_000
"""Each kind of lane's first thread id (Triton's)."""
DEVICE_LANES = 1_000_000
"""A device's lanes lie this far past the previous device's (device 0's are Triton's)."""


class ScopeSpan(NamedTuple):
    """One entry of a scope, on the trace's clock (the kernels', else the host's)."""

    path: int
    start: int
    end: int
    thread: int
    """The thread that entered it, as threading.get_ident() names it."""
    metrics: dict | None = None
    """The metrics it was given (at its enter and exit), by name."""
    scope_id: int = 0
    """The entry's number in the process (its event's args.scope_id)."""


class WarpSpan(NamedTuple):
    """One warp's pass through one kernel scope (backend="instrumentation"), on the trace's
    clock."""

    scope: int
    """Path id of the scope (under its kernel's node)."""
    kernel: int
    """Path id of the kernel's node (its call path is the span's call_stack)."""
    kernel_name: str
    device: int
    sm: int
    cta: int
    warp: int
    origin_ns: int
    """The CTA's start on the trace's clock (whole ns: a float of ns since the epoch could
    not tell a cycle from the next)."""
    start_ns: float
    """The scope's start, after `origin_ns`."""
    dur_ns: float
    cycles: int
    launch: int
    """The launch's number in the session (spans are written launch by launch)."""
    init_ns: int
    """The CTA's %globaltimer at its start."""
    clock_khz: int
    """The SM clock the cycles were turned into time with."""
    end_warp: int = -1
    """An event ended in another warp (Triton 3.9's events): that warp; -1 when `warp` ended
    it. Such a pair is written as a flow between the two warps, not as a span."""
    final_ns: int = 0
    """The CTA's %globaltimer when it began writing its records out (pre-final)."""
    post_ns: int = 0
    """... and when it was done (post-final)."""
    event: bool = False
    """A Triton 3.9 event's pair (allocate_event), not a scope's: its trace lays them apart."""


Stack = Callable[[int], list]
"""A path id's call stack, ROOT first (memoized per trace)."""


def build_trace(events: Sequence[tuple], spans: Sequence[tuple] = (),
                job: dict | None = None, intra: Sequence[WarpSpan] = (), *,
                waits: Sequence[tuple[int, int, int, int]] = (),
                lanes: bool | None = None) -> dict:
    """The trace document of `events`, each (path id, kernel[, launch call's start]), a kernel
    being any record with name, device_id, stream_id, start and end (ns) (and correlation_id,
    config and graph_node, as cupti.attribution.KernelRecord); `spans`: scope entries
    (ScopeSpan, or its first four fields); `waits`: the CPU blocked on the GPU (path id,
    start, end, thread id; the kernels' clock); `intra`: kernel scopes
    (backend="instrumentation"), laid out as Triton's Proton writes them (see _intra_events).
    `lanes`: the layout (see the module's docstring; with `intra`, _intra_events under 3.6,
    _intra_events_39 newer); default: the installed Triton's.
    Times in us from the first event (ns with `intra`), the call path in each event's args;
    `baseTimeNanoseconds` (and OTHER_DATA's T0_NS) is the clock at time 0.

    Usage:
        doc = build_trace(session.events, session.spans, job.fields())
        writer.write(doc, "run.chrome_trace")
    """
    kernels = sorted(((e[0], e[1], e[2] if len(e) > 2 else None) for e in events),
                     key=lambda k: k[1].start)
    entries = sorted((ScopeSpan(*s) for s in spans), key=lambda s: (s.start, -s.end))
    t0 = min([rec.start for _, rec, _ in kernels[:1]] + [s.start for s in entries[:1]]
             + [wait[1] for wait in waits] + [span.origin_ns for span in intra], default=0)
    job = job or {}
    who = f"rank {job['rank']} " if job.get("rank") is not None else ""
    stacks: dict[int, list[str]] = {}

    def stack(path: int) -> list[str]:
        return stacks.get(path) or stacks.setdefault(path, [ROOT_NAME, *paths.names(path)])

    lanes = triton_version.after_3_6() if lanes is None else lanes
    out = (_lane_events if lanes else _process_events)(kernels, entries, waits, t0, who, stack)
    if intra:
        out += (_intra_events_39 if lanes else _intra_events)(intra, t0, who, stack)
    # the facts first: a later writer of the same name reads them from the file's head
    return {OTHER_DATA: {**job, T0_NS: t0}, "displayTimeUnit": "ns" if intra else "us",
            "baseTimeNanoseconds": t0, "traceEvents": out}


def _us(ns: int | float) -> float:
    return ns / 1e3


def _kernel_event(path: int, rec: Any, pid: Any, tid: Any, t0: int, stack: Stack) -> dict:
    names = stack(path)
    event = {"name": names[-1], "cat": "kernel", "ph": "X", "pid": pid, "tid": tid,
             "ts": _us(rec.start - t0), "dur": _us(rec.end - rec.start),
             "args": {"call_stack": names}}
    if _is_copy(rec):  # a copy or set: its bytes (cupti.records.CopyName)
        event["cat"] = names[-1].split()[0]
        event["args"][BYTES] = -rec.config
    return event


def _is_copy(rec: Any) -> bool:
    return getattr(rec, "config", 0) < 0


def _wait_event(wait: tuple, pid: Any, tid: Any, t0: int, stack: Stack) -> dict:
    path, start, end, _ = wait
    return {"name": "wait", "cat": "wait", "ph": "X", "pid": pid, "tid": tid,
            "ts": _us(start - t0), "dur": _us(end - start), "args": {"call_stack": stack(path)}}


def _process_events(kernels: list, spans: list[ScopeSpan], waits: Sequence[tuple], t0: int,
                    who: str, stack: Stack) -> list[dict]:
    """Triton 3.6's layout: processes named by their pid, a string ("GPU 0", "rank 1 GPU 0",
    "host"), which Perfetto and chrome://tracing show as the process's name; a thread per
    stream, and per host thread; no metadata events."""
    out = [_kernel_event(path, rec, f"{who}GPU {rec.device_id}", rec.stream_id, t0, stack)
           for path, rec, _ in kernels]
    out += [{"name": stack(s.path)[-1], "cat": "scope", "ph": "X", "pid": f"{who}host",
             "tid": s.thread, "ts": _us(s.start - t0), "dur": _us(s.end - s.start),
             "args": {"call_stack": stack(s.path)}} for s in spans]
    out += [_wait_event(w, f"{who}host", w[3], t0, stack) for w in sorted(waits, key=_second)]
    return out


def _second(item: tuple) -> Any:
    return item[1]


def _lane_events(kernels: list, spans: list[ScopeSpan], waits: Sequence[tuple], t0: int,
                 who: str, stack: Stack) -> list[dict]:
    """Triton 3.9's layout (see the module's docstring): lanes' metadata, the scopes' entries,
    waits, graph scope ranges, flows, kernels."""
    waits = sorted(waits, key=_second)
    threads: dict[int, int] = {}  # thread -> its CPU lane's number, in order of first event
    for _, thread in sorted([(s.start, s.thread) for s in spans]
                            + [(w[1], w[3]) for w in waits]):
        threads.setdefault(thread, len(threads))
    out = [_scope_event(s, CPU_LANES + threads[s.thread], t0, stack) for s in spans]
    out += [_wait_event(w, PID, CPU_LANES + threads[w[3]], t0, stack) for w in waits]
    if not kernels:  # as Triton's trace of scopes alone: no lanes named
        return out
    several = len({rec.device_id for _, rec, _ in kernels}) > 1

    def lane(base: int, rec: Any) -> int:
        return base + rec.device_id * DEVICE_LANES + rec.stream_id

    gpu = {lane(GPU_LANES, rec): f"GPU {rec.device_id} Stream {rec.stream_id}" if several
           else f"GPU Stream {rec.stream_id}" for _, rec, _ in kernels}
    ranges = _graph_ranges(kernels)
    graph = {lane(GRAPH_LANES, rec): f"Graph: Stream {rec.stream_id}"
             + (f" (GPU {rec.device_id})" if several else "") for rec, _, _, _ in ranges}
    meta = [{"ph": "M", "pid": PID, "tid": 0, "name": "process_name",
             "args": {"name": f"{who}Trace"}},
            {"ph": "M", "pid": PID, "tid": 0, "name": "process_sort_index",
             "args": {"sort_index": 0}}]
    named = [(CPU_LANES + n, f"CPU Thread {n}") for n in threads.values()]
    for tid, name in named + sorted(graph.items()) + sorted(gpu.items()):
        meta += [{"ph": "M", "pid": PID, "tid": tid, "name": "thread_name",
                  "args": {"name": name}},
                 {"ph": "M", "pid": PID, "tid": tid, "name": "thread_sort_index",
                  "args": {"sort_index": tid}}]
    out = meta + out
    out += [{"name": paths.frames[path].name, "cat": "scope", "ph": "X", "pid": PID,
             "tid": lane(GRAPH_LANES, rec), "ts": _us(start - t0), "dur": _us(end - start),
             "args": {"call_stack": stack(path)}} for rec, path, start, end in ranges]
    for number, (span, path, rec) in enumerate(_launches(kernels, spans), 1):
        for ph, tid, ts in (("s", CPU_LANES + threads[span.thread], span.start),
                            ("f", lane(GPU_LANES, rec), rec.start)):
            out.append({"name": "launch->kernel", "cat": "flow", "ph": ph, "pid": PID,
                        "tid": tid, "ts": _us(ts - t0), "id": number, "bp": "e"})
    out += [_kernel_event(path, rec, PID, lane(GPU_LANES, rec), t0, stack)
            for path, rec, _ in kernels]
    return out


def _scope_event(span: ScopeSpan, tid: int, t0: int, stack: Stack) -> dict:
    """A scope's entry: a "scope" event, or with metrics a "metric" event named after them."""
    names = stack(span.path)
    event = {"name": names[-1], "cat": "scope", "ph": "X", "pid": PID, "tid": tid,
             "ts": _us(span.start - t0), "dur": _us(span.end - span.start),
             "args": {"call_stack": names, "scope_id": span.scope_id}}
    if span.metrics:
        texts = {key: metric_text(span.metrics[key]) for key in sorted(span.metrics)}
        event["name"] = f"{names[-1]}: " + ", ".join(f"<{k}, {v}>" for k, v in texts.items())
        event["cat"] = "metric"
        event["args"]["metrics"] = texts
    return event


def metric_text(value: Any) -> str:
    """A metric's value as Triton's Proton writes it in a trace (C++'s std::to_string: six
    decimals for a float; a vector's items as a stream prints them: `[1,0.5,1e+20]`); a GPU
    tensor's copy read now."""
    if isinstance(value, DeviceValue):
        value = value.value()
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float):
        return f"{value:f}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) + "]"
    return str(value)


def _captured_scopes(path: int) -> tuple[int, ...]:
    """The scopes a graph kernel at `path` was captured in, from its CAPTURED_AT frame down
    (path ids); none for a kernel launched outside a graph."""
    frames, found = paths.frames, []
    node = frames[path].parent
    while node > ROOT:
        frame = frames[node]
        if frame.kind == SCOPE:
            found.append(node)
            if frame.name == CAPTURED_AT:
                return tuple(reversed(found))
        node = frame.parent
    return ()


def _graph_ranges(kernels: list) -> list[tuple[Any, int, int, int]]:
    """Each graph replay's captured scopes on its stream: (a kernel of it, scope path, first
    kernel's start, last kernel's end), in time order. A replay is one graph launch (its
    kernels share the launch's correlation id) on one device and stream."""
    captured: dict[int, tuple[int, ...]] = {}
    ranges: dict[tuple, list] = {}
    for path, rec, _ in kernels:
        scopes = captured.get(path)
        if scopes is None:
            scopes = captured[path] = _captured_scopes(path)
        for scope in scopes:
            key = (rec.correlation_id, rec.device_id, rec.stream_id, scope)
            seen = ranges.get(key)
            if seen is None:
                ranges[key] = [rec, scope, rec.start, rec.end]
            else:
                seen[2], seen[3] = min(seen[2], rec.start), max(seen[3], rec.end)
    return sorted((tuple(r) for r in ranges.values()), key=lambda r: (r[2], -r[3]))


def _launches(kernels: list, spans: list[ScopeSpan]) -> list[tuple[ScopeSpan, int, Any]]:
    """(scope entry, kernel path, kernel) for each kernel (not a copy) launched inside a
    scope's entry: the innermost scope above the kernel whose entry holds the launch call's
    start (a graph's replay: the scope it was launched in, once per replay and stream)."""
    by_path: dict[int, tuple[list[int], list[ScopeSpan]]] = {}
    for s in spans:  # in start order
        starts, entries = by_path.setdefault(s.path, ([], []))
        starts.append(s.start)
        entries.append(s)
    frames = paths.frames
    out, replays = [], set()
    for path, rec, launch in kernels:
        if launch is None or _is_copy(rec):
            continue
        # one launch call, one flow: a graph replay's kernels share its correlation id (the
        # sink's records carry no graph node to tell them by)
        replay = (rec.correlation_id, rec.device_id, rec.stream_id)
        if replay in replays:
            continue
        replays.add(replay)
        node = frames[path].parent
        while node > ROOT:
            found = by_path.get(node)
            if found is not None:
                i = bisect.bisect_right(found[0], launch) - 1
                if i >= 0 and found[1][i].end >= launch:
                    out.append((found[1][i], path, rec))
                    break
            node = frames[node].parent
    return out


def _intra_events(intra: Sequence[WarpSpan], t0: int, who: str, stack: Stack) -> list[dict]:
    """Kernel scopes as Triton's Proton lays them out: launch by launch, then by SM, CTA,
    warp and start; the event named after the scope, its category the kernel's name; a
    process per kernel, SM and CTA ("add_kernel Core0 CTA3", then " GPU 1" when the trace
    holds several devices) and a thread per warp and line ("warp 0 (line 1)": a scope inside
    another, or overlapping it, goes on the next free line, so a line's spans never overlap).
    args: the kernel's call path, the scope's cycles, the clock they were read at, the CTA's
    start, its post-final time and how long its write-out took (%globaltimer). An event ended
    in another warp is a flow, as in Triton's: an event of no length at its start
    ("flow_out") and one at its end ("flow_in") in the other warp, one "bind_id" for both."""
    out: list[dict] = []
    several = len({s.device for s in intra}) > 1
    # (warp's key, start after the origin, span, its part of a flow: 0 none, 1 out, 2 in)
    marks = []
    for s in intra:
        if s.end_warp < 0:
            marks.append(((s.launch, s.sm, s.cta, s.warp), s.start_ns, s, 0))
        else:
            marks.append(((s.launch, s.sm, s.cta, s.warp), s.start_ns, s, 1))
            marks.append(((s.launch, s.sm, s.cta, s.end_warp), s.start_ns + s.dur_ns, s, 2))
    marks.sort(key=lambda m: (m[0], m[1], -m[3]))
    group: tuple | None = None
    line_ends: list = []
    flows: dict[int, int] = {}
    for key, start, s, part in marks:
        if key != group:  # one CTA's warp: one origin
            group, line_ends = key, []
        dur = s.dur_ns if part == 0 else 0.0
        line = _free_line(line_ends, start, start + dur)
        event = _warp_event(s, s.kernel_name, key[3], line, start, dur, t0, who, several,
                            _cta_args(s, stack))
        if part:
            event["bind_id"] = flows.setdefault(id(s), len(flows) + 1)
            event["flow_out" if part == 1 else "flow_in"] = True
        out.append(event)
    return out


def _free_line(line_ends: list, start: float, end: float) -> int:
    """The first line of a warp free at `start` (`line_ends`: each line's last end), taken
    until `end`; a new line when none is."""
    line = next((i for i, last in enumerate(line_ends) if start >= last), None)
    if line is None:
        line_ends.append(end)
        return len(line_ends) - 1
    line_ends[line] = end
    return line


def _warp_event(s: WarpSpan, cat: str, warp: int, line: int, start: float, dur: float,
                t0: int, who: str, several: bool, args: dict) -> dict:
    """One event of a kernel scope's trace: on its kernel's, SM's and CTA's process, its
    warp's line, `start` after the CTA's origin (ns)."""
    where = f" GPU {s.device}" if several else ""
    return {"name": paths.frames[s.scope].name, "cat": cat, "ph": "X",
            "pid": f"{who}{s.kernel_name} Core{s.sm} CTA{s.cta}{where}",
            "tid": f"warp {warp} (line {line})",
            "ts": (s.origin_ns - t0 + start) / 1e3, "dur": dur / 1e3, "args": args}


def _cta_args(s: WarpSpan, stack: Stack) -> dict:
    """A scope's args: the kernel's call path, its cycles, the clock they were read at, and
    its CTA's times (%globaltimer)."""
    return {"call_stack": stack(s.kernel), CYCLES: int(s.cycles),
            "Frequency (MHz)": s.clock_khz / 1e3, "Init Time (ns)": int(s.init_ns),
            "Post Final Time (ns)": int(s.post_ns),
            "Finalization Time (ns)": max(int(s.post_ns) - int(s.final_ns), 0)}


COLORS = ("cq_build_passed", "cq_build_failed", "thread_state_iowait", "thread_state_running",
          "thread_state_runnable", "thread_state_unknown", "rail_response", "rail_idle",
          "rail_load", "cq_build_attempt_passed", "cq_build_attempt_failed")
"""The trace viewer's named colours Triton 3.9's kernel scope trace gives its scopes, in turn
("cname")."""


def _intra_events_39(intra: Sequence[WarpSpan], t0: int, who: str,
                     stack: Stack) -> list[dict]:
    """Kernel scopes as Triton 3.9's Proton lays them out: _intra_events' processes, threads
    and lines, each launch's CTAs by SM and CTA, and in each CTA its scopes (by warp and start;
    "cat" the kernel's name, args as _intra_events'), then its events in one warp ("cat":
    "async"), then its events ended in another warp, each a pair of "flow" events of no
    length on line 0 of both warps (flow_out, then flow_in; one bind_id, numbered across the
    trace). A warp's scopes and its events in it share one set of lines (each span on the
    first line free at its start), as Triton's writer places them. Every
    event has a "cname": the launch's scopes and events take COLORS in turn, in the order
    they start (by warp, then start: an outer scope before the scopes inside it, as the H200
    run's trace of Triton 3.9 colours them).
    An event's args: the kernel's call path and, ours beside Triton's, its cycles (a flow's
    ends have no length to show them)."""
    out: list[dict] = []
    several = len({s.device for s in intra}) > 1
    ctas: dict[tuple, list[WarpSpan]] = {}
    for s in intra:
        ctas.setdefault((s.launch, s.sm, s.cta), []).append(s)
    colors: dict[tuple[int, int], str] = {}  # (launch, scope) -> its colour
    taken: dict[int, int] = {}  # launch -> colours handed out
    bind = 0
    for (launch, _, _), spans in sorted(ctas.items()):
        scopes = sorted((s for s in spans if not s.event), key=lambda s: (s.warp, s.start_ns))
        same = sorted((s for s in spans if s.event and s.end_warp < 0),
                      key=lambda s: (s.warp, s.start_ns))
        cross = sorted((s for s in spans if s.end_warp >= 0),
                       key=lambda s: (s.warp, s.start_ns))
        for s in sorted(scopes + same + cross, key=lambda s: (s.warp, s.start_ns)):
            if (launch, s.scope) not in colors:
                n = taken[launch] = taken.get(launch, -1) + 1
                colors[launch, s.scope] = COLORS[n % len(COLORS)]
        lines: dict[int, int] = {}  # id(span) -> its line
        warp, line_ends = -1, list[float]()
        for s in sorted(scopes + same, key=lambda s: (s.warp, s.start_ns)):
            if s.warp != warp:
                warp, line_ends = s.warp, []
            lines[id(s)] = _free_line(line_ends, s.start_ns, s.start_ns + s.dur_ns)
        for s in scopes + same:
            args = _cta_args(s, stack) if not s.event else {
                "call_stack": stack(s.kernel), CYCLES: int(s.cycles)}
            event = _warp_event(s, "async" if s.event else s.kernel_name, s.warp, lines[id(s)],
                                s.start_ns, s.dur_ns, t0, who, several, args)
            out.append({"cname": colors[launch, s.scope], **event})
        for s in cross:
            bind += 1
            for warp, at, end in ((s.warp, s.start_ns, "flow_out"),
                                  (s.end_warp, s.start_ns + s.dur_ns, "flow_in")):
                event = _warp_event(s, "flow", warp, 0, at, 0.0, t0, who, several,
                                    {"call_stack": stack(s.kernel), CYCLES: int(s.cycles)})
                out.append({"cname": colors[launch, s.scope], **event, "bind_id": bind,
                            end: True})
    return out


