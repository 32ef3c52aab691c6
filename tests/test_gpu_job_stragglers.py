"""A job's straggler named from its job file alone, on GPUs with NCCL (issue 57): the training job
of tests/straggler_job.py as users write it (torch DDP with its bucketed all-reduce inside
backward, or FSDP2; no synchronize in the loop; the model built and warmed up outside the
scopes), run whole under `torchrun -m proton`. `proton-viewer --diagnose` of the one file the
job's own merge wrote must name the rank, the scope where it spent the time, the cause (host
or GPU) and the cost a step, against the job's own measures (host clocks, CUDA events), and a
balanced job must get no straggler finding. Run with `pytest -m gpu`; 2 GPUs or more (device
kinds nvidia-h200-x2, -x4, -x8: a case needing more GPUs than there are skips, saying so); each
case is a torchrun of ~20 s."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from straggler_words import read  # noqa: E402 - tests/, on the path

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
JOB = os.path.join(os.path.dirname(__file__), "straggler_job.py")
FSDP = ["--kind", "fsdp", "--dim", "4096", "--batch", "2048"]
"""FSDP's step made GPU-bound (its all-gathers and hooks make a small one host-bound: 4 H200s,
dim 2048 and batch 1024, every rank's GPU idled 1 to 12 ms of a 27 ms step)."""



def run_job(tmp_path, world: int, *args: str) -> tuple[list[dict], list[dict]]:
    """The job under `torchrun -m proton` on `world` GPUs: each rank's measures, and the
    --diagnose findings of its job file."""
    if GPUS < world:
        pytest.skip(f"needs {world} GPUs for {world} NCCL ranks, found {GPUS}: run on device "
                    f"kind nvidia-h200-x{world}")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PROTON_")},
           "OMP_NUM_THREADS": "1", "PROTON_RANK_FILES": "job"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                          str(world), "--master-port", str(29600 + os.getpid() % 1000),
                          "-m", "proton", "-n", "job", JOB, *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == ["job.hatchet"], run.stderr
    ranks = [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"job"')]
    assert sorted(r["rank"] for r in ranks) == list(range(world)), run.stdout[-3000:]
    shown = subprocess.run([sys.executable, "-P", "-m", "proton.viewer.cli", "--diagnose",
                            "--output", "json", str(tmp_path / "job.hatchet")],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    return sorted(ranks, key=lambda r: r["rank"]), json.loads(shown.stdout)["findings"]


def late(findings: list[dict], slow: int, cause: str) -> dict:
    """The one straggler finding, read: it names `slow` and `cause` in scope step, and no frame
    imbalance stands beside it."""
    found = [f for f in findings if f["rule"] == "straggler"]
    assert len(found) == 1, [f["evidence"] for f in found]
    assert not [f for f in findings if f["rule"] == "imbalance"], findings
    got = read(found[0]["evidence"])
    assert got and (got["rank"], got["step"], got["cause"]) == (slow, "step", cause), found
    assert "scope" in got, found
    return got


@pytest.mark.parametrize("world,kind,share", [(2, "ddp", 0.2), (4, "ddp", 0.1),
                                               (4, "fsdp", 0.2), (8, "ddp", 0.1)])
def test_a_rank_slow_on_the_host_is_named_with_its_scope_and_cost(tmp_path, world, kind, share):
    """The last rank's host sleeps `share` of a step in scope data: named, host, data, its
    host's excess there within 15% of the sleep (host clock), the cost a step no more than the
    sleep and, under DDP, within 25% of what the job's step lost (its step time over the
    step before the sleep began)."""
    ranks, findings = run_job(tmp_path, world, *(FSDP if kind == "fsdp" else []),
                              "--host", str(share))
    slow = ranks[-1]
    got = late(findings, world - 1, "host")
    assert got["scope"] == "data" and got["steps"] == slow["steps"], got
    assert got["excess_ms"] == pytest.approx(slow["sleep_ms"], rel=0.15), (got, slow)
    assert got["cost_ms"] <= 1.1 * slow["sleep_ms"], (got, slow)
    if kind == "ddp":
        lost = slow["step_ms"] - slow["before_ms"]
        assert got["cost_ms"] == pytest.approx(lost, rel=0.25), (got, slow)


def test_a_rank_slow_on_the_gpu_is_named_with_its_kernels_excess(tmp_path):
    """The last of 4 DDP ranks trains on 15% more rows a step (an extra micro-batch): named,
    GPU, fwd_bwd; its excess GPU time a step measured by CUDA events with the all-reduce off
    (no_sync) lies within the finding's bounds (10% slack)."""
    ranks, findings = run_job(tmp_path, 4, "--gpu", "0.15")
    got = late(findings, 3, "GPU")
    assert got["scope"] == "fwd_bwd", got
    truth = ranks[3]["compute_ms"] - sum(r["compute_ms"] for r in ranks[:3]) / 3
    assert truth > 0 and 0.9 * got["cost_ms"] <= truth <= 1.1 * got["high_ms"], (got, ranks)


@pytest.mark.parametrize("world,kind", [(4, "ddp"), (4, "fsdp")])
def test_a_balanced_job_has_no_straggler_finding(tmp_path, world, kind):
    ranks, findings = run_job(tmp_path, world, *(FSDP if kind == "fsdp" else []))
    judged = [f["evidence"] for f in findings if f["rule"] in ("straggler", "imbalance")]
    assert not judged, judged
    # NCCL's grid is not the user's to change: no launch-shape rule on its kernels
    assert not [f for f in findings if "nccl" in f["kernel"].lower()
                and f["rule"] in ("too few programs", "tail effect", "low occupancy")]
