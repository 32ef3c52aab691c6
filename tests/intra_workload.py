"""One instrumented Triton kernel under a profiler, for the gpu tests and bench/ (one process
each: Triton's Proton and ours cannot share one).

Usage: python tests/intra_workload.py PROFILER DATA PREFIX [--lang MODULE] [--loop N]
           [--mode MODE] [--fixture PATH] [--beside PREFIX]
  PROFILER  triton (triton.profiler) or ours (proton)
  DATA      tree or trace
  --lang    the kernel's scope module: proton.language (default) or triton.profiler.language
  --loop    also launch a kernel with a scope inside an N-step loop (2N records per warp)
  --mode    the instrumentation mode ("default:buffer_type=global:buffer_size=131072")
  --fixture save the raw buffer of one launch (ours only) as an .npz for the CPU tests
  --beside  also record a kernel trace (backend cupti, data="trace") to PREFIX meanwhile
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

import torch
import triton
import triton.language as tl

args = argparse.ArgumentParser()
args.add_argument("profiler", choices=("triton", "ours"))
args.add_argument("data", choices=("tree", "trace"))
args.add_argument("prefix")
args.add_argument("--lang", default="proton.language")
args.add_argument("--loop", type=int, default=0)
args.add_argument("--mode", default=None, help="the instrumentation mode string")
args.add_argument("--fixture")
args.add_argument("--beside")
opts = args.parse_args()

pl = importlib.import_module(opts.lang)
pl.enable_semantic("triton")
BLOCK, ITERS, GRID, WARPS = 256, 64, 8, 4


@triton.jit
def scoped(x_ptr, y_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    pl.enter_scope("kernel")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("load"):
        x = tl.load(x_ptr + offs, mask=mask)
    with pl.scope("compute"):
        for _ in range(ITERS):
            x = tl.sin(x) * 1.0001 + 0.5
    with pl.scope("store"):
        tl.store(y_ptr + offs, x, mask=mask)
    pl.exit_scope("kernel")


@triton.jit
def looped(x_ptr, n, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    for _ in range(STEPS):
        pl.enter_scope("step")
        x = x * 1.0001 + 0.5
        pl.exit_scope("step")
    tl.store(x_ptr + offs, x, mask=offs < n)


def main() -> None:
    x = torch.randn(GRID * BLOCK, device="cuda")
    y = torch.empty_like(x)
    mode = opts.mode
    if opts.profiler == "triton":
        import triton.profiler as prof
    else:
        import proton as prof
    prof.start(opts.prefix, backend="instrumentation", data=opts.data, mode=mode)
    if opts.beside:
        prof.start(opts.beside, data="trace")
    scoped[(GRID,)](x, y, x.numel(), ITERS=ITERS, BLOCK=BLOCK, num_warps=WARPS)
    if opts.fixture and opts.profiler == "ours":
        save_fixture(opts.fixture)
    if opts.loop:
        looped[(2,)](x, x.numel(), STEPS=opts.loop, BLOCK=BLOCK, num_warps=WARPS)
    torch.cuda.synchronize()
    prof.finalize()
    expect = x.clone()
    for _ in range(ITERS):
        expect = torch.sin(expect) * 1.0001 + 0.5
    print(json.dumps({"correct": bool(torch.allclose(y, expect, atol=1e-4))}))


def save_fixture(path: str) -> None:
    """The arena's bytes of the one launch made so far, with what the decoder needs."""
    import numpy as np

    from proton.runtime import instrumentation

    inst = instrumentation._installed
    torch.cuda.synchronize()
    (info, offset, size, *_), = inst.pending
    raw = inst.arena[offset:offset + size].cpu().numpy()
    np.savez(path, buffer=raw, scratch=info.scratch, num_warps=info.num_warps,
             names=json.dumps(info.scope_names), parents=json.dumps(info.scope_parents),
             triton=triton.__version__, device=torch.cuda.get_device_name())


if __name__ == "__main__":
    sys.exit(main())
