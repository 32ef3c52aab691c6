"""Waits (the CPU blocked in synchronizing calls) and GPU idle time per scope, on the CPU:
the interval math of runtime/idle.py against a brute-force timeline, and the synchronizing
calls' callbacks replayed through the C launch log and its Python twin."""
from __future__ import annotations

import ctypes
import json
import random
import threading

import numpy as np
import pytest

from proton.format import GPU_IDLE, SCOPE_WALL, SYNC_COUNT, SYNC_TIME
from proton.runtime.idle import IdleTracker


def _brute(entries, kernels):
    """(path, wall, idle) per entry from a 1 ns timeline."""
    end = max([e for _, _, e in entries] + [e for _, e in kernels] + [1])
    busy = np.zeros(end + 1, dtype=bool)
    for s, e in kernels:
        busy[s:e] = True
    return [(p, e - s, int((~busy[s:e]).sum())) for p, s, e in entries]


def _sums(judged_list):
    out: dict[int, list[int]] = {}
    for j in judged_list:
        for p, w, i in zip(j.paths.tolist(), j.walls.tolist(), j.idles.tolist()):
            got = out.setdefault(p, [0, 0])
            got[0] += w
            got[1] += i
    return out


def test_one_stream_idle_is_the_scope_time_no_kernel_ran():
    t = IdleTracker()
    t.enter(1, 0)
    t.add(np.array([100, 500]), np.array([300, 600]))
    t.exit(1000)
    j = t.advance(2000)
    assert (j.paths.tolist(), j.walls.tolist(), j.idles.tolist()) == ([1], [1000], [700])


def test_two_streams_count_their_union_once():
    t = IdleTracker()
    t.enter(1, 0)
    t.add(np.array([100, 300]), np.array([400, 600]))  # overlapping: two streams
    t.exit(1000)
    assert t.advance(2000).idles.tolist() == [500]


def test_nested_scopes_each_judge_their_own_entry():
    t = IdleTracker()
    t.enter(1, 0)
    t.enter(2, 200)
    t.add(np.array([100, 400]), np.array([300, 800]))
    t.exit(500)
    t.exit(1000)
    got = _sums([t.advance(5000)])
    assert got == {2: [300, 100], 1: [1000, 400]}


def test_records_that_come_late_and_out_of_order_give_the_exact_idle_time():
    """Kernels come in buffers after their scopes closed, out of order; the watermark (no
    record that starts before it is still to come) advances between buffers."""
    rng = random.Random(3)
    entries, kernels, t = [], [], IdleTracker()
    now, judged = 0, []
    for _ in range(300):  # nested scopes on one thread, kernels launched inside them
        depth = rng.randint(1, 3)
        opened = []
        for d in range(depth):
            now += rng.randint(1, 50)
            t.enter(d, now)
            opened.append((d, now))
        for _ in range(rng.randint(0, 4)):
            now += rng.randint(1, 30)
            start = now + rng.randint(0, 100)
            kernels.append((start, start + rng.randint(1, 200)))
        for d, s in reversed(opened):
            now += rng.randint(1, 40)
            judged.append(t.exit(now))
            entries.append((d, s, now))
    pending = sorted(kernels)
    # deliver in buffers of 7, each shuffled; the watermark is the earliest start to come
    for i in range(0, len(pending), 7):
        chunk = pending[i:i + 7]
        rng.shuffle(chunk)
        t.add(np.array([s for s, _ in chunk]), np.array([e for _, e in chunk]))
        watermark = pending[i + 7][0] if i + 7 < len(pending) else now + 10_000
        judged.append(t.advance(watermark))
    want: dict[int, list[int]] = {}
    for p, w, i in _brute(entries, kernels):
        got = want.setdefault(p, [0, 0])
        got[0] += w
        got[1] += i
    assert _sums([j for j in judged if j is not None]) == want
    assert t.forced == 0


def test_memory_stays_bounded_over_100k_records():
    """100,000 kernels in 100 scope entries, delivered in buffers of 1,000 with the watermark
    advancing: what the tracker holds stays small, and the answer is exact."""
    t, judged, kernels, entries = IdleTracker(), [], [], []
    held = []
    ts = 0
    for entry in range(100):
        t.enter(7, ts)
        start = ts
        chunk_s = ts + 10 + np.arange(1000) * 20
        chunk_e = chunk_s + 15  # 5 ns idle between kernels
        ts = int(chunk_e[-1]) + 100
        t.add(chunk_s, chunk_e)
        judged.append(t.exit(ts))
        entries.append((7, start, ts))
        kernels += list(zip(chunk_s.tolist(), chunk_e.tolist()))
        judged.append(t.advance(ts))
        held.append(t.held())
    assert max(held) <= 4
    want = _brute(entries, kernels)
    assert _sums([j for j in judged if j is not None]) == {7: [sum(w for _, w, _ in want), sum(i for _, _, i in want)]}


