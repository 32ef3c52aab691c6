"""Our step breakdown against Holistic Trace Analysis's (issue 57, item 2): the DDP job of
real_shapes.py (2 ranks, rank 1's host sleeps 20 ms a step in scope `data` before its forward,
DDP's all-reduce inside backward, warm-up outside the profile) run twice, once under Proton
(rank files) and once under torch.profiler (a Chrome trace per rank): one CUPTI subscriber per
process, so never both in one run. HTA's temporal breakdown of the traces is then compared with
ours, per rank, on this machine or any (HTA needs no GPU).

    bash bench/probes/idle_hta.sh                      # on 2 GPUs: both runs, $OUT/idle_hta.tgz
    python idle_hta.py compare DIR                     # HTA (pip install holistictraceanalysis)

HTA's temporal breakdown (hta/analyzers/breakdown_analysis.py) spans a rank's trace from its
first kernel's start to its last kernel's end; idle is that span less the union of every GPU
record (kernels, copies, sets), compute the union of computation kernels, non-compute the rest
(communication and copies not hidden by compute). Ours spans the steps, from the first step's
start to where the last one drained (format.STEP_WALL), and splits the same way: compute
(step_compute), non-compute (step_comm + step_copy), idle (every step_idle_* part). Compared as
shares of the span, per rank; TOLERANCE says how close they must come (two runs of the job: the
host's timing differs between them a little).
"""
from __future__ import annotations

import json
import os
import sys
import time

from proton.format import job_of

TOLERANCE = 5.0
"""Percentage points between HTA's share and ours, per rank and part."""
STEPS = 20
SLOW_RANK, HOST_MS = 1, 20.0


def job(out: str, profiler: str) -> None:
    """The DDP job under `profiler` ("proton": rank files OUT/ddp.rankR.hatchet; "torch": a
    Chrome trace per rank in OUT/hta/)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import proton

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 2048),
                                                          torch.nn.GELU()) for _ in range(8)]
                                    ).cuda(), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(1024, 2048, device="cuda")
    for _ in range(3):  # warm-up outside the profile
        model(data).square().mean().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    dist.barrier()
    prof = None
    if profiler == "torch":
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    else:
        proton.start(os.path.join(out, "ddp"))
    t0 = time.perf_counter()
    for _ in range(STEPS):
        with proton.scope("step"):  # no-ops without a Proton session
            with proton.scope("data"):
                if rank == SLOW_RANK:
                    time.sleep(HOST_MS / 1e3)
                x = data
            with proton.scope("fwd_bwd"):
                model(x).square().mean().backward()
            with proton.scope("optimizer"):
                opt.step()
                opt.zero_grad()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    if prof is not None:
        prof.__exit__(None, None, None)
        os.makedirs(os.path.join(out, "hta"), exist_ok=True)
        prof.export_chrome_trace(os.path.join(out, "hta", f"rank-{rank}.json"))
    else:
        proton.finalize()
    print(json.dumps({"profiler": profiler, "rank": rank, "wall_s": wall}), flush=True)
    dist.destroy_process_group()


def ours(folder: str) -> dict[int, dict[str, float]]:
    """Per rank, our shares (%) of the steps' span: idle, compute, non_compute."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("ddp.rank") and name.endswith(".hatchet")):
            continue
        with open(os.path.join(folder, name)) as f:
            root = json.load(f)[0]
        rank = int(job_of(root)["rank"])
        step = next(c for c in root["children"] if c["frame"]["name"] == "step")["metrics"]
        wall = step["step_wall (ns)"]
        idle = sum(v for k, v in step.items() if k.startswith("step_idle_"))
        out[rank] = {"idle": 100 * idle / wall,
                     "compute": 100 * step["step_compute (ns)"] / wall,
                     "non_compute": 100 * (step["step_comm (ns)"] + step["step_copy (ns)"]) / wall,
                     "span_ms": wall / 1e6}
    return out


def hta(folder: str) -> dict[int, dict[str, float]]:
    """Per rank, HTA's temporal breakdown shares (%)."""
    from hta.trace_analysis import TraceAnalysis

    df = TraceAnalysis(trace_dir=folder).get_temporal_breakdown(visualize=False)
    unit = "us" if "kernel_time(us)" in df.columns else "ns"
    return {int(r["rank"]): {"idle": float(r["idle_time_pctg"]),
                             "compute": float(r["compute_time_pctg"]),
                             "non_compute": float(r["non_compute_time_pctg"]),
                             "span_ms": float(r[f"kernel_time({unit})"]) /
                             (1e3 if unit == "us" else 1e6)}
            for _, r in df.iterrows()}


def compare(folder: str) -> int:
    mine, theirs = ours(folder), hta(os.path.join(folder, "hta"))
    print(f"{'rank':>4} {'part':>12} {'HTA %':>8} {'ours %':>8} {'diff':>6}")
    bad = []
    for rank in sorted(set(mine) | set(theirs)):
        if rank not in mine or rank not in theirs:
            bad.append(f"rank {rank}: only in {'ours' if rank in mine else 'HTA'}")
            continue
        for part in ("idle", "compute", "non_compute"):
            a, b = theirs[rank][part], mine[rank][part]
            print(f"{rank:>4} {part:>12} {a:8.1f} {b:8.1f} {b - a:+6.1f}")
            if abs(a - b) > TOLERANCE:
                bad.append(f"rank {rank} {part}: HTA {a:.1f}%, ours {b:.1f}%")
        print(f"{rank:>4} {'span ms':>12} {theirs[rank]['span_ms']:8.1f} "
              f"{mine[rank]['span_ms']:8.1f}")
    print(f"tolerance: {TOLERANCE:g} percentage points per rank and part: "
          + ("within" if not bad else "OUTSIDE: " + "; ".join(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2]))
    job(sys.argv[2], sys.argv[1])
