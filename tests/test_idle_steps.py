"""A step's GPU time broken down by what the GPU did (runtime/idle.py), on the CPU: records and
host stretches replayed through the tracker as the collector feeds it, against a 1 ns timeline
built by brute force, and the shapes real jobs take (an all-reduce that runs after the host left
its scope, scopes back to back whose work outlives them, the profiler's first launches inside
the first scope); and the collector telling the tracker which launch call made each record."""
from __future__ import annotations

import random

import numpy as np

from proton.format import STEP_PARTS
from proton.runtime.idle import COMM, COMPUTE, COPY, LAUNCH, OWN, SYNC, IdleTracker

PART = {name: i for i, name in enumerate(STEP_PARTS)}
MS = 1_000_000


def _steps(judged_list) -> dict[int, np.ndarray]:
    """Per step path: [wall, parts...] summed over its windows."""
    out: dict[int, np.ndarray] = {}
    for j in judged_list:
        if j is None or j.steps is None:
            continue
        st = j.steps
        for p, w, row in zip(st.paths.tolist(), st.walls.tolist(), st.parts):
            out[p] = out.get(p, np.zeros(1 + len(STEP_PARTS), dtype=np.int64)) + \
                np.concatenate(([w], row))
    return out


def _brute(entries, busy, host):
    """Per outermost path: [wall, parts...] from a 1 ns timeline. `entries`: (path, start,
    end, depth) in order of start; busy: (start, end, kind, launch) (launch: when its launch
    call was made; None: not told, taken as its start); host: (start, end, kind). A step
    drains where every record launched before its exit ended (or at its exit); its window
    runs to the next step's start if that is of its scope, else to its drain; each begins at
    its start or where the one before ended, whichever is later."""
    busy = [(s, e, k, s if lc is None else lc) for s, e, k, lc in busy]
    end = max([e for _, _, e, _ in entries] + [e for _, e, _, _ in busy] +
              [e for _, e, _ in host] + [1]) + 2
    c, n, y = (np.zeros(end, dtype=bool) for _ in range(3))
    o, lau, sy = (np.zeros(end, dtype=bool) for _ in range(3))
    for s, e, k, _ in busy:
        (c, n, y)[k][s:e] = True
    for s, e, k in host:
        (o, lau, sy)[k][s:e] = True
    cls = np.full(end, 3)  # idle host
    cls[sy] = 4
    cls[lau] = 5
    cls[o] = 6
    cls[y] = 2
    cls[n] = 1
    cls[c] = 0
    steps = [(p, s, e) for p, s, e, d in entries if d == 0]
    out: dict[int, np.ndarray] = {}
    before = 0
    for i, (p, s, e) in enumerate(steps):
        drained = max([e] + [be for bs, be, _, lc in busy if lc < e and be > bs])
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        begin = max(s, before)
        before = max(begin, nxt[1] if nxt is not None and nxt[0] == p else drained)
        counts = np.bincount(cls[begin:before], minlength=7)
        out[p] = out.get(p, np.zeros(8, dtype=np.int64)) + \
            np.concatenate(([before - begin], counts))
    return out


