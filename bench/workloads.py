"""One benchmark workload under one profiler, in this process; prints one JSON line.

    python bench/workloads.py WORKLOAD PROFILER [--hook triton] [--context shadow|python]
                              [--mode pcsampling[:serialize=1]]
WORKLOAD: launch | paired | gpu | model | accuracy | scale | pcsampling
PROFILER: none | listen (bare, but open to `proton capture`) | cupti (CUPTI's kernel activity
          alone, its buffers handed back unread: the floor any CUPTI profiler pays) | proton |
          triton (Triton 3.6's own Proton) | torch (torch.profiler; accuracy only)
bench/run.py runs each in its own process (one CUPTI subscriber per process) and prints the table.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import statistics
import tempfile
import time

import torch
import triton
import triton.language as tl

import hwcount  # bench/, on the path as the script's folder
from hostspeed import host_speed

from proton.examples.matmul import event_timed, matmul  # installed (bench/ is no package)


@triton.jit
def tiny_kernel(x, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + 1)


@triton.jit
def trig_kernel(x, y, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """Compute-bound: a chain of sin/cos per element (about 0.48 ms on an H100 at 4M, 64)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    for _ in range(ITERS):
        v = tl.sin(v) * 0.9 + tl.cos(v) * 0.1
    tl.store(y + offs, v, mask=offs < n)


class KernelActivityOnly:
    """CUPTI's CONCURRENT_KERNEL activity with buffers handed back unread (through our raw
    buffers, as the profiler takes them): what every CUPTI profiler pays per launch."""

    def __init__(self) -> None:
        from cupti import cupti

        from proton.cupti.buffers import RawBuffers, loaded_libcupti

        self._cupti = cupti
        cupti.get_timestamp()  # loads libcupti
        self._raw = RawBuffers.shared(loaded_libcupti(), 8 << 20)
        self._raw.detach()  # buffers handed back unread
        self._raw.register()
        cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)

    def stop(self) -> None:
        self._cupti.activity_flush_all(1)
        self._cupti.activity_disable(self._cupti.ActivityKind.CONCURRENT_KERNEL)


class Profiler:
    """The same calls on our Proton, Triton's, CUPTI's floor, or nothing (bare)."""

    def __init__(self, which: str, hook: str | None, context: str,
                 mode: str | None = None) -> None:
        self.which, self.hook, self.context, self.mode = which, hook, context, mode
        self.mod = None
        if which == "listen":  # a job open to captures, none running: bare, plus the endpoint
            import proton

            proton.listen()
            mod = None
        elif which == "proton":
            import proton as mod
        elif which == "triton":
            import triton.profiler as mod
        else:
            mod = None
        self.mod = mod
        self.path = os.path.join(tempfile.mkdtemp(), "bench")
        self._floor = None

    def start(self) -> None:
        if self.which == "cupti":
            self._floor = KernelActivityOnly()
        if self.mod is not None:
            self.mod.start(self.path, hook=self.hook, context=self.context, mode=self.mode)

    def scope(self, name: str):
        return self.mod.scope(name) if self.mod is not None else contextlib.nullcontext()

    def finalize(self) -> float:
        """Seconds finalize took; 0 when bare."""
        if self._floor is not None:
            self._floor.stop()
        if self.mod is None:
            return 0.0
        t0 = time.perf_counter()
        self.mod.finalize()
        return time.perf_counter() - t0

    def file(self) -> str:
        return self.path + ".hatchet"


def _loop_times(x, scope, args) -> list[float]:
    """Microseconds a launch of the one-block kernel, per repeat, each repeat in `scope`."""
    launches, times = args.launches or 5000, []
    for _ in range(args.repeats):
        with scope("loop"):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(launches):
                tiny_kernel[(1,)](x, BLOCK=128)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / launches * 1e6)
    return times


def launch(prof: Profiler, args) -> dict:
    """Microseconds per launch of a one-block Triton kernel."""
    x = torch.zeros(128, device="cuda")
    tiny_kernel[(1,)](x, BLOCK=128)
    prof.start()
    times = _loop_times(x, prof.scope, args)
    return {"value": min(times), "median": statistics.median(times), "unit": "us/launch",
            "finalize_s": prof.finalize()}


