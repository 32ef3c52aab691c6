"""Render a synthetic 100,000-node profile with two derived metrics: our viewer (its own view,
and --output triton's text) and Triton's.

    python bench/viewer_scale.py [--nodes 100000] [--timeout 600]
Each viewer runs in its own process with output to a file; prints one table.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time


def synthetic(nodes: int, seed: int = 0) -> list:
    """A tree of scopes (fan-out 10) whose leaves are kernels with time, count and flops."""
    rng = random.Random(seed)
    made = 1
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops16": 0}, "children": []}
    level = [root]
    while made < nodes:
        nxt = []
        for parent in level:
            for i in range(10):
                if made >= nodes:
                    break
                node = {"frame": {"name": f"{parent['frame']['name'][:40]}/s{i}", "type": "function"},
                        "metrics": {}, "children": []}
                parent["children"].append(node)
                nxt.append(node)
                made += 1
        level = nxt
    for leaf in level:
        count = rng.randint(1, 100)
        leaf["frame"]["name"] = "kernel_" + leaf["frame"]["name"].replace("/", "_")
        leaf["metrics"] = {"time (ns)": rng.randint(1_000, 10_000_000), "count": count,
                           "flops16": rng.randint(1, 10**12), "device_id": "0",
                           "device_type": "CUDA"}
    return [root, {"CUDA": {"0": {"arch": "90", "num_sms": 132, "clock_rate": 1980000,
                                  "memory_clock_rate": 2619000, "bus_width": 5120}}}]


def timed(cmd: list[str], timeout: float) -> tuple[float | None, str]:
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        try:
            run = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"> {timeout:.0f} s (stopped)"
        seconds = time.perf_counter() - t0
        if run.returncode != 0:
            return None, f"failed: {run.stderr.strip().splitlines()[-1]}"
        out.seek(0)
        return seconds, f"{seconds:.2f} s, {sum(1 for _ in out)} lines"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--metrics", default="time/ms,avg_time/us")
    args = parser.parse_args()
    path = os.path.join(tempfile.mkdtemp(), "scale.hatchet")
    with open(path, "w") as f:
        json.dump(synthetic(args.nodes), f)
    print(f"{args.nodes} nodes, -m {args.metrics}, {os.path.getsize(path) / 1e6:.1f} MB")
    rows = [("ours", [sys.executable, "-m", "proton.viewer.cli", "-m", args.metrics, path]),
            ("ours triton", [sys.executable, "-m", "proton.viewer.cli", "--output", "triton",
                             "-m", args.metrics, path])]
    try:
        import triton.profiler.viewer  # noqa: F401

        rows.append(("triton 3.6", [sys.executable, "-m", "triton.profiler.viewer", "-m",
                                    args.metrics, path]))
    except ImportError:
        print("triton is not installed: only ours")
    for name, cmd in rows:
        _, what = timed(cmd, args.timeout)
        print(f"{name:<12}{what}")


if __name__ == "__main__":
    main()
