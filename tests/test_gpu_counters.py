"""mode="counters" on a GPU: PM samples joined to kernels, checked against what the kernels are
known to do. Run with `pytest -m gpu`. Each case runs in a process of its own (one CUPTI
subscriber per process, and PM sampling holds the GPU's counters while it runs)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import find, load
from proton.format import COPY_FRAME

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def run(code: str, tmp_path, *args: str, timeout: float = 300,
        env: dict | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(code))
    out = subprocess.run([sys.executable, "-P", *args, str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(
                             [HERE, os.environ.get("PYTHONPATH", "")])})
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def kernels_under(node: dict) -> list[dict]:
    out = []
    for child in node["children"]:
        if "counter_ns" in child["metrics"] or "time (ns)" in child["metrics"]:
            out.append(child)
        out += kernels_under(child)
    return out


def total(node: dict, metric: str) -> float:
    return node["metrics"].get(metric, 0) + sum(total(c, metric) for c in node["children"])


WORKLOADS = """
    import torch, proton
    N = 256 * {MIB}                       # bytes per buffer
    x = torch.ones(N // 2, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    small = torch.ones(2 * {MIB}, dtype=torch.bfloat16, device="cuda")   # 4 MiB: fits L2
    out = torch.empty_like(small)
    torch.mul(x, 2, out=y); a @ b; torch.mul(small, 2, out=out); torch.cuda.synchronize()
    proton.start("c", mode="counters{mode}")
    with proton.scope("copy"):
        for _ in range(20):
            torch.mul(x, 2, out=y)             # reads N, writes N
    torch.cuda.synchronize()
    with proton.scope("matmul"):
        for _ in range(10):
            a @ b                              # 2 * 8192^3 FLOPs
    torch.cuda.synchronize()
    with proton.scope("in_l2"):
        for _ in range(2000):
            torch.mul(small, 2, out=out)       # 8 MiB of traffic, all in L2
    torch.cuda.synchronize()
    proton.finalize()
"""


@pytest.fixture(scope="module", params=["native", "python"])
def profile(request, tmp_path_factory):
    """The workloads profiled with samples read by the C reader, and by Python's fallback."""
    tmp = tmp_path_factory.mktemp("counters")
    env = {"PROTON_NATIVE": "0"} if request.param == "python" else {}
    out = run(WORKLOADS.format(MIB=MIB, mode=""), tmp, env=env)
    return load(tmp / "c.hatchet"), out.stderr


def test_a_copy_kernel_reads_and_writes_its_bytes_in_dram(profile):
    tree, _ = profile
    copy = find(tree[0], "copy")
    moved = 20 * 2 * 256 * MIB
    assert total(copy, "dram_bytes") == pytest.approx(moved, rel=0.03)
    # one kernel node under the scope, covered by samples for (almost) all its time
    (kernel,) = kernels_under(copy)
    assert kernel["metrics"]["counter_ns"] >= 0.97 * kernel["metrics"]["time (ns)"]


def test_a_bf16_matmuls_tensor_work_is_its_2mnk_flops(profile):
    tree, _ = profile
    mm = find(tree[0], "matmul")
    flops = 10 * 2 * 8192 ** 3
    assert total(mm, "tensor_flops") == pytest.approx(flops, rel=0.03)
    active = total(mm, "tensor_active_ns") / total(mm, "counter_ns")
    assert 0.6 < active <= 1.0


def test_a_kernel_that_fits_in_l2_shows_almost_no_dram(profile):
    tree, _ = profile
    node = find(tree[0], "in_l2")
    l2, dram = total(node, "l2_bytes"), total(node, "dram_bytes")
    assert l2 > 2000 * 8 * MIB * 0.9
    assert dram < 0.05 * l2


def test_a_scopes_counters_are_the_sum_of_its_kernels(profile):
    tree, _ = profile
    for scope in ("copy", "matmul", "in_l2"):
        node = find(tree[0], scope)
        for metric in ("dram_bytes", "l2_bytes", "counter_ns"):
            assert total(node, metric) == pytest.approx(
                sum(k["metrics"].get(metric, 0) for k in kernels_under(node)))
    assert tree[0]["metrics"]["dram_bytes"] == 0  # the root's 0: an inclusive metric


def test_counters_on_a_gpt_training_step_cover_every_kernel(tmp_path):
    """cuBLAS, autograd's backward thread, bf16 autocast, AdamW: every kernel node gets
    counters, the matmuls tensor work, and the viewer derives the rates."""
    out = subprocess.run(
        [sys.executable, "-P", "-m", "proton", "--counters", "-n", "gpt",
         os.path.join(HERE, "gpt_workload.py"), "--steps", "60"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PROTON_DEBUG": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    tree = load(tmp_path / "gpt.hatchet")
    kernels = [k for k in kernels_under(tree[0]) if "time (ns)" in k["metrics"]
               and not COPY_FRAME.match(k["frame"]["name"])]
    assert len(kernels) > 20

    def sampled(k: dict) -> float:  # measured, or sampled and said not to be measurable
        return k["metrics"].get("counter_ns", 0) + k["metrics"].get("counters_unresolved_ns", 0)

    covered = sum(map(sampled, kernels))
    timed = sum(k["metrics"]["time (ns)"] for k in kernels)
    assert covered >= 0.9 * timed, (covered, timed, out.stderr[-2000:])
    without = [k["frame"]["name"] for k in kernels if not sampled(k)]
    assert len(without) <= len(kernels) // 20, without
    gemms = [k for k in kernels if k["metrics"].get("tensor_flops", 0) > 0]
    assert gemms, "no kernel did tensor work in a bf16 GPT step"


def test_counters_held_by_another_sampler_are_refused_in_one_line_and_times_go_on(tmp_path):
    out = run("""
        import torch, proton
        from proton.cupti import perfworks
        from proton.cupti.buffers import loaded_libcupti
        from proton.cupti.counters import METRICS
        x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize()
        from cupti import cupti  # loads libcupti as the profiler does
        holder = perfworks.PmSampler(perfworks.Cupti(loaded_libcupti()), 0, METRICS, 100000)
        holder.start()
        proton.start("held", mode="counters")
        with proton.scope("work"):
            torch.mul(x, 2)
        proton.finalize()
    """, tmp_path)
    said = [line for line in out.stderr.splitlines() if "mode='counters'" in line]
    assert len(said) == 1 and "cannot be read" in said[0], out.stderr
    tree = load(tmp_path / "held.hatchet")
    assert total(find(tree[0], "work"), "time (ns)") > 0
    assert total(tree[0], "dram_bytes") == 0


def test_exact_counts_of_listed_scopes_by_the_range_profiler(tmp_path):
    """counters:scopes=copy,matmul: the range profiler counts each listed scope's kernels;
    a listed scope inside another is counted within it, an unlisted one not at all."""
    run("""
        import torch, proton
        x = torch.ones(128 * %d, dtype=torch.bfloat16, device="cuda")   # 256 MiB
        y = torch.empty_like(x)
        a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
        torch.mul(x, 2, out=y); a @ a; torch.cuda.synchronize()
        proton.start("exact", mode="counters:scopes=copy,matmul")
        for _ in range(3):
            with proton.scope("copy"):
                for _ in range(5):
                    torch.mul(x, 2, out=y)
                with proton.scope("matmul"):      # nested in a listed scope: within copy's
                    pass
            with proton.scope("matmul"):
                for _ in range(4):
                    a @ a
            with proton.scope("other"):
                torch.mul(x, 2, out=y)
        proton.finalize()
    """ % MIB, tmp_path)
    tree = load(tmp_path / "exact.hatchet")
    copy = find(tree[0], "copy")["metrics"]
    mm = next(c for c in tree[0]["children"] if c["frame"]["name"] == "matmul")["metrics"]
    assert copy["exact_ranges"] == 3 and mm["exact_ranges"] == 3
    assert copy["exact_dram_bytes"] == pytest.approx(3 * 5 * 2 * 256 * MIB, rel=0.03)
    assert mm["exact_tensor_flops"] == pytest.approx(3 * 4 * 2 * 8192 ** 3, rel=0.03)
    assert mm["exact_tensor_active"] > 50
    assert "exact_dram_bytes" not in find(tree[0], "other")["metrics"]
    # the kernels' own times are still there, unserialised: the scope's GPU time within 10%
    kernel_ns = sum(k["metrics"].get("time (ns)", 0) for k in kernels_under(
        next(c for c in tree[0]["children"] if c["frame"]["name"] == "matmul")))
    assert mm["exact_gpu_ns"] == pytest.approx(kernel_ns, rel=0.1)


NCU_WORK = """
    import sys, torch
    x = torch.ones(128 * {MIB}, dtype=torch.bfloat16, device="cuda"); y = torch.empty_like(x)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    torch.cuda.synchronize()
    under_ncu = sys.argv[1:] == ["ncu"]
    if not under_ncu:
        import proton
        proton.start("side", mode="counters")
    for name, fn, n in (("copy", lambda: torch.mul(x, 2, out=y), 10), ("matmul", lambda: a @ a, 10)):
        if under_ncu:
            torch.cuda.nvtx.range_push(name)
        else:
            proton.enter_scope(name)
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop() if under_ncu else proton.exit_scope(name)
    if not under_ncu:
        proton.finalize()
"""
NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
               "sm__pipe_tensor_cycles_active.sum")


def nsight_compute() -> str | None:
    import glob
    import shutil
    found = [shutil.which("ncu"), *sorted(glob.glob("/usr/local/cuda*/bin/ncu"))]
    return next((p for p in found if p and os.access(p, os.X_OK)), None)


def test_nsight_compute_counts_what_the_samples_count(tmp_path):
    """Side by side with Nsight Compute (which replays each kernel), caches and clocks left as
    the job has them: DRAM and L2 bytes and tensor-pipe cycles per scope within 3%.
    H200, 2026-11-26: copy DRAM 1.003, L2 0.997; matmul DRAM 1.000, L2 1.003, tensor 1.000."""
    import csv
    import io
    ncu = nsight_compute()
    if ncu is None:
        pytest.skip("Nsight Compute (ncu) is not on this machine")
    script = tmp_path / "job.py"
    run(NCU_WORK.format(MIB=MIB), tmp_path)
    out = subprocess.run([ncu, "--cache-control", "none", "--clock-control", "none", "--csv",
                          "--nvtx", "--print-units", "base", "--metrics", ",".join(NCU_METRICS),
                          sys.executable, "-P", str(script), "ncu"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    table = out.stdout[out.stdout.find('"ID"'):]
    assert table, out.stdout[-2000:] + out.stderr[-2000:]
    theirs: dict = {}
    for row in csv.DictReader(io.StringIO(table)):
        ranges = " ".join(v for k, v in row.items() if k and k.startswith("thread Domain") and v)
        scope = "copy" if "copy" in ranges else "matmul" if "matmul" in ranges else "?"
        into = theirs.setdefault(scope, {})
        into[row["Metric Name"]] = into.get(row["Metric Name"], 0.0) + float(
            row["Metric Value"].replace(",", "") or 0)
    tree = load(tmp_path / "side.hatchet")[0]
    for scope in ("copy", "matmul"):
        ours, t = find(tree, scope), theirs[scope]
        assert total(ours, "dram_bytes") == pytest.approx(
            t["dram__bytes_read.sum"] + t["dram__bytes_write.sum"], rel=0.03), scope
        assert total(ours, "l2_bytes") == pytest.approx(t["lts__t_bytes.sum"], rel=0.03), scope
    # GH100 and the chips listed in counters.FLOPS_PER_TENSOR_CYCLE: 1,024 FLOP a cycle
    assert total(find(tree, "matmul"), "tensor_flops") == pytest.approx(
        theirs["matmul"]["sm__pipe_tensor_cycles_active.sum"] * 1024, rel=0.03)


def test_a_full_hardware_buffer_is_counted_and_said_and_the_profile_keeps_its_times(tmp_path):
    """Samples lost to a full hardware buffer (made small here, and read seldom) are said in one
    line at the end; the kernels keep their times and the samples that were read."""
    out = run("""
        import time, torch, proton
        from proton.cupti import counters
        counters.HARDWARE_BUFFER, counters.TICK = 1 << 20, 1.0
        x = torch.ones(1 << 24, device="cuda"); y = torch.empty_like(x)
        proton.start("full", mode="counters:interval=10")
        with proton.scope("work"):
            t = time.time()
            while time.time() - t < 3:
                torch.mul(x, 2, out=y)
            torch.cuda.synchronize()
        proton.finalize()
    """, tmp_path)
    said = [line for line in out.stderr.splitlines() if "overflowed" in line]
    assert len(said) == 1 and "interval=US" in said[0], out.stderr[-2000:]
    work = find(load(tmp_path / "full.hatchet")[0], "work")
    assert total(work, "time (ns)") > 1e9 and total(work, "count") > 1000


# -- issue 57: short kernels, warm-ups, a copy and L2-resident adds, as real_shapes.py runs them --
PLANTED = """
    import json, torch, proton
    n = 64 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    z = torch.empty_like(x)
    big = torch.empty(64 << 20, device="cuda"); big2 = torch.empty_like(big)   # 256 MiB each
    small = [torch.randn(1 << 20, device="cuda") for _ in range(3)]          # 12 MiB: in L2
    pool = torch.randn(1 << 28, device="cuda")  # 1 GiB, rotated through: reads miss L2
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.add(x, y, out=z); torch.cuda.synchronize()
    proton.start("planted", mode="counters")
    for _ in range(3):  # warm-up launches outside any scope, the GPU coming out of idle
        torch.add(x, y, out=z)
    w @ w  # cuBLAS's first matmul, outside scopes
    torch.cuda.synchronize()
    with proton.scope("add64M"):
        for _ in range(10):
            torch.add(x, y, out=z)
    with proton.scope("d2d_copy"):
        for _ in range(10):
            big2.copy_(big)                   # a memcpy DtoD: reads and writes 256 MiB
    with proton.scope("l2_adds"):
        for _ in range(200):
            torch.add(small[0], small[1], out=small[2])
    truth, off = {}, 0
    for label, k in (("short_5us", 1 << 17), ("short_20us", 1 << 20), ("short_100us", 6 << 20),
                     ("short_1ms", 64 << 20)):
        with proton.scope(label):
            for _ in range(20):
                if off + 2 * k > pool.numel():
                    off = 0
                torch.mul(pool[off:off + k], 2.0, out=pool[off + k:off + 2 * k])
                off += 2 * k
        truth[label] = 20 * 2 * k * 4       # each launch reads and writes k floats
    torch.cuda.synchronize()
    proton.finalize()
    print(json.dumps(truth))
"""


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The `counters` job of bench/probes/real_shapes.py: the profile, and each short scope's
    true DRAM bytes."""
    tmp = tmp_path_factory.mktemp("planted")
    out = run(PLANTED, tmp)
    return load(tmp / "planted.hatchet"), json.loads(out.stdout.strip().splitlines()[-1]), \
        str(tmp / "planted.hatchet")


def only_kernel(node: dict) -> dict:
    (kernel,) = [k for k in kernels_under(node) if "time (ns)" in k["metrics"]]
    return kernel


def test_planted_short_kernels_read_their_bytes_within_10_percent_or_are_marked(planted):
    """Kernels of about 2, 3.5, 14 and 130 us (20 launches each, 1, 8, 48 and 512 MiB moved a
    launch) in scopes run back to back: each scope's kernel reads its true DRAM bytes within
    10%, or is written as not measured (counters_unresolved_ns, no bytes). The 130 us kernels
    span whole samples: measured, within 10%."""
    tree, truth, _ = planted
    for label, expected in truth.items():
        m = only_kernel(find(tree[0], label))["metrics"]
        if m.get("counters_unresolved_ns"):
            assert "dram_bytes" not in m and label != "short_1ms", (label, m)
            continue
        assert m["dram_bytes"] == pytest.approx(expected, rel=0.10), (label, m)


def test_warm_ups_and_every_kernel_read_at_most_the_gpus_peak(planted):
    """The warm-up adds and cuBLAS's first matmul (outside scopes, on a GPU coming out of
    idle: 126% SM active and 114% of the DRAM bandwidth before) and every other node: no view
    shows a share of a peak over 100%, nor DRAM bytes/s over the bandwidth."""
    from proton.viewer.derive import available, derive
    from proton.viewer.reader import load as load_profile

    tree, _, path = planted
    gpu = tree[1]["CUDA"]["0"]
    bandwidth = 2 * gpu["bus_width"] * gpu["memory_clock_rate"] * 1e3 / 8
    for child in tree[0]["children"]:  # the warm-ups: ROOT's own kernels
        m = child["metrics"]
        if m.get("counter_ns"):
            assert m["sm_active_ns"] <= 1.05 * m["counter_ns"], child["frame"]["name"]
            assert m["dram_bytes"] / m["counter_ns"] * 1e9 <= 1.05 * bandwidth
    prof = load_profile(path)
    for spec in ("sm_active", "tensor_active", "issue_active", "dram_throughput",
                 "l2_throughput", "l1_throughput", "sm_throughput"):
        if spec not in available(prof):
            continue
        values = derive(prof, spec).values.dropna()
        assert (values <= 100).all(), (spec, values.max())
    assert (derive(prof, "dram_byte/s").values.dropna() <= bandwidth).all()


def test_a_device_to_device_copy_gets_its_dram_bytes(planted):
    """y.copy_(x) of 256 MiB, ten times (a memcpy DtoD on the copy engines): the copy's node
    reads 2N a copy within 5%: the copy engines' traffic is in the samples, and is its own."""
    tree, _, _ = planted
    copy = only_kernel(find(tree[0], "d2d_copy"))
    assert COPY_FRAME.match(copy["frame"]["name"]), copy["frame"]
    assert copy["metrics"]["dram_bytes"] == pytest.approx(10 * 2 * 256 * MIB, rel=0.05)


def test_adds_in_l2_are_judged_against_the_l2(planted):
    """200 adds of 1M fp32 (12 MiB, in L2), right after the copy: their DRAM traffic is not
    the copy's (under 5% of their L2 bytes), the L2's own throughput is sampled, and
    --diagnose neither calls them far from the roofline by DRAM nor tells them to fix DRAM
    traffic."""
    from proton.viewer.diagnose import diagnose
    from proton.viewer.reader import load as load_profile

    tree, _, path = planted
    m = only_kernel(find(tree[0], "l2_adds"))["metrics"]
    assert "counters_unresolved_ns" not in m, m
    assert m.get("dram_bytes", 0) < 0.05 * m["l2_bytes"], m
    assert m["l2_throughput_ns"] > 0  # the L2's share of its peak, as the GPU counts it
    for f in diagnose(load_profile(path)).findings:
        if f.path.endswith("l2_adds") and f.rule in ("far from the roofline", "memory-bound",
                                                     "latency-bound"):
            assert "of the DRAM bandwidth" not in f.evidence, f.evidence
            assert "DRAM" not in f.advice or "DRAM is not what limits" in f.advice, f.advice
