"""Kernels with proton.language events (Triton 3.9) under a profiler, for the gpu tests (one
process each: Triton's Proton and ours cannot share one).

Usage: python tests/intra_events_workload.py PROFILER DATA PREFIX [--lang MODULE]
  PROFILER  triton (triton.profiler) or ours (proton)
  DATA      tree or trace
  --lang    the kernels' module: proton.language (default) or triton.profiler.language

Two kernels, launched once each: `stepped` (Triton, 4 CTAs x 4 warps): an event over each of
three loop steps and one from the first load to the last store, in every warp; `handed`
(Gluon, 2 CTAs): the worker partition's 4 warps start an event, then arrive on a barrier the
default partition's 4 warps wait on and end it (a flow from each worker warp to a default
one). Prints {"correct": ...} last.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

args = argparse.ArgumentParser()
args.add_argument("profiler", choices=("triton", "ours"))
args.add_argument("data", choices=("tree", "trace"))
args.add_argument("prefix")
args.add_argument("--lang", default="proton.language")
opts = args.parse_args()

pl = importlib.import_module(opts.lang)
pl.enable_semantic("triton")
BLOCK, STEPS, GRID, WARPS = 128, 3, 4, 4


@triton.jit
def stepped(x_ptr, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    whole = pl.allocate_event("whole")
    step = pl.allocate_event("step")
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    pl.start_event(whole)
    x = tl.load(x_ptr + offs)
    for _ in tl.static_range(STEPS):
        pl.start_event(step)
        x = tl.sin(x) * 1.0001 + 0.5
        pl.end_event(step)
    tl.store(x_ptr + offs, x)
    pl.end_event(whole)


@gluon.jit
def _waiter(barrier, event, out_ptr):
    mbarrier.wait(barrier, phase=0)
    pl.end_event(event)
    gl.store(out_ptr + gl.program_id(0), 1)


@gluon.jit
def _starter(barrier, event, out_ptr):
    pl.start_event(event)
    mbarrier.arrive(barrier, count=1)


@gluon.jit
def handed(out_ptr):
    barrier = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(barrier, count=1)
    event = pl.allocate_event("handed")
    gl.warp_specialize([(_waiter, (barrier, event, out_ptr)),
                        (_starter, (barrier, event, out_ptr))], [4], [24])


def main() -> None:
    x = torch.randn(GRID * BLOCK, device="cuda")
    expect = x.clone()
    for _ in range(STEPS):
        expect = torch.sin(expect) * 1.0001 + 0.5
    out = torch.zeros(2, dtype=torch.int32, device="cuda")
    if opts.profiler == "triton":
        import triton.profiler as prof
    else:
        import proton as prof
    prof.start(opts.prefix, backend="instrumentation", data=opts.data)
    stepped[(GRID,)](x, STEPS=STEPS, BLOCK=BLOCK, num_warps=WARPS)
    handed[(2,)](out, num_warps=4)
    torch.cuda.synchronize()
    prof.finalize()
    ok = bool(torch.allclose(x, expect, atol=1e-4)) and out.tolist() == [1, 1]
    print(json.dumps({"correct": ok}))


if __name__ == "__main__":
    sys.exit(main())
