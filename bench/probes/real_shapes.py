"""Jobs in the shapes real training takes (issue 57), each written as a user writes one, to see
what the analyses say of them. Every job prints what an independent measure says (CUDA events,
torch.cuda.memory_stats, host clocks) beside the profile it leaves.

    python real_shapes.py loop OUT          # copies, a readback, a host sleep, a 4 MiB leak
    python real_shapes.py pcs OUT           # first scope of a pcsampling + hook=triton session
    python real_shapes.py counters OUT      # mode="counters": warm-ups, short kernels, L2
    torchrun --nproc-per-node N -m proton -n OUT real_shapes.py ddp|fsdp SLOW_RANK HOST_MS BATCH_X
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

import proton


def loop(out: str) -> None:
    dev = "cuda"
    a = torch.randn(2048, 2048, device=dev)
    host = torch.randn(8 << 20)  # 32 MiB, pageable
    x = torch.randn(1 << 20, device=dev)
    (a @ a).sum().item()  # cuBLAS's handle (its workspace is allocated in the profile)
    torch.cuda.synchronize()
    kept = []
    proton.start(out, memory=True)
    t0 = time.perf_counter()
    live0 = torch.cuda.memory_allocated()
    for _ in range(10):
        with proton.scope("step"):
            with proton.scope("copy"):
                y = host.to(dev)
            with proton.scope("readback"):
                loss = (a @ a).sum()
                loss.item()
            with proton.scope("idle"):
                x.mul_(1.0001)
                time.sleep(0.010)
                x.add_(1)
            with proton.scope("leak"):
                kept.append(torch.empty(1 << 20, device=dev))  # 4 MiB a step
            del y
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    proton.finalize()
    print(json.dumps({"job": "loop", "wall_s": wall,
                      "live_growth_bytes": torch.cuda.memory_allocated() - live0,
                      "kept_bytes": sum(t.numel() * 4 for t in kept)}))


def pcs(out: str) -> None:
    from proton.examples.matmul import matmul
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    matmul(a, a, c)  # compiled and loaded before the session
    torch.cuda.synchronize()
    proton.start(out, mode="pcsampling", hook="triton")
    t0 = time.perf_counter()
    with proton.scope("mm"):
        for _ in range(10):
            matmul(a, a, c)
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    with proton.scope("mm2"):
        for _ in range(10):
            matmul(a, a, c)
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    proton.finalize()
    print(json.dumps({"job": "pcs", "mm_wall_s": t1 - t0, "mm2_wall_s": t2 - t1}))


def counters(out: str) -> None:
    n = 64 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    z = torch.empty_like(x)
    big = torch.empty(64 << 20, device="cuda")
    big2 = torch.empty_like(big)  # 256 MiB each
    small = [torch.randn(1 << 20, device="cuda") for _ in range(3)]
    pool = torch.randn(1 << 28, device="cuda")  # 1 GiB: rotated through, so reads miss L2
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.add(x, y, out=z)
    torch.cuda.synchronize()
    proton.start(out, mode="counters")
    for _ in range(3):  # warm-up launches outside any scope
        torch.add(x, y, out=z)
    (w @ w)  # cuBLAS outside scopes
    torch.cuda.synchronize()
    truth = {}
    with proton.scope("add64M"):
        for _ in range(10):
            torch.add(x, y, out=z)
    truth["add64M"] = 10 * 3 * n * 4
    with proton.scope("d2d_copy"):
        for _ in range(10):
            big2.copy_(big)
    truth["d2d_copy"] = 10 * 2 * big.numel() * 4
    with proton.scope("l2_adds"):
        for _ in range(200):
            torch.add(small[0], small[1], out=small[2])
    # short kernels of known bytes: a read + write of k floats from a rotating 1 GiB pool
    off = 0
    for label, k in (("short_5us", 1 << 17), ("short_20us", 1 << 20), ("short_100us", 6 << 20),
                     ("short_1ms", 64 << 20)):
        with proton.scope(label):
            for _ in range(20):
                if off + 2 * k > pool.numel():
                    off = 0
                src, dst = pool[off:off + k], pool[off + k:off + 2 * k]
                torch.mul(src, 2.0, out=dst)
                off += 2 * k
        truth[label] = 20 * 2 * k * 4
    with proton.scope("bf16_matmul"):
        for _ in range(10):
            w @ w
    torch.cuda.synchronize()
    proton.finalize()
    print(json.dumps({"job": "counters", "dram_bytes_expected": truth}))


def ddp(slow: int, host_ms: float, batch_x: float, fsdp: bool = False) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 2048),
                                                      torch.nn.GELU()) for _ in range(8)]).cuda()
    if fsdp:  # FSDP2: each layer's parameters all-gathered in forward, reduce-scattered in backward
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    else:
        model = DDP(model, device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = 1024
    if rank == slow:
        batch = int(batch * batch_x)
    data = torch.randn(batch, 2048, device="cuda")
    for _ in range(3):  # warm-up outside scopes
        model(data).square().mean().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    ev = []
    t0 = time.perf_counter()
    for step in range(20):
        with proton.scope("step"):
            with proton.scope("data"):
                if rank == slow and host_ms:
                    time.sleep(host_ms / 1e3)  # a slow data loader on this rank's host
                x = data
            with proton.scope("fwd_bwd"):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                model(x).square().mean().backward()
                e.record()
                ev.append((s, e))
            with proton.scope("optimizer"):
                opt.step()
                opt.zero_grad()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    fwd_bwd_gpu = sum(s.elapsed_time(e) for s, e in ev)
    print(json.dumps({"job": "ddp", "rank": rank, "wall_s": wall, "steps": 20,
                      "fwd_bwd_events_ms": fwd_bwd_gpu}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    job = sys.argv[1]
    if job in ("ddp", "fsdp"):
        ddp(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), fsdp=job == "fsdp")
    else:
        {"loop": loop, "pcs": pcs, "counters": counters}[job](sys.argv[2])
