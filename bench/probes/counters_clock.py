"""Probe (issue 57): what pushes a kernel's counters past the GPU's peak, on the samples
themselves. PM samples of counters.METRICS plus the SM clock beside CUPTI's kernel and copy
records, around the `counters` job's warm-ups (3 64M adds and cuBLAS's first matmul on a GPU
idle for 0.5 s), 64M adds, a 256 MiB DtoD copy and 200 L2-resident adds. Prints, per sample
that holds work: its span, the SM clock (MHz), SM active %, DRAM bytes against the work's time
in it, and the L2's peak implied by lts__t_bytes over its own share (bytes/s). Checks: does the
clock ramp inside the first samples (SM active past 100% of the kernels' time)? do kernel
edges fall where the samples' counts do (the clocks' offset)? what is the H200's L2 roof?

    python -P bench/probes/counters_clock.py [interval_us]   # writes $OUT/counters_clock.json
"""
import json
import os
import sys
import time

import torch
from cupti import cupti

from proton.cupti import perfworks
from proton.cupti.buffers import loaded_libcupti
from proton.cupti.counters import METRICS

INTERVAL = int(sys.argv[1]) if len(sys.argv) > 1 else 250
EXTRA = ["sm__cycles_elapsed.avg.per_second"]
records = []


def requested():
    return 8 << 20, 0


def completed(activities):
    for a in activities:
        if a.kind == cupti.ActivityKind.CONCURRENT_KERNEL:
            records.append((a.start, a.end, a.name[:40]))
        elif a.kind in (cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMSET):
            records.append((a.start, a.end, str(a.kind)))


n = 64 << 20
x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
z, big = torch.empty_like(x), torch.empty(64 << 20, device="cuda")
big2 = torch.empty_like(big)
small = [torch.randn(1 << 20, device="cuda") for _ in range(3)]
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.add(x, y, out=z)
torch.cuda.synchronize()
cupti.activity_register_callbacks(requested, completed)
for kind in (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY,
             cupti.ActivityKind.MEMSET):
    cupti.activity_enable(kind)
lib = perfworks.Cupti(loaded_libcupti())
metrics = list(METRICS) + EXTRA
s = perfworks.PmSampler(lib, 0, metrics, INTERVAL * 1000, 512 << 20)
s.start()
time.sleep(0.5)  # the GPU idles: its clock drops
for _ in range(3):
    torch.add(x, y, out=z)
w @ w
torch.cuda.synchronize()
time.sleep(0.005)
for _ in range(10):
    torch.add(x, y, out=z)
for _ in range(10):
    big2.copy_(big)
for _ in range(200):
    torch.add(small[0], small[1], out=small[2])
torch.cuda.synchronize()
time.sleep(0.01)
parts = [s.decode()]
s.stop()
parts.append(s.decode())
s.close()
cupti.activity_flush_all(1)
starts = [int(v) for p in parts for v in p.starts]
ends = [int(v) for p in parts for v in p.ends]
values = [list(map(float, row)) for p in parts for row in p.values]
records.sort()
rows = []
for a, b, v in zip(starts, ends, values):
    inside = [(max(a, k0), min(b, k1), name) for k0, k1, name in records if k1 > a and k0 < b]
    if not inside and v[0] + v[1] < 1e6:
        continue
    busy = sum(e - s0 for s0, e, _ in inside)
    m = dict(zip(metrics, v))
    rows.append({"start": a, "ns": b - a, "busy_ns": busy, "work": sorted({w for *_, w in inside}),
                 "clock_mhz": m[EXTRA[0]] / 1e6,
                 "sm_active_over_busy": m[METRICS[6]] / 100 * (b - a) / busy if busy else None,
                 "dram_gbps_over_busy": (m[METRICS[0]] + m[METRICS[1]]) / busy if busy else None,
                 "l2_peak_gbps": m[METRICS[2]] / (m[METRICS[7]] / 100 * (b - a))
                 if m[METRICS[7]] > 1 else None, "l1_pct": m[METRICS[8]]})
out = {"interval_us": INTERVAL, "samples": len(starts), "records": len(records),
       "first_record": records[0][0] if records else None, "rows": rows}
path = os.path.join(os.environ.get("OUT", "."), "counters_clock.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1)
for r in rows[:40]:
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items() if k != "start"})
print("wrote", path)
