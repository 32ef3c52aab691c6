"""Where the time of reading CUPTI records goes: cProfile of the buffer callback at finalize.

    python bench/profile_finalize.py [--launches 30000]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
import triton
import triton.language as tl

import proton
from proton.session import profiler


@triton.jit
def tiny_kernel(x, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=30000)
    args = parser.parse_args()
    x = torch.zeros(128, device="cuda")
    tiny_kernel[(1,)](x, BLOCK=128)
    torch.cuda.synchronize()
    proton.start("/tmp/profile_finalize")
    with proton.scope("loop"):
        for _ in range(args.launches):
            tiny_kernel[(1,)](x, BLOCK=128)
    torch.cuda.synchronize()
    collector = profiler.collector
    read = collector._buffer_completed
    seen = {"records": 0, "seconds": 0.0, "profiles": []}

    def profiled(activities):
        t0 = time.perf_counter()
        prof = cProfile.Profile()
        prof.enable()
        read(activities)
        prof.disable()
        seen["records"] += len(activities)
        seen["seconds"] += time.perf_counter() - t0
        seen["profiles"].append(prof)

    def requested():
        return collector._buffer_requested()

    from cupti import cupti

    cupti.activity_register_callbacks(requested, profiled)
    t0 = time.perf_counter()
    proton.finalize()
    print(f"finalize {time.perf_counter() - t0:.3f} s; {seen['records']} records read in "
          f"{seen['seconds']:.3f} s of callbacks")
    if seen["profiles"]:
        stats = pstats.Stats(seen["profiles"][0])
        for prof in seen["profiles"][1:]:
            stats.add(prof)
        stats.sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    main()
