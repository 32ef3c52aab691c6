"""The analyzer on real profiles: launch configuration recorded from CUPTI, a deliberately bad
kernel per rule, and healthy matmuls with no warning. Run with `pytest -m gpu`."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import find, load

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402

import proton  # noqa: E402
from kernels import add_kernel  # noqa: E402
from proton.viewer.diagnose import diagnose  # noqa: E402
from proton.viewer.reader import load as load_profile  # noqa: E402


def add(x, out, grid: int, warps: int = 4):
    return add_kernel[(grid,)](x, x, out, x.numel(), BLOCK=1024, num_warps=warps)


def test_launch_configuration_is_the_compiled_kernels(profile_path):
    name, read = profile_path
    x = torch.randn(1 << 22, device="cuda")
    out = torch.empty_like(x)
    compiled = add(x, out, 4096)
    torch.cuda.synchronize()
    proton.start(name)
    with proton.scope("s"):
        add(x, out, 4096)
    proton.finalize()
    root, _ = read()
    m = find(root, "s", "add_kernel")["metrics"]
    assert (m["grid_blocks"], m["block_threads"]) == (4096, 128)
    assert m["registers_per_thread"] == compiled.n_regs > 0
    assert m["shared_memory_bytes"] == compiled.metadata.shared
    assert "launch_configs" not in m


def test_a_bad_kernel_per_rule_and_healthy_matmuls(tmp_path):
    import diagnose_workload

    # a fresh process: CUPTI does not sample modules loaded after an earlier session of this
    # one ended (the earlier tests'), and the workload's kernels would have no lines
    subprocess.run([sys.executable, diagnose_workload.__file__, str(tmp_path / "d")],
                   check=True, cwd=os.path.dirname(diagnose_workload.__file__))
    path = str(tmp_path / "d.hatchet")
    got = diagnose(load_profile(path))
    assert diagnose_workload.problems(got.findings) == [], got.findings
    assert got.notes == [], got.notes  # every rule could run on this profile


@triton.jit
def dot_kernel(a, b, c, BM: tl.constexpr, IEEE: tl.constexpr):
    r = tl.arange(0, BM)
    x = tl.load(a + r[:, None] * BM + r[None, :])
    y = tl.load(b + r[:, None] * BM + r[None, :])
    if IEEE:
        acc = tl.dot(x, y, input_precision="ieee")
    else:
        acc = tl.dot(x, y)
    tl.store(c + r[:, None] * BM + r[None, :], acc)


def test_the_machine_code_of_a_dot_says_whether_tensor_cores_ran(tmp_path):
    half = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    single = half.float()
    out = torch.empty(128, 128, device="cuda")
    for x, ieee in ((half, False), (single, True)):
        dot_kernel[(1,)](x, x, out, BM=128, IEEE=ieee)
    torch.cuda.synchronize()
    proton.start(str(tmp_path / "tc"))
    for _ in range(200):
        dot_kernel[(1,)](half, half, out, BM=128, IEEE=False)
        dot_kernel[(1,)](single, single, out, BM=128, IEEE=True)
    torch.cuda.synchronize()
    proton.finalize()
    root, _ = load(tmp_path / "tc.hatchet")
    m = root["children"][0]["metrics"]
    assert m["tl_dot"] == 2 and m["tl_dot_no_tensor_cores"] == 1  # two variants, one name
    findings = diagnose(load_profile(str(tmp_path / "tc.hatchet"))).findings
    assert any(f.rule == "no tensor cores" and f.kernel == "dot_kernel" for f in findings), \
        findings
