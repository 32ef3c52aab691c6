"""Probe: where does continuous PC sampling's cost on a compute-bound kernel come from? Times a
transcendental loop kernel (CUDA events) with one part of a sampling session turned on at a
time, and reads the SM clock nvidia-smi reports while it runs. One line per run.

    python bench/probes/probe_pc_cost.py bare|activity|enabled|started|session [interval] [iters]
bare:     nothing of CUPTI
activity: CUPTI kernel activity only
enabled:  PC sampling enabled and configured on the context, not started
started:  enabled and started (samples collected), no activity
session:  a whole proton pcsampling session (activity, module callback, sampling)
"""
import subprocess
import sys

import torch
import triton
import triton.language as tl
from cuda.bindings import driver


@triton.jit
def trig(x, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    for _ in range(ITERS):
        v = tl.sin(v) * 0.9 + tl.cos(v) * 0.1
    tl.store(x + offs, v, mask=offs < n)


def clock() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw",
                          "--format=csv,noheader", "-i", "0"], capture_output=True, text=True)
    return out.stdout.strip()


variant = sys.argv[1]
interval = int(sys.argv[2]) if len(sys.argv) > 2 else 10
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
x = torch.rand(1 << 22, device="cuda")


def run(n: int) -> None:
    for _ in range(n):
        trig[(x.numel() // 1024,)](x, x.numel(), ITERS=iters, BLOCK=1024)


run(3)
torch.cuda.synchronize()
sampler = None
if variant == "activity":
    from cupti import cupti
    cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
elif variant in ("enabled", "started"):
    from cupti import cupti

    from proton.cupti.buffers import loaded_libcupti
    from proton.cupti.pcsampling import Library, Sampler
    cupti.get_timestamp()
    _, ctx = driver.cuCtxGetCurrent()
    sampler = Sampler(Library(loaded_libcupti()), int(ctx), period=interval)
    if variant == "started":
        sampler.start()
elif variant == "session":
    import proton
    proton.start("/tmp/probe_pc_cost", mode=f"pcsampling:interval={interval}")
times = []
for _ in range(5):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run(40)
    seen = clock() if _ == 2 else None
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end) / 40)
    if seen:
        clocks = seen
if sampler is not None:
    sampler.stop()
    sampler.drain()
    extra = f", samples {sampler.total_samples}"
else:
    extra = ""
if variant == "session":
    import proton
    proton.finalize()
times.sort()
print(f"{variant:9s} interval {interval} iters {iters}: {times[2]:.3f} ms/launch (min {times[0]:.3f}, "
      f"max {times[-1]:.3f}); SM clock, max clock, power while running: {clocks}{extra}")
