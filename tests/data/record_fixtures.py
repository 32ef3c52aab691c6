"""Record the bundled GPU fixtures with today's runtime (run on the GPU machine; each part takes a
few seconds on an H200, the first Triton compile included).

    python tests/data/record_fixtures.py [OUTDIR] [--only train|counters|warps|pcsampling]

writes, into OUTDIR (default: this folder), from one small training-ish job (a torch MLP and a
Triton kernel with launch metadata, steps fed from pinned host memory):
  train_gpu.hatchet        kernel times with launch configurations (hook="triton"), host to
                           device copies, a loader's sleep (GPU idle), a `.item()` a step (a
                           wait), cuBLAS kernels (library: no tensor-core check applies)
  train_counters.hatchet   the same job under mode="counters" (PM sampling: DRAM, L2, tensor pipe)
  train_warps.hatchet      an instrumented Triton kernel (backend="instrumentation"): scopes
                           per warp, its warp timeline (proton-viewer --warps, --html's Warps tab)
  train_pc.hatchet         the Triton kernel under mode="pcsampling": source lines, carrying
                           this file's text (proton-viewer --source scale_add anywhere)
Each part runs in its own process (one CUPTI mode per process), so a failing part leaves the
others' files.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PARTS = ("train", "counters", "warps", "pcsampling")
FILES = {"train": "train_gpu", "counters": "train_counters", "warps": "train_warps",
         "pcsampling": "train_pc"}
STEPS = 6
LOADER_SLEEP_S = 0.002
"""The data loader's stall per step: the GPU idles while the host waits for it."""


def job(part: str, out: str) -> None:
    """The training-ish job under the profiler `part` asks for, written to `out`."""
    import torch
    import triton
    import triton.language as tl

    import proton
    import proton.language as pl

    if part == "warps":
        pl.enable_semantic("triton")  # before the kernels are defined, as Triton's tests do
    def scale_add_metadata(grid, metadata, args):
        n = args["n"]
        return {"name": f"scale_add_{n}", "flops32": 2 * n, "bytes": 3 * 4 * n}

    @triton.jit(launch_metadata=scale_add_metadata)
    def scale_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * 0.5 + y, mask=mask)

    @triton.jit
    def scoped_norm(x_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
        pl.enter_scope("kernel")
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        with pl.scope("load"):
            x = tl.load(x_ptr + offs, mask=mask)
        with pl.scope("compute"):
            for _ in range(ITERS):
                x = tl.sin(x) * 1.0001 + 0.5
        with pl.scope("store"):
            tl.store(x_ptr + offs, x, mask=mask)
        pl.exit_scope("kernel")

    torch.manual_seed(0)
    width, batch = 1024, 256
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                torch.nn.Linear(4 * width, width)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    host = [torch.randn(batch, width).pin_memory() for _ in range(2)]
    n = 1 << 20
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.empty_like(a)
    grid = (triton.cdiv(n, 1024),)
    if part != "pcsampling":  # compiled before the session: its first load is not the job's
        scale_add[grid](a, b, c, n, BLOCK=1024)
    torch.cuda.synchronize()

    if part == "warps":
        x = torch.randn(8 * 256, device="cuda")
        proton.start(out, backend="instrumentation")
        with proton.scope("norm"):
            for _ in range(3):
                scoped_norm[(8,)](x, x.numel(), ITERS=64, BLOCK=256, num_warps=4)
        proton.finalize()
        return
    mode = {"train": None, "counters": "counters", "pcsampling": "pcsampling"}[part]
    proton.start(out, hook="triton", mode=mode)
    for step in range(STEPS):
        with proton.scope("step"):
            with proton.scope("loader"):
                time.sleep(LOADER_SLEEP_S)  # the GPU has nothing to do meanwhile
                x = host[step % 2].to("cuda", non_blocking=True)  # a host-to-device copy
            with proton.scope("forward"):
                loss = model(x).square().mean()
            with proton.scope("backward"):
                loss.backward()
            with proton.scope("optimizer"):
                opt.step()
                opt.zero_grad()
            with proton.scope("fused"):
                scale_add[grid](a, b, c, n, BLOCK=1024)
            with proton.scope("log"):
                loss.item()  # waits for the step's kernels
    proton.finalize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", nargs="?", default=HERE)
    parser.add_argument("--only", choices=PARTS)
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # one child's part
    args = parser.parse_args()
    if args.part:
        job(args.part, os.path.join(args.outdir, FILES[args.part]))
        return
    failed = []
    for part in (args.only,) if args.only else PARTS:
        began = time.perf_counter()
        run = subprocess.run([sys.executable, os.path.abspath(__file__), args.outdir,
                              "--part", part])
        print(f"{FILES[part]}.hatchet: {'written' if run.returncode == 0 else 'FAILED'} in "
              f"{time.perf_counter() - began:.1f} s", flush=True)
        if run.returncode:
            failed.append(part)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
