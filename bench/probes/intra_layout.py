"""Probe: the profile buffer's layout of a warp-specialised TMA matmul under
backend="instrumentation" (Triton 3.6): the kernel's metadata warps, each CTA block's header
(buffer bytes, per-warp counters) and what ours decodes, to check the decoder against kernels
whose warps do not divide the buffer.

Usage (GPU machine): python bench/probes/intra_layout.py
"""
from __future__ import annotations

import json

import numpy as np
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import proton
import proton.language as pl
from proton.data import intra
from proton.hooks import InstrumentationHook

pl.enable_semantic("triton")


@triton.jit
def mm(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
       WS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(tl.cdiv(K, BK), warp_specialize=WS):
        pl.enter_scope("loop")
        a = a_desc.load([0, k * BK])
        b = b_desc.load([pid * BN, k * BK])
        acc = tl.dot(a, b.T, acc)
        pl.exit_scope("loop")
    c_desc.store([0, pid * BN], acc.to(tl.float16))


def main() -> None:
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                 device="cuda"))
    M = N = K = 512
    a = torch.randn((M, K), device="cuda", dtype=torch.float16)
    b = torch.randn((N, K), device="cuda", dtype=torch.float16)
    c = torch.empty((M, N), device="cuda", dtype=torch.float16)
    out = {}
    for ws in (False, True):
        InstrumentationHook.enable_host_buffer = True
        proton.start(f"/tmp/intra_layout_{ws}", backend="instrumentation",
                     mode=proton.mode.Default(optimizations="clock32"))
        try:
            k = mm[(N // 256,)](TensorDescriptor(a, a.shape, a.stride(), [128, 128]),
                                TensorDescriptor(b, b.shape, b.stride(), [256, 128]),
                                TensorDescriptor(c, c.shape, c.stride(), [128, 256]),
                                K, BM=128, BN=256, BK=128, WS=ws, num_warps=8, num_stages=2)
            buf = InstrumentationHook.host_buffer.numpy()
        except Exception as exc:  # the probe says what failed and goes on
            out[str(ws)] = {"error": f"{type(exc).__name__}: {exc}"}
            InstrumentationHook.enable_host_buffer = False
            proton.finalize()
            continue
        head = np.frombuffer(buf[:40].tobytes(), "<u4").tolist()
        payload = buf[head[3]:]
        warps, scratch = head[7], head[8]
        block = np.frombuffer(payload[:scratch].tobytes(), "<u4")
        info = {"header": head, "metadata_warps": k.metadata.num_warps,
                "scratch": k.metadata.profile_scratch_size,
                "block_words": block[:10].tolist(), "counters": block[10:10 + warps].tolist()}
        try:
            d = intra.decode(payload, scratch, warps)
            info["decoded"] = {"events": int(d.scope.size), "warps": sorted(set(d.warp.tolist())),
                               "unbalanced": d.unbalanced, "reordered": d.reordered,
                               "dropped": d.dropped, "min_cycles": int(d.cycles.min(initial=0))}
        except intra.LayoutError as exc:
            info["decoded"] = f"LayoutError: {exc}"
        out[str(ws)] = info
        InstrumentationHook.enable_host_buffer = False
        proton.finalize()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
