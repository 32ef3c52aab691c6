"""Run the benchmarks, each mode in its own process, and print one table.

    python bench/run.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ["bare", "proton", "triton", "proton_hook", "triton_hook", "proton_hook_config"]


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
    medians: dict[str, list[float]] = {}
    finals: dict[str, list[float]] = {}
    for _ in range(args.rounds):  # interleave modes so drift hits all alike
        for mode in modes:
            res = run(mode)
            if res:
                best[mode] = min(best.get(mode, float("inf")), res["us_per_launch"])
                medians.setdefault(mode, []).append(res["median"])
                finals.setdefault(mode, []).append(res["finalize_s"])
    med = {k: statistics.median(v) for k, v in medians.items()}
    print("\nlaunch-bound loop, 5000 tiny Triton launches x 7 repeats, "
          f"{args.rounds} processes per mode")
    print(f"{'mode':<20}{'best us':>9}{'x bare':>8}{'median us':>11}{'x bare':>8}"
          f"{'finalize s':>12}")
    for mode in modes:
        if mode in best:
            print(f"{mode:<20}{best[mode]:9.2f}{best[mode] / best['bare']:8.3f}"
                  f"{med[mode]:11.2f}{med[mode] / med['bare']:8.3f}"
                  f"{statistics.median(finals[mode]):12.3f}")


if __name__ == "__main__":
    main()
