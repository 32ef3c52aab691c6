"""Probe (issue 48): of a counters profile's tensor FLOPs, the share on kernels that cannot do
tensor work (no GEMM, attention or cuDNN/cuBLAS/CUTLASS name): how far the per-kernel split
blurs.   python bench/probes/tensor_leak.py PROFILE.hatchet"""
import json
import re
import sys

TENSOR = re.compile(r"nvjet|gemm|sdpa|flash|wgmma|cutlass|cudnn|mma|sm90_xmma|ampere_", re.I)


def walk(node, out):
    m = node.get("metrics", {})
    if "tensor_flops" in m:
        out.append((node["frame"]["name"], m["tensor_flops"], m.get("time (ns)", 0)))
    for c in node.get("children", []):
        walk(c, out)


kernels = []
walk(json.load(open(sys.argv[1]))[0], kernels)
total = sum(f for _, f, _ in kernels) or 1.0
leak = sum(f for n, f, _ in kernels if not TENSOR.search(n))
print(f"tensor FLOPs on non-tensor kernels: {leak / total:.1%} of {total:.3e} "
      f"({sum(1 for n, f, _ in kernels if f > 0 and not TENSOR.search(n))} of "
      f"{sum(1 for n, _, _ in kernels if not TENSOR.search(n))} such kernel nodes with any)")
