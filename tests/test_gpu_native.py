"""The two attribution pipelines on real CUPTI buffers: the same profile whether the C helper
logs the launches in its callback and joins them with the kernel records (the default) or
Python does it all from CUPTI's API and external records (PROTON_NATIVE=0). `pytest -m gpu`."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = """
import json, sys, torch, proton
from proton.runtime.profiler import profiler
x = torch.ones(1024, device="cuda")
proton.start(sys.argv[1])
for i in range(40):  # 60,000 launches: several CUPTI buffers
    with proton.scope(f"s{i % 4}"):
        for _ in range(1500):
            x.add_(1)
for _ in range(1000):  # no scope open: placed by the Attributor (the main thread's timeline)
    x.add_(1)
c = profiler.collector
p = c.pipeline
info = {"native": p.native, "join": getattr(p, "join", None) is not None,
        "log": getattr(p, "log", None) is not None,
        "waiting": c.flush()}  # torch launches through the runtime: none left unmatched
proton.finalize()
info["joined"] = p.kernels
print(json.dumps(info))
"""


def run(tmp_path, name: str, native: str) -> tuple[dict, dict]:
    (tmp_path / "walk.py").write_text(SCRIPT)
    env = {**os.environ, "PROTON_NATIVE": native, "PROTON_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-P", "walk.py", name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / f"{name}.hatchet") as f:
        root = json.load(f)[0]
    counts = {s["frame"]["name"].split("(")[0][-30:]:
              sum(k["metrics"]["count"] for k in s["children"]) if s["children"]
              else s["metrics"]["count"] for s in root["children"]}
    return json.loads(done.stdout.splitlines()[-1]), counts


def test_the_c_pipeline_and_the_python_pipeline_give_the_same_profile(tmp_path):
    joined, joined_counts = run(tmp_path, "joined", "1")
    python, python_counts = run(tmp_path, "python", "0")
    assert joined["join"] and not python["join"]
    assert joined["log"] and not python["log"]
    assert joined["waiting"] == python["waiting"] == 0
    assert joined["native"] and not python["native"]
    assert joined["joined"] == 60_000  # every scoped kernel joined in C; the 1,000 unscoped not
    scoped = {f"s{i}": 15_000 for i in range(4)}
    assert joined_counts == python_counts
    assert {k: v for k, v in joined_counts.items() if k in scoped} == scoped
    assert sorted(joined_counts.values()) == [1000] + [15_000] * 4
