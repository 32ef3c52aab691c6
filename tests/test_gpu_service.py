"""Captures of running GPU jobs: a training loop captured mid-run for exactly 3 steps (kernel
times, instruction sampling, python context), and a 2-rank torchrun job captured with --all.
Run with `pytest -m gpu`."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from conftest import kernels, load, total
from proton.format import job_of

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

LOOP = """
import os, sys, time
import torch, triton, triton.language as tl
import proton

@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)

if "RANK" in os.environ:
    import torch.distributed as dist
    dist.init_process_group("gloo")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
x = torch.randn(1 << 22, device="cuda")
out = torch.empty_like(x)
add_kernel[(1 << 12,)](x, x, out, x.numel(), BLOCK=1024)  # compiled before any capture
torch.cuda.synchronize()
print("ready", flush=True)
deadline = time.time() + 120
while not os.path.exists("stop") and time.time() < deadline:
    proton.step()
    with proton.scope("step"):
        for _ in range(3):  # 3 kernels a step
            add_kernel[(1 << 12,)](x, x, out, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
print("done", flush=True)
"""


def add_kernels(path) -> list[dict]:
    root, _ = load(path)
    return [k for k in kernels(root) if k["frame"]["name"] == "add_kernel"]


def wait_listening(pids: list[int], timeout: float = 120) -> None:
    from proton.service.protocol import socket_path

    deadline = time.monotonic() + timeout
    while not all(os.path.exists(socket_path(p)) for p in pids):
        assert time.monotonic() < deadline, "the job never listened"
        time.sleep(0.05)


def capture(folder, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-P", "-m", "proton", "capture", *args], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture
def loop(tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    job = subprocess.Popen([sys.executable, "-P", "-m", "proton", "--listen", "loop.py"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        assert job.stdout.readline() == "ready\n", job.stderr.read()
        wait_listening([job.pid])
    except BaseException:
        job.kill()  # reaped, not left running past a failed start
        job.communicate()
        raise
    yield job
    (tmp_path / "stop").touch()
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0 and out == "done\n", err


def test_a_running_loop_captured_for_exactly_three_steps(tmp_path, loop):
    time.sleep(1)  # mid-run
    capture(tmp_path, str(loop.pid), "--steps", "3", "-n", "three")
    got = add_kernels(tmp_path / "three.hatchet")
    assert sum(k["metrics"]["count"] for k in got) == 9  # 3 steps of 3 kernels
    assert all(k["metrics"]["time (ns)"] > 0 for k in got)
    root, _ = load(tmp_path / "three.hatchet")
    assert [c["frame"]["name"] for c in root["children"]] == ["step"]  # under the scope
    # a second capture of the same job is whole and independent
    capture(tmp_path, str(loop.pid), "--steps", "5", "-n", "five")
    assert sum(k["metrics"]["count"] for k in add_kernels(tmp_path / "five.hatchet")) == 15


def test_a_duration_capture_puts_kernels_under_the_scope_the_loop_is_in(tmp_path, loop):
    capture(tmp_path, str(loop.pid), "--duration", "1", "-n", "second")
    root, _ = load(tmp_path / "second.hatchet")
    got = add_kernels(tmp_path / "second.hatchet")
    assert sum(k["metrics"]["count"] for k in got) >= 9
    assert [c["frame"]["name"] for c in root["children"]] == ["step"]


def test_a_capture_with_instruction_sampling(tmp_path, loop):
    capture(tmp_path, str(loop.pid), "--steps", "3", "-m", "pcsampling", "-n", "pc")
    got = add_kernels(tmp_path / "pc.hatchet")
    assert sum(k["metrics"]["count"] for k in got) == 9
    # the samples sit on the kernel's source lines (file:line@add_kernel), below its node; the
    # file is the one Triton compiled the cached cubin from (an identical kernel in another
    # test's file shares its cache entry, and so its line table)
    samples = sum(total(k, "num_samples") for k in got)
    on_lines = sum(line["metrics"].get("num_samples", 0) for k in got for line in k["children"]
                   if re.fullmatch(r".+\.py:\d+@add_kernel", line["frame"]["name"]))
    assert samples > 100 and on_lines > 0.9 * samples, (samples, on_lines)


def test_a_capture_with_python_call_paths(tmp_path, loop):
    capture(tmp_path, str(loop.pid), "--steps", "3", "-c", "python", "-n", "py")
    got = add_kernels(tmp_path / "py.hatchet")
    assert sum(k["metrics"]["count"] for k in got) == 9
    root, _ = load(tmp_path / "py.hatchet")
    names = []
    node = root
    while node["children"] and node["frame"]["name"] != "add_kernel":
        node = node["children"][0]
        names.append(node["frame"]["name"])
    assert any(n.startswith(str(tmp_path / "loop.py")) for n in names), names


def test_a_torchrun_job_captured_on_every_rank_with_all(tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                            "2", "--master-port", str(29600 + os.getpid() % 1000), "-m",
                            "proton", "--listen", "loop.py"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert job.stdout.readline() == "ready\n"
        assert job.stdout.readline() == "ready\n"
        time.sleep(1)
        done = capture(tmp_path, "--all", "--steps", "3", "-n", "ddp")
        assert "started within" in done.stderr
        for rank in (0, 1):
            path = tmp_path / f"ddp.rank{rank}.hatchet"
            assert sum(k["metrics"]["count"] for k in add_kernels(path)) == 9
            assert job_of(load(path)[0])["rank"] == rank
    finally:
        (tmp_path / "stop").touch()
        job.communicate(timeout=120)
    assert job.returncode == 0
