"""Probe: do kernels whose module loaded before CUPTI was in use get PC samples when sampling
starts later (a capture of a running job)? Prints one line per variant.

    python bench/probe_pc_capture.py cold|watched|warm
cold:    nothing of CUPTI before the kernel loads (a --listen job today)
watched: a CUPTI subscriber with only the module-load callback while the kernel loads,
         released before the sampling session starts
warm:    CUPTI loaded (cuptiGetTimestamp) but no subscriber while the kernel loads
"""
import json
import os
import sys
import tempfile

import torch
import triton
import triton.language as tl

import proton


@triton.jit
def busy(x, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    for _ in range(200):
        v = v * 1.0001 + 0.5
    tl.store(x + offs, v, mask=offs < n)


variant = sys.argv[1]
sub = None
if variant in ("watched", "warm"):
    from cupti import cupti

    from proton.cupti.buffers import loaded_libcupti
    from proton.cupti.subscriber import Subscriber

    cupti.get_timestamp()
    if variant == "watched":
        sub = Subscriber(loaded_libcupti(), lambda *a: None)
        sub.subscribe()
        sub.enable(int(cupti.CallbackDomain.RESOURCE), int(cupti.CallbackIdResource.MODULE_LOADED))
x = torch.randn(1 << 22, device="cuda")
busy[(4096,)](x, x.numel(), BLOCK=1024)
torch.cuda.synchronize()
if sub is not None:
    sub.unsubscribe()
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
print(f"{variant}: busy kernel samples {samples}")
