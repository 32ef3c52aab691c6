"""Several GPUs: torchrun jobs under `proton` (one file per rank, merged by the viewer) and one
process driving two GPUs. Needs 2 GPUs (device kind nvidia-h200-x2); run with `pytest -m gpu`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import kernels, load

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

TWO = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                         reason="needs 2 GPUs: run on device kind nvidia-h200-x2")

TRAIN = """
import os, torch, torch.distributed as dist
import proton

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
a = torch.randn(2048, 2048, device="cuda")
g = torch.ones(1 << 20, device="cuda")
dist.all_reduce(g)  # NCCL's warm-up outside the step
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
    run = subprocess.run([sys.executable, "-m", "proton.viewer.cli", "--output", "json", *args],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return {" / ".join(r["path"]): r for r in json.loads(run.stdout)}


def nccl(node: dict) -> list[dict]:
    return [k for k in kernels(node) if k["frame"]["name"].lower().startswith("nccl")]


@TWO
@pytest.mark.parametrize("form", ["command", "module"])
def test_torchrun_job_writes_one_profile_per_rank_and_the_viewer_merges_them(tmp_path, form):
    if form == "command":  # torchrun --no-python proton -n ddp train.py
        proton_bin = shutil.which("proton")
        assert proton_bin, "the proton command is not on PATH"
        torchrun(tmp_path, "--no-python", proton_bin, "-n", "ddp", "train.py")
    else:  # torchrun -m proton -n ddp train.py
        torchrun(tmp_path, "-m", "proton", "-n", "ddp", "train.py")
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == ["ddp.rank0.hatchet",
                                                                  "ddp.rank1.hatchet"]
    for rank in (0, 1):
        root, devices = load(tmp_path / f"ddp.rank{rank}.hatchet")
        assert root["frame"]["rank"] == rank and root["frame"]["world_size"] == 2
        assert root["frame"]["local_rank"] == rank
        step = next(c for c in root["children"] if c["frame"]["name"] == "step")
        comm = nccl(step)
        assert comm, f"rank {rank} has no NCCL kernel under step"
        assert {k["metrics"]["device_id"] for k in kernels(step)} == {str(rank)}
        assert list(devices["CUDA"]) == [str(rank)]
    got = viewer_rows("-m", "count", str(tmp_path / "ddp.rank0.hatchet"),
                      str(tmp_path / "ddp.rank1.hatchet"))
    compute = got["ROOT / step / compute"]
    assert compute["count max"] == 3 * compute["count min"] > 0
    assert compute["count"] == compute["count min"] + compute["count max"]


@TWO
def test_merged_view_shows_rank_ones_extra_work_as_imbalance(tmp_path):
    torchrun(tmp_path, "-m", "proton", "-n", "ddp", "train.py")
    got = viewer_rows("-m", "count,time/ms,comm/%", str(tmp_path))
    compute = got["ROOT / step / compute"]
    # rank 1 runs three times rank 0's iterations (a matmul and a clamp each)
    assert compute["count max"] == 3 * compute["count min"] > 0
    assert compute["count max rank"] == 1
    assert compute["time (ms) max rank"] == 1
    assert compute["time (ms) max/mean"] == pytest.approx(1.5, rel=0.15)  # 3:1 -> max/mean 1.5
    allreduce = got["ROOT / step / allreduce"]
    assert allreduce["comm/%"] == pytest.approx(100)
    comm = [p for p in got if p.startswith("ROOT / step / allreduce / ") and
            p.split(" / ")[-1].lower().startswith("nccl")]
    assert comm and all("[rank" not in p for p in comm)  # on both ranks
    assert got["ROOT / step"]["comm/% max rank"] == 0  # rank 0 waits longer in the all-reduce


@TWO
def test_torchrun_traces_merge_into_one_timeline(tmp_path):
    torchrun(tmp_path, "-m", "proton", "-n", "ddp", "-d", "trace", "train.py")
    assert sorted(p.name for p in tmp_path.glob("*.chrome_trace")) == [
        "ddp.rank0.chrome_trace", "ddp.rank1.chrome_trace"]
    run = subprocess.run([sys.executable, "-m", "proton.viewer.cli", "--output", "trace",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    events = json.loads(run.stdout)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert {"rank 0 GPU 0", "rank 1 GPU 1"} <= set(names.values())
    ar = {}
    for e in events:
        if e.get("ph") == "X" and e["name"].lower().startswith("nccl"):
            ar.setdefault(names[e["pid"]], []).append(e)
    assert set(ar) == {"rank 0 GPU 0", "rank 1 GPU 1"}
    # the step's all-reduce ends at about the same instant on both ranks (one clock)
    ends = [max(e["ts"] + e["dur"] for e in evs) for evs in ar.values()]
    assert abs(ends[0] - ends[1]) < 1000  # us


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
    got = kernels(root)
    by_device = {}
    for k in got:
        by_device.setdefault(k["metrics"]["device_id"], 0)
        by_device[k["metrics"]["device_id"]] += k["metrics"]["count"]
    assert by_device == {"0": 3, "1": 3}
    assert sorted(devices["CUDA"]) == ["0", "1"]