def test_entries_whose_records_never_come_are_judged_at_a_bound():
    t = IdleTracker(max_waiting=100)
    judged = []
    for i in range(1000):
        t.enter(1, i * 10)
        judged.append(t.exit(i * 10 + 5))
    assert t.held() <= 2 * 100  # entries and step windows, each at most max_waiting
    assert t.forced >= 900
    assert _sums([j for j in judged if j is not None])[1][0] == t.forced * 5


# -- waits: the synchronizing calls' callbacks replayed -------------------------------------

class _Calls:
    """Calls a subscriber callback as CUPTI would at a call's enter and exit, with CUPTI's
    timestamp function answering `now`."""

    def __init__(self, callback) -> None:
        from cupti import cupti

        from proton.cupti.subscriber import callback_fields

        self.now = 0
        self.callback = callback
        self._site, self._corr, self._ret = callback_fields(cupti)
        self._data = (ctypes.c_uint8 * cupti.callback_data_dtype.itemsize)()
        self._status = ctypes.c_int32(0)

    def tick(self, out) -> int:
        out[0] = self.now
        return 0

    def call(self, domain: int, cbid: int, start: int, end: int, during=None) -> None:
        data = ctypes.addressof(self._data)
        ctypes.c_void_p.from_address(data + self._ret).value = ctypes.addressof(self._status)
        for site, at in ((0, start), (1, end)):
            if site and during is not None:
                during()
            ctypes.c_uint32.from_address(data + self._site).value = site
            self.now = at
            self.callback(None, domain, cbid, data)


def _cbid(collector, domain: int, name: str) -> int:
    from cupti import cupti

    from proton.cupti.subscriber import cupti_enum

    enum = cupti_enum(cupti, *(("driver_api_trace_cbid", "DriverApiTraceCbid") if domain == 1
                               else ("runtime_api_trace_cbid", "RuntimeApiTraceCbid")))
    cbid = int(enum[name])
    assert cbid in collector.sync_cbids[domain]
    return cbid


def _names() -> dict[int, dict[int, str]]:
    from cupti import cupti

    from proton.cupti.subscriber import cupti_enum

    return {d: {int(v): k for k, v in cupti_enum(cupti, *e).__members__.items()}
            for d, e in ((1, ("driver_api_trace_cbid", "DriverApiTraceCbid")),
                         (2, ("runtime_api_trace_cbid", "RuntimeApiTraceCbid")))}


def _replay(collector, calls, push, pop, main_path, at=(7, 9, 5)) -> int:
    """The same calls whichever callback times them: a runtime sync with the driver's inside
    (counted once) under path 7; .item()'s cudaStreamSynchronize under 9 inside 7; a
    device sync outside any scope (the root); a worker thread's with no scope of its own (the
    main thread's scope, 5); `at` gives other paths for 7, 9 and 5. Returns the worker
    thread's id."""
    outer, inner_path, main = at
    stream = _cbid(collector, 2, "cudaStreamSynchronize_v3020")
    inner = _cbid(collector, 1, "cuStreamSynchronize")
    device = _cbid(collector, 2, "cudaDeviceSynchronize_v3020")
    names = _names()
    copy = _cbid(collector, 1, "cuMemcpyDtoH_v2")
    async_rt, async_drv = (next(c for c in collector.async_copy_cbids[d] if names[d][c] == n)
                           for d, n in ((2, "cudaMemcpyAsync_v3020"), (1, "cuMemcpyDtoHAsync_v2")))
    push(outer)
    calls.call(2, stream, 1000, 2000, during=lambda: calls.call(1, inner, 1010, 1990))
    push(inner_path)
    calls.call(2, stream, 3000, 3500)
    calls.call(1, copy, 3600, 3700)
    calls.call(2, async_rt, 3800, 3805)  # an asynchronous copy that returned at once
    calls.call(2, async_rt, 10_000, 40_000,  # a pageable one that waited 30 us (counted once)
               during=lambda: calls.call(1, async_drv, 10_010, 39_990))
    pop()
    pop()
    calls.call(2, device, 4000, 4100)
    main_path(main)
    worker = threading.Thread(target=lambda: calls.call(2, stream, 5000, 5400))
    worker.start()
    worker.join()
    collector.own_waits(True)  # the profiler's own synchronize (its flush): not the job's
    calls.call(2, device, 6000, 6900)
    collector.own_waits(False)
    return worker.ident


