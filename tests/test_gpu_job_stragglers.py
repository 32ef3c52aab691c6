"""A job's straggler named from its job file alone, on GPUs with NCCL (issue 49): torchrun over
min(4, GPUs) ranks, a DDP-like loop of 5 steps in which the last rank sleeps DELAY on the host
before its all-reduce each step; `proton-viewer --diagnose` of the one file the job's own
merge wrote must name that rank and a cost within 10% of the delay a step. Run with
`pytest -m gpu`; needs 2 GPUs or more (device kinds nvidia-h100-x2, nvidia-h100-x4)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
DELAY_MS = 20.0
STEPS = 5

TRAIN = """
import os, sys, time
import torch, torch.distributed as dist
import proton

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank, world = dist.get_rank(), dist.get_world_size()
slow, delay, steps = world - 1, float(sys.argv[1]) / 1e3, int(sys.argv[2])
a = torch.randn(1024, 1024, device="cuda")
grad = torch.ones(1 << 22, device="cuda")  # 16 MB of "gradients"
for _ in range(3):  # NCCL's and cuBLAS's set-up outside the profile
    (a @ a).sum()
    dist.all_reduce(grad)
torch.cuda.synchronize()
dist.barrier()
proton.start("ddp")
for step in range(steps):
    with proton.scope("step"):
        with proton.cpu_timed_scope("fwd_bwd"):
            for _ in range(4):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()  # a backward pass ends on the host's side
            if rank == slow:
                time.sleep(delay)  # the straggler: late to every all-reduce
        dist.all_reduce(grad)
    torch.cuda.synchronize()
proton.finalize()  # the job's file: merged over the ranks before the group goes
dist.destroy_process_group()
"""


@pytest.mark.parametrize("world", [2, 4])
def test_the_job_file_names_the_rank_late_to_the_all_reduce_and_its_cost(tmp_path, world):
    if GPUS < world:
        pytest.skip(f"needs {world} GPUs for {world} NCCL ranks, found {GPUS}: run on device "
                    f"kind nvidia-h100-x{world}")
    (tmp_path / "train.py").write_text(TRAIN)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PROTON_")},
           "OMP_NUM_THREADS": "1", "PROTON_RANK_FILES": "job"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                          str(world), "--master-port", str(29600 + os.getpid() % 1000),
                          "train.py", str(DELAY_MS), str(STEPS)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=150, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == ["ddp.hatchet"], run.stderr
    shown = subprocess.run([sys.executable, "-P", "-m", "proton.viewer.cli", "--diagnose",
                            str(tmp_path / "ddp.hatchet")],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    slow = world - 1
    line = next((x for x in shown.stdout.splitlines() if "arrives last" in x), None)
    assert line is not None, shown.stdout
    assert f"rank {slow} arrives last at " in line and "AllReduce" in line, line
    assert "fwd_bwd (cpu time)" in line, line
    found = re.search(r": costs ([\d.]+) ms \(([\d.]+) ms a call, (\d+) calls a rank\)", line)
    assert found, line
    total, each, calls = float(found[1]), float(found[2]), int(found[3])
    assert calls == STEPS, line
    assert each == pytest.approx(DELAY_MS, rel=0.10), line
    assert total == pytest.approx(STEPS * DELAY_MS, rel=0.10), line
    # NCCL's grid is not the user's to change: no occupancy rule on its kernels (the job's
    # own 1024^2 matmul may well have one)
    items = re.split(r"\n(?=\s*\d+\. )", shown.stdout)
    assert not [b for b in items if "ncclDevKernel" in b.strip().splitlines()[0]
                and "too few programs" in b], shown.stdout
