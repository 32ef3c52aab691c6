"""The window's edges: captures of running jobs (the real-workload matrix's GPT training job and
a cuBLAS loop), --steps and --duration in turns, each capture's kernels exact and no capture
warning of lost kernels. A healthy capture loses nothing: its window opens and ends at
launch boundaries and waits for the kernels of the launches inside it, so a warning means a
real loss. Run with `pytest -m gpu`."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import kernels  # copies and sets are not kernels

from test_gpu_matrix import _capture, _job, _listening, record, reference, step_kernels  # noqa: F401

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

CAPTURES = [("steps", 3), ("duration", 1), ("steps", 1), ("duration", 1), ("steps", 5),
            ("duration", 1)]
"""--steps after --duration after --steps: on the H100 a kernel the job launched as one
capture stopped came with the next capture's records (counted as its loss)."""
LOST = ("no kernel record", "no launch record", "misses kernels", "CUPTI dropped")
"""What the job says when a capture lost kernels."""

CUBLAS = """
import json, os, sys, time
import torch
import proton

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)


def step():
    with proton.scope("step"):
        for _ in range(4):
            a @ a


for _ in range(10):
    step()
torch.cuda.synchronize()
if "--count" in sys.argv:  # the kernels of a step as torch.profiler counts them
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    print(json.dumps({"kernels_per_step": len(kernels) / 5}))
    sys.exit()
print("measuring", flush=True)
deadline = time.time() + 300
i = 0
while not os.path.exists("stop") and time.time() < deadline:
    proton.step()
    step()
    i += 1
    if i % 50 == 0:  # the GPU runs behind the loop: a window's kernels run after it ends
        torch.cuda.synchronize()
torch.cuda.synchronize()
print("done", flush=True)
"""


def _captures(folder, job: subprocess.Popen, per_step: float, name: str) -> list[str]:
    """CAPTURES of `job`, each recorded; what went wrong (kernels, warnings), if anything."""
    wrong = []
    for i, (how, n) in enumerate(CAPTURES):
        said = _capture(folder, job.pid, f"--{how}", str(n), "-n", f"{name}{i}")
        files = glob.glob(str(folder / f"{name}{i}*.hatchet"))
        assert files, f"capture {i} wrote nothing: {said}"
        under_step, scopes = step_kernels(files[0])
        with open(files[0]) as f:
            everywhere = sum(k["metrics"].get("count", 0) for k in kernels(json.load(f)[0]))
        expected = n * per_step if how == "steps" else None
        warned = [line for line in said.splitlines() if any(w in line for w in LOST)]
        record(f"edge/{name}/{i}:--{how} {n}", kernels=under_step, everywhere=everywhere,
               expected=expected, warned=warned)
        if warned:
            wrong.append(f"capture {i} (--{how} {n}) warned: {warned}")
        if expected is not None and under_step != expected:
            wrong.append(f"capture {i} (--{how} {n}): {under_step} kernels, expected {expected}")
        if under_step != everywhere or under_step == 0:  # every kernel a step's, none at ROOT
            wrong.append(f"capture {i} (--{how} {n}): {under_step} of {everywhere} kernels "
                         "under the step scope")
    return wrong


def _stop(folder, job: subprocess.Popen) -> list[str]:
    (folder / "stop").touch()
    out, err = job.communicate(timeout=120)
    wrong = [f"the job said: {line}" for line in err.splitlines()
             if any(w in line for w in LOST)]
    if job.returncode != 0:
        wrong.append(f"the job ended with status {job.returncode}: {err[-2000:]}")
    return wrong


def test_captures_of_a_training_job_hold_exactly_their_steps_kernels_and_lose_none(
        tmp_path, reference):
    """The GPT job (eager bf16, autograd's thread, AdamW, DataLoader workers): --steps N holds
    exactly N times torch.profiler's kernels of a step, a --duration window only whole
    kernels under the step scope, and no capture says it lost any."""
    per_step = reference("eager")["kernels_per_step"]
    job = _job(tmp_path, "--listen")
    try:
        wrong = _captures(tmp_path, job, per_step, "gpt")
    finally:
        wrong_at_end = _stop(tmp_path, job)
    assert not wrong + wrong_at_end, wrong + wrong_at_end


def test_captures_of_a_cublas_loop_hold_exactly_their_steps_kernels_and_lose_none(tmp_path):
    """A loop of bf16 cuBLAS matmuls that runs ahead of the GPU: a --steps window's kernels
    run after its last step ends, and the capture waits for them."""
    (tmp_path / "loop.py").write_text(CUBLAS)
    counted = subprocess.run([sys.executable, "loop.py", "--count"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    assert counted.returncode == 0, counted.stderr[-3000:]
    per_step = json.loads(counted.stdout.splitlines()[-1])["kernels_per_step"]
    assert per_step >= 4
    job = subprocess.Popen([sys.executable, "-m", "proton", "--listen", "loop.py"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert job.stdout.readline() == "measuring\n", job.stderr.read()[-3000:]
        _listening(job.pid)
        wrong = _captures(tmp_path, job, per_step, "cublas")
    finally:
        wrong_at_end = _stop(tmp_path, job)
    assert not wrong + wrong_at_end, wrong + wrong_at_end
