"""What does exact sampling cost a launch: start/stop around each launch, or KERNEL_SERIALIZED?
(H200, 2026-11-22: 4.7 vs 2.8 ms a 4096^3 matmul launch at period 10.)

    python bench/probes/pc_exact_probe.py
"""
import time, torch
from cuda.bindings import driver
import proton
from proton.cupti.buffers import loaded_libcupti
from proton.cupti.pcsampling import Library, Sampler
from proton.examples.matmul import matmul
a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16); c = torch.empty_like(a)
matmul(a, a, c); torch.cuda.synchronize()
proton.start("/tmp/exact_probe")
_, ctx = driver.cuCtxGetCurrent(); lib = Library(loaded_libcupti())
def per_launch(label, s, startstop):
    for rep in range(2):
        t = time.perf_counter(); rows = 0; tt = {}
        for _ in range(10):
            t0 = time.perf_counter()
            if startstop: s.start()
            matmul(a, a, c); t1 = time.perf_counter(); driver.cuCtxSynchronize(); t2 = time.perf_counter()
            if startstop: s.stop()
            t3 = time.perf_counter(); d = s.drain(); t4 = time.perf_counter()
            rows += sum(len(x.samples) for x in d)
            for k, v in (("start+launch", t1 - t0), ("sync", t2 - t1), ("stop", t3 - t2), ("drain", t4 - t3)):
                tt[k] = tt.get(k, 0) + v / 10 * 1e3
        print(f"{label}: {(time.perf_counter()-t)/10*1e3:.2f} ms/launch, rows/launch {rows/10:.0f}", {k: round(v, 2) for k, v in tt.items()}, flush=True)
for period in (10, 12):
    for hw in (256 << 20, 32 << 20):
        s = Sampler(lib, int(ctx), period=period, hardware_bytes=hw); per_launch(f"startstop p{period} hw{hw>>20}M", s, True); s.disable()
    s = Sampler(lib, int(ctx), period=period, serialized=True); per_launch(f"serialized p{period}", s, False); s.disable()
