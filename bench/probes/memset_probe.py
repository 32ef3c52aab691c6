"""Probe (issue 50): how long are the memsets cuBLAS issues in a bf16 training step, by ours and
by torch.profiler (kineto, CUPTI too), each in a process of its own (one CUPTI subscriber a
process). The copies helper saw ~1.39 ms a memset under ours, as long as the gemm beside it.

    python3 -P bench/probes/memset_probe.py            both, one after the other
    python3 -P bench/probes/memset_probe.py proton|kineto
"""
import json
import os
import subprocess
import sys
import tempfile

import torch


def work(n: int = 20) -> None:
    """A small GPT-like block's forward and backward under bf16 autocast."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                 torch.nn.Linear(2048, 512), torch.nn.Linear(512, 8192)).cuda()
    x = torch.randn(16 * 256, 512, device="cuda")
    for _ in range(n):
        with torch.autocast("cuda", torch.bfloat16):
            y = layers(x).float().square().mean()
        y.backward()
    torch.cuda.synchronize()


def nodes(node, path=()):
    here = (*path, node["frame"]["name"])
    yield here, node
    for c in node.get("children", []):
        yield from nodes(c, here)


def with_proton() -> None:
    import proton

    work(3)
    name = os.path.join(tempfile.mkdtemp(), "memset")
    proton.start(name)
    with proton.scope("work"):
        work()
    proton.finalize()
    root = json.load(open(name + ".hatchet"))[0]
    kernels = []
    for path, node in nodes(root):
        m = node.get("metrics", {})
        if "count" in m and not node.get("children"):
            kernels.append((m.get("time (ns)", 0) / m["count"] / 1e3, m["count"],
                            m.get("bytes", 0) / max(m["count"], 1), path[-1][:70]))
    print("ours: us a call, calls, bytes a call, name")
    for row in sorted(kernels, key=lambda r: -r[0] * r[1])[:15]:
        print(f"  {row[0]:9.2f} {row[1]:5d} {row[2]:12.0f}  {row[3]}")


def with_kineto() -> None:
    from torch.profiler import ProfilerActivity, profile

    work(3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        work()
    sums: dict = {}
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        s = sums.setdefault(e.name[:70], [0.0, 0])
        s[0] += e.device_time
        s[1] += 1
    print("kineto: us a call, calls, name")
    for name, (us, n) in sorted(sums.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"  {us / n:9.2f} {n:5d}  {name}")


if __name__ == "__main__":
    which = sys.argv[1:] or ["proton", "kineto"]
    if len(which) > 1:
        for w in which:
            subprocess.run([sys.executable, "-P", __file__, w], check=False)
    elif which[0] == "proton":
        with_proton()
    else:
        with_kineto()
