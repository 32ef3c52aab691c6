"""A data-parallel training job as users write it, one rank made a straggler (issue 57): torch
DDP (its bucketed all-reduce runs inside backward) or FSDP2 (fully_shard per layer: all-gathers
in forward and backward, reduce-scatters in backward), scopes step / data / fwd_bwd / optimizer
/ log, the loss read each step (loss.item(), as a loop that logs it does: the host waits for its
step, so a host delay is the job's; a host running ahead hides a sleep). The slow rank's host sleeps in `data` before its forward (a slow
data loader: --host, a share of the step), or it trains on more data (an extra micro-batch
beside the batch, DDP: --gpu, a share of the batch). The model is built, wrapped and warmed up
outside the scopes, so its broadcasts and warm-up collectives sit at ROOT, as in users' jobs.

Whole under the profiler, one run (the job's file is written at destroy_process_group):
    torchrun --nproc-per-node N -m proton -n NAME tests/straggler_job.py --kind ddp --host 0.2
A session per run, many runs in one launch (bench/stragglers_runs.py):
    torchrun --nproc-per-node N tests/straggler_job.py --runs 10 --out DIR/NAME --host 0.05

Each rank prints a JSON line per run with the job's own measures (none from the profiler):
`sleep_ms` (planted a step), `compute_ms` (its forward and backward a step on the GPU, CUDA
events, communication off: DDP's no_sync), `before_ms` (a step before the sleep began, host
clock, every rank's slowest) and `step_ms` (a step of the scoped loop).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist

import proton


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=("ddp", "fsdp"), default="ddp")
    p.add_argument("--slow", type=int, default=-1, help="the slow rank (default: the last)")
    p.add_argument("--host", type=float, default=0.0, help="its host's sleep, a share of a step")
    p.add_argument("--gpu", type=float, default=0.0, help="its extra rows, a share of the batch")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--out", default="", help="a session per run, OUT.runR (else the proton "
                                             "command's session)")
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=2048)
    args = p.parse_args()
    if args.kind == "fsdp" and args.gpu:
        p.error("--gpu plants a micro-batch under DDP's no_sync: use --kind ddp")
    return args


CUDA = torch.cuda.is_available()
"""Off only for a smoke test of the job's plumbing on a machine without a GPU (gloo, CPU)."""
DEVICE = "cuda" if CUDA else "cpu"


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def one_run(args: argparse.Namespace, rank: int, slow: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(args.dim, args.dim),
                                                      torch.nn.GELU())
                                  for _ in range(args.layers)]).to(DEVICE)
    if args.kind == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    else:
        model = DDP(model, device_ids=[torch.cuda.current_device()] if CUDA else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.dim, device=DEVICE)
    extra = None
    if rank == slow and args.gpu:
        extra = torch.randn(max(1, round(args.gpu * args.batch)), args.dim, device=DEVICE)

    def fwd_bwd() -> torch.Tensor:
        if extra is not None:  # gradient accumulation: one more micro-batch, no all-reduce
            with model.no_sync():
                model(extra).square().mean().backward()
        loss = model(x).square().mean()
        loss.backward()
        return loss

    losses: list[float] = []

    def step() -> None:
        loss = fwd_bwd()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())  # the loss logged every step, as training loops do

    for _ in range(3):  # warm-up, outside the scopes
        step()
    sync()
    compute_ms = None
    if args.kind == "ddp" and CUDA:  # each rank's own GPU work a step, communication off
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with model.no_sync():
            start.record()
            for _ in range(5):
                fwd_bwd()
            end.record()
        torch.cuda.synchronize()
        compute_ms = start.elapsed_time(end) / 5
        opt.zero_grad()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(5):  # the step before anyone sleeps (every rank's slowest)
        step()
    sync()
    before = torch.tensor([(time.perf_counter() - t0) * 1e3 / 5], device=DEVICE)
    dist.all_reduce(before, op=dist.ReduceOp.MAX)
    before_ms = float(before[0])
    sleep_s = args.host * before_ms / 1e3 if rank == slow else 0.0
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        with proton.scope("step"):
            with proton.scope("data"):
                if sleep_s:
                    time.sleep(sleep_s)  # a slow data loader on this rank's host
            with proton.scope("fwd_bwd"):
                loss = fwd_bwd()
            with proton.scope("optimizer"):
                opt.step()
                opt.zero_grad()
            with proton.scope("log"):
                losses.append(loss.item())  # the host waits for the step: a late rank's
                # host delay is the job's (without it the host runs ahead and hides a sleep)
    sync()
    step_ms = (time.perf_counter() - t0) * 1e3 / args.steps
    return {"sleep_ms": sleep_s * 1e3, "compute_ms": compute_ms, "before_ms": before_ms,
            "step_ms": step_ms, "steps": args.steps}


def main() -> None:
    args = parse()
    if CUDA:
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = args.slow if args.slow >= 0 else world - 1
    for run in range(args.runs):
        name = f"{args.out}.run{run}" if args.out else ""
        if name:
            proton.start(name)
        try:
            got = one_run(args, rank, slow)
        finally:
            if name:
                proton.finalize()  # the job file, merged over the ranks
        gc.collect()  # the run's model and its DDP reducer (cycles) before the next one
        if CUDA:
            torch.cuda.empty_cache()
        print(json.dumps({"job": args.kind, "run": run, "rank": rank, "world": world,
                          "slow": slow, "host": args.host, "gpu": args.gpu, **got}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