def _replay(entries, busy, host, chunk=5, seed=0, delays=(0, 1000, 50_000, 500_000)):
    """Feed the tracker as the profiler does, in time order: the main thread's enters and
    exits at their times; records and host stretches in buffers that come some time after
    they ended, shuffled, each buffer after the launch calls made by then were told (those a
    record marks None never are), then an advance to the watermark: the earliest launch (or
    host stretch) still to come, or the buffer's time. At the end, end_steps."""
    rng = random.Random(seed)
    t, judged = IdleTracker(), []
    main = sorted([(s, 1, p) for p, s, _, _ in entries] + [(e, 0, p) for p, _, e, _ in entries],
                  key=lambda x: (x[0], x[1]))
    corr = {i: n for n, i in enumerate(sorted(range(len(busy)), key=lambda i: (
        busy[i][3] if busy[i][3] is not None else busy[i][0], i)))}
    items = [(e + rng.choice(delays), "b", i) for i, (_, e, _, _) in enumerate(busy)] + \
        [(e + rng.choice(delays), "h", i) for i, (_, e, _) in enumerate(host)]
    items.sort()
    told: set[int] = set()
    waiting = {("b", i) for i in range(len(busy))} | {("h", i) for i in range(len(host))}

    def first_to_come(what: str, i: int) -> int:
        if what == "h":
            return host[i][0]
        s, _, _, lc = busy[i]
        return s if lc is None else lc

    for k in range(0, len(items), chunk):
        part = items[k:k + chunk]
        now = max(at for at, _, _ in part)
        while main and main[0][0] <= now:
            ts, is_enter, p = main.pop(0)
            if is_enter:
                t.enter(p, ts)
            else:
                judged.append(t.exit(ts))
        new = [i for i, (_, _, _, lc) in enumerate(busy)
               if lc is not None and lc <= now and i not in told]
        told.update(new)
        if new:
            t.launched([corr[i] for i in new], [busy[i][3] for i in new])
        rng.shuffle(part)
        for _, what, i in part:
            waiting.discard((what, i))
            if what == "b":
                s, e, kind, _ = busy[i]
                t.add(np.array([s]), np.array([e]), np.array([kind]), np.array([corr[i]]))
            else:
                t.host(host[i][2], [host[i][0]], [host[i][1]])
        judged.append(t.advance(min([now] + [first_to_come(w, i) for w, i in waiting])))
    for ts, is_enter, p in main:
        if is_enter:
            t.enter(p, ts)
        else:
            judged.append(t.exit(ts))
    judged.append(t.advance(10**12))
    judged.append(t.end_steps())
    return judged, t


def _random_job(seed):
    """Steps of scopes 1 (a loop, broken by 2 and 3), each with an inner scope, launching
    kernels, NCCL kernels and copies on two streams that run them in order, some long enough
    to outlive their step and the next ones; launches between steps, and a few whose launch
    call is never told."""
    rng = random.Random(seed)
    entries, busy, host = [], [], []
    now = 0
    free = [0, 0]  # each stream runs its work in order
    paths = [1, 1, 1, 2, 1, 1, 3]

    def launch(at: int) -> None:
        stream = rng.choice((0, 0, 1))
        s = max(at + rng.randint(0, 2000), free[stream])
        e = s + (rng.randint(1, 300_000) if rng.random() < 0.15 else rng.randint(1, 5000))
        free[stream] = e
        told = at if rng.random() < 0.9 else None
        busy.append((s, e, rng.choice((COMPUTE, COMPUTE, COMM, COPY)), told))

    for k in range(40):
        path = paths[k % len(paths)]
        start = now
        depth_entries = [(path, start, None, 0)]
        for _ in range(rng.randint(0, 6)):
            now += rng.randint(0, 3000)
            launch(now)
            if rng.random() < 0.3:
                hs = now + rng.randint(0, 1000)
                host.append((hs, hs + rng.randint(1, 3000), rng.choice((OWN, LAUNCH, SYNC))))
        inner_s = now + rng.randint(1, 100)
        now = inner_s + rng.randint(1, 500)
        depth_entries.append((path + 10, inner_s, now, 1))
        now += rng.randint(1, 3000)
        depth_entries[0] = (path, start, now, 0)
        entries += depth_entries
        now += rng.choice((0, 1, 50, 200_000, 1_000_000))  # back to back, or a gap
        if rng.random() < 0.1:  # a launch outside any scope, between steps
            launch(now - 1)
    entries.sort(key=lambda x: (x[1], x[3]))
    return entries, busy, host


def test_step_parts_match_a_brute_force_timeline_with_late_records():
    """Loops broken by other scopes, work that outlives its step, records in late shuffled
    buffers interleaved with the steps: each step's parts are the timeline's, exactly."""
    for seed in range(8):
        entries, busy, host = _random_job(seed)
        for chunk, delays in ((4, (0, 1000, 50_000, 500_000)), (1, (0,)), (25, (10**6,))):
            judged, t = _replay(entries, busy, host, chunk=chunk, seed=seed, delays=delays)
            got = _steps(judged)
            want = _brute(entries, busy, host)
            assert got.keys() == want.keys(), seed
            for p in want:
                assert got[p].tolist() == want[p].tolist(), (seed, chunk, p)
                assert got[p][1:].sum() == got[p][0]
            assert t.forced == 0


