"""DataLoader workers forked while a session collects kernels on the GPU: the workers touch
neither CUPTI nor the profile, and the parent's profile has every kernel it launched.
Run with `pytest -m gpu`."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import find, kernels, load

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

DATALOADER = """
import torch, proton
from torch.utils.data import DataLoader, Dataset

class Numbers(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        with proton.scope("load", {"n": 1}):  # in a worker: the worker's, not the profile's
            return torch.full((4,), float(i))

x = torch.zeros(1024, device="cuda")
x.add_(1.0)  # torch's kernels loaded before the session
torch.cuda.synchronize()
proton.start("run")
with proton.scope("epoch"):
    for batch in DataLoader(Numbers(), batch_size=2, num_workers=2,
                            multiprocessing_context="fork"):
        with proton.scope("batch", {"n": 1}):
            x.add_(float(batch.sum()))  # one CUDA kernel a batch
torch.cuda.synchronize()
proton.finalize()
print(float(x[0]))
"""


def test_dataloader_workers_forked_under_a_session_leave_every_kernel_in_its_profile(tmp_path):
    (tmp_path / "job.py").write_text(DATALOADER)
    done = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 1.0 + 4 * sum(range(16))  # the job's own result: 481
    assert "Traceback" not in done.stderr, done.stderr
    # the parent's finalize says where it wrote; a worker (a forked copy of the session) writes
    # nothing and says nothing
    wrote = [line for line in done.stderr.splitlines() if "wrote" in line]
    assert wrote == [f"proton: wrote {tmp_path / 'run.hatchet'}"], done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == ["run.hatchet"]
    root = load(tmp_path / "run.hatchet")[0]
    batch = find(root, "epoch", "batch")
    assert batch["metrics"]["n"] == 8
    assert sum(k["metrics"]["count"] for k in kernels(batch)) == 8  # one per batch
    assert kernels(root) == kernels(batch)  # nothing elsewhere, no "load" frames
    assert [c["frame"]["name"] for c in root["children"]] == ["epoch"]
