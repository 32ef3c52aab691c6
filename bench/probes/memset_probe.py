"""Probe (issue 50): how long are the memsets cuBLAS issues in a bf16 training step, by ours and
by torch.profiler (kineto, CUPTI too), each in a process of its own (one CUPTI subscriber a
process). The copies helper saw ~1.39 ms a memset under ours, as long as the gemm beside it.

    python3 -P bench/probes/memset_probe.py            both, one after the other
    python3 -P bench/probes/memset_probe.py proton|kineto
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import step_cost  # noqa: E402 - bench/step_cost.py


def work(n: int = 20) -> None:
    """`n` steps of bench/step_cost.py's bf16 GPT (its cuBLAS gemms issue the memsets)."""
    global _model
    if _model is None:
        _model = step_cost.build("cuda")
    step_cost.steps(*_model, n, SCOPE, "cuda")
    torch.cuda.synchronize()


_model = None
SCOPE = lambda name: contextlib.nullcontext()  # noqa: E731 - proton's in with_proton


def nodes(node, path=()):
    here = (*path, node["frame"]["name"])
    yield here, node
    for c in node.get("children", []):
        yield from nodes(c, here)


def with_proton() -> None:
    import proton

    global SCOPE
    SCOPE = proton.scope
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
    for row in sorted(kernels, key=lambda r: -r[0] * r[1])[:12]:
        print(f"  {row[0]:9.2f} {row[1]:5d} {row[2]:12.0f}  {row[3]}")
    print("ours, every copy and set: us a call, calls, bytes a call, where")
    for path, node in nodes(root):
        m = node.get("metrics", {})
        if path[-1].startswith(("memset", "memcpy")):
            print(f"  {m.get('time (ns)', 0) / m['count'] / 1e3:9.2f} {m['count']:5d} "
                  f"{m.get('bytes', 0) / m['count']:12.0f}  {' > '.join(path[1:])}")


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
    for name, (us, n) in sorted(sums.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"  {us / n:9.2f} {n:5d}  {name}")
    for name, (us, n) in sums.items():
        if name.lower().startswith(("memset", "memcpy")):
            print(f"  copy or set: {us / n:9.2f} {n:5d}  {name}")


if __name__ == "__main__":
    which = sys.argv[1:] or ["proton", "kineto"]
    if len(which) > 1:
        for w in which:
            subprocess.run([sys.executable, "-P", __file__, w], check=False)
    elif which[0] == "proton":
        with_proton()
    else:
        with_kineto()