US = 1000


def _queue(launches, latency=5 * US):
    """Records on one stream, which runs its work in order: each of `launches` (launch time,
    duration, kind) starts `latency` after its launch call or when the one before ended,
    whichever is later. (start, end, kind, launch) each."""
    out, free = [], 0
    for at, dur, kind in launches:
        s = max(at + latency, free)
        free = s + dur
        out.append((s, free, kind, at))
    return out


def counters_job():
    """The counters job's shape (bench/probes/real_shapes.py, H200): top-level scopes, each
    entered once, one after another with no synchronize between them; each one's work runs
    on the GPU long after its host interval. add64M: 10 adds of 185 us launched in 224 us
    (the first add starts 117 us into the scope); d2d_copy: 10 copies of 128 us in 222 us;
    l2_adds: 200 adds of 2.3 us, one per 5 us of host; short_5us: a first launch that held
    the host 18 ms (the kernel's first load), then 20 kernels of 5 us; bf16_matmul: 10 of
    170 us. (entries, busy, host, {path: (each one's compute, copy)})."""
    entries, launches, host, own = [], [], [], {}
    now = 0

    def scope(path: int, n: int, first: int, every: int, dur: int, kind: int, host_ms=0):
        nonlocal now
        start = now
        if host_ms:  # the first launch call held the host
            host.append((now + first, now + first + host_ms * MS, LAUNCH))
            first += host_ms * MS
        launches.extend((now + first + i * every, dur, kind) for i in range(n))
        now += first + n * every
        entries.append((path, start, now, 0))
        own[path] = (n * dur if kind == COMPUTE else 0, n * dur if kind == COPY else 0)

    scope(1, 10, 112 * US, 11 * US, 185 * US, COMPUTE)                  # add64M
    scope(2, 10, 2 * US, 22 * US, 128 * US, COPY)                       # d2d_copy
    scope(3, 200, 2 * US, 5 * US, 2300, COMPUTE)                        # l2_adds
    scope(4, 20, 2 * US, 5 * US, 5 * US, COMPUTE, host_ms=18)           # short_5us
    scope(5, 10, 2 * US, 10 * US, 170 * US, COMPUTE)                    # bf16_matmul
    return entries, _queue(launches), host, own


def test_scopes_back_to_back_each_get_the_work_they_launched_where_it_ran():
    """The counters job: each scope's window holds exactly its own kernels' or copies' time,
    its GPU never waits on the host (no idle finding), and the windows follow each other: on
    main the first scope's window ended at the second's start (its adds were counted in
    d2d_copy's window, d2d_copy's copies in later ones) and read 52% idle."""
    entries, busy, host, own = counters_job()
    for chunk, delays in ((8, (0, 1000, 50_000, 500_000)), (200, (10**7,))):
        judged, t = _replay(entries, busy, host, chunk=chunk, delays=delays)
        got = _steps(judged)
        assert {p: got[p].tolist() for p in got} == \
            {p: v.tolist() for p, v in _brute(entries, busy, host).items()}
        for path, (compute, copy) in own.items():
            row = dict(zip(STEP_PARTS, got[path][1:].tolist()))
            assert (row["step_compute (ns)"], row["step_copy (ns)"]) == (compute, copy), path
            assert row["step_idle_host (ns)"] < 0.2 * got[path][0], (path, row)
        # the windows tile the run from the first step's start to where the last drained
        assert sum(got[p][0] for p in got) == max(e for _, e, _, _ in busy)
    first = dict(zip(STEP_PARTS, got[1][1:].tolist()))
    assert first["step_idle_host (ns)"] == 117 * US  # before its first add began
    assert first["step_idle_launch (ns)"] == 0
    short = dict(zip(STEP_PARTS, got[4][1:].tolist()))  # the GPU waited on the first load
    assert short["step_idle_launch (ns)"] > 0.9 * got[4][0]


