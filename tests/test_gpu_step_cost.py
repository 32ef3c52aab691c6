"""bench/step_cost.py's workers on the GPU, a few steps each: every mode runs its rounds with
no failure and Triton's Proton keeps its phase beside the floor's. What step_cost.py's full run
(~6 minutes, `OVERHEAD=bf16step bash bench/gpu_run.sh`) needs to work. `pytest -m gpu`."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "step_cost.py")


def worker(profilers: str) -> dict:
    done = subprocess.run([sys.executable, BENCH, "--worker", profilers, "--rounds", "2",
                           "--steps", "3", "--warmup", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_ours_run_every_round_with_the_floor_and_report_their_callbacks():
    result = worker("floor,shadow,hook,python")
    assert result["errors"] == []
    got = sorted((p["mode"], p["round"]) for p in result["phases"])
    assert got == sorted((m, r) for m in ("none", "floor", "shadow", "hook", "python")
                         for r in (0, 1))
    for p in result["phases"]:
        assert len(p["step_ms"]) == 3 and all(ms > 0 for ms in p["step_ms"])
        assert len(p["speed_ns"]) == 2 and all(0 < ns < 1000 for ns in p["speed_ns"])
    first = {p["mode"]: p for p in result["phases"] if p["round"] == 0}
    assert first["shadow"]["enabled"] and first["shadow"]["scope_us"] > 0


def test_tritons_proton_keeps_its_phases_beside_the_floor():
    result = worker("triton,floor")
    triton = [p for p in result["phases"] if p["mode"] == "triton"]
    # once a process (it cannot subscribe again after its finalize); if the floor cannot
    # share, it is the floor that fails (triton loads its CUPTI first), judged through bare
    assert len(triton) == 1 and "triton" not in [e["mode"] for e in result["errors"]], \
        result["errors"]
    floor = [p for p in result["phases"] if p["mode"] == "floor"]
    assert len(floor) == 2 or [e["mode"] for e in result["errors"]] == ["floor"]
