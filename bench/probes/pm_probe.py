"""Probe (issue 48): PM sampling through ctypes on torch's libcupti 13.0, in a torch process,
beside CUPTI kernel activity. Prints the clock offset between PM samples and kernel records
and each phase's counters against the truth.

    python -P bench/probes/pm_probe.py [interval_ns]
"""
import collections
import sys
import time

import torch
from cupti import cupti

from proton.cupti import perfworks
from proton.cupti.buffers import loaded_libcupti

INTERVAL = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
           "sm__pipe_tensor_cycles_active.sum", "sm__issue_active.sum", "sm__cycles_active.sum",
           "sm__cycles_elapsed.avg"]

kernels = []


def requested():
    return 8 << 20, 0


def completed(activities):
    for a in activities:
        if a.kind == cupti.ActivityKind.CONCURRENT_KERNEL:
            kernels.append((a.start, a.end, a.name, a.device_id))


torch.cuda.init()
x = torch.empty(128 << 20, dtype=torch.bfloat16, device="cuda")  # 256 MiB
y = torch.empty_like(x)
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
sx = torch.empty(4 << 20, dtype=torch.bfloat16, device="cuda")  # 8 MiB, fits L2 (50 MiB)
sy = torch.empty_like(sx)
y.copy_(x); a @ b; sy.copy_(sx); torch.cuda.synchronize()

cupti.activity_register_callbacks(requested, completed)
cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
path = loaded_libcupti()
print("libcupti", path)
lib = perfworks.Cupti(path)
t0 = time.perf_counter()
s = perfworks.PmSampler(lib, 0, METRICS, INTERVAL)
print("chip", s.chip, "setup", round(time.perf_counter() - t0, 3), "s")
s.start()
cupti_t0 = cupti.get_timestamp()
phases = {}
for name, fn, n in (("copy256M", lambda: y.copy_(x), 10), ("mm8192", lambda: a @ b, 5),
                    ("copy8M_l2", lambda: sy.copy_(sx), 400)):
    time.sleep(0.005)
    torch.cuda.synchronize()
    first = len(kernels)
    t = cupti.get_timestamp()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    phases[name] = (t, cupti.get_timestamp())
time.sleep(0.005)
parts = []
t0 = time.perf_counter()
parts.append(s.decode())
s.stop()
parts.append(s.decode())
Smp = collections.namedtuple("Smp", "start end values")
samples = [Smp(int(a), int(b), list(v)) for p in parts for a, b, v in zip(p.starts, p.ends, p.values)]
print("decode", round(time.perf_counter() - t0, 3), "s", len(samples), "samples; overflow",
      s.overflowed)
s.close()
cupti.activity_flush_all(1)
print("kernels", len(kernels))
print("cupti ts around run", cupti_t0, "samples", samples[0].start if samples else None,
      samples[-1].end if samples else None)
busy = [x for x in samples if x.values[5] > 0]
print("first busy sample", busy[0].start if busy else None, "first kernel", min(k[0] for k in kernels))
# offset: the shift that puts the most DRAM bytes of busy samples inside kernels
ks = sorted((k[0], k[1]) for k in kernels)


def inside(offset):
    tot = 0.0
    j = 0
    for smp in samples:
        st, en = smp.start + offset, smp.end + offset
        ov = 0
        for k0, k1 in ks:
            if k1 <= st:
                continue
            if k0 >= en:
                break
            ov += min(en, k1) - max(st, k0)
        tot += smp.values[5] * min(1.0, ov / max(1, en - st))
    return tot


base = min(k[0] for k in kernels) - (busy[0].start if busy else 0)
print("naive offset (first kernel - first busy sample):", base)
best = max(range(-200000, 200001, 2000), key=lambda d: inside(base + d))
print("best offset", base + best, "active cycles inside", inside(base + best), "of",
      sum(x.values[5] for x in samples), "at naive", inside(base))
for off_name, off in (("zero", 0), ("naive", base), ("best", base + best)):
    print("== offset", off_name, off)
    for name, (p0, p1) in phases.items():
        kk = [k for k in kernels if p0 <= k[0] <= p1]
        dur = sum(k[1] - k[0] for k in kk)
        tot = [0.0] * len(METRICS)
        for smp in samples:
            st, en = smp.start + off, smp.end + off
            ov = sum(max(0, min(en, k[1]) - max(st, k[0])) for k in kk)
            if ov:
                f = min(1.0, ov / (en - st))
                act = ov
                for i, v in enumerate(smp.values):
                    tot[i] += v * (1.0 if i != 6 else f)
        print(name, len(kk), "kernels", dur, "ns", {m.split("__")[1]: f"{v:.4g}"
                                                 for m, v in zip(METRICS, tot)})
print("truth: copy256M dram 2*256MiB*10 =", 2 * (256 << 20) * 10,
      "; mm8192 flops 2*8192^3*5 =", 2 * 8192 ** 3 * 5)
print("sample durations", sorted({x.end - x.start for x in samples})[:5], "...")
