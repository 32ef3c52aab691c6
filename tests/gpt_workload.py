"""A small GPT training job, as users run them, for the real-workload matrix (test_gpu_matrix.py):
autograd's backward thread, cuBLAS, bf16 autocast, AdamW, a DataLoader whose 2 workers fork
after the profiler started, and on request torch.compile (inductor's Triton kernels), a CUDA
graph of the model (forward and backward replayed) and a gloo all-reduce across ranks.

Each step is `with proton.scope("step")` around forward / backward / optimizer (and allreduce),
with proton.step() between steps. The last line printed is JSON: steps run, the median step
time in ms over the measured steps, and with --torch-profile the kernels a measured step
launches as torch.profiler counts them (a count independent of ours).

Usage: python tests/gpt_workload.py --steps 20 [--compile] [--graph] [--allreduce]
       [--torch-profile] [--until-file stop]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import proton

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 512, 256, 4, 2, 128, 8
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: a smoke run of the same code


class Block(nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, dim // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, dim))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """This job's model; bench/step_cost.py builds a larger one of the same code."""

    def __init__(self, vocab: int = VOCAB, dim: int = DIM, heads: int = HEADS,
                 layers: int = LAYERS) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randint(0, VOCAB, (SEQ + 1,), generator=torch.Generator().manual_seed(i))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--graph", action="store_true")
    parser.add_argument("--allreduce", action="store_true")
    parser.add_argument("--torch-profile", action="store_true")
    parser.add_argument("--until-file", default=None,
                        help="run until this file exists (a job to capture), at most 300 s")
    args = parser.parse_args()

    rank = 0
    if args.allreduce:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
    torch.manual_seed(0)
    model = GPT().to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    run = model
    if args.compile:
        run = torch.compile(model)
    elif args.graph:
        sample = torch.randint(0, VOCAB, (BATCH, SEQ), device=DEVICE)
        with torch.autocast(DEVICE, torch.bfloat16, cache_enabled=False):
            run = torch.cuda.make_graphed_callables(model, (sample,))
    total = args.warmup + args.steps if args.until_file is None else 10 ** 9
    loader = torch.utils.data.DataLoader(Tokens(min(total, 100_000) * BATCH), batch_size=BATCH,
                                         num_workers=2, multiprocessing_context="fork")
    prof = loss = None
    times: list[float] = []
    deadline = time.monotonic() + 300
    for i, batch in enumerate(loader):
        if i == total or (args.until_file and (os.path.exists(args.until_file)
                                               or time.monotonic() > deadline)):
            break
        measured = i >= args.warmup
        if i == args.warmup:
            print("measuring", flush=True)  # a job to capture is past its warm-up
        if args.torch_profile and i == args.warmup:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        proton.step()
        t0 = time.perf_counter()
        batch = batch.to(DEVICE, non_blocking=True)
        with proton.scope("step" if measured else "warmup"):
            with proton.scope("forward"):
                with torch.autocast(DEVICE, torch.bfloat16, cache_enabled=not args.graph):
                    logits = run(batch[:, :-1])
                    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB),
                                           batch[:, 1:].reshape(-1))
            with proton.scope("backward"):
                loss.backward()  # on autograd's own thread
            if args.allreduce:
                with proton.scope("allreduce"):
                    for p in model.parameters():
                        torch.distributed.all_reduce(p.grad)
            with proton.scope("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=False)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        if measured:
            times.append((time.perf_counter() - t0) * 1e3)
    out = {"rank": rank, "steps": len(times), "loss": None if loss is None else loss.item(),
           "step_ms": statistics.median(times) if times else None}
    if prof is not None:
        prof.__exit__(None, None, None)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset"))]
        out["kernels_per_step"] = len(kernels) / max(len(times), 1)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