def test_a_loop_of_one_scope_still_ends_each_window_at_the_next_start():
    """Five entries of `step` whose kernels outlive the host and run into the next step:
    each window runs from its step's start to the next's (HTA's ProfilerStep windows), the
    last to where the GPU finished what it launched; as before."""
    launches, entries = [], []
    for i in range(5):
        s = i * 1200 * US
        entries.append((1, s, s + 300 * US, 0))
        launches += [(s + 10 * US, 1000 * US, COMPUTE), (s + 20 * US, 150 * US, COMM)]
    busy = _queue(launches)
    judged, _ = _replay(entries, busy, [], chunk=3)
    walls = np.concatenate([j.steps.walls for j in judged if j is not None and j.steps])
    last = busy[-1][1] - 4 * 1200 * US
    assert walls.tolist() == [1200 * US] * 4 + [last]
    got = _steps(judged)[1]
    assert got.tolist() == _brute(entries, busy, [])[1].tolist()
    row = dict(zip(STEP_PARTS, got[1:].tolist()))
    assert row["step_compute (ns)"] == 5 * 1000 * US and row["step_comm (ns)"] == 5 * 150 * US


def test_a_loop_then_another_scope_each_keep_their_own_work():
    """Three entries of `step`, then `eval` entered at once: the last step's window runs on
    until the GPU finished what it launched, past eval's start, and eval's begins there, with
    exactly eval's kernels in it (on main, eval's window began at its own start and held the
    step's kernels)."""
    launches, entries = [], []
    for i in range(3):
        s = i * 500 * US
        entries.append((1, s, s + 500 * US, 0))
        launches += [(s + 10 * US + k * 40 * US, 300 * US, COMPUTE) for k in range(10)]
    entries.append((2, 1500 * US, 1600 * US, 0))
    eval_launches = [(1500 * US + k * 10 * US, 200 * US, COMPUTE) for k in range(5)]
    busy = _queue(launches + eval_launches)
    judged, _ = _replay(entries, busy, [], chunk=7, seed=3)
    got = _steps(judged)
    step_end = busy[29][1]  # the last step's last kernel
    assert got[1][0] == step_end and step_end > 1600 * US
    assert got[2].tolist() == [5 * 200 * US, 5 * 200 * US, 0, 0, 0, 0, 0, 0]
    assert got[1][1] == 30 * 300 * US
    assert {p: v.tolist() for p, v in got.items()} == \
        {p: v.tolist() for p, v in _brute(entries, busy, []).items()}


def test_the_launches_held_stay_bounded():
    """100 steps of two scopes in turn, 1,000 records each, every launch told: the launch
    calls and intervals held stay as few as the watermark allows."""
    t, held, judged = IdleTracker(), [], []
    busy = np.array([r[:2] for r in _queue([(k * 30_000 * US + i * 10 * US, 20 * US, COMPUTE)
                                            for k in range(100) for i in range(1000)])])
    for k in range(100):  # each step's work runs 10 ms past its exit
        s0 = k * 30_000 * US
        t.enter(1 + k % 2, s0)
        corrs = k * 1000 + np.arange(1000)
        t.launched(corrs, s0 + np.arange(1000) * 10 * US)
        t.add(busy[corrs, 0], busy[corrs, 1], np.zeros(1000), corrs)
        judged.append(t.exit(s0 + 10_000 * US))
        judged.append(t.advance(s0 + 10_000 * US))
        held.append(t.held())
    judged.append(t.advance(10**15))
    judged.append(t.end_steps())
    assert max(held) <= 4, held
    got = _steps(judged)
    assert got[1][1] + got[2][1] == 100 * 1000 * 20 * US  # every kernel, once


