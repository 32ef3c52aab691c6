"""What does CUPTI's PC sampling give and cost through proton.cupti.pcsampling alone (no
session): the record layout, stall reasons, CRCs, lines, and the time of start/stop/GetData.

    python bench/probes/pc_probe.py
"""
import time

import torch
from cuda.bindings import driver
from cupti import cupti

from proton.compiler.kernels import loaded_kernels
from proton.cupti.buffers import loaded_libcupti
from proton.cupti.pcsampling import Library, Sampler
from proton.examples.matmul import matmul

a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
c = torch.empty(4096, 4096, device="cuda", dtype=torch.float16)
matmul(a, b, c); torch.cuda.synchronize()
import sys
import proton
if len(sys.argv) > 1 and sys.argv[1] != "none":
    proton.start("/tmp/probe", context=sys.argv[1])
_, ctx = driver.cuCtxGetCurrent()
print("ctx", int(ctx))
cupti.get_timestamp()
lib = Library(loaded_libcupti())
crcs = {lib.cubin_crc(k.asm["cubin"]): k for k in loaded_kernels()}
print("kernels", [(k.name, hex(c)) for c, k in crcs.items()])


def bare(n):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): matmul(a, b, c)
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e3


print("bare ms", min(bare(20) for _ in range(3)))


def trial(label, period=10, **kw):
    t = time.perf_counter(); s = Sampler(lib, int(ctx), period=period, **kw); t_en = time.perf_counter() - t
    torch.cuda.synchronize()
    t = time.perf_counter(); s.start(); t_start = time.perf_counter() - t
    ms = min(bare(20) for _ in range(3))
    t = time.perf_counter(); mid = s.drain(); t_mid = time.perf_counter() - t
    t = time.perf_counter(); s.stop(); t_stop = time.perf_counter() - t
    t = time.perf_counter(); d = s.drain(); t_drain = time.perf_counter() - t
    rows = sum(len(x.samples) for x in mid + d)
    tot = sum(int(x.samples.sum()) for x in mid + d)
    print(f"{label} period {period}: ms {ms:.3f} enable {t_en*1e3:.1f}ms start {t_start*1e3:.1f} mid-drain {t_mid*1e3:.1f} ({sum(len(x.samples) for x in mid)} rows) stop {t_stop*1e3:.1f} drain {t_drain*1e3:.1f}; rows {rows} samples {tot} total {s.total_samples} dropped {s.dropped_samples} hwfull {s.hardware_buffer_full} nonuser {s.non_user_samples}", flush=True)
    if rows and not globals().get("shown"):
        globals()["shown"] = 1
        x = (mid + d)[0]
        print("names", x.names, "crc match", [int(c) in crcs for c in set(x.crc.tolist())])
        k = crcs.get(int(x.crc[0]))
        if k is not None:
            lines = {}
            name = x.names[int(x.crc[0]), int(x.function[0])]
            t = time.perf_counter()
            offs = sorted(set(x.offset.tolist()))
            for off in offs:
                ln = lib.source_line(k.asm["cubin"], name, off)
                lines[ln] = lines.get(ln, 0) + 1
            print(f"lines for {len(offs)} pcs in {(time.perf_counter()-t)*1e3:.1f} ms",
                  sorted(lines.items(), key=lambda kv: -kv[1])[:6])
    t = time.perf_counter()
    for _ in range(10):
        s.start(); matmul(a, b, c); driver.cuCtxSynchronize(); s.stop(); s.drain()
    print(f"  per-launch start/sync/stop/drain: {(time.perf_counter()-t)/10*1e3:.2f} ms", flush=True)
    t = time.perf_counter(); s.disable(); print(f"  disable {(time.perf_counter()-t)*1e3:.1f} ms")


trial("first")
if len(sys.argv) > 2:
    trial("default-buffers", scratch_bytes=0, hardware_bytes=0)
    trial("p12", period=12)
    trial("p14", period=14)
