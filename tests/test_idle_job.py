"""A DDP job's step breakdown end to end on the CPU: each rank's scope entries, records and host
stretches replayed through the idle tracker as the collector feeds it, onto a session by the
profiler, written as the rank's file, and read back by `proton-viewer --diagnose` over the rank
files (and -m step parts). The shape is the issue's: rank 1's host sleeps 20 ms a step in scope
`data` before its forward; DDP's all-reduce, launched inside backward, waits on rank 0's GPU for
rank 1 long after rank 0's host left `fwd_bwd`."""
from __future__ import annotations

import json
import os

import numpy as np
from click.testing import CliRunner

from proton.data import writer
from proton.data.job import Job
from proton.data.paths import KERNEL, ROOT, paths
from proton.format import (COUNT, DEVICE_ID, DEVICE_TYPE, STEP_COMM, STEP_COUNT, STEP_IDLE_HOST,
                           STEP_WALL, TIME)
from proton.runtime.idle import COMM, COMPUTE, SYNC, IdleTracker
from proton.runtime.output import document
from proton.runtime.profiler import Profiler
from proton.runtime.session import Session
from proton.viewer.cli import viewer

MS = 1_000_000
STEPS, STEP = 10, 22 * MS
H200 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 6144}


def _share(line: str, label: str) -> int:
    """The share a --diagnose step line gives a part: `label 1.234 ms (56%)`."""
    return int(line.split(label + " ")[1].split("(")[1].split("%")[0])


def _read(path: str) -> list:
    with open(path) as f:
        return json.load(f)


