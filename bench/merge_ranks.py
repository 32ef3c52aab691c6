"""How long proton-viewer takes to merge a job's rank files (issue: 256 ranks of a 5,000-frame
profile in seconds). The files are made from a real profile: tests/data/example_gpu.hatchet
(3 steps of an MLP on an H200) copied under enough scopes to reach --frames frames, each rank's
kernel times scaled by a rank-dependent factor.

Usage: python bench/merge_ranks.py [--ranks 256] [--frames 5000] [--keep DIR]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "..", "tests", "data", "example_gpu.hatchet")


def count(node: dict) -> int:
    n, stack = 0, [node]
    while stack:
        n += 1
        stack.extend(stack.pop()["children"])
    return n


def big_profile(frames: int) -> list:
    """The real profile's subtrees repeated under layer_<i> scopes until `frames` frames."""
    doc = json.load(open(REAL))
    root = doc[0]
    per_copy = count(root) - 1 + 1  # its subtrees plus the layer scope above them
    layers = max(1, frames // per_copy)
    root["children"] = [{"frame": {"name": f"layer_{i}", "type": "function"}, "metrics": {},
                         "children": copy.deepcopy(root["children"])} for i in range(layers)]
    return doc


def scaled(doc: list, rank: int, world: int) -> list:
    out = copy.deepcopy(doc)
    out[0]["frame"].update({"host": "bench", "pid": 1000 + rank, "rank": rank,
                            "world_size": world, "local_rank": rank % 8})
    rng = random.Random(rank)
    stack = [out[0]]
    while stack:
        node = stack.pop()
        m = node["metrics"]
        if "time (ns)" in m:
            m["time (ns)"] = int(m["time (ns)"] * (1 + rank / world) * rng.uniform(0.95, 1.05))
        stack.extend(node["children"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--frames", type=int, default=5000)
    ap.add_argument("--keep", default=None, help="write the files here and keep them")
    args = ap.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="proton-ranks-")
    os.makedirs(folder, exist_ok=True)
    doc = big_profile(args.frames)
    for r in range(args.ranks):
        with open(os.path.join(folder, f"job.rank{r}.hatchet"), "w") as f:
            json.dump(scaled(doc, r, args.ranks), f)
    frames = count(doc[0])
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))

    from proton.viewer import ranks

    t0 = time.perf_counter()
    found, union, _ = ranks.read(ranks.expand([folder]))
    t1 = time.perf_counter()
    merged = ranks.merge(found, union)
    t2 = time.perf_counter()
    ranks.columns(merged, ["time/ms", "avg_time/us"])
    t3 = time.perf_counter()
    cmd = [sys.executable, "-m", "proton.viewer.cli", "-m", "time/ms", "-d", "2", folder]
    t4 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    t5 = time.perf_counter()
    if done.returncode:
        sys.exit(f"proton-viewer failed: {done.stderr.strip()}")
    print("| ranks | frames per rank | MB read | read s | merge s | 2 metrics s | "
          "proton-viewer -m time/ms (whole command) s |")
    print(f"| {args.ranks} | {frames:,} | {size / 1e6:.0f} | {t1 - t0:.2f} | {t2 - t1:.2f} | "
          f"{t3 - t2:.2f} | {t5 - t4:.2f} |")


if __name__ == "__main__":
    main()