def paired(prof: Profiler, args) -> dict:
    """The launch loop bare and profiled in turn in one process (--pairs times; the profiler
    started and finalized each time): microseconds a launch the profiler adds, per pair.
    Processes of one configuration differed by up to 7 us a launch bare (H100 host, 11-23),
    far above what a profiler adds; a difference taken inside one process cancels that."""
    x = torch.zeros(128, device="cuda")
    tiny_kernel[(1,)](x, BLOCK=128)
    bare, profiled = [], []
    for _ in range(args.pairs):
        bare.append(min(_loop_times(x, lambda name: contextlib.nullcontext(), args)))
        prof.start()
        profiled.append(min(_loop_times(x, prof.scope, args)))
        prof.finalize()
    added = [p - b for p, b in zip(profiled, bare)]
    return {"value": statistics.median(added), "added": added, "bare": bare,
            "profiled": profiled, "unit": "us/launch added"}


def gpu(prof: Profiler, args) -> dict:
    """ms per 4096^3 fp16 matmul, Triton's and torch's (CUDA events around 20 in a row)."""
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty_like(a)
    out = {}
    prof.start()
    for name, fn in (("triton_mm", lambda: matmul(a, b, c)), ("torch_mm", lambda: a @ b)):
        fn()
        times = []
        for _ in range(args.repeats):
            with prof.scope(name):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                for _ in range(20):
                    fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 20)
        out[name] = min(times)
        out[name + "_median"] = statistics.median(times)
    out["finalize_s"] = prof.finalize()
    out["unit"] = "ms"
    return out


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def gpt(dim=512, heads=8, layers=4, vocab=8192):
    emb = torch.nn.Embedding(vocab, dim)
    blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
    head = torch.nn.Linear(dim, vocab)
    return torch.nn.ModuleDict({"emb": emb, "blocks": blocks, "head": head}).cuda()


