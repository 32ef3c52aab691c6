"""Probe (issue 48, item 4): Nsight Compute's counts beside ours, kernel by kernel.

Run after bench/gpu_run.sh installed the project: `python3 -P bench/probes/ncu_side.py`.
It finds ncu, runs one workload (a 256 MiB bf16 copy, an 8192^3 bf16 matmul, a 4 MiB copy
that fits in L2) once under ncu (which replays each kernel) and once under proton's counters
mode, and prints per kernel: DRAM bytes, L2 bytes and tensor FLOPs (16-bit dense rate) by both.
"""
from __future__ import annotations

import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

WORK = r'''
import sys, torch
MODE = sys.argv[1]
x = torch.ones(128 << 20, dtype=torch.bfloat16, device="cuda")
y = torch.empty_like(x)
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
s = torch.ones(1 << 20, dtype=torch.float32, device="cuda"); t = torch.empty_like(s)
torch.cuda.synchronize()
if MODE == "proton":
    import proton
    proton.start(sys.argv[2], mode="counters")
for name, fn, n in (("copy", lambda: torch.mul(x, 2, out=y), 10),
                    ("matmul", lambda: a @ a, 10),
                    ("l2", lambda: torch.mul(s, 2, out=t), 200)):
    if MODE == "proton":
        with proton.scope(name):
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
    else:
        torch.cuda.nvtx.range_push(name)
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
if MODE == "proton":
    proton.finalize()
'''

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
           "sm__pipe_tensor_cycles_active.sum", "gpu__time_duration.sum")


def find_ncu() -> str | None:
    for c in [shutil.which("ncu"), *sorted(glob.glob("/usr/local/cuda*/bin/ncu")),
              *sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))]:
        if c and os.access(c, os.X_OK):
            return c
    return None


def ncu_counts(ncu: str, script: str) -> dict[str, dict[str, float]]:
    """Per scope (NVTX range): each metric summed over its kernels."""
    # NCU_FLAGS="--cache-control none --clock-control none": caches and clocks as the job
    # left them (ncu's default flushes caches and locks the base clock before each kernel)
    out = subprocess.run([ncu, *os.environ.get("NCU_FLAGS", "").split(), "--csv", "--nvtx", "--print-nvtx-rename", "none",
                          "--metrics", ",".join(METRICS), "--print-units", "base",
                          sys.executable, "-P", script, "ncu"],
                         capture_output=True, text=True, timeout=400)
    text = out.stdout[out.stdout.find('"ID"'):]
    if not text:
        print("ncu gave no table:", out.stdout[-2000:], out.stderr[-2000:])
        return {}
    sums: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        nvtx = [v for k, v in row.items() if k and k.startswith("thread Domain")]
        scope = next((v.split(":")[-1].strip() for v in nvtx if v), "?")
        for key in ("copy", "matmul", "l2"):
            if key in " ".join(nvtx):
                scope = key
        value = float(row["Metric Value"].replace(",", "")) if row["Metric Value"] else 0.0
        sums.setdefault(scope, {}).setdefault(row["Metric Name"], 0.0)
        sums[scope][row["Metric Name"]] += value
    return sums


def proton_counts(script: str, folder: str) -> dict[str, dict[str, float]]:
    name = os.path.join(folder, "side")
    subprocess.run([sys.executable, "-P", script, "proton", name], check=True, timeout=300)
    tree = json.load(open(name + ".hatchet"))[0]
    sums: dict[str, dict[str, float]] = {}

    def add(node, into):
        for k, v in node["metrics"].items():
            if isinstance(v, (int, float)):
                into[k] = into.get(k, 0.0) + v
        for c in node["children"]:
            add(c, into)
    for child in tree["children"]:
        add(child, sums.setdefault(child["frame"]["name"], {}))
    return sums


def main() -> None:
    folder = tempfile.mkdtemp()
    script = os.path.join(folder, "work.py")
    open(script, "w").write(WORK)
    ours = proton_counts(script, folder)
    ncu = find_ncu()
    print("ncu:", ncu)
    theirs = ncu_counts(ncu, script) if ncu else {}
    print(f"{'scope':8} {'metric':12} {'ncu':>14} {'proton':>14} {'ratio':>7}")
    for scope in ("copy", "matmul", "l2"):
        t, o = theirs.get(scope, {}), ours.get(scope, {})
        rows = (("dram_bytes", t.get("dram__bytes_read.sum", 0) + t.get("dram__bytes_write.sum", 0),
                 o.get("dram_bytes", 0)),
                ("l2_bytes", t.get("lts__t_bytes.sum"), o.get("l2_bytes", 0)),
                # GH100: 1,024 dense 16-bit FLOP per tensor-pipe cycle per SM sub-partition
                ("tensor_flops", t.get("sm__pipe_tensor_cycles_active.sum", 0) * 1024 if t else None,
                 o.get("tensor_flops", 0)),
                ("time_ns", t.get("gpu__time_duration.sum"), o.get("time (ns)", 0)))
        for metric, a, b in rows:
            ratio = f"{b / a:7.3f}" if a else "      -"
            print(f"{scope:8} {metric:12} {a if a is not None else float('nan'):14.4g} {b:14.4g} {ratio}")


if __name__ == "__main__":
    main()