WANT = {7: (1000, 1), 9: (30_600, 3), 0: (100, 1), 5: (400, 1)}


def _want_events(worker: int, at=(7, 9, 5)) -> list[tuple[int, int, int, int]]:
    """_replay's waits as a trace's events: (path, start, end, thread), in the order they ended."""
    outer, inner, main = at
    me = threading.get_ident()
    return [(outer, 1000, 2000, me), (inner, 3000, 3500, me), (inner, 3600, 3700, me),
            (inner, 10_000, 40_000, me), (0, 4000, 4100, me), (main, 5000, 5400, worker)]


def _c_replayer():
    """A collector whose C launch log's callback `calls` drive, on `calls`' clock."""
    from cupti import cupti

    from proton.cupti.collector import CollectorSettings, CuptiCollector
    from proton.cupti.subscriber import CALLBACK, callback_fields

    collector = CuptiCollector(CollectorSettings([].extend, groups=lambda g, f, rows: None,
                                                 native=True))
    calls = _Calls(None)
    clock = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))(calls.tick)
    collector.fields = callback_fields(cupti)
    log, _, _ = collector.pipeline.start(ctypes.cast(clock, ctypes.c_void_p).value)
    forwarded: list[int] = []
    python = CALLBACK(lambda userdata, domain, cbid, data: forwarded.append(cbid))
    log.configure(ctypes.cast(python, ctypes.c_void_p).value)
    log.sync_calls(collector.sync_cbids, collector.async_copy_cbids)
    collector.pipeline.enable(True)
    calls.callback = CALLBACK(log.callback)
    calls.keep = (clock, python)  # alive while C holds them
    return collector, log, calls, forwarded


def _python_replayer():
    """A collector timing waits in Python (no C helper), `calls` driving its callback; the
    shadow context's paths as `stack` (the main thread's scopes) and `main` say."""
    from proton.cupti.collector import CollectorSettings, CuptiCollector
    from proton.cupti.subscriber import CALLBACK

    stack: list[int] = []
    main: list = [None]

    def launch_path(frame):  # the shadow context's: the thread's innermost scope
        if threading.current_thread() is threading.main_thread():
            return stack[-1] if stack else None
        return None

    def unscoped(thread, ts):  # the main thread's timeline
        return main[0] if main[0] is not None else 0

    collector = CuptiCollector(CollectorSettings([].extend, unscoped=unscoped, native=False,
                                                 launch_path=launch_path))
    calls = _Calls(None)
    collector.python_syncs._now = lambda: calls.now
    passed: list[int] = []
    calls.callback = CALLBACK(collector.python_syncs.wrap(
        lambda userdata, domain, cbid, data: passed.append(cbid)))
    return collector, calls, stack, main, passed


def _taken(taken) -> dict[int, tuple[int, int]]:
    paths, ns, counts = taken
    return {p: (t, n) for p, t, n in zip(paths, ns, counts)}


def test_the_c_callback_sums_each_synchronizing_call_on_the_path_that_waited(helper_cache):
    collector, log, calls, forwarded = _c_replayer()
    _replay(collector, calls, log.push, log.pop, lambda p: log.main_path(p))
    assert _taken(collector.take_syncs()) == WANT
    assert forwarded == []  # the synchronizing calls stay in C
    assert _taken(collector.take_syncs()) == {}  # taken whole
    assert collector.take_wait_events() == []  # no trace asked for them
    log.main_path(None)


def test_the_python_callback_sums_the_same_as_the_c_one():
    """Without the C helper the subscriber's Python callback times the same calls, placing
    them where the context says the calling thread is."""
    collector, calls, stack, main, passed = _python_replayer()
    _replay(collector, calls, stack.append, stack.pop, lambda p: main.__setitem__(0, p))
    assert _taken(collector.take_syncs()) == WANT
    assert collector.take_wait_events() == []  # no trace asked for them
    calls.call(1, 1, 10, 20)  # not a synchronizing call: handed on, enter and exit
    assert passed == [1, 1]


