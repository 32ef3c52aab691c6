"""Why the same bare launch loop runs at 11-13 us a launch in one process and 16-19 in the next
(RESULTS, 2026-11-23): a probe, no profiler. Each child process times pure Python calls (the
host CPU alone) and tiny Triton launches (Python, the launcher, the driver), and says which CPU
and NUMA node it ran on; the parent runs children with address-space randomisation on and off
(`setarch -R`), interleaved, and prints one row each. If the slow mode follows the host CPU it
shows in the Python column too; if it follows the memory layout it goes away with
randomisation off.

    python bench/probes/bimodal.py [--children 10]
                    (with the project installed: it times the loops of bench/workloads.py)
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import statistics
import subprocess
import sys


def _node(cpu: int) -> str:
    nodes = glob.glob(f"/sys/devices/system/cpu/cpu{cpu}/node*")
    return os.path.basename(nodes[0])[4:] if nodes else "?"


def _cpu() -> int:
    """The CPU this process last ran on (field 39 of /proc/self/stat)."""
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def child() -> None:
    import torch

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
    from workloads import _loop_times, host_speed, tiny_kernel

    x = torch.zeros(128, device="cuda")
    tiny_kernel[(1,)](x, BLOCK=128)
    loop = argparse.Namespace(launches=5000, repeats=7)
    row = {"python_ns": host_speed(1_000_000, reps=7),
           "launch_us": min(_loop_times(x, lambda name: contextlib.nullcontext(), loop)),
           "cpu": _cpu(), "x_addr": hex(x.data_ptr())[-6:]}
    row["node"] = _node(row["cpu"])
    print(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child()
    aslr_off = subprocess.run(["setarch", "--help"], capture_output=True).returncode == 0
    ways = {"random": [], "fixed": []} if aslr_off else {"random": []}
    for i in range(args.children):
        for way in ways:
            cmd = [sys.executable, __file__, "--child"]
            if way == "fixed":
                cmd = ["setarch", os.uname().machine, "-R", *cmd]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                print(f"child failed: {out.stderr[-800:]}", file=sys.stderr)
                continue
            row = json.loads(out.stdout.strip().splitlines()[-1])
            ways[way].append(row)
            print(f"{i:2d} {way:6s} python {row['python_ns']:6.1f} ns  launch "
                  f"{row['launch_us']:6.2f} us  cpu "
                  f"{row['cpu']:3d} node {row['node']}  x ..{row['x_addr']}", flush=True)
    for way, rows in ways.items():
        if rows:
            us, ns = [r["launch_us"] for r in rows], [r["python_ns"] for r in rows]
            print(f"{way}: launch us median {statistics.median(us):.2f} range {min(us):.2f}-"
                  f"{max(us):.2f}; python ns {min(ns):.1f}-{max(ns):.1f}")


if __name__ == "__main__":
    main()
