"""What backend="instrumentation" adds per launch: a loop of instrumented launches, bare (no
profiler, uninstrumented kernel), under Triton's Proton and under ours, each in its own
process, rounds interleaved (the host's speed drifts between processes); under each Triton
given (the machine's own, and e.g. 3.9.0 from a site folder put first on PYTHONPATH, as the
peer suite's run_gpu.sh does).

Usage: python bench/instrumentation_cost.py [--launches 3000] [--rounds 3] [--out FILE]
           [--triton-site DIR ...] [--no-default-triton]
Prints one JSON line per process and a table of medians per Triton; the cost is profiled
minus bare.
"""
from __future__ import annotations

import argparse
import json
import statistics
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time, torch, triton, triton.language as tl
who, n = sys.argv[1], int(sys.argv[2])
if who == "triton":
    import triton.profiler as prof, triton.profiler.language as pl
else:
    import proton as prof, proton.language as pl
pl.enable_semantic("triton")

@triton.jit
def tiny(x_ptr, BLOCK: tl.constexpr):
    pl.enter_scope("all")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("add"):
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
    pl.exit_scope("all")

x = torch.zeros(4 * 128, device="cuda")
if who != "bare":
    prof.start(f"/tmp/instr_cost_{who}", backend="instrumentation")
for _ in range(50):
    tiny[(4,)](x, BLOCK=128, num_warps=4)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(n):
    tiny[(4,)](x, BLOCK=128, num_warps=4)
torch.cuda.synchronize()
loop = time.perf_counter() - t
t = time.perf_counter()
if who != "bare":
    prof.finalize()
fin = time.perf_counter() - t
assert int(x[0].item()) == n + 50, x[0].item()
print(json.dumps({"who": who, "triton": triton.__version__, "us_per_launch": loop / n * 1e6,
                  "finalize_s": fin}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--triton-site", action="append", default=[],
                    help="a folder holding another triton (put first on PYTHONPATH)")
    ap.add_argument("--no-default-triton", action="store_true",
                    help="measure only under the --triton-site ones")
    a = ap.parse_args()
    sites = ([] if a.no_default_triton else [""]) + a.triton_site
    rows = []
    with tempfile.TemporaryDirectory() as tmp:  # @triton.jit needs its source in a file
        child = os.path.join(tmp, "instrumented_loop.py")
        with open(child, "w") as f:
            f.write(CHILD)
        for _ in range(a.rounds):
            for site in sites:
                for who in ("bare", "triton", "ours"):
                    rows += run_child(child, who, a.launches, site)
    report(rows, a)


def run_child(child: str, who: str, launches: int, site: str = "") -> list[dict]:
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-P", child, who, str(launches)],
                          capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode:
        print(f"{who} ({site or 'default triton'}) failed: {proc.stderr[-1500:]}",
              file=sys.stderr)
        return []
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(row), flush=True)
    return [row]


def report(rows: list[dict], a) -> None:
    medians = {}
    for version in sorted({r["triton"] for r in rows}):
        mine = [r for r in rows if r["triton"] == version]
        med = {w: statistics.median(r["us_per_launch"] for r in mine if r["who"] == w)
               for w in ("bare", "triton", "ours") if any(r["who"] == w for r in mine)}
        medians[version] = med
        print(f"triton {version:8}{'us/launch':>10}{'added':>8}  (median of {a.rounds}, "
              f"{a.launches} launches)")
        for w, v in med.items():
            print(f"  {w:14}{v:10.2f}{v - med.get('bare', v):8.2f}")
        if {"bare", "triton", "ours"} <= med.keys():
            theirs, ours = med["triton"] - med["bare"], med["ours"] - med["bare"]
            ratio = ours / theirs if theirs > 0 else float("nan")
            print(f"  ours adds {ratio:.2f}x of Triton's added cost: goal (under 0.5x) "
                  f"{'met' if ratio < 0.5 else 'NOT met'}")
    if len(medians) > 1 and all({"bare", "ours"} <= m.keys() for m in medians.values()):
        added = {v: m["ours"] - m["bare"] for v, m in medians.items()}
        print("ours adds per launch: " + ", ".join(f"{v} {x:.2f} us" for v, x in added.items()))
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps({"bench": "instrumentation_cost", "rows": rows,
                                "median": medians}) + "\n")


if __name__ == "__main__":
    main()
