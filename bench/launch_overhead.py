"""Microseconds per launch of a tiny Triton kernel: bare, under Proton, under Triton's Proton.

Run one mode per process (one CUPTI subscriber per process):
    python bench/launch_overhead.py bare|proton|proton_hook|proton_hook_config|triton|triton_hook
        [--launches 5000]
Prints one JSON line: {"mode", "us_per_launch" (best of repeats), "median", "repeats"}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
import triton
import triton.language as tl


@triton.jit
def tiny_kernel(x, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + 1)


def timed_loop(x, launches: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(launches):
        tiny_kernel[(1,)](x, BLOCK=128)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / launches * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["bare", "proton", "proton_hook", "proton_hook_config",
                                         "triton", "triton_hook"])
    parser.add_argument("--launches", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    x = torch.zeros(128, device="cuda")
    tiny_kernel[(1,)](x, BLOCK=128)
    out = tempfile.mkdtemp() + "/bench"
    hook = {"proton_hook": "triton", "triton_hook": "triton",
            "proton_hook_config": "triton:config=BLOCK"}.get(args.mode)
    if args.mode.startswith("proton"):
        import proton as prof
    elif args.mode.startswith("triton"):
        import triton.profiler as prof
    else:
        prof = None
    if prof is not None:
        prof.start(out, hook=hook)
    times = []
    for _ in range(args.repeats):
        if prof is not None:
            with prof.scope("loop"):
                times.append(timed_loop(x, args.launches))
        else:
            times.append(timed_loop(x, args.launches))
    t0 = time.perf_counter()
    if prof is not None:
        prof.finalize()
    print(json.dumps({"mode": args.mode, "us_per_launch": min(times),
                      "median": statistics.median(times), "repeats": len(times),
                      "finalize_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
