"""Probe (issue 50): what one small cudaMemsetAsync costs the host under CUPTI's kernel floor,
the floor plus CUPTI's MEMSET records, and ours (shadow) with and without copies: which of
CUPTI's record and our callback the bf16 step's ~31 memsets a step pay. One process, phases
in turn (rounds), the median of each phase's microseconds a call.

    python3 -P bench/probes/memset_cost.py [ROUNDS]
"""
from __future__ import annotations

import ctypes
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import step_cost  # noqa: E402 - bench/step_cost.py: the floor (Counting)

N = 20_000
dev = torch.empty(1024, device="cuda")
stream = torch.cuda.current_stream().cuda_stream
cudart = next(ctypes.CDLL(line[line.index("/"):].strip()) for line in open("/proc/self/maps")
              if "/libcudart.so" in line)
cudart.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                   ctypes.c_void_p]
memset = cudart.cudaMemsetAsync
ptr = dev.data_ptr()


def loop() -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(N):
        memset(ptr, 0, 4096, stream)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / N * 1e6


def floor(memsets: bool) -> float:
    from cupti import cupti

    prof = step_cost.Counting(None, subscribe=False)
    prof.start()
    if memsets:
        cupti.activity_enable(cupti.ActivityKind.MEMSET)
    us = loop()
    if memsets:
        cupti.activity_disable(cupti.ActivityKind.MEMSET)
    prof.stop()
    return us


def ours(off: str) -> float:
    import proton

    os.environ["PROTON_OFF"] = off
    try:
        proton.start(os.path.join(tempfile.mkdtemp(), "m"))
    finally:
        os.environ.pop("PROTON_OFF", None)
    us = loop()
    proton.finalize()
    return us


PHASES = {"bare": loop, "floor": lambda: floor(False), "floor+MEMSET": lambda: floor(True),
          "shadow, kernels only": lambda: ours("copies,waits,idle"),
          "shadow, copies only": lambda: ours("waits,idle"), "shadow": lambda: ours("")}

if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    loop()
    got: dict[str, list[float]] = {k: [] for k in PHASES}
    for r in range(rounds):
        names = list(PHASES)[r % len(PHASES):] + list(PHASES)[:r % len(PHASES)]
        for name in names:
            got[name].append(PHASES[name]())
    print(f"cudaMemsetAsync of 4 KiB, us a call (median of {rounds} rounds of {N:,}):")
    for name, v in got.items():
        print(f"  {name:22s} {statistics.median(v):6.2f}  [{min(v):.2f}-{max(v):.2f}]")
