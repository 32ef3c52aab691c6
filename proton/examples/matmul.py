"""A Triton fp16 matmul that tells the profiler its flops and bytes (launch_metadata).

    proton -k triton -n matmul proton/examples/matmul.py --size 4096
    proton-viewer -m time/ms,tflop16/s,util matmul.hatchet
"""
from __future__ import annotations

import argparse
from typing import Callable

import torch
import triton
import triton.language as tl

import proton


def _metadata(grid, metadata, args) -> dict:
    (m, k), n = args["a"].shape, args["b"].shape[1]
    return {"name": f"matmul_{m}x{n}x{k}", "flops16": 2 * m * n * k,
            "bytes": 2 * (m * k + k * n + m * n)}


@triton.jit(launch_metadata=_metadata)
def matmul_kernel(a, b, c, K, stride_am, stride_bk, stride_cm,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(a + rm[:, None] * stride_am + (k0 + rk)[None, :])
        y = tl.load(b + (k0 + rk)[:, None] * stride_bk + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16))


def matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """c = a @ b for row-major fp16 matrices whose sides are multiples of 128."""
    m, k = a.shape
    n = b.shape[1]
    assert m % 128 == 0 and n % 128 == 0 and k % 64 == 0, "sides must be multiples of 128"
    matmul_kernel[(m // 128, n // 128)](a, b, c, k, a.stride(0), b.stride(0), c.stride(0),
                                        BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                                        num_warps=8, num_stages=3)
    return c


def event_timed(fn: Callable[[], object], times: int) -> float:
    """Seconds the GPU spent in `times` calls of fn, each between its own pair of CUDA events
    (what the profile's kernel time is checked against)."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(times)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return sum(start.elapsed_time(end) for start, end in events) * 1e-3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    a, b = (torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
            for _ in range(2))
    c = torch.empty_like(a)
    proton.start("matmul", hook="triton")  # joins the `proton` command's session if any
    with proton.scope("matmul"):
        for _ in range(args.iters):
            matmul(a, b, c)
    proton.finalize()


if __name__ == "__main__":
    main()
