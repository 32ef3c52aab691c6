"""The fixtures of one small training job recorded on an H200 with today's runtime
(tests/data/record_fixtures.py), read as a newcomer reads them on a machine without a GPU: each
shows what its mode measures."""
from __future__ import annotations

import json
import os
import subprocess
import sys

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def viewer(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-P", "-m", "proton.viewer.cli", *args],
                          capture_output=True, text=True, cwd=DATA, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def nodes(tree: dict):
    yield tree
    for child in tree["children"]:
        yield from nodes(child)


def test_the_training_job_shows_its_copies_idle_waits_and_launch_configurations():
    with open(os.path.join(DATA, "train_gpu.hatchet")) as f:
        root = json.load(f)[0]
    copies = {n["frame"]["name"]: n["metrics"] for n in nodes(root)
              if n["frame"]["name"].startswith("memcpy")}
    # six steps, each a 256 x 1024 float32 batch copied from pinned memory: 6 MiB in all
    assert copies["memcpy HtoD (pinned)"]["count"] == 6
    assert copies["memcpy HtoD (pinned)"]["bytes"] == 6 * 256 * 1024 * 4
    report = viewer("--diagnose", "train_gpu.hatchet")
    assert "step: 6 steps" in report and "waiting on the host" in report
    assert "[synchronization in a step]" in report and "scope log" in report
    assert "[too few programs]" in report and "blocks on 132 SMs" in report
    # the parts "sum to the step", so their shares as printed sum to at most 100% (they read
    # 1% + 89% + 11% = 101% when each was rounded alone)
    step = next(line for line in report.splitlines() if line.startswith("  step: 6 steps"))
    shares = [int(p.split("%)")[0]) for p in step.split("(")[1:] if "%)" in p]
    assert len(shares) >= 3 and 99 <= sum(shares) <= 100, step


def test_the_counters_profile_reads_dram_rates_under_the_h200s_peak():
    out = viewer("-m", "dram_gbyte/s,time/ms", "-d", "4", "train_counters.hatchet")
    rates = [float(line.split()[0].replace(",", "")) for line in out.splitlines()[1:]
             if line.split() and line.split()[0][0].isdigit() and len(line.split()) > 2]
    assert rates and max(rates) <= 4_800  # the H200's DRAM peak (GB/s)
    assert "scale_add_1048576" in out


def test_the_warps_profile_shows_each_scope_per_warp():
    out = viewer("--warps", "train_warps.hatchet")
    for scope in ("kernel", "kernel > compute", "kernel > load", "kernel > store"):
        assert f"scoped_norm > {scope} " in out
    assert "96" in out  # 8 CTAs x 4 warps x 3 launches


def test_the_pc_profile_shows_its_source_with_no_checkout_of_it():
    out = viewer("--source", "scale_add", "train_pc.hatchet")
    assert "tl.store(out_ptr + offs, x * 0.5 + y, mask=mask)" in out
    assert "long_scoreboard" in out
