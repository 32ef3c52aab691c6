"""Several GPUs: torchrun jobs under `proton` (one file per rank, merged by the viewer) and one
process driving two GPUs; run with `pytest -m gpu`. The NCCL and two-GPU tests need 2 GPUs
(device kind nvidia-h200-x2); on one GPU both ranks share it and all-reduce through gloo."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import kernels, load
from proton.format import job_of

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

TWO = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                         reason="needs 2 GPUs: run on device kind nvidia-h200-x2")

TRAIN = """
import os, torch, torch.distributed as dist
import proton

two = torch.cuda.device_count() >= 2  # NCCL needs a GPU per rank
dist.init_process_group("nccl" if two else "gloo")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
a = torch.randn(2048, 2048, device="cuda")
(a @ a).clamp_(-1, 1)  # cuBLAS's set-up outside the step: it can outlast the 3:1 skew
g = torch.ones(1 << 20, device="cuda" if two else "cpu")
dist.all_reduce(g)  # NCCL's warm-up outside the step (and both ranks start the step together)
torch.cuda.synchronize()
with proton.scope("step"):
    with proton.scope("compute"):
        for _ in range(4 * (1 + 2 * rank)):  # rank 1 does three times rank 0's matmuls
            a = (a @ a).clamp_(-1, 1)
    with proton.scope("allreduce"):
        dist.all_reduce(g)
torch.cuda.synchronize()
assert g[0].item() == 2 * 2  # the step's all-reduce ran on both ranks
dist.destroy_process_group()
"""


def torchrun(tmp_path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "train.py").write_text(TRAIN)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", str(29500 + os.getpid() % 1000), *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def viewer_rows(*args: str) -> dict[str, dict]:
    run = subprocess.run([sys.executable, "-P", "-m", "proton.viewer.cli", "--output", "json",
                          *args],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return {" / ".join(r["path"]): r for r in json.loads(run.stdout)}


def nccl(node: dict) -> list[dict]:
    from proton.viewer.derive import COMM_KERNEL  # CUPTI's names are mangled C++

    return [k for k in kernels(node) if COMM_KERNEL.match(k["frame"]["name"])]


def job_files(tmp_path) -> list[str]:
    return [str(tmp_path / f"ddp.rank{rank}.hatchet") for rank in (0, 1)]


@pytest.mark.parametrize("form", ["command", "module"])
def test_torchrun_job_writes_one_profile_per_rank_and_the_viewer_merges_them(tmp_path, form):
    if form == "command":  # torchrun --no-python proton -n ddp train.py
        proton_bin = shutil.which("proton")
        assert proton_bin, "the proton command is not on PATH"
        torchrun(tmp_path, "--no-python", proton_bin, "-n", "ddp", "train.py")
    else:  # torchrun -m proton -n ddp train.py
        torchrun(tmp_path, "-m", "proton", "-n", "ddp", "train.py")
    # the job's file too: merged before the script's destroy_process_group()
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == [
        "ddp.hatchet", "ddp.rank0.hatchet", "ddp.rank1.hatchet"]
    for rank in (0, 1):
        root, devices = load(tmp_path / f"ddp.rank{rank}.hatchet")
        assert job_of(root)["rank"] == rank and job_of(root)["world_size"] == 2
        assert job_of(root)["local_rank"] == rank
        step = next(c for c in root["children"] if c["frame"]["name"] == "step")
        gpu = rank % torch.cuda.device_count()
        assert {k["metrics"]["device_id"] for k in kernels(step)} == {str(gpu)}
        assert list(devices["CUDA"]) == [str(gpu)]
    got = viewer_rows("-m", "count,time/ms", *job_files(tmp_path))
    compute = got["ROOT / step / compute"]
    # rank 1 runs three times rank 0's iterations (a matmul and a clamp each)
    assert compute["count max"] == 3 * compute["count min"] > 0
    assert compute["count"] == compute["count min"] + compute["count max"]
    assert compute["count max rank"] == 1 and compute["time (ms) max rank"] == 1


@TWO
def test_nccl_all_reduce_and_the_imbalance_before_it(tmp_path):
    torchrun(tmp_path, "-m", "proton", "-n", "ddp", "train.py")
    for rank in (0, 1):
        root, _ = load(tmp_path / f"ddp.rank{rank}.hatchet")
        step = next(c for c in root["children"] if c["frame"]["name"] == "step")
        assert nccl(step), f"rank {rank} has no NCCL kernel under step"
    got = viewer_rows("-m", "time/ms,comm/%", str(tmp_path))
    compute = got["ROOT / step / compute"]
    assert compute["time (ms) max rank"] == 1
    assert compute["time (ms) max/mean"] == pytest.approx(1.5, rel=0.15)  # 3:1 -> 1.5
    assert got["ROOT / step / allreduce"]["comm/%"] == pytest.approx(100)
    comm = [p for p in got if p.startswith("ROOT / step / allreduce / ") and
            p.split(" / ")[-1].lower().startswith("nccl")]
    assert comm and all("[rank" not in p for p in comm)  # on both ranks
    # rank 0 waits longer in the all-reduce
    assert got["ROOT / step"]["comm/% max rank"] == 0, got["ROOT / step"]


def merged_trace(tmp_path) -> tuple[list[dict], dict]:
    torchrun(tmp_path, "-m", "proton", "-n", "ddp", "-d", "trace", "train.py")
    assert sorted(p.name for p in tmp_path.glob("*.chrome_trace")) == [
        "ddp.rank0.chrome_trace", "ddp.rank1.chrome_trace"]
    run = subprocess.run([sys.executable, "-P", "-m", "proton.viewer.cli", "--output", "trace",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    events = json.loads(run.stdout)["traceEvents"]
    return events, {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}


def test_torchrun_traces_merge_into_one_timeline(tmp_path):
    events, names = merged_trace(tmp_path)
    gpus = {f"rank {r} GPU {r % torch.cuda.device_count()}" for r in (0, 1)}
    tracks = {names[e["pid"]] for e in events if e.get("cat") == "kernel"}
    assert tracks == gpus  # each rank's kernels on its own process track


@TWO
def test_the_all_reduce_lines_up_across_ranks_in_the_merged_trace(tmp_path):
    from proton.viewer.derive import COMM_KERNEL

    events, names = merged_trace(tmp_path)
    ends: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "kernel" and COMM_KERNEL.match(e["name"]):
            ends[names[e["pid"]]] = max(ends.get(names[e["pid"]], 0), e["ts"] + e["dur"])
    assert set(ends) == {"rank 0 GPU 0", "rank 1 GPU 1"}
    # the step's all-reduce ends at about the same instant on both ranks: one clock
    first, second = ends.values()
    assert abs(first - second) < 1000  # us


@TWO
def test_one_process_drives_two_gpus(tmp_path):
    import proton

    a = [torch.randn(1024, 1024, device=f"cuda:{d}") for d in (0, 1)]
    for x in a:
        x @ x
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    proton.start(str(tmp_path / "two"))
    with proton.scope("both"):
        for _ in range(3):
            for x in a:
                x @ x
    proton.finalize()
    root, devices = load(tmp_path / "two.hatchet")
    by_device: dict[str, int] = {}
    for k in kernels(root):
        device = k["metrics"]["device_id"]
        by_device[device] = by_device.get(device, 0) + k["metrics"]["count"]
    assert by_device == {"0": 3, "1": 3}
    assert sorted(devices["CUDA"]) == ["0", "1"]
