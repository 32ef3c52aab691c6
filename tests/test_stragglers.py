"""A job's stragglers named by --diagnose over its rank files or its job file: the rank each
step's collectives wait for, the scope where it spent the time, whether its host or its GPU was
slow, and what it costs a step; communication kernels not judged by the launch-shape rules.

The real jobs (tests/data/rs, rs4: bench/probes/real_shapes.sh on 2 and 4 H200s, whole scripts
under `torchrun -m proton`, so DDP's construction, broadcasts and warm-up sit at ROOT): DDP
with its bucketed all-reduce in backward, or FSDP2; a rank whose host sleeps in scope `data`
before its forward, or whose batch is 1.05x; each job's log holds its own measures (wall time
and the CUDA-event time of fwd_bwd, per rank)."""
from __future__ import annotations

import json
import os
import re

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer
from straggler_words import read

H100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 5120}
MS = 1e6
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def kernel(name: str, ns: float, device: int, **more) -> dict:
    return {"frame": {"name": name, "type": "function"},
            "metrics": {"time (ns)": ns, "count": 5, "device_id": str(device),
                        "device_type": "CUDA", **more}, "children": []}


def timed(name: str, ns: float, *children) -> dict:
    """A cpu_timed_scope as the writer records it: its host time and entries, own values."""
    return {"frame": {"name": name, "type": "function"},
            "metrics": {"cpu_time (ns)": ns, "cpu_count": 5}, "children": list(children)}


def rank_file(folder, rank: int, world: int, *children) -> str:
    root = {"frame": {"name": "ROOT", "type": "function", "host": "h", "pid": 100 + rank,
                      "rank": rank, "world_size": world, "local_rank": rank},
            "metrics": {"time (ns)": 0, "count": 0}, "children": list(children)}
    path = os.path.join(folder, f"ddp.rank{rank}.hatchet")
    with open(path, "w") as f:
        json.dump([root, {"CUDA": {str(rank): H100}}], f)
    return path


def nccl(ns: float, rank: int) -> dict:
    """The issue's all-reduce: 24 blocks on an H100's 132 SMs."""
    return kernel(NCCL, ns, rank, grid_blocks=24, block_threads=512, registers_per_thread=96)


def ddp_job(folder, world: int, slow: int | None, delay_ns: float, noise: float = 0.0) -> None:
    """5 steps of a DDP job: fwd_bwd (host time, a matmul) then the all-reduce. Rank `slow`
    spends `delay_ns` more in fwd_bwd on the host; the others wait that long in the all-reduce
    (every rank's step takes as long: they synchronise there)."""
    for rank in range(world):
        jitter = 1 + noise * (rank % 2)
        extra = delay_ns if rank == slow else 0.0
        waits = 5 * MS if rank == slow or slow is None else 5 * MS + delay_ns
        step = 300 * MS + delay_ns
        rank_file(folder, rank, world,
                  timed("step", step,
                        timed("fwd_bwd", 250 * MS * jitter + extra,
                              kernel("matmul", 200 * MS * jitter, rank)),
                        nccl(waits * jitter, rank)))


