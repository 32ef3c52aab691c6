"""Which earlier CUPTI use makes a later PC sampling session lose the samples of modules loaded
before it (issue 45 item 1). Each variant runs in a fresh process: a Triton kernel, a cuBLAS
matmul and torch elementwise kernels (optionally a torch.compile'd MLP) are loaded first, then
the variant's earlier sessions or raw CUPTI calls, then one pcsampling session; one JSON line
per variant: CUPTI's total and non-user samples and the samples per kernel family.

    python bench/probes/pc_after_sessions.py            (all variants, on a GPU)
    python bench/probes/pc_after_sessions.py VARIANT    (one, in this process)
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

VARIANTS = ["fresh", "lazy_cublas", "plain", "plain_busy", "plain_busy_finalize", "pc_busy", "raw_busy",
            "compile_fresh"]


def families(path: str) -> dict:
    doc = json.load(open(path))
    out: dict = {}

    def walk(node):
        name = node["frame"]["name"]
        s = node["metrics"].get("num_samples", 0)
        if s and name != "ROOT":  # a kernel's source line (file:line@function) or the kernel
            fam = ("hot_kernel" if "hot_kernel" in name else "inductor" if "triton_" in name
                   else "cublas" if ("nvjet" in name or "gemm" in name or "cutlass" in name)
                   else "torch")
            fam += "/lines" if "@" in name else "/nolines"
            why = node["frame"].get("no_lines")
            if why:
                out.setdefault("why", {}).setdefault(fam, sorted({why[:40]}))
            out[fam] = out.get(fam, 0) + s
        for c in node["children"]:
            walk(c)
    walk(doc[0])

    def kernels(node):
        m = node["metrics"]
        if m.get("count") and node["frame"]["name"] != "ROOT":
            got = m.get("num_samples", 0) + sum(c["metrics"].get("num_samples", 0)
                                                for c in node["children"])
            name = node["frame"]["name"][:70]
            t, g = unsampled.get(name, (0, 0))
            unsampled[name] = (t + m.get("time (ns)", 0) / 1e3, g + got)
        for c in node["children"]:
            kernels(c)
    unsampled: dict = {}
    kernels(doc[0])
    out["unsampled_us"] = {k: round(t) for k, (t, g) in unsampled.items() if not g and t > 20}
    return out


def one(variant: str) -> dict:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "tests"))
    import torch
    import proton
    from kernels import hot_kernel
    from proton.cupti import pc_collector

    stats = {}
    orig = pc_collector.PCCollector._report

    def report(self):
        s = self.sampler
        stats.update(total=s.total_samples, non_user=s.non_user_samples)
        orig(self)
    pc_collector.PCCollector._report = report

    x = torch.zeros(1 << 20, device="cuda")
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)

    def work(compiled=None):
        for _ in range(3):
            hot_kernel[(1024,)](x, x.numel(), ITERS=512, BLOCK=1024)
            (a @ a).relu_()
            x.mul_(0.5).add_(1)
            if compiled is not None:
                compiled(a)
        torch.cuda.synchronize()

    compiled = None
    if variant.startswith("compile"):
        mlp = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU(),
                                  torch.nn.LayerNorm(2048)).cuda().bfloat16()
        compiled = torch.compile(mlp)
    if variant != "lazy_cublas":
        work(compiled)  # every module loaded before any CUPTI
    else:
        hot_kernel[(1024,)](x, x.numel(), ITERS=512, BLOCK=1024)
        torch.cuda.synchronize()
    tmp = tempfile.mkdtemp()

    import cupti.cupti as cu
    from proton.cupti.buffers import loaded_libcupti

    def lib():
        cu.get_timestamp()
        return ctypes.CDLL(loaded_libcupti())

    def finalize_cupti():
        rc = lib().cuptiFinalize()
        assert rc == 0, rc

    def session(name, **kw):
        proton.start(os.path.join(tmp, name), **kw)
        work(compiled)
        proton.finalize()

    import threading

    def busy_session(**kw):
        """The earlier session ends (CUPTI torn down) while another thread launches, as a
        capture ends on the capture thread while the job runs on."""
        stop = threading.Event()

        def launch():
            b = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
            while not stop.is_set():
                for _ in range(20):
                    (b @ b).relu_()
                    x.mul_(0.5).add_(1)
                torch.cuda.synchronize()
        proton.start(os.path.join(tmp, "earlier"), **kw)
        th = threading.Thread(target=launch)
        th.start()
        time.sleep(0.5)
        proton.finalize()
        time.sleep(0.3)
        stop.set()
        th.join()
        torch.cuda.synchronize()

    kinds = {"plain": {}, "python": {"context": "python"}, "triton": {"hook": "triton"},
             "trace": {"data": "trace"}, "pc": {"mode": "pcsampling"}}
    if variant in kinds:
        session("earlier", **kinds[variant])
    elif variant in ("plain_busy", "plain_busy_finalize"):
        busy_session()
        if variant == "plain_busy_finalize":
            finalize_cupti()
    elif variant == "pc_busy":
        busy_session(mode="pcsampling")
    elif variant == "raw_busy":  # subscribe + kernel activity, torn down under launches
        from proton.cupti.subscriber import Subscriber
        from proton.cupti.buffers import RawBuffers
        path = (cu.get_timestamp(), loaded_libcupti())[1]
        stop = threading.Event()

        def launch():
            while not stop.is_set():
                (a @ a).relu_()
                x.mul_(0.5).add_(1)
                torch.cuda.synchronize()
        sub = Subscriber(path, lambda *a: None)
        sub.subscribe()
        raw = RawBuffers.shared(path, 8 << 20)
        raw.register()
        cu.activity_enable(cu.ActivityKind.CONCURRENT_KERNEL)
        th = threading.Thread(target=launch)
        th.start()
        time.sleep(0.5)
        cu.activity_disable(cu.ActivityKind.CONCURRENT_KERNEL)
        cu.activity_flush_all(1)
        sub.unsubscribe()
        time.sleep(0.3)
        stop.set()
        th.join()
    elif variant in ("plain_finalize", "compile_plain_finalize"):
        session("earlier")
        finalize_cupti()
    elif variant == "plain_finalize_between":
        session("earlier")
        finalize_cupti()
        hot_kernel[(1024,)](x, x.numel(), ITERS=256, BLOCK=1024)  # a new module, between
        torch.cuda.synchronize()
    elif variant.startswith("raw"):
        from proton.cupti.subscriber import Subscriber
        path = loaded_libcupti() or (cu.get_timestamp(), loaded_libcupti())[1]
        if variant == "raw_pc_twice":
            from proton.cupti.pcsampling import Library, Sampler
            from cuda.bindings import driver
            _, ctx = driver.cuCtxGetCurrent()
            s = Sampler(Library(path), int(ctx), period=10)
            s.start(); work(); s.stop(); s.drain(); s.disable()
        else:
            sub = None
            if variant in ("raw_subscribe", "raw_both", "raw_both_finalize"):
                sub = Subscriber(path, lambda *a: None)
                sub.subscribe()
            if variant in ("raw_activity", "raw_both", "raw_both_finalize"):
                from proton.cupti.buffers import RawBuffers
                raw = RawBuffers.shared(path, 8 << 20)
                raw.register()
                cu.activity_enable(cu.ActivityKind.CONCURRENT_KERNEL)
                work()
                cu.activity_disable(cu.ActivityKind.CONCURRENT_KERNEL)
                cu.activity_flush_all(1)
            if sub is not None:
                sub.unsubscribe()
            if variant == "raw_both_finalize":
                finalize_cupti()
    extra = {}
    if variant == "lazy_cublas":
        pass  # cuBLAS and torch's kernels load lazily inside the session
    t0 = time.monotonic()
    session("pc", mode="pcsampling")
    extra["pc_session_s"] = round(time.monotonic() - t0, 2)
    return {"variant": variant, **stats, "families": families(os.path.join(tmp, "pc.hatchet")),
            **extra}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print("RESULT " + json.dumps(one(sys.argv[1])), flush=True)
        sys.exit(0)
    for variant in VARIANTS:
        t0 = time.monotonic()
        try:
            done = subprocess.run([sys.executable, __file__, variant], capture_output=True,
                                  text=True, timeout=150)
            lines = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
            if lines:
                print(lines[-1][7:], flush=True)
            else:
                print(json.dumps({"variant": variant, "rc": done.returncode,
                                  "err": done.stderr[-1500:]}), flush=True)
            warn = [l for l in done.stderr.splitlines() if "PC sampling" in l or "rror" in l]
            if warn:
                print("   stderr:", warn[-3:], flush=True)
        except subprocess.TimeoutExpired:
            print(json.dumps({"variant": variant, "timeout": True}), flush=True)
        print(f"   ({time.monotonic() - t0:.0f} s)", flush=True)