def test_the_c_callback_keeps_each_wait_as_an_event_while_a_trace_asks(helper_cache):
    """With wait events on (a trace session is live), each wait is also kept whole: its path,
    its enter and exit on CUPTI's clock and the thread that waited; the sums are unchanged.
    Many more events than the take's first guess come back whole and in order; off, none."""
    collector, log, calls, _ = _c_replayer()
    collector.wait_events(True)
    worker = _replay(collector, calls, log.push, log.pop, lambda p: log.main_path(p))
    log.main_path(None)
    assert collector.take_wait_events() == _want_events(worker)
    assert _taken(collector.take_syncs()) == WANT
    assert collector.take_wait_events() == []  # taken whole
    device = _cbid(collector, 2, "cudaDeviceSynchronize_v3020")
    for i in range(3000):
        calls.call(2, device, 100_000 + 10 * i, 100_005 + 10 * i)
    got = collector.take_wait_events()
    assert [e[1] for e in got] == [100_000 + 10 * i for i in range(3000)]
    assert {(e[0], e[2] - e[1]) for e in got} == {(0, 5)}
    collector.wait_events(False)
    calls.call(2, device, 200_000, 200_100)
    assert collector.take_wait_events() == []
    assert _taken(collector.take_syncs()) == {0: (3000 * 5 + 100, 3001)}
    assert collector.wait_events_dropped == 0


def test_the_python_callback_keeps_the_same_events_as_the_c_one(monkeypatch):
    """The Python twin keeps the same events, bounded as the C log is (what is past the bound
    is counted, not kept)."""
    from proton.cupti import collector as collector_module

    collector, calls, stack, main, _ = _python_replayer()
    collector.wait_events(True)
    worker = _replay(collector, calls, stack.append, stack.pop,
                     lambda p: main.__setitem__(0, p))
    assert collector.take_wait_events() == _want_events(worker)
    assert _taken(collector.take_syncs()) == WANT
    monkeypatch.setattr(collector_module, "WAIT_EVENTS_MAX", 2)
    _replay(collector, calls, stack.append, stack.pop, lambda p: main.__setitem__(0, p))
    assert len(collector.take_wait_events()) == 2
    assert collector.wait_events_dropped == 4  # counted: said at the end
    collector.wait_events(False)
    _replay(collector, calls, stack.append, stack.pop, lambda p: main.__setitem__(0, p))
    assert collector.take_wait_events() == []