def diagnose(*args) -> str:
    result = CliRunner().invoke(viewer, ["--diagnose", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout


def findings(*args) -> dict:
    result = CliRunner().invoke(viewer, ["--diagnose", "--output", "json", *map(str, args)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("world,slow", [(2, 1), (4, 1), (4, 3)])
def test_the_rank_the_others_wait_for_is_named_with_its_scope_cause_and_cost(tmp_path, world,
                                                                              slow):
    delay = 100 * MS  # 20 ms a step over 5 steps, as in issue 49
    ddp_job(tmp_path, world, slow, delay)
    got = findings(tmp_path)
    stragglers = [f for f in got["findings"] if f["rule"] == "straggler"]
    assert len(stragglers) == 1, got["findings"]
    s = stragglers[0]
    assert s["kernel"] == "scope fwd_bwd" and s["path"] == "ROOT / step"
    assert s["evidence"].startswith(f"rank {slow} arrives last at the collectives of scope step")
    assert f"the other {'rank spends' if world == 2 else f'{world - 1} ranks spend'} 21.000 ms " \
        f"a step in them, rank {slow} 1.000 ms" in s["evidence"]
    assert f"rank {slow} is slow on the host: it spends +20.000 ms a step over the others in " \
        "scope fwd_bwd (cpu time)" in s["evidence"]
    assert "costs 20.000 ms a step" in s["evidence"] and "step (5 steps): " in s["evidence"]
    assert s["saves_ns"] == pytest.approx(delay, rel=0.1)
    # its cause is named there, not once more as an imbalance of its own
    assert not [f for f in got["findings"] if f["rule"] == "imbalance"]
    # the straggler is the first thing to read
    assert got["groups"][0]["kernel"] == "scope fwd_bwd"
    text = diagnose(tmp_path)
    assert text.startswith("1. scope fwd_bwd")
    assert "[straggler]" in text and "[too few programs]" not in text


def test_a_collective_of_24_blocks_on_132_sms_gets_no_launch_shape_advice(tmp_path):
    """Issue 49: NCCL picks its grid, and its time is waiting: not 'too few programs'."""
    rank_file(tmp_path, 0, 1, timed("step", 200 * MS, nccl(126 * MS, 0),
                                    kernel("matmul", 50 * MS, 0, grid_blocks=16,
                                           block_threads=128, registers_per_thread=32)))
    text = diagnose(tmp_path / "ddp.rank0.hatchet")
    assert "[too few programs]" in text  # the matmul's grid is still judged
    assert f"{NCCL}" not in text.split("note:")[0]
    assert "1 communication kernel (NCCL) not judged by the launch-shape" in text


def test_two_rank_files_of_the_issue_give_the_straggler_not_occupancy_advice(tmp_path):
    ddp_job(tmp_path, 2, 1, 100 * MS)
    text = diagnose(tmp_path / "ddp.rank0.hatchet", tmp_path / "ddp.rank1.hatchet")
    assert "too few programs" not in text and "low occupancy" not in text
    assert "far from the roofline" not in text.split("note:")[0]


@pytest.mark.parametrize("world", [2, 4])
def test_a_balanced_job_has_no_straggler(tmp_path, world):
    ddp_job(tmp_path, world, None, 0.0, noise=0.05)  # odd ranks 5% slower throughout
    got = findings(tmp_path)
    assert not [f for f in got["findings"] if f["rule"] in ("straggler", "imbalance")]
    assert "straggler" in got["rules_run"] and "imbalance" in got["rules_run"]


def test_a_rank_with_more_gpu_work_is_named_with_its_cost(tmp_path):
    """No collective: rank 2's matmul takes 100 ms more; the job waits that long for it."""
    for rank in range(4):
        rank_file(tmp_path, rank, 4, timed("step", 300 * MS, kernel(
            "matmul", (300 if rank == 2 else 200) * MS, rank)))
    got = findings(tmp_path)
    found = [f for f in got["findings"] if f["rule"] == "imbalance"]
    assert [f["kernel"] for f in found] == ["matmul"]
    assert found[0]["evidence"].startswith("rank 2 spends 300.000 ms of GPU time here")
    assert found[0]["saves_ns"] == pytest.approx(100 * MS)
    assert "33% of the job's 300.000 ms" in found[0]["evidence"]


def test_one_profile_is_not_judged_for_stragglers(tmp_path):
    ddp_job(tmp_path, 2, 1, 100 * MS)
    got = findings(tmp_path / "ddp.rank1.hatchet")
    assert "straggler" not in got["rules_run"]


def test_one_straggler_among_64_ranks_is_named_though_max_over_mean_is_near_one(tmp_path):
    """63 ranks wait about equally in the all-reduce (its max/mean is 1.02): its fastest rank
    gives the straggler away."""
    ddp_job(tmp_path, 64, 37, 100 * MS)
    got = findings(tmp_path)
    s = [f for f in got["findings"] if f["rule"] == "straggler"]
    assert len(s) == 1 and s[0]["evidence"].startswith("rank 37 arrives last at the "
                                                       "collectives of scope step")
    assert s[0]["saves_ns"] == pytest.approx(100 * MS, rel=0.1)


def test_a_rank_slow_in_the_collective_itself_is_an_imbalance_not_a_straggler(tmp_path):
    """Rank 3's all-reduce takes twice the others' (a slow link, say): nobody arrived late."""
    for rank in range(4):
        rank_file(tmp_path, rank, 4, timed("step", 300 * MS, nccl((80 if rank == 3 else 40)
                                                                   * MS, rank)))
    got = findings(tmp_path)
    assert [f["rule"] for f in got["findings"]] == ["imbalance"]
    assert got["findings"][0]["evidence"].startswith("rank 3 spends 80.000 ms of GPU time")
    assert got["findings"][0]["saves_ns"] == pytest.approx(40 * MS)


def plain(name: str, *children) -> dict:
    return {"frame": {"name": name, "type": "function"}, "metrics": {},
            "children": list(children)}


def test_a_rank_slow_everywhere_is_one_finding_at_the_root_not_one_per_frame(tmp_path):
    """Rank 2's GPU (a slower clock, say) takes 1.5x on every kernel of every layer."""
    for rank in range(4):
        f = 1.5 if rank == 2 else 1.0
        rank_file(tmp_path, rank, 4, *[plain(f"layer_{i}", kernel("matmul", 30 * MS * f, rank),
                                             kernel("gelu", 10 * MS * f, rank))
                                       for i in range(3)])
    got = findings(tmp_path)
    assert [(f["rule"], f["kernel"]) for f in got["findings"]] == [("imbalance", "ROOT")]
    assert got["findings"][0]["evidence"].startswith(
        "rank 2 spends 180.000 ms of GPU time in its kernels")
    assert got["findings"][0]["saves_ns"] == pytest.approx(60 * MS)


def test_the_html_reports_findings_name_the_straggler_too(tmp_path):
    """--html of several rank files: its findings tab has the same job rules as --diagnose."""
    ddp_job(tmp_path, 2, 1, 100 * MS)
    out = tmp_path / "job.html"
    result = CliRunner().invoke(viewer, ["--html", str(out), str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    data = json.loads(text.split('id="data">', 1)[1].split("</script>", 1)[0])
    assert "arrives last at the collectives of scope step" in json.dumps(data["findings"])


def job_file(folder, world: int, slow: int, delay_ns: float) -> str:
    """The job file the job's own merge writes (rank_merge, as at finalize) of ddp_job's
    ranks: no rank's values, only each frame's statistics."""
    from proton import rank_merge

    ddp_job(folder, world, slow, delay_ns)
    reducer = rank_merge.Reducer()
    for rank in range(world):
        with open(os.path.join(folder, f"ddp.rank{rank}.hatchet")) as f:
            root, devices = json.load(f)
        reducer.add(rank_merge.leaf(root, rank, devices, root["frame"]))
        os.remove(os.path.join(folder, f"ddp.rank{rank}.hatchet"))
    path = os.path.join(folder, "ddp.hatchet")
    with open(path, "w") as f:
        json.dump(rank_merge.document(reducer.result(), world), f)
    return path


@pytest.mark.parametrize("world,slow", [(2, 1), (4, 3), (64, 17)])
def test_a_job_file_alone_names_the_straggler_and_its_cost_per_step(tmp_path, world, slow):
    """5 steps, rank `slow` 20 ms late to the all-reduce each step (100 ms in all): the job
    file (no rank files beside it) names it, the cause and a cost within 10% of the delay."""
    path = job_file(str(tmp_path), world, slow, 100 * MS)
    out = CliRunner().invoke(viewer, ["--diagnose", path])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if "arrives last" in x)
    assert f"rank {slow} arrives last at the collectives of scope step" in line, line
    assert f"rank {slow} is slow on the host: it spends +20.000 ms a step over the others in " \
        "scope fwd_bwd (cpu time)" in line, line
    each = float(line.split("costs ")[1].split(" ms a step")[0])
    assert abs(each - 20) <= 2 and "scope step (5 steps): " in line, line
    assert "too few programs" not in out.output


# -- the real jobs ------------------------------------------------------------------------------
DATA = os.path.join(os.path.dirname(__file__), "data")
REAL = {"ddp2_host": "rs", "ddp4_host5": "rs", "ddp4_gpu5": "rs", "ddp4_balanced": "rs",
        "fsdp4_host5": "rs4", "fsdp4_balanced": "rs4"}
"""Each job's folder: rs recorded at main 44bba74, rs4 at 90c6005 (scopes' gpu_idle then
counted every entry; rs's data scope lost the entries in which the GPU ran nothing)."""
PLANTED_MS = {"ddp2_host": 20.0, "ddp4_host5": 3.0, "fsdp4_host5": 3.0}
"""The host sleep a step of the slow rank, in scope data before its forward."""
STEPS = 20



def real(name: str, which: str) -> list[str]:
    """The job's own file, or its rank files."""
    folder = os.path.join(DATA, REAL[name])
    if which == "job":
        return [os.path.join(folder, f"{name}.hatchet")]
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.startswith(f"{name}.rank") and f.endswith(".hatchet"))


def log(name: str) -> dict[int, dict]:
    """The job's own measures, per rank (its log's JSON lines, run together by torchrun)."""
    with open(os.path.join(DATA, REAL[name], f"{name}.log")) as f:
        found = re.findall(r"\{[^{}]*\"job\"[^{}]*\}", f.read())
    return {d["rank"]: d for d in map(json.loads, found)}


def wall_ms_a_step(name: str) -> float:
    return max(d["wall_s"] for d in log(name).values()) * 1e3 / STEPS


def straggler(name: str, which: str, scope: str) -> str:
    """The one straggler finding's evidence of --diagnose (asserts there is one, on the scope
    named, and no imbalance beside it)."""
    got = findings(*real(name, which))
    late = [f for f in got["findings"] if f["rule"] == "straggler"]
    assert len(late) == 1, [f["evidence"] for f in late]
    assert not [f for f in got["findings"] if f["rule"] == "imbalance"], got["findings"]
    assert (late[0]["kernel"], late[0]["path"]) == (f"scope {scope}", "ROOT / step"), late[0]
    return late[0]["evidence"]


@pytest.mark.parametrize("which", ["job", "ranks"])
@pytest.mark.parametrize("name,slow", [("ddp2_host", 1), ("ddp4_host5", 3), ("fsdp4_host5", 2)])
def test_a_rank_slow_on_the_host_is_named_with_its_scope_and_cost_a_step(name, slow, which):
    """The rank whose host sleeps before its forward, not one the warm-up's collectives at
    ROOT point at (today's main named rank 0 of ddp2_host, from them, with a cause in a
    cuBLAS kernel). Its host's excess in data within 10% of the sleep; the cost a step (its
    GPU's extra idle) within 15% of the job's own measure: its step's wall time over the
    balanced job's (DDP on 4 GPUs), the others' extra CUDA-event time in fwd_bwd, where they
    wait (2 ranks); never over the sleep."""
    got = read(straggler(name, which, "data"))
    assert got and (got["rank"], got["step"], got["steps"], got["cause"]) == \
        (slow, "step", STEPS, "host"), got
    planted = PLANTED_MS[name]
    assert got["scope"] == "data" and got["what"] == "host time", got
    assert got["excess_ms"] == pytest.approx(planted, rel=0.10), got
    cost = got["cost_ms"]
    assert cost <= 1.1 * planted, got
    if name == "ddp4_host5":
        job = wall_ms_a_step(name) - wall_ms_a_step("ddp4_balanced")
        assert cost == pytest.approx(job, rel=0.15), (got, job)
    if name == "ddp2_host":
        ranks = log(name)
        waits = (ranks[0]["fwd_bwd_events_ms"] - ranks[1]["fwd_bwd_events_ms"]) / STEPS
        assert cost == pytest.approx(waits, rel=0.15), (got, waits)


@pytest.mark.parametrize("which", ["job", "ranks"])
def test_a_rank_slow_on_the_gpu_is_named_with_its_kernels_excess_in_fwd_bwd(which):
    """ddp4_gpu5: rank 3's batch is 1.05x (cuBLAS picks other kernels for it). Its kernels'
    excess in fwd_bwd is what the rank files hold (read here from their JSON); the job's own
    cost a step (its step's wall time over the balanced job's: 0.96 ms) lies between the
    finding's bounds: the others' kernels slowed by the all-reduce spinning beside them keep
    the lower one low, their wait in every bucket's all-reduce makes the upper one high."""
    got = read(straggler("ddp4_gpu5", which, "fwd_bwd"))
    assert got and (got["rank"], got["step"], got["cause"], got["scope"]) == \
        (3, "step", "GPU", "fwd_bwd"), got
    excess, low, high = got["excess_ms"], got["cost_ms"], got["high_ms"]
    assert low >= excess, got
    kernels = []
    for path in real("ddp4_gpu5", "ranks"):
        with open(path) as f:
            step = next(c for c in json.load(f)[0]["children"] if c["frame"]["name"] == "step")
        fwd_bwd = next(c for c in step["children"] if c["frame"]["name"] == "fwd_bwd")
        kernels.append(sum(k["metrics"].get("time (ns)", 0) for k in fwd_bwd["children"]
                           if "nccl" not in k["frame"]["name"].lower()))
    truth = (kernels[3] - sum(kernels[:3]) / 3) / MS / STEPS
    assert excess == pytest.approx(truth, abs=0.002), (got, truth)
    job = wall_ms_a_step("ddp4_gpu5") - wall_ms_a_step("ddp4_balanced")
    assert low < job < high, (got, job)


@pytest.mark.parametrize("which", ["job", "ranks"])
@pytest.mark.parametrize("name", ["ddp4_balanced", "fsdp4_balanced"])
def test_a_balanced_job_has_no_straggler_finding(name, which):
    """No rank planted slow: DDP's all-reduce within 8% over the ranks; FSDP's collectives
    spread wide (a host-bound job whose ranks take turns being last) with no rank apart."""
    got = findings(*real(name, which))
    assert not [f for f in got["findings"] if f["rule"] in ("straggler", "imbalance")], \
        [f["evidence"] for f in got["findings"] if f["rule"] in ("straggler", "imbalance")]
    assert "straggler" in got["rules_run"]
