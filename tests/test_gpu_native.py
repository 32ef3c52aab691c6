"""The C helper on real CUPTI buffers: the same profile as the Python walk. `pytest -m gpu`."""
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
for i in range(20):
    with proton.scope(f"s{i % 4}"):
        for _ in range(500):
            x.add_(1)
native = profiler.collector._raw._walk.native
proton.finalize()
print(json.dumps({"native": native}))
"""


def run(tmp_path, name: str, native: bool) -> tuple[dict, dict]:
    (tmp_path / "walk.py").write_text(SCRIPT)
    env = {**os.environ, "PROTON_NATIVE": "1" if native else "0",
           "PROTON_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-P", "walk.py", name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / f"{name}.hatchet") as f:
        root = json.load(f)[0]
    counts = {s["frame"]["name"]: sum(k["metrics"]["count"] for k in s["children"])
              for s in root["children"]}
    return json.loads(done.stdout.splitlines()[-1]), counts


def test_the_c_helper_and_python_walk_give_the_same_profile(tmp_path):
    fast, native_counts = run(tmp_path, "native", True)
    slow, python_counts = run(tmp_path, "python", False)
    assert fast["native"] and not slow["native"]
    assert native_counts == python_counts == {f"s{i}": 2500 for i in range(4)}