def _rank(rank: int, folder) -> str:
    """One rank's file, recorded as the profiler records it (the timeline is the measure the
    test checks against: it is built here, not by the profiler)."""
    step = paths.intern(ROOT, "step")
    data = paths.intern(step, "data")
    fwd = paths.intern(step, "fwd_bwd")
    opt = paths.intern(step, "optimizer")
    gemm = paths.intern(fwd, "gemm", KERNEL)
    allreduce = paths.intern(fwd, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", KERNEL)
    adam = paths.intern(opt, "multi_tensor_apply_kernel", KERNEL)
    s = Session(1, "ddp", str(folder / f"ddp.rank{rank}.hatchet"), "shadow", "tree", None,
                job=Job("h", 100 + rank, rank, 2, rank))
    s.intervals = [[0, -1]]
    p = Profiler()
    p.sessions = {1: s}
    t = IdleTracker()
    kernels: dict[int, float] = {}

    def run(path: int, kind: int, a: int, b: int) -> None:
        t.add(np.array([a]), np.array([b]), np.array([kind]))
        kernels[path] = kernels.get(path, 0) + b - a

    for i in range(STEPS):
        s0 = i * STEP
        t.enter(step, s0)
        if rank == 1:  # its data loader sleeps 20 ms: the GPU waits on the host
            t.enter(data, s0)
            p.parts.named("idle").add(t.exit(s0 + 20 * MS))
            fwd0 = s0 + 20 * MS
        else:
            t.enter(data, s0)
            p.parts.named("idle").add(t.exit(s0 + 20_000))
            fwd0 = s0 + 20_000
        t.enter(fwd, fwd0)
        run(gemm, COMPUTE, fwd0 + 30_000, fwd0 + 930_000)
        # the all-reduce waits on the GPU until both ranks have come: rank 1 is there at
        # 21 ms into the step, rank 0 waits from 1 ms on
        run(allreduce, COMM, fwd0 + 950_000, s0 + 21 * MS + 100_000)
        p.parts.named("idle").add(t.exit(fwd0 + 1 * MS))  # the host left fwd_bwd: the all-reduce runs on
        t.enter(opt, fwd0 + 1 * MS)
        run(adam, COMPUTE, s0 + 21 * MS + 110_000, s0 + 21 * MS + 600_000)
        t.host(SYNC, [fwd0 + 1 * MS + 10_000], [s0 + 21 * MS + 600_000])  # the step's .item()
        p.parts.named("idle").add(t.exit(s0 + 21 * MS + 650_000))
        p.parts.named("idle").add(t.exit(s0 + 21 * MS + 700_000))
        p.parts.named("idle").add(t.advance(s0 + 21 * MS + 700_000))
    p.parts.named("idle").add(t.advance(10**15))
    p.parts.named("idle").add(t.end_steps())
    for path, ns in kernels.items():
        s.add(path, {TIME: ns, COUNT: STEPS, DEVICE_ID: rank, DEVICE_TYPE: 1})
    doc = document(p, s, s.data_of(0), {"CUDA": {str(rank): H200}})
    return writer.write(doc, s.path)


def test_a_ddp_step_reads_communication_on_the_waiting_rank_and_host_wait_on_the_slow_one(tmp_path):
    files = [_rank(r, tmp_path) for r in (0, 1)]
    node = {c["frame"]["name"]: c for c in _read(files[0])[0]["children"]}["step"]
    m = node["metrics"]
    # every window from a step's start to the next, the last until the GPU drained
    assert m[STEP_COUNT] == STEPS
    assert m[STEP_WALL] == (STEPS - 1) * STEP + 21 * MS + 700_000  # drained: to its exit
    assert m[STEP_COMM] >= 0.85 * m[STEP_WALL]        # rank 0: its GPU was in the all-reduce
    assert m[STEP_IDLE_HOST] <= 0.03 * m[STEP_WALL]         # 0.44 ms a step between steps
    fwd = {c["frame"]["name"]: c for c in node["children"]}["fwd_bwd"]
    assert "step_wall (ns)" not in fwd["metrics"]      # only steps carry the breakdown
    got = CliRunner().invoke(viewer, ["--diagnose", *files])
    assert got.exit_code == 0, got.output
    out = got.output
    assert "GPU time per step" in out
    line0 = next(x for x in out.splitlines() if x.strip().startswith("rank 0: step"))
    line1 = next(x for x in out.splitlines() if x.strip().startswith("rank 1: step"))
    assert _share(line0, "communication (NCCL)") >= 85
    assert _share(line0, "idle, waiting on the host") <= 3
    assert 89 <= _share(line1, "idle, waiting on the host") <= 95  # 20.4 ms of 22
    # the idle finding names the slow rank, and the scope its host was in
    idle = [x for x in out.splitlines() if "[idle GPU]" in x]
    assert any("rank 1:" in x and "scope data" in x for x in idle), out
    assert not any("rank 0:" in x for x in idle), out
    shown = CliRunner().invoke(viewer, ["-m", "step_comm/%,step_idle_host/ms", files[0]])
    assert shown.exit_code == 0, shown.output
    assert "step_comm/%" in shown.output.splitlines()[0] or "step_comm" in shown.output


def test_a_first_scope_slowed_by_the_profilers_first_launches_has_no_idle_finding(tmp_path):
    """The pcs job's shape: in the first scope the first launch call held the host 5.5 ms
    (CUPTI setting the kernel up after the profiler attached); the second scope, the same
    work, runs back to back. --diagnose finds no idle GPU, says the 5.5 ms were first
    launches, and gpu_idle leaves them out."""
    mm = paths.intern(ROOT, "mm")
    mm2 = paths.intern(ROOT, "mm2")
    k1, k2 = paths.intern(mm, "matmul_kernel", KERNEL), paths.intern(mm2, "matmul_kernel", KERNEL)
    s = Session(1, "pcs", str(tmp_path / "pcs.hatchet"), "shadow", "tree", None)
    s.intervals = [[0, -1]]
    p = Profiler()
    p.sessions = {1: s}
    t = IdleTracker()
    from proton.runtime.idle import LAUNCH
    t.enter(mm, 0)
    t.host(LAUNCH, [100_000], [5_600_000])
    starts = 5_650_000 + np.arange(10) * 210_000
    t.add(starts, starts + 209_000, np.zeros(10))
    p.parts.named("idle").add(t.exit(int(starts[-1]) + 220_000))
    t.enter(mm2, int(starts[-1]) + 300_000)
    starts2 = int(starts[-1]) + 320_000 + np.arange(10) * 210_000
    t.add(starts2, starts2 + 209_000, np.zeros(10))
    p.parts.named("idle").add(t.exit(int(starts2[-1]) + 220_000))
    p.parts.named("idle").add(t.advance(10**15))
    p.parts.named("idle").add(t.end_steps())
    s.add(k1, {TIME: 2_090_000, COUNT: 10, DEVICE_ID: 0, DEVICE_TYPE: 1})
    s.add(k2, {TIME: 2_090_000, COUNT: 10, DEVICE_ID: 0, DEVICE_TYPE: 1})
    path = writer.write(document(p, s, s.data_of(0), {"CUDA": {"0": H200}}), s.path)
    m = {c["frame"]["name"]: c["metrics"] for c in _read(path)[0]["children"]}
    assert m["mm"]["gpu_idle_excluded (ns)"] == 5_500_000
    assert m["mm"]["gpu_idle (ns)"] < 0.05 * m["mm"]["scope_wall (ns)"]
    got = CliRunner().invoke(viewer, ["--diagnose", path])
    assert got.exit_code == 0, got.output
    assert "[idle GPU]" not in got.output, got.output
    assert "keep the GPU fed" not in got.output
    assert "[info: first launches]" in got.output and "5.500 ms" in got.output
    assert os.path.exists(path)


def test_scopes_back_to_back_read_their_own_work_and_no_idle_gpu(tmp_path):
    """The counters job's shape (test_idle_steps.counters_job: add64M, d2d_copy, l2_adds,
    short_5us, bf16_matmul entered once each, back to back, each one's work running long
    after its host interval) through the profiler and --diagnose: add64M reads its 10 adds'
    1.850 ms and no idle GPU; d2d_copy reads only copies. On main add64M read `compute
    0.105 ms (47%), idle, waiting on the host 0.117 ms (53%)` with an [idle GPU] finding, and
    d2d_copy `compute 0.222 ms (100%)`, the adds of the scope before it."""
    from test_idle_steps import _replay, counters_job

    names = {1: "add64M", 2: "d2d_copy", 3: "l2_adds", 4: "short_5us", 5: "bf16_matmul"}
    scopes = {k: paths.intern(ROOT, name) for k, name in names.items()}
    entries, busy, host, own = counters_job()
    s = Session(1, "counters", str(tmp_path / "counters.hatchet"), "shadow", "tree", None)
    s.intervals = [[0, -1]]
    p = Profiler()
    p.sessions = {1: s}
    judged, _ = _replay([(scopes[k], a, b, d) for k, a, b, d in entries], busy, host, chunk=16)
    for j in judged:
        p.parts.named("idle").add(j)
    for k, (compute, copy) in own.items():
        kernel = paths.intern(scopes[k], "memcpy DtoD" if copy else "add_kernel", KERNEL)
        s.add(kernel, {TIME: compute + copy, COUNT: 10, DEVICE_ID: 0, DEVICE_TYPE: 1})
    path = writer.write(document(p, s, s.data_of(0), {"CUDA": {"0": H200}}), s.path)
    got = CliRunner().invoke(viewer, ["--diagnose", path])
    assert got.exit_code == 0, got.output
    out = got.output
    assert "[idle GPU]" not in out, out
    steps = {x.split(":")[0].strip(): x for x in out.splitlines() if " steps of " in x}
    assert "1 steps of 1.967 ms: compute 1.850 ms (94%)" in steps["add64M"], out
    assert "copies 1.280 ms (100%)" in steps["d2d_copy"] and "compute" not in steps["d2d_copy"]
    assert "compute 0.460 ms (100%)" in steps["l2_adds"], out
