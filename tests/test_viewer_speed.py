"""The viewer at the speed of reading (issue 62): what a view costs besides its profile's size.
bench/viewer_scale.py measures every view; these tests hold the structure that made it fast."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from proton.viewer import derive, specs
from proton.viewer.cli import viewer

DATA = os.path.join(os.path.dirname(__file__), "data")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_reading_a_profile_loads_neither_ipython_nor_matplotlib_and_to_dot_still_works():
    """hatchet's import loaded IPython and matplotlib (0.8 s of CPU, most of a small view)
    for a notebook widget and to_dot's colours, which the viewer never uses."""
    code = ("import sys; from proton.viewer.reader import load; "
            f"prof = load({os.path.join(DATA, 'example_gpu.hatchet')!r}); "
            "print(sorted(m for m in ('IPython', 'matplotlib') if m in sys.modules)); "
            "print(prof.gf.to_dot(metric='time (ns)')[:14]); print('matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[]", "strict digraph", "True"], done.stdout


def test_the_page_derives_each_kernels_roof_once(tmp_path, monkeypatch):
    """--html asked for every kernel's roof four times (its kernels table, util, roofline and
    findings); the profile keeps what was derived."""
    calls = []
    roof = specs.compute_roof

    def counted(*args, **kwargs):
        calls.append(1)
        return roof(*args, **kwargs)

    monkeypatch.setattr(derive, "compute_roof", counted)
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        from viewer_scale import synthetic
    finally:
        sys.path.pop(0)
    doc = synthetic(200)  # 180 kernels with flops16 on an H100's figures
    kernels = sum(1 for _ in _kernels(doc[0]))
    profile = str(tmp_path / "small.hatchet")
    with open(profile, "w") as f:
        json.dump(doc, f)
    page = tmp_path / "report.html"
    done = CliRunner().invoke(viewer, ["--html", str(page), profile])
    assert done.exit_code == 0, done.output
    assert 0 < len(calls) <= kernels, (len(calls), kernels)


def _kernels(node: dict):
    stack = [node]
    while stack:
        node = stack.pop()
        if "flops16" in node["metrics"] or any(k.startswith("flops") for k in node["metrics"]):
            if node["frame"]["name"] != "ROOT":
                yield node
        stack.extend(node["children"])
