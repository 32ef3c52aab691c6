"""Triton kernels the gpu tests share (imported once torch and triton are known present)."""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def hot_kernel(x, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """One line does almost all the work: a chain of ITERS dependent multiply-adds."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    for _ in range(ITERS):
        v = v * 0.9999 + 0.5  # HOT
    tl.store(x + offs, v, mask=offs < n)