def test_an_all_reduce_after_the_host_left_the_scope_is_communication_of_its_step():
    """Rank 0 of a DDP job whose other rank is late: each step's host interval is short
    (forward, backward launched, 1 ms), the all-reduce launched inside backward runs on the
    GPU for 20 ms after the host left fwd_bwd, waiting for the other rank. The scope's idle
    figure (its host interval) says 0; the step breakdown puts the 20 ms in communication
    and no idle host time, where the host interval alone would call the step mostly idle."""
    t, judged = IdleTracker(), []
    step_ms = 22
    for i in range(5):
        s = i * step_ms * MS
        t.enter(1, s)              # step
        t.enter(2, s + 10_000)     # fwd_bwd: 1 ms of launches
        t.add(np.array([s + 20_000]), np.array([s + 1 * MS]), np.array([COMPUTE]))
        # the all-reduce: launched at the end of backward, runs 20 ms on the GPU
        t.add(np.array([s + 1 * MS]), np.array([s + 21 * MS]), np.array([COMM]))
        judged.append(t.exit(s + 1 * MS))   # fwd_bwd left
        t.enter(3, s + 1 * MS + 10_000)     # optimizer: its kernels queue after the all-reduce
        t.add(np.array([s + 21 * MS]), np.array([s + 21 * MS + 500_000]), np.array([COMPUTE]))
        judged.append(t.exit(s + 1 * MS + 100_000))
        judged.append(t.exit(s + 1 * MS + 110_000))  # step left at 1.11 ms
        judged.append(t.advance(s + 1 * MS + 200_000))
    judged.append(t.advance(10**12))
    judged.append(t.end_steps())
    got = _steps(judged)[1]
    wall = got[0]
    assert wall == 5 * step_ms * MS - (step_ms * MS - (21 * MS + 500_000))  # last drains
    assert got[1 + PART["step_comm (ns)"]] == 5 * 20 * MS - 5 * 20_000 + 5 * 20_000
    assert got[1 + PART["step_idle_host (ns)"]] < 0.03 * wall
    assert got[1 + PART["step_comm (ns)"]] > 0.85 * wall


def test_the_profilers_first_launches_in_the_first_scope_are_not_the_jobs_idle():
    """The first scope of a session: the first launch call of a kernel held the host 5.5 ms
    (CUPTI setting the kernel up after the profiler attached); then ten 0.2 ms kernels. The
    job's idle (gpu_idle) is the scope's own launch gaps only; the 5.5 ms go to
    gpu_idle_excluded and to the step's launch part."""
    t = IdleTracker()
    t.enter(1, 0)
    t.host(LAUNCH, [100_000], [5_600_000])  # the slow first launch call
    starts = 5_650_000 + np.arange(10) * 200_000
    t.add(starts, starts + 200_000, np.full(10, COMPUTE))
    j1 = t.exit(starts[-1] + 200_000 + 10_000)
    j = t.advance(10**12)
    assert j1 is None
    assert j.paths.tolist() == [1]
    assert j.idles.tolist() == [100_000 + 50_000 + 10_000]
    assert j.excluded.tolist() == [5_500_000]
    st = t.end_steps().steps
    assert st is not None
    row = dict(zip(STEP_PARTS, st.parts[0].tolist()))
    assert row["step_idle_launch (ns)"] == 5_500_000
    assert row["step_compute (ns)"] == 2_000_000
    assert row["step_idle_host (ns)"] == 160_000
    assert st.walls.tolist() == [sum(row.values())]


def test_proton_own_work_inside_a_scope_is_the_profilers_idle():
    t = IdleTracker()
    t.enter(1, 0)
    t.own(1000, 4000)                # a flush on the main thread, inside the scope
    t.add(np.array([5000]), np.array([6000]), np.array([COPY]))
    t.host(SYNC, [6000], [7000])     # waiting, but the GPU ran nothing
    t.exit(8000)
    j = t.advance(10**9)
    assert (j.idles.tolist(), j.excluded.tolist()) == ([4000], [3000])
    row = dict(zip(STEP_PARTS, t.end_steps().steps.parts[0].tolist()))
    assert row == {"step_compute (ns)": 0, "step_comm (ns)": 0, "step_copy (ns)": 1000,
                   "step_idle_host (ns)": 3000, "step_idle_sync (ns)": 1000,
                   "step_idle_launch (ns)": 0, "step_idle_profiler (ns)": 3000}


