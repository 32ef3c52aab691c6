"""Probe: can a job that will be captured with -m pcsampling later get samples for kernels whose
module loaded before the capture, if PC sampling is enabled (not started) on its context before
they load? And what does that cost a launch while idle? One line per run.

    python bench/probes/probe_pc_listen.py cold|pre|pre_activity|pre_reenable|cost_off|cost_on
cold:         the sampler is enabled after the kernel loaded (a --listen job today)
pre:          enabled before the kernel loads, started after
pre_activity: as pre, and kernel activity is enabled after PC sampling (what a session does)
pre_reenable: enabled before the kernel loads, disabled after, then a normal pcsampling session
cost_off/on:  tiny-kernel launch loop, without / with an enabled-but-stopped sampler
"""
import json
import os
import sys
import tempfile
import time

import torch
import triton
import triton.language as tl
from cuda.bindings import driver


@triton.jit
def busy(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    for _ in range(200):
        v = v * 1.0001 + 0.5
    tl.store(x + offs, v, mask=offs < n)


def sampler():
    from cupti import cupti

    from proton.cupti.buffers import loaded_libcupti
    from proton.cupti.pcsampling import Library, Sampler

    cupti.get_timestamp()
    _, ctx = driver.cuCtxGetCurrent()
    return Sampler(Library(loaded_libcupti()), int(ctx), period=10)


def count(s) -> str:
    drained = s.drain()
    busy_samples = sum(int(d.samples[[d.names.get((c, f), "") == "busy" for c, f in
                                      zip(d.crc.tolist(), d.function.tolist())]].sum())
                       for d in drained)
    return (f"busy samples {busy_samples}, total {s.total_samples}, "
            f"non-user {s.non_user_samples}")


variant = sys.argv[1]
torch.zeros(1, device="cuda")  # the context exists; busy's module is not loaded yet
x = torch.randn(1 << 22, device="cuda")
if variant.startswith("cost"):
    s = sampler() if variant == "cost_on" else None
    y = torch.zeros(16, device="cuda")
    for _ in range(2000):
        y.add_(1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    n = 100_000
    for _ in range(n):
        y.add_(1)
    torch.cuda.synchronize()
    print(f"{variant}: {(time.perf_counter() - t) / n * 1e6:.2f} us/launch")
    sys.exit()
s = sampler() if variant.startswith("pre") else None
busy[(4096,)](x, x.numel(), BLOCK=1024)  # loads the module
torch.cuda.synchronize()
if variant == "cold":
    s = sampler()
if variant == "pre_activity":
    from cupti import cupti
    try:
        cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
        print("pre_activity: kernel activity enabled after PC sampling: ok")
    except cupti.cuptiError as exc:
        print(f"pre_activity: kernel activity refused: {exc}")
if variant == "pre_reenable":
    s.disable()
    import proton
    path = os.path.join(tempfile.mkdtemp(), "p")
    proton.start(path, mode="pcsampling")
    for _ in range(5):
        busy[(4096,)](x, x.numel(), BLOCK=1024)
    proton.finalize()
    doc = json.load(open(path + ".hatchet"))
    stack, samples = [doc[0]], 0
    while stack:
        node = stack.pop()
        if node["frame"]["name"].endswith("busy"):  # the kernel and its lines (file:line@busy)
            samples += node["metrics"].get("num_samples", 0)
        stack.extend(node["children"])
    print(f"pre_reenable: busy kernel samples {samples}")
    sys.exit()
s.start()
for _ in range(5):
    busy[(4096,)](x, x.numel(), BLOCK=1024)
torch.cuda.synchronize()
s.stop()
print(f"{variant}: {count(s)}")
