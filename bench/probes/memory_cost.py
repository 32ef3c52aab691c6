"""What memory=True costs per scope entry on the GPU machine: empty scopes with a session
bare and with memory=True (CUDA started, the allocator holding a few blocks), the raw reads
behind it, and the share of a bf16 GPT step of 4 scopes (~9 ms, DESIGN.md). Usage:
python bench/probes/memory_cost.py OUT_DIR"""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

import proton

N = 20_000
blocks = [torch.empty(1 << k, device="cuda") for k in range(10, 24)]
torch.cuda.synchronize()


def per_scope(memory: bool) -> float:
    proton.start(os.path.join(sys.argv[1], f"cost_{memory}"), memory=memory)
    t0 = time.perf_counter()
    for _ in range(N):
        with proton.scope("s"):
            pass
    dt = (time.perf_counter() - t0) / N
    proton.finalize()
    return dt * 1e6


def raw(fn) -> float:
    t0 = time.perf_counter()
    for _ in range(N):
        fn()
    return (time.perf_counter() - t0) / N * 1e6


runs = {False: [], True: []}
for _ in range(3):
    for memory in (False, True):
        runs[memory].append(per_scope(memory))
bare, mem = statistics.median(runs[False]), statistics.median(runs[True])
print(f"scope enter+exit: {bare:.2f} us without, {mem:.2f} us with memory=True "
      f"(+{mem - bare:.2f} us per entry); runs {runs}")
print(f"torch._C._cuda_memoryStats: {raw(lambda: torch._C._cuda_memoryStats(0)):.2f} us; "
      f"_cuda_resetPeakMemoryStats: {raw(lambda: torch._C._cuda_resetPeakMemoryStats(0)):.2f} us; "
      f"torch.cuda.memory_stats: {raw(lambda: torch.cuda.memory_stats(0)):.2f} us; "
      f"torch.cuda.memory_allocated: {raw(lambda: torch.cuda.memory_allocated(0)):.2f} us")
print(f"a bf16 GPT step of 4 scopes (~9 ms): +{4 * (mem - bare) / 9000:.2%}")
