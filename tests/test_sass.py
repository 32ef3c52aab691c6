"""A Triton kernel's tl.dot in its SASS, on this machine's CPU: Triton compiles for a GPU target
without one, and its wheel's nvdisasm reads the cubin."""
from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from proton.compiler.sass import has_dot, instruction_mix, nvdisasm  # noqa: E402

pytestmark = pytest.mark.skipif(nvdisasm() is None, reason="no nvdisasm (Triton's wheel has one)")


@triton.jit
def dot_kernel(a, b, c, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               IEEE: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * BN + rn[None, :])
        if IEEE:
            acc += tl.dot(x, y, input_precision="ieee")
        else:
            acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * BN + rn[None, :], acc)


@triton.jit
def add_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y + offs, tl.load(x + offs) * 2.0 + 1.0)


def compile_dot(arch: int, dtype: str, block: int, ieee: bool = False):
    src = triton.compiler.ASTSource(
        fn=dot_kernel, signature={"a": f"*{dtype}", "b": f"*{dtype}", "c": "*fp32",
                                  "K": "constexpr", "BM": "constexpr", "BN": "constexpr",
                                  "BK": "constexpr", "IEEE": "constexpr"},
        constexprs={"K": 256, "BM": block, "BN": block, "BK": 32, "IEEE": ieee})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4})


@pytest.mark.parametrize("arch,dtype,block,ieee,want", [
    (90, "fp16", 128, False, "HGMMA"),  # Hopper's warpgroup MMA
    (80, "fp16", 128, False, "HMMA"),  # Ampere's mma.sync
    (90, "fp32", 64, True, "FFMA"),  # fp32 at IEEE precision: no tensor cores
])
def test_the_dots_instructions(arch, dtype, block, ieee, want):
    kernel = compile_dot(arch, dtype, block, ieee)
    assert has_dot(kernel.asm["ttir"])
    mix = instruction_mix(kernel.asm["cubin"])
    assert mix[want] > 0
    for other in {"HGMMA", "HMMA"} - {want}:
        assert mix[other] == 0, mix


def test_a_kernel_without_a_dot():
    src = triton.compiler.ASTSource(fn=add_kernel, signature={"x": "*fp32", "y": "*fp32",
                                                              "n": "i32", "BLOCK": "constexpr"},
                                    constexprs={"BLOCK": 128})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    assert has_dot(kernel.asm["ttir"]) is False
    mix = instruction_mix(kernel.asm["cubin"])
    assert mix["HGMMA"] == mix["HMMA"] == 0
    assert has_dot(None) is None and instruction_mix(b"not a cubin") is None
