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
from kernels import add_kernel  # tests/ is on the path, as a script or under pytest
from proton.examples.matmul import matmul

EXPECTED = [
    ("too_few_programs", "too few programs"),
    ("tail_effect", "tail effect"),
    ("low_occupancy", "low occupancy"),  # an fp32 dot: 64 KiB shared memory a block
    ("low_occupancy", "no tensor cores"),
    ("low_occupancy", "far from the roofline"),
    ("mma_sync", "no wgmma"),  # an fp16 dot on 2 warps: Hopper's HMMA, not its warpgroup MMA
    ("uncoalesced", "far from the roofline"),
    ("uncoalesced", "stalled line"),
    ("launch_bound", "launch-bound"),
]
"""(scope, a rule that must fire on the kernel in it)"""
HEALTHY = ("cublas_matmul", "triton_matmul")


@triton.jit
def square_dot(a, c, BM: tl.constexpr):
    r = tl.arange(0, BM)
    x = tl.load(a + r[:, None] * BM + r[None, :])
    tl.store(c + r[:, None] * BM + r[None, :], tl.dot(x, x))


def _copy_bytes(grid, kernel, args) -> dict:
    return {"flops32": args["n"], "bytes": 8 * args["n"]}


@triton.jit(launch_metadata=_copy_bytes)
def strided_copy(x, out, n, BLOCK: tl.constexpr):
    """Reads 4 bytes of every 128-byte line (a stride of 32 floats): a memory-bound kernel at a
    small fraction of the bandwidth its useful bytes would need."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    src = (offs * 32) % n + (offs * 32) // n
    tl.store(out + offs, tl.load(x + src, mask=offs < n) * 2.0, mask=offs < n)


def _dot_flops(grid, kernel, args) -> dict:
    bm = args["BM"]  # each program reads an fp32 tile and writes one
    return {"flops32": 2 * bm ** 3 * grid[0], "bytes": 8 * bm * bm * grid[0]}


@triton.jit(launch_metadata=_dot_flops)
def ieee_dot(a, c, BM: tl.constexpr):
    r = tl.arange(0, BM)
    x = tl.load(a + r[:, None] * BM + r[None, :])
    tl.store(c + r[:, None] * BM + r[None, :], tl.dot(x, x, input_precision="ieee"))


def record(name: str) -> str:
    """Profile the workload to NAME.hatchet; return the file's path."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn(1 << 22, device="cuda")
    out = torch.empty_like(x)
    big = torch.randn(1 << 24, device="cuda")  # 64 MiB: more than the L2 cache holds
    big_out = torch.empty_like(big)
    single = torch.randn(128, 128, device="cuda")
    half64 = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    tile = torch.empty(128, 128, device="cuda")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    # 4 warps and 30 registers: 16 blocks an SM, so one wave is 16 x SMs; 1.1 waves of them
    tail = int(sms * 16 * 1.1)
    work = {
        "too_few_programs": lambda: add_kernel[(8,)](x, x, out, x.numel(), BLOCK=1024),
        "tail_effect": lambda: add_kernel[(tail,)](x, x, out, x.numel(), BLOCK=1024),
        # 3 blocks an SM fit (shared memory): one wave
        "low_occupancy": lambda: ieee_dot[(3 * sms,)](single, tile, BM=128),
        "mma_sync": lambda: square_dot[(3 * sms,)](half64, tile, BM=64, num_warps=2),
        "uncoalesced": lambda: strided_copy[(big.numel() // 1024,)](big, big_out, big.numel(),
                                                                    BLOCK=1024),
        "cublas_matmul": lambda: a @ a,
        "triton_matmul": lambda: matmul(a, a, c),
    }
    launches = {"too_few_programs": 400, "low_occupancy": 5, "uncoalesced": 25,
                "cublas_matmul": 5, "triton_matmul": 5}
    for fn in work.values():  # compiled and loaded before the profile
        fn()
    torch.cuda.synchronize()
    proton.start(name, hook="triton", mode="pcsampling")
    for scope, fn in work.items():
        with proton.scope(scope):
            for _ in range(launches.get(scope, 100)):
                fn()
    with proton.cpu_timed_scope("launch_bound"):
        y = torch.zeros(16, device="cuda")
        for _ in range(2000):
            y.add_(1)  # tiny kernels, one after another
    torch.cuda.synchronize()
    proton.finalize()
    return name + ".hatchet"


def problems(findings) -> list[str]:
    """What --diagnose got wrong on this workload's profile: a rule that did not fire on the
    scope made to trip it, or a warning on a healthy matmul."""
    fired = {(f.kernel.removeprefix("scope ") if f.rule == "launch-bound"
              else f.path.split(" / ")[-1], f.rule) for f in findings if not f.info}
    out = [f"{rule!r} did not fire on {scope!r}" for scope, rule in EXPECTED
           if (scope, rule) not in fired]
    out += [f"a healthy matmul was warned about: {f}" for f in findings
            if not f.info and any(h in f.path.split(" / ") for h in HEALTHY)]
    return out


if __name__ == "__main__":
    print(record(sys.argv[1]))
