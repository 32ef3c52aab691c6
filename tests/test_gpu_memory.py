"""memory=True on torch's real caching allocator (issue 50 item 4): a step that keeps a tensor
of known bytes alive (a leak) and makes a temporary of known bytes (the peak); the numbers
within 5% of what was planted, the leak rule names the scope that keeps, the peak the scope it
happened in. Run with `pytest -m gpu`."""
from __future__ import annotations

import pytest

from conftest import find

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import proton  # noqa: E402
from proton.viewer.diagnose import diagnose  # noqa: E402
from proton.viewer.reader import load as load_profile  # noqa: E402

MiB = 1 << 20
LEAK, TEMP, STEPS = 4 * MiB, 256 * MiB, 10


def test_leak_and_peak_of_a_step_within_5_percent(profile_path, capfd):
    name, read = profile_path
    x = torch.ones(MiB, device="cuda")  # CUDA and the allocator started before the session
    torch.cuda.synchronize()
    kept = []
    proton.start(name, memory=True)
    with proton.scope("train"):
        for _ in range(STEPS):
            with proton.scope("step"):
                with proton.scope("keep"):
                    kept.append(torch.empty(LEAK // 4, device="cuda").fill_(1.0))
                with proton.scope("temp"):
                    t = torch.empty(TEMP // 4, device="cuda")
                    t.fill_(2.0)
                    del t
                x.mul_(1.0)
    proton.finalize()
    root, _ = read()
    keep = find(root, "train", "step", "keep")["metrics"]
    temp = find(root, "train", "step", "temp")["metrics"]
    step = find(root, "train", "step")["metrics"]
    assert keep["mem_alloc_bytes"] == pytest.approx(STEPS * LEAK, rel=0.05)
    assert keep["mem_freed_bytes"] <= 0.05 * STEPS * LEAK
    assert keep["mem_live_bytes"] - keep["mem_live_first_bytes"] == \
        pytest.approx((STEPS - 1) * LEAK, rel=0.05)
    assert keep["mem_count"] == STEPS and keep["mem_grew_count"] == STEPS - 1
    assert temp["mem_alloc_bytes"] == pytest.approx(STEPS * TEMP, rel=0.05)
    assert temp["mem_freed_bytes"] == pytest.approx(STEPS * TEMP, rel=0.05)
    assert temp["mem_peak_bytes"] - temp["mem_live_bytes"] == pytest.approx(TEMP, rel=0.05)
    assert step["mem_peak_bytes"] == temp["mem_peak_bytes"]  # the inner peak is the step's
    assert "mem_peak_bytes" not in root["metrics"]
    got = {(f.rule, f.kernel) for f in diagnose(load_profile(name + ".hatchet")).findings}
    assert [k for rule, k in got if rule == "memory leak"] == ["scope keep"]
    assert ("memory peak", "scope temp") in got
    assert "was reached in train / step / temp" in capfd.readouterr().err
    del kept