def model_steps(prof: Profiler, steps: int, seq=256, batch=16):
    """A GPT-style step (forward with a scope per layer, backward, AdamW) `steps` times; yields
    the seconds of each step."""
    torch.manual_seed(0)
    m = gpt()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    tokens = torch.randint(0, 8192, (batch, seq + 1), device="cuda")
    mask = torch.nn.Transformer.generate_square_subsequent_mask(seq, device="cuda")
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with prof.scope("step"):
            with prof.scope("forward"):
                x = m["emb"](tokens[:, :-1])
                for i, block in enumerate(m["blocks"]):
                    with prof.scope(f"layer{i}"):
                        x = block(x, mask)
                loss = torch.nn.functional.cross_entropy(m["head"](x).flatten(0, 1),
                                                         tokens[:, 1:].flatten())
            with prof.scope("backward"):
                loss.backward()
            with prof.scope("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        yield time.perf_counter() - t0


def model(prof: Profiler, args) -> dict:
    """ms per training step of a small transformer (4 layers, dim 512, seq 256, batch 16)."""
    prof.start()
    times = list(model_steps(prof, args.steps + 3))[3:]
    return {"value": min(times) * 1e3, "median": statistics.median(times) * 1e3, "unit": "ms/step",
            "finalize_s": prof.finalize()}


def model_paired(prof: Profiler, args) -> dict:
    """--steps model steps bare, profiled, bare again in one process (after 5 warm-up steps):
    the median profiled step over the median of the bare steps around it, with the CPU
    seconds of the launching thread and of the others (PyTorch's autograd thread, CUPTI's)."""
    cpu: list[dict] = [{}, {}, {}]

    def phase(p: Profiler, i: int) -> list[float]:
        with cpu_seconds(cpu[i]):
            return list(model_steps(p, args.steps))

    bare = Profiler("none", None, "shadow")
    list(model_steps(bare, 5))
    before = phase(bare, 0)
    prof.start()
    profiled = phase(prof, 1)
    fin = prof.finalize()
    after = phase(bare, 2)
    b = (statistics.median(before) + statistics.median(after)) / 2
    ms = lambda ts: [round(t * 1e3, 3) for t in ts]  # noqa: E731
    return {"value": statistics.median(profiled) / b, "unit": "x bare (median step)",
            "best": min(profiled) / min(before + after), "bare_ms": [ms(before), ms(after)],
            "run_ms": ms(profiled), "cpu_s": cpu, "finalize_s": fin}


def accuracy(prof: Profiler, args) -> dict:
    """(1) an 8192^3 matmul's kernel time in the profile against CUDA events around each launch;
    (2) total kernel time of 10 model steps (ours/Triton's profile, or torch.profiler's)."""
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty_like(a)
    matmul(a, b, c)
    out = {"unit": "ns"}
    bare = Profiler("none", None, "shadow")
    list(model_steps(bare, 3))  # warm: allocator, cuBLAS handles, autotuned kernels
    if prof.which == "torch":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as tp:
            list(model_steps(bare, 10))
        # the device-side events themselves (kernels, and memcpy/memset if any)
        kernels = [e for e in tp.events() if e.device_type.name == "CUDA"
                   and not e.name.startswith(("Memcpy", "Memset"))]  # we time kernels only
        out["model_kernel_ns"] = sum(e.time_range.elapsed_us() for e in kernels) * 1e3
        out["model_kernels"] = len(kernels)
        return out
    prof.start()
    with prof.scope("warmup"):  # the first launches after a profiler attaches run slower
        for _ in range(3):
            matmul(a, b, c)
    with prof.scope("events"):
        out["events_ns"] = event_timed(lambda: matmul(a, b, c), 20) * 1e9
    with prof.scope("model"):
        list(model_steps(prof, 10))
    prof.finalize()
    with open(prof.file()) as f:
        root = json.load(f)[0]
    nodes = {n["frame"]["name"]: n for n in root["children"]}
    out["profile_ns"] = _total(nodes["events"])
    out["model_kernel_ns"] = _total(nodes["model"])
    out["model_kernels"] = _total(nodes["model"], "count")
    return out


def _total(node: dict, metric: str = "time (ns)") -> float:
    return node["metrics"].get(metric, 0) + sum(_total(c, metric) for c in node["children"])


LINE = re.compile(r".+:\d+@.+")  # a source line (file:line@function), as Triton's Proton names it


def _line_samples(node: dict, under_kernel: bool = False) -> tuple[float, int]:
    """num_samples on the source-line nodes below a kernel (inclusive), and how many such nodes."""
    name = node["frame"]["name"]
    if under_kernel and LINE.fullmatch(name):
        return _total(node, "num_samples"), 1
    below = under_kernel or (name != "ROOT" and not LINE.fullmatch(name))
    found = [_line_samples(c, below) for c in node["children"]]
    return sum(s for s, _ in found), sum(n for _, n in found)


def pcsampling(prof: Profiler, args) -> dict:
    """ms per launch under PC sampling (--mode) of --kernel: the 4096^3 fp16 Triton matmul, or
    trig (compute-bound sin/cos); --launches in a row (20 unless given), wall clock with a
    synchronize before and after, --repeats times or until the timed loops pass --max-seconds.
    The kernel is compiled and run before the profiler starts, so this also checks that a
    kernel loaded before start() still runs (same output) and gets samples."""
    if args.kernel == "trig":
        a = torch.rand(1 << 22, device="cuda")
        c = torch.empty_like(a)

        def kernel() -> None:
            trig_kernel[(a.numel() // 1024,)](a, c, a.numel(), ITERS=64, BLOCK=1024)
    else:
        a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
        c = torch.empty_like(a)

        def kernel() -> None:
            matmul(a, b, c)
    for _ in range(3):
        kernel()
    expected = c.clone()
    torch.cuda.synchronize()
    launches = args.launches or 20
    prof.start()
    times, spent = [], 0.0
    for _ in range(args.repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(launches):
            kernel()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        spent += elapsed
        times.append(elapsed / launches * 1e3)
        if spent > args.max_seconds:
            break
    out = {"value": min(times), "median": statistics.median(times), "unit": "ms/launch",
           "kernel": args.kernel,
           "launches": launches, "repeats": len(times), "same_output": torch.equal(c, expected),
           "finalize_s": prof.finalize()}
    if prof.mod is not None:
        with open(prof.file()) as f:
            root = json.load(f)[0]
        out["num_samples"] = _total(root, "num_samples")
        out["line_samples"], out["lines"] = _line_samples(root)
    return out


@contextlib.contextmanager
def cpu_seconds(into: dict):
    """Fills `into` with the CPU seconds the block took on this thread ("main") and on the
    process's other threads ("other": CUPTI's, PyTorch's autograd thread): which side a
    profiler's cost lands on; and where the host has perf counters, this thread's user-space
    cycles and instructions ("main_cycles", "main_instructions")."""
    counters = hwcount.thread_counters()
    start = counters.read() if counters else None
    main0, all0 = time.thread_time(), time.process_time()
    yield into
    main = time.thread_time() - main0
    into["main"], into["other"] = main, time.process_time() - all0 - main
    if counters:  # the launching thread's user-space work, whatever the host's speed
        end = counters.read()
        into["main_cycles"], into["main_instructions"] = (b - a for a, b in zip(start, end))
        counters.close()


def _scale_run(prof: Profiler | None, x, args) -> dict:
    """--scopes scopes of --launches-per-scope launches, the profiler started first (bare: prof
    None): "run_s" counts its start, not its finalize; "start_s"; "cpu_s", the CPU seconds of
    the launching thread ("main") and of the other threads (CUPTI's among them): which side a
    profiler's cost lands on; "tenths_s", the host seconds of each tenth of the scopes: whether
    a cost grows along the run; "speeds_ns", host_speed() before the first tenth and after
    each (not timed)."""
    scope = prof.scope if prof is not None else lambda name: contextlib.nullcontext()
    tenth = max(1, args.scopes // 10)
    out: dict = {"cpu_s": {}, "tenths_s": [], "speeds_ns": []}
    torch.cuda.synchronize()
    with cpu_seconds(out["cpu_s"]):
        untimed = 0.0  # host_speed's seconds: out of the run's time and the tenths'

        def speed() -> None:
            nonlocal untimed
            t1 = time.perf_counter()
            out["speeds_ns"].append(host_speed())
            untimed += time.perf_counter() - t1

        t0 = time.perf_counter()
        elapsed = lambda: time.perf_counter() - t0 - untimed  # noqa: E731
        if prof is not None:
            prof.start()
        out["start_s"] = t = elapsed()
        speed()
        for s in range(args.scopes):
            with scope(f"scope{s}"):
                for _ in range(args.launches_per_scope):
                    tiny_kernel[(1,)](x, BLOCK=128)
            if (s + 1) % tenth == 0:
                now = elapsed()
                out["tenths_s"].append(now - t)
                t = now
                speed()
        torch.cuda.synchronize()
        out["run_s"] = elapsed()
    return out


def scale(prof: Profiler, args) -> dict:
    """1,000,000 launches across 1,000 distinct scopes: peak RSS growth and file size."""
    x = torch.zeros(128, device="cuda")
    tiny_kernel[(1,)](x, BLOCK=128)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run = _scale_run(prof, x, args)
    fin = prof.finalize()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    size = os.path.getsize(prof.file()) if prof.mod is not None else 0
    return {"value": (rss1 - rss0) / 1024, "unit": "MB peak RSS growth", "file_mb": size / 1e6,
            "finalize_s": fin, "launches": args.scopes * args.launches_per_scope, **run}


def scale_paired(prof: Profiler, args) -> dict:
    """The scale run bare, profiled, bare again in one process: the profiled run's time over
    the mean of the bare runs around it. Between processes the same bare run differed by up
    to 17% (H100 host, 2026-11-23), more than the bound it is judged by."""
    x = torch.zeros(128, device="cuda")
    tiny_kernel[(1,)](x, BLOCK=128)
    before = _scale_run(None, x, args)
    profiled = _scale_run(prof, x, args)
    prof.finalize()
    after = _scale_run(None, x, args)
    runs = (before, profiled, after)
    return {"value": profiled["run_s"] / ((before["run_s"] + after["run_s"]) / 2),
            "unit": "x bare", "bare_s": [before["run_s"], after["run_s"]],
            "run_s": profiled["run_s"], "launches": args.scopes * args.launches_per_scope,
            **{k: [r[k] for r in runs] for k in ("cpu_s", "tenths_s", "speeds_ns")}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload",
                        choices=["launch", "paired", "gpu", "model", "accuracy", "scale",
                                 "scale_paired", "model_paired", "pcsampling"])
    parser.add_argument("profiler", choices=["none", "listen", "cupti", "proton", "triton",
                                             "torch"])
    parser.add_argument("--hook", default=None)
    parser.add_argument("--context", default="shadow")
    parser.add_argument("--mode", default=None, help="e.g. pcsampling, pcsampling:serialize=1")
    parser.add_argument("--launches", type=int, default=None,
                        help="per timed repeat (launch: 5000, pcsampling: 20)")
    parser.add_argument("--kernel", choices=["matmul", "trig"], default="matmul",
                        help="pcsampling: the 4096^3 matmul or a compute-bound sin/cos loop")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--pairs", type=int, default=4, help="paired: bare/profiled turns")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--scopes", type=int, default=1000)
    parser.add_argument("--launches-per-scope", type=int, default=1000)
    parser.add_argument("--max-seconds", type=float, default=10.0,
                        help="pcsampling: no new repeat once the timed loops took this long")
    args = parser.parse_args()
    prof = Profiler(args.profiler, args.hook, args.context, args.mode)
    result = globals()[args.workload](prof, args)
    print(json.dumps({"workload": args.workload, "profiler": args.profiler, "hook": args.hook,
                      "context": args.context, "mode": args.mode, **result}))


if __name__ == "__main__":
    main()