def test_the_c_helpers_slow_launch_bound_is_the_formats():
    """native.c logs a launch call as slow at format.STEP_SLOW_LAUNCH, and marks it with
    native.SLOW_LAUNCH_PATH: one number each, in C and in Python."""
    import os
    import re

    from proton.cupti import native
    from proton.format import STEP_SLOW_LAUNCH

    with open(os.path.join(os.path.dirname(native.__file__), "native.c")) as f:
        text = f.read()
    assert int(re.search(r"#define SLOW_LAUNCH_NS (\d+)", text).group(1)) == STEP_SLOW_LAUNCH
    assert int(re.search(r"#define SLOW_LAUNCH_PATH \((-\d+)\)", text).group(1)) == \
        native.SLOW_LAUNCH_PATH


def test_the_c_launch_log_keeps_launch_calls_that_held_their_thread_as_slow(helper_cache):
    """Launch calls replayed through the C launch log's callback on a clock it reads: one that
    held its thread 300 us comes back as a wait event marked SLOW_LAUNCH_PATH (the idle
    tracker's LAUNCH stretch), one of 5 us does not, and none is kept while wait events are
    off."""
    import threading

    from test_waits import _c_replayer

    from proton.cupti.native import SLOW_LAUNCH_PATH

    collector, log, calls, _ = _c_replayer()
    launch = next(c for c, n in collector._driver_cbids.items() if n == "cuLaunchKernel")
    log.wait_events(True)
    calls.call(1, launch, 1000, 1000 + 300_000)
    calls.call(1, launch, 400_000, 405_000)
    me = threading.get_ident()
    assert collector.take_wait_events() == [(SLOW_LAUNCH_PATH, 1000, 301_000, me)]
    log.wait_events(False)
    calls.call(1, launch, 500_000, 900_000)
    assert collector.take_wait_events() == []
    log.main_path(None)


def test_the_collector_tells_the_tracker_each_launch_before_its_record(helper_cache):
    """A step left at 1 us whose kernel, launched at 0.5 us, ran from 5 to 9 us: its window
    runs to 9 us only if the tracker learnt the kernel's launch call. Through every way the
    collector takes launches: CUPTI's API records read by Python or by the C join, the C
    launch log (shadow context), and the python context's launch enter."""
    import pytest

    pytest.importorskip("cupti.cupti")
    from cupti import cupti
    from test_copies import DRIVER, _cbid, _record
    from test_native import _Launcher, _feed

    from proton.cupti.collector import CollectorSettings, CuptiCollector
    from proton.cupti.settings import PartAsks

    K = cupti.ActivityKind
    launch = _cbid(*DRIVER, "cuLaunchKernel")
    kernel = _record(cupti.activity_kernel10_dtype, kind=int(K.CONCURRENT_KERNEL),
                     correlation_id=50, name=0x1000, start=5000, end=9000, stream_id=7)
    call = _record(cupti.activity_api_dtype, kind=int(K.DRIVER), cbid=launch,
                   correlation_id=50, start=500, thread_id=3)
    for way in ("python", "c join", "c log", "python context"):
        t = IdleTracker()
        collector = CuptiCollector(CollectorSettings(
            lambda kernels: None, unscoped=lambda thread, ts: 0, native=way != "python",
            groups=(lambda g, first, rows: None) if way.startswith("c ") else None,
            in_callback=way == "python context", launch_path=lambda frame: 5,
            parts=PartAsks(busy=t.add, launched=t.launched)))
        collector.shaper.names = {0x1000: "k"}
        t.enter(1, 0)
        t.exit(1000)
        if way in ("c log", "python context"):
            _Launcher(collector).launch(1, launch, corr=50, start=500)
            _feed(collector, [kernel])
        else:
            _feed(collector, [call, kernel], way == "c join")
        assert collector.callback_errors == [], way
        t.advance(10**6)
        assert t.end_steps().steps.walls.tolist() == [9000], way
