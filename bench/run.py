"""Run the benchmarks, each mode in its own process, and print one table.

    python bench/run.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ["bare", "proton", "triton", "proton_hook", "triton_hook"]


def run(mode: str) -> dict | None:
    proc = subprocess.run([sys.executable, os.path.join(HERE, "launch_overhead.py"), mode],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(f"{mode}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    best: dict[str, float] = {}
    for _ in range(args.rounds):  # interleave modes so drift hits all alike
        for mode in modes:
            res = run(mode)
            if res:
                best[mode] = min(best.get(mode, float("inf")), res["us_per_launch"])
    bare = best.get("bare")
    print("\nlaunch-bound loop, 5000 tiny Triton launches, best of rounds x repeats")
    print(f"{'mode':<14}{'us/launch':>10}{'x bare':>8}{'added us':>10}")
    for mode in modes:
        if mode in best:
            us = best[mode]
            ratio = f"{us / bare:8.3f}" if bare else "       -"
            added = f"{us - bare:10.2f}" if bare else "         -"
            print(f"{mode:<14}{us:10.2f}{ratio}{added}")


if __name__ == "__main__":
    main()
