"""One profile with a deliberately bad kernel per --diagnose rule, and healthy matmuls beside
them, under instruction sampling and the Triton launch hook (for flops and bytes). The gpu test
runs it; on the GPU machine it also writes the CPU tests' fixture:

    python tests/diagnose_workload.py tests/data/diagnose_recorded

Each scope is named for the rule its kernel should trip (H100/H200 arithmetic in the comments).
"""
from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

import proton
from proton.examples.matmul import matmul

SCOPES = {
    "too_few_programs": ("too few programs", "add_kernel"),
    "tail_effect": ("tail effect", "add_kernel"),
    "low_occupancy": ("low occupancy", "wide_fma"),
    "uncoalesced": ("far from the roofline", "strided_copy"),
    "dependent_math": ("stall-dominated lines", "fma_chain"),
    "fp32_dot": ("no tensor cores", "ieee_dot"),
}
"""scope -> (the rule its kernel trips, the kernel)"""
HEALTHY = ("cublas_matmul", "triton_matmul")
LAUNCH_BOUND = "launch_bound"


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _fma_flops(grid, kernel, args) -> dict:
    return {"flops32": 2 * args["ITERS"] * args["n"], "bytes": 8 * args["n"]}


@triton.jit(launch_metadata=_fma_flops)
def wide_fma(x, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """4096 values a program on one warp: 128 a thread, about 254 registers, 8 blocks an SM
    (12.5% occupancy); fp32 math, far below the tensor peak."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    for _ in range(ITERS):
        v = v * 0.9999 + 0.5
    tl.store(x + offs, v, mask=offs < n)


def _copy_bytes(grid, kernel, args) -> dict:
    return {"flops32": args["n"], "bytes": 8 * args["n"]}


@triton.jit(launch_metadata=_copy_bytes)
def strided_copy(x, out, n, BLOCK: tl.constexpr):
    """Reads 4 bytes of every 128-byte line (a stride of 32 floats): a memory-bound kernel at a
    small fraction of the bandwidth its useful bytes would need."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    src = (offs * 32) % n + (offs * 32) // n
    tl.store(out + offs, tl.load(x + src, mask=offs < n) * 2.0, mask=offs < n)


@triton.jit
def fma_chain(x, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    for _ in range(ITERS):
        v = v * 0.9999 + 0.5  # each multiply-add waits for the one before
    tl.store(x + offs, v, mask=offs < n)


@triton.jit
def ieee_dot(a, c, BM: tl.constexpr):
    r = tl.arange(0, BM)
    x = tl.load(a + r[:, None] * BM + r[None, :])
    tl.store(c + r[:, None] * BM + r[None, :], tl.dot(x, x, input_precision="ieee"))


def record(name: str) -> str:
    """Profile the workload to NAME.hatchet; return the file's path."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn(1 << 22, device="cuda")
    out = torch.empty_like(x)
    half = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    single = half.float()
    tile = torch.empty(128, 128, device="cuda")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    # 4 warps and 30 registers: 16 blocks an SM, so one wave is 16 x SMs; 1.1 waves of them
    tail = int(sms * 16 * 1.1)
    work = {
        "too_few_programs": lambda: add_kernel[(8,)](x, x, out, x.numel(), BLOCK=1024),
        "tail_effect": lambda: add_kernel[(tail,)](x, x, out, x.numel(), BLOCK=1024),
        "low_occupancy": lambda: wide_fma[(x.numel() // 4096,)](x, x.numel(), ITERS=64,
                                                                 BLOCK=4096, num_warps=1),
        "uncoalesced": lambda: strided_copy[(x.numel() // 1024,)](x, out, x.numel(), BLOCK=1024),
        "dependent_math": lambda: fma_chain[(x.numel() // 1024,)](x, x.numel(), ITERS=256,
                                                                    BLOCK=1024),
        "fp32_dot": lambda: ieee_dot[(1,)](single, tile, BM=128),
        "cublas_matmul": lambda: a @ a,
        "triton_matmul": lambda: matmul(a, a, c),
    }
    for fn in work.values():  # compiled and loaded before the profile
        fn()
    torch.cuda.synchronize()
    proton.start(name, hook="triton", mode="pcsampling")
    for scope, fn in work.items():
        with proton.scope(scope):
            for _ in range(5 if scope in HEALTHY else 400 if scope == "too_few_programs"
                           else 100):
                fn()
    with proton.cpu_timed_scope(LAUNCH_BOUND):
        y = torch.zeros(16, device="cuda")
        for _ in range(2000):
            y.add_(1)  # tiny kernels, one after another
    torch.cuda.synchronize()
    proton.finalize()
    return name + ".hatchet"


def problems(findings) -> list[str]:
    """What --diagnose got wrong on this workload's profile: a rule that did not fire on the
    scope made to trip it, or a warning on a healthy matmul."""
    fired = {(f.rule, f.kernel if f.rule == "launch-bound" else f.path.split(" / ")[-1])
             for f in findings if not f.info}
    wanted = {(rule, scope) for scope, (rule, _) in SCOPES.items()}
    wanted.add(("launch-bound", f"scope {LAUNCH_BOUND}"))
    out = [f"{rule!r} did not fire on {scope!r}" for rule, scope in sorted(wanted - fired)]
    out += [f"a healthy matmul was warned about: {f}" for f in findings
            if not f.info and any(h in f.path.split(" / ") for h in HEALTHY)]
    return out


if __name__ == "__main__":
    print(record(sys.argv[1]))
