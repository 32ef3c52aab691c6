"""A step's GPU time broken down by what the GPU did (runtime/idle.py), on the CPU: records and
host stretches replayed through the tracker as the collector feeds it, against a 1 ns timeline
built by brute force, and the shapes real jobs take (an all-reduce that runs after the host left
its scope, the profiler's first launches inside the first scope)."""
from __future__ import annotations

import random

import numpy as np

from proton.format import STEP_DRAIN_GAP, STEP_PARTS
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


def _brute(entries, busy, host, gap=STEP_DRAIN_GAP):
    """Per outermost path: [wall, parts...] from a 1 ns timeline. `entries`: (path, start,
    end, depth) in order of start; busy: (start, end, kind); host: (start, end, kind)."""
    end = max([e for _, _, e, _ in entries] + [e for _, e, _ in busy] +
              [e for _, e, _ in host] + [1]) + 2 * gap
    c, n, y = (np.zeros(end, dtype=bool) for _ in range(3))
    o, lau, sy = (np.zeros(end, dtype=bool) for _ in range(3))
    for s, e, k in busy:
        (c, n, y)[k][s:e] = True
    for s, e, k in host:
        (o, lau, sy)[k][s:e] = True
    anyb = c | n | y
    cls = np.full(end, 3)  # idle host
    cls[sy] = 4
    cls[lau] = 5
    cls[o] = 6
    cls[y] = 2
    cls[n] = 1
    cls[c] = 0
    steps = [(p, s, e) for p, s, e, d in entries if d == 0]
    out: dict[int, np.ndarray] = {}
    for i, (p, s, e) in enumerate(steps):
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        if nxt is not None and nxt[0] == p:
            w_end = nxt[1]
        else:
            t = e  # drain: first instant not busy followed by gap ns with no busy start
            while True:
                if t < end and anyb[t]:
                    t += 1
                    continue
                if anyb[t:t + gap].any():
                    t += int(np.argmax(anyb[t:t + gap]))
                    continue
                break
            w_end = min(t, nxt[1]) if nxt is not None else t
        counts = np.bincount(cls[s:w_end], minlength=7)
        out[p] = out.get(p, np.zeros(8, dtype=np.int64)) + np.concatenate(([w_end - s], counts))
    return out


def _replay(entries, busy, host, chunk=5, seed=0):
    """Feed the tracker as the profiler does: enters and exits in time order on the main
    thread; records and host stretches in late, shuffled buffers, each followed by an advance
    to the earliest start still to come; at the end, end_steps."""
    rng = random.Random(seed)
    t, judged = IdleTracker(), []
    events = []
    for p, s, e, _ in entries:
        events.append((s, 1, p))
        events.append((e, 0, p))
    events.sort(key=lambda x: (x[0], x[1]))
    for ts, is_enter, p in events:
        if is_enter:
            t.enter(p, ts)
        else:
            judged.append(t.exit(ts))
    pending = sorted([(s, e, k, "b") for s, e, k in busy] + [(s, e, k, "h") for s, e, k in host])
    for i in range(0, len(pending), chunk):
        part = pending[i:i + chunk]
        rng.shuffle(part)
        for s, e, k, what in part:
            if what == "b":
                t.add(np.array([s]), np.array([e]), np.array([k]))
            else:
                t.host(k, [s], [e])
        mark = pending[i + chunk][0] if i + chunk < len(pending) else 10**12
        judged.append(t.advance(mark))
    judged.append(t.end_steps())
    return judged, t


def _random_job(seed):
    rng = random.Random(seed)
    entries, busy, host = [], [], []
    now = 0
    paths = [1, 1, 1, 2, 1, 1, 3]
    for k in range(40):
        path = paths[k % len(paths)]
        start = now
        depth_entries = [(path, start, None, 0)]
        for _ in range(rng.randint(0, 6)):
            now += rng.randint(0, 3000)
            s = now + rng.randint(0, 2000)
            kind = rng.choice((COMPUTE, COMPUTE, COMM, COPY))
            busy.append((s, s + rng.randint(1, 5000), kind))
            if rng.random() < 0.3:
                hs = now + rng.randint(0, 1000)
                host.append((hs, hs + rng.randint(1, 3000), rng.choice((OWN, LAUNCH, SYNC))))
        inner_s = now + rng.randint(1, 100)
        now = inner_s + rng.randint(1, 500)
        depth_entries.append((path + 10, inner_s, now, 1))
        now += rng.randint(1, 3000)
        depth_entries[0] = (path, start, now, 0)
        entries += depth_entries
        now += rng.choice((0, 1, 50, 200_000))  # back to back, or a gap between steps
    entries.sort(key=lambda x: (x[1], x[3]))
    return entries, busy, host


def test_step_parts_match_a_brute_force_timeline_with_late_records():
    for seed in range(6):
        entries, busy, host = _random_job(seed)
        judged, t = _replay(entries, busy, host, chunk=4, seed=seed)
        got = _steps(judged)
        want = _brute(entries, busy, host)
        assert got.keys() == want.keys(), seed
        for p in want:
            assert got[p].tolist() == want[p].tolist(), (seed, p)
            assert got[p][1:].sum() == got[p][0]
        assert t.forced == 0


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


def test_the_c_launch_log_keeps_launch_calls_that_held_their_thread_as_slow(cache):
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
