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
    assert t.held() <= 100
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


def _replay(collector, calls, push, pop, main_path) -> None:
    """The same calls whichever callback times them: a runtime sync with the driver's inside
    (counted once) under path 7; .item()'s cudaStreamSynchronize under 9 inside 7; a
    device sync outside any scope (the root); a worker thread's with no scope of its own (the
    main thread's scope, 5)."""
    stream = _cbid(collector, 2, "cudaStreamSynchronize_v3020")
    inner = _cbid(collector, 1, "cuStreamSynchronize")
    device = _cbid(collector, 2, "cudaDeviceSynchronize_v3020")
    names = _names()
    copy = _cbid(collector, 1, "cuMemcpyDtoH_v2")
    async_rt, async_drv = (next(c for c in collector.async_copy_cbids[d] if names[d][c] == n)
                           for d, n in ((2, "cudaMemcpyAsync_v3020"), (1, "cuMemcpyDtoHAsync_v2")))
    push(7)
    calls.call(2, stream, 1000, 2000, during=lambda: calls.call(1, inner, 1010, 1990))
    push(9)
    calls.call(2, stream, 3000, 3500)
    calls.call(1, copy, 3600, 3700)
    calls.call(2, async_rt, 3800, 3805)  # an asynchronous copy that returned at once
    calls.call(2, async_rt, 10_000, 40_000,  # a pageable one that waited 30 us (counted once)
               during=lambda: calls.call(1, async_drv, 10_010, 39_990))
    pop()
    pop()
    calls.call(2, device, 4000, 4100)
    main_path(5)
    worker = threading.Thread(target=lambda: calls.call(2, stream, 5000, 5400))
    worker.start()
    worker.join()
    collector.own_waits(True)  # the profiler's own synchronize (its flush): not the job's
    calls.call(2, device, 6000, 6900)
    collector.own_waits(False)


WANT = {7: (1000, 1), 9: (30_600, 3), 0: (100, 1), 5: (400, 1)}


def _taken(taken) -> dict[int, tuple[int, int]]:
    paths, ns, counts = taken
    return {p: (t, n) for p, t, n in zip(paths, ns, counts)}


def test_the_c_callback_sums_each_synchronizing_call_on_the_path_that_waited(cache):
    from proton.cupti.collector import CuptiCollector
    from proton.cupti.subscriber import CALLBACK

    collector = CuptiCollector([].extend, groups=lambda g, f, rows: None, native=True)
    calls = _Calls(None)
    clock = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))(calls.tick)
    from cupti import cupti

    from proton.cupti.subscriber import callback_fields

    collector._fields = callback_fields(cupti)
    log, _, _ = collector.pipeline.start(ctypes.cast(clock, ctypes.c_void_p).value)
    forwarded = []
    python = CALLBACK(lambda userdata, domain, cbid, data: forwarded.append(cbid))
    log.configure(ctypes.cast(python, ctypes.c_void_p).value)
    log.sync_calls(collector.sync_cbids, collector.async_copy_cbids)
    collector.pipeline.enable(True)
    calls.callback = CALLBACK(log.callback)
    _replay(collector, calls, log.push, log.pop, lambda p: log.main_path(p))
    assert _taken(collector.take_syncs()) == WANT
    assert forwarded == []  # the synchronizing calls stay in C
    assert _taken(collector.take_syncs()) == {}  # taken whole
    log.main_path(None)


def test_the_python_callback_sums_the_same_as_the_c_one():
    """Without the C helper the subscriber's Python callback times the same calls, placing
    them where the context says the calling thread is."""
    from proton.cupti.collector import CuptiCollector
    from proton.cupti.subscriber import CALLBACK

    stack: list[int] = []
    main = [None]

    def launch_path(frame):  # the shadow context's: the thread's innermost scope
        if threading.current_thread() is threading.main_thread():
            return stack[-1] if stack else None
        return None

    def unscoped(thread, ts):  # the main thread's timeline
        return main[0] if main[0] is not None else 0

    collector = CuptiCollector([].extend, unscoped, native=False, launch_path=launch_path)
    calls = _Calls(None)
    collector.python_syncs._now = lambda: calls.now
    passed = []
    calls.callback = CALLBACK(collector.python_syncs.wrap(
        lambda userdata, domain, cbid, data: passed.append(cbid)))
    _replay(collector, calls, stack.append, stack.pop, lambda p: main.__setitem__(0, p))
    assert _taken(collector.take_syncs()) == WANT
    calls.call(1, 1, 10, 20)  # not a synchronizing call: handed on, enter and exit
    assert passed == [1, 1]


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