def test_trace_sessions_get_each_wait_they_were_active_for_and_trees_the_sums(helper_cache,
                                                                              monkeypatch):
    """The profiler turns wait events on for a trace session and hands each wait, after a
    buffer, to the traces active at its start: the trace's "host" process (Triton 3.6's
    layout; tests/test_trace_lanes.py: Triton 3.9's) shows it on the
    thread that waited, named after nothing but "wait", its call path in args; a tree
    session keeps its sums alone; a trace resumed later sees only the later waits."""
    from proton.data.paths import ROOT, SCOPE, paths
    from proton.format import SYNC_COUNT, SYNC_TIME
    from proton.runtime.output import document
    from proton.runtime.profiler import Profiler
    from proton.runtime.session import Session

    outer = paths.intern(ROOT, "wait_outer", SCOPE)
    inner = paths.intern(outer, "wait_inner", SCOPE)
    main = paths.intern(ROOT, "wait_main", SCOPE)
    at = (outer, inner, main)
    collector, log, calls, _ = _c_replayer()
    prof = Profiler()
    prof.collector = collector
    trace = Session(0, "t", "t.chrome_trace", "shadow", "trace", None)
    tree = Session(1, "h", "h.hatchet", "shadow", "tree", None)
    late = Session(2, "l", "l.chrome_trace", "shadow", "trace", None)
    trace.resume(0)
    tree.resume(0)
    late.resume(4500)
    prof.sessions.update({0: trace, 1: tree, 2: late})
    prof.parts.named("idle").sessions_changed()
    worker = _replay(collector, calls, log.push, log.pop, lambda p: log.main_path(p), at)
    log.main_path(None)
    prof.parts.buffered()
    want = _want_events(worker, at)
    assert trace.waits == want
    assert late.waits == [want[3], want[5]]  # those that began after 4500
    assert tree.waits == [] and tree.nodes[inner] == {SYNC_TIME: 30_600, SYNC_COUNT: 3}
    monkeypatch.setattr("proton.triton_version.after_3_6", lambda: False)
    doc = document(prof, trace, trace.data_of(0), {})
    waits = [e for e in doc["traceEvents"] if e["cat"] == "wait"]
    me = threading.get_ident()
    assert [(e["name"], e["ph"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in waits] == [
        ("wait", "X", "host", me, 0.0, 1.0), ("wait", "X", "host", me, 2.0, 0.5),
        ("wait", "X", "host", me, 2.6, 0.1), ("wait", "X", "host", me, 3.0, 0.1),
        ("wait", "X", "host", worker, 4.0, 0.4), ("wait", "X", "host", me, 9.0, 30.0)]
    assert waits[1]["args"]["call_stack"] == ["ROOT", "wait_outer", "wait_inner"]
    assert waits[3]["args"]["call_stack"] == ["ROOT"]
    prof.sessions.clear()
    prof.parts.named("idle").sessions_changed()  # no trace left: off
    calls.call(2, _cbid(collector, 2, "cudaDeviceSynchronize_v3020"), 50_000, 50_100)
    assert collector.take_wait_events() == []


def test_waits_stay_in_the_phase_they_began_in():
    """A trace's waits go with its phases (proton.data.advance_phase, periodic flushing) as
    its kernels do: each in the phase of its start."""
    from proton.runtime.session import Session

    s = Session(0, "t", "t.chrome_trace", "shadow", "trace", None)
    s.resume(0)
    s.add_wait(0, 100, 200, 1)
    s.advance(1000)
    s.add_wait(0, 500, 1500, 1)  # began before the phase did: the first one's
    s.add_wait(0, 1200, 1300, 2)
    assert s.data_of(0).waits == [(0, 100, 200, 1), (0, 500, 1500, 1)]
    assert s.data_of(1).waits == [(0, 1200, 1300, 2)]
    s.clear(0)
    assert s.data_of(0) is None and s.data_of(1).waits == [(0, 1200, 1300, 2)]


def test_a_wait_lines_up_with_the_kernel_it_waited_for_in_the_trace_and_its_merge(tmp_path):
    """build_trace: the kernel on its GPU's stream, the wait on the host's thread, both in us
    from the first event on one clock; proton-viewer --output trace keeps the wait on the
    rank's host track."""
    from proton.cupti.attribution import KernelRecord
    from proton.data.chrome_trace import build_trace
    from proton.data.paths import ROOT, SCOPE, paths
    from proton.viewer.traces import merge_traces

    step = paths.intern(ROOT, "wait_step", SCOPE)
    kernel = KernelRecord(1, "sleep", 0, 10_000, 20_010_000, stream_id=7)
    doc = build_trace([(step, kernel)], waits=[(step, 15_000, 20_020_000, 1234)],
                      job={"rank": 1}, lanes=False)
    got = {e["cat"]: e for e in doc["traceEvents"]}
    assert got["wait"] == {"name": "wait", "cat": "wait", "ph": "X", "pid": "rank 1 host",
                           "tid": 1234, "ts": 5.0, "dur": 20_005.0,
                           "args": {"call_stack": ["ROOT", "wait_step"]}}
    assert got["kernel"]["pid"] == "rank 1 GPU 0" and got["kernel"]["ts"] == 0.0
    wait, k = got["wait"], got["kernel"]
    assert wait["ts"] <= k["ts"] + k["dur"] <= wait["ts"] + wait["dur"]
    path = tmp_path / "w.rank1.chrome_trace"
    path.write_text(json.dumps(doc))
    text, errors, _ = merge_traces([str(path)])
    merged = json.loads(text)["traceEvents"]
    assert errors == []
    [wait] = [e for e in merged if e.get("cat") == "wait"]
    names = {e["pid"]: e["args"]["name"] for e in merged if e.get("name") == "process_name"}
    assert names[wait["pid"]] == "rank 1 host" and wait["tid"] == 1234


def test_viewer_derives_waits_and_idle_share(tmp_path):
    from proton.viewer.derive import available, derive
    from proton.viewer.reader import load

    def node(name, metrics, children=()):
        return {"frame": {"name": name, "type": "function"}, "metrics": metrics,
                "children": list(children)}

    kernel = node("k", {"time (ns)": 4_000_000, "count": 4, "device_id": "0",
                        "device_type": "CUDA"})
    step = node("step", {SYNC_TIME: 2_000_000, SYNC_COUNT: 4, GPU_IDLE: 3_000_000,
                         SCOPE_WALL: 12_000_000}, [kernel])
    root = node("ROOT", {"time (ns)": 0, "count": 0, SYNC_TIME: 0, SYNC_COUNT: 0}, [step])
    path = tmp_path / "w.hatchet"
    path.write_text(json.dumps([root, {}]))
    prof = load(str(path))
    assert {"sync_time/ms", "gpu_idle/%", "gpu_idle/ms"} <= set(available(prof))
    names = prof.gf.dataframe["name"]
    at = {n: i for i, n in names.items()}
    assert derive(prof, "sync_time/ms").values[at["step"]] == pytest.approx(2.0)
    assert derive(prof, "sync_time/ms").values[at["ROOT"]] == pytest.approx(2.0)
    assert derive(prof, "gpu_idle/%").values[at["step"]] == pytest.approx(25.0)
    assert derive(prof, "gpu_idle/ms").values[at["step"]] == pytest.approx(3.0)
