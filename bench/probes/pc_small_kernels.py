"""Probe: do tiny torch kernels get PC samples under mode="pcsampling"? (Triton's
test_pcsampling wants num_samples on the elementwise fill kernel under its scope.)
Usage: python bench/probes/pc_small_kernels.py [ours|triton] [earlier]
  earlier: run a plain session with torch.ones first, as earlier tests in one pytest process do."""
import json
import sys
import tempfile

import torch
import triton
import triton.language as tl

impl = sys.argv[1] if len(sys.argv) > 1 else "ours"
if impl == "triton":
    import triton.profiler as proton
else:
    import proton


@triton.jit
def foo(x, y, size: tl.constexpr):
    offs = tl.arange(0, size)
    for _ in range(1000):
        tl.store(y + offs, tl.load(x + offs))


d = tempfile.mkdtemp()
if "earlier" in sys.argv:
    proton.start(f"{d}/earlier")
    with proton.scope("s"):
        torch.ones((2, 2), device="cuda")
    proton.finalize()
proton.start(f"{d}/pc", hook="triton", backend="cupti", mode="pcsampling")
with proton.scope("init"):
    x = torch.ones((1024,), device="cuda", dtype=torch.float32)
    y = torch.zeros_like(x)
with proton.scope("test"):
    foo[(1,)](x, y, x.size()[0], num_warps=4)
proton.finalize()
data = json.load(open(f"{d}/pc.hatchet"))


def show(node, depth=0):
    m = node["metrics"]
    print("  " * depth + node["frame"]["name"][:70], {k: m[k] for k in m if k in
          ("num_samples", "count", "time (ns)")})
    for c in node["children"]:
        show(c, depth + 1)


print(f"== {impl} {' '.join(sys.argv[2:])}")
show(data[0])
