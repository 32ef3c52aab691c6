"""What a host-bound bf16 training step pays under each profiler (issue 37), and why.

A 4-layer GPT (dim 512, seq 256, batch 16, vocab 8192) under torch.autocast(bf16), fused AdamW,
a DataLoader with 2 workers, 4 scopes a step (step, forward, backward, optimizer): PyTorch
issues ~280 kernels in ~9 ms, so every microsecond added to a launch or a CUDA call shows.

Each worker process runs bare, P1, bare, P2, ..., bare, --rounds times (--steps steps a phase
after --warmup warm-up steps; the order of the profilers turns from process to process, cb-all
comes once, last) and compares each profiled phase with the faster of the bare phases beside
it, and with the floor's phase of the same round: the host runs whole processes at different
speeds, and drifts within one, so only phases close in time are compared. Per phase: the
median step time, the main thread's CPU seconds per step (time.thread_time) and every thread's
CPU (/proc/self/task/*/schedstat): main, autograd's (the backward pass), the rest (CUPTI's
buffer thread among them). Triton's Proton runs in processes of its own (bare, triton, bare).

Profilers: floor (CUPTI kernel activity, buffers handed back unread: what any CUPTI profiler
pays), subscribed (floor + a CUPTI subscriber with no callback enabled), cb-runtime /
cb-driver / cb-launch (floor + a counting C callback on the runtime's, the driver's or both
domains' launch calls), cb-all (floor + the counting callback on every runtime and driver
call: the cost of a callback per API call, and the census of calls per step by API), shadow,
hook (hook="triton"), python (context="python"), triton (Triton's Proton, shadow).

    python bench/step_cost.py [--processes 8] [--rounds 2] [--steps 40] [--results F.jsonl]
    python bench/step_cost.py --table F.jsonl        the table of earlier results
    python bench/step_cost.py --worker floor,shadow  one process; one JSON line
    python bench/step_cost.py --worker none --device cpu --steps 3   a dry run of the step

Needs an NVIDIA GPU, torch, cupti-python and a C compiler (cc) for the counting callback.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 8192, 512, 8, 4, 256, 16
OURS = ("floor", "subscribed", "cb-runtime", "cb-driver", "cb-launch", "cb-all", "shadow",
        "hook", "python")
ALL = (*OURS, "triton")
DEFAULT = ("floor", "cb-driver", "shadow", "hook", "python", "cb-all")
LAST = ("cb-all",)
"""Run once, after every round: enabling every API callback left the process's later bare
steps slower, also after it unsubscribed (H100, CUDA 13)."""
DOMAINS = {1: "driver", 2: "runtime"}
"""CUPTI's callback domains of the API calls (CUPTI_CB_DOMAIN_DRIVER_API, _RUNTIME_API)."""

COUNTER_C = r"""
#include <stdint.h>
#include <string.h>
#define CBIDS 4096
static uint64_t calls[3][CBIDS], nested[CBIDS], same_corr[CBIDS];
static int32_t site_at = -1, corr_at = -1;
static __thread int rt_depth;
static __thread uint32_t rt_corr;
/* CUPTI's callback: counts each call's enter by domain and cbid; and for a driver call made
   inside a runtime call, whether it carries the runtime call's correlation id. */
void count_call(void *userdata, int domain, uint32_t cbid, const void *data) {
    if (domain < 1 || domain > 2 || cbid >= CBIDS || site_at < 0) return;
    uint32_t site, corr;
    memcpy(&site, (const char *)data + site_at, sizeof site);
    memcpy(&corr, (const char *)data + corr_at, sizeof corr);
    if (domain == 2) {
        if (site == 0) { if (rt_depth++ == 0) rt_corr = corr; }
        else if (rt_depth > 0) rt_depth--;
    }
    if (site != 0) return;
    __atomic_add_fetch(&calls[domain][cbid], 1, __ATOMIC_RELAXED);
    if (domain == 1 && rt_depth > 0) {
        __atomic_add_fetch(&nested[cbid], 1, __ATOMIC_RELAXED);
        if (corr == rt_corr) __atomic_add_fetch(&same_corr[cbid], 1, __ATOMIC_RELAXED);
    }
}
void count_setup(int32_t site, int32_t corr) { site_at = site; corr_at = corr; }
void count_clear(void) {
    memset(calls, 0, sizeof calls); memset(nested, 0, sizeof nested);
    memset(same_corr, 0, sizeof same_corr);
}
uint64_t *count_calls(void) { return &calls[0][0]; }
uint64_t *count_nested(void) { return nested; }
uint64_t *count_same(void) { return same_corr; }
"""
CBIDS = 4096


class BenchError(Exception):
    """What stops the benchmark, said in one line."""


def need_gpu() -> None:
    import torch

    if not torch.cuda.is_available():
        raise BenchError("step_cost.py measures CUDA launches: it needs an NVIDIA GPU "
                         "(torch.cuda.is_available() is False); on a CPU use "
                         "--worker none --device cpu for a dry run of the step")


@functools.lru_cache(maxsize=None)
def _counter_lib() -> ctypes.CDLL:
    """The counting callback, compiled with the machine's C compiler (once a process)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BenchError("no C compiler (cc or gcc on PATH, or CC): the counting CUPTI "
                         "callback is C")
    work = tempfile.mkdtemp(prefix="step_cost")
    src, out = os.path.join(work, "count.c"), os.path.join(work, "count.so")
    with open(src, "w") as f:
        f.write(COUNTER_C)
    done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, src],
                          capture_output=True, text=True)
    if done.returncode:
        raise BenchError(f"{cc} could not build the counting callback: {done.stderr[:200]}")
    lib = ctypes.CDLL(out)
    shutil.rmtree(work)  # loaded: the mapping outlives the file
    for name in ("count_calls", "count_nested", "count_same"):
        getattr(lib, name).restype = ctypes.POINTER(ctypes.c_uint64)
    lib.count_setup.argtypes = [ctypes.c_int32, ctypes.c_int32]
    return lib


# -- the step -----------------------------------------------------------------------------
def build(device: str):
    """The model, its fused AdamW and an endless iterator over a 2-worker DataLoader."""
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from gpt_workload import GPT  # the matrix's model, at this benchmark's sizes

    class Tokens(torch.utils.data.IterableDataset):
        def __iter__(self):
            g = torch.Generator().manual_seed(torch.utils.data.get_worker_info().id)
            while True:
                yield torch.randint(0, VOCAB, (SEQ + 1,), generator=g)

    torch.manual_seed(0)
    model = GPT(VOCAB, DIM, HEADS, LAYERS).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    loader = torch.utils.data.DataLoader(Tokens(), batch_size=BATCH, num_workers=2,
                                         multiprocessing_context="fork")
    return model, opt, iter(loader)


def steps(model, opt, batches, n: int, scope, device: str) -> tuple[list[float], list[float]]:
    """`n` training steps; each step's seconds and the main thread's CPU seconds."""
    import torch
    import torch.nn.functional as F

    wall, cpu = [], []
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.thread_time()
        batch = next(batches).to(device, non_blocking=True)
        with scope("step"):
            with scope("forward"):
                with torch.autocast(device, torch.bfloat16):
                    logits = model(batch[:, :-1])
                    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB),
                                           batch[:, 1:].reshape(-1))
            with scope("backward"):
                loss.backward()
            with scope("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        sync()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return wall, cpu


def thread_cpu() -> dict[int, tuple[str, int]]:
    """Every thread of this process: (its name, CPU nanoseconds so far)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError, IndexError):
            continue
        out[int(tid)] = (name, ns)
    return out


def cpu_by_thread(before: dict, after: dict, main: int) -> dict[str, float]:
    """CPU seconds between two thread_cpu() readings: main, autograd's, the rest."""
    out = {"main": 0.0, "autograd": 0.0, "other": 0.0}
    for tid, (name, ns) in after.items():
        spent = (ns - before.get(tid, (name, 0))[1]) / 1e9
        kind = "main" if tid == main else "autograd" if name.startswith("pt_autograd") \
            else "other"
        out[kind] += spent
    return out


# -- the profilers ------------------------------------------------------------------------
class Counting:
    """CUPTI kernel activity (the floor), and with `enable` a subscriber whose C callback
    counts the calls of: None (subscribed, none enabled), "runtime" / "driver" / "launch"
    (the launch calls of one or both domains; proton enables the driver's), "all" (every
    runtime and driver call)."""

    def __init__(self, enable: str | None, subscribe: bool) -> None:
        from cupti import cupti

        self.cupti, self.enable, self.subscribe = cupti, enable, subscribe
        self.lib = _counter_lib() if subscribe else None
        self.handle = ctypes.c_void_p()

    def start(self) -> None:
        from proton.cupti.buffers import RawBuffers, loaded_libcupti
        from proton.cupti.subscriber import CALLBACK, callback_fields

        cupti = self.cupti
        cupti.get_timestamp()  # loads libcupti
        path = loaded_libcupti()
        self._raw = RawBuffers(path, 8 << 20)
        self._raw.on_buffer = lambda buffer, valid: None
        self._raw.register()
        cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
        if not self.subscribe:
            return
        site, corr, _ = callback_fields(cupti)
        self.lib.count_setup(site, corr)
        self.lib.count_clear()
        libcupti = ctypes.CDLL(path)
        self.libcupti = libcupti
        callback = CALLBACK(ctypes.cast(self.lib.count_call, ctypes.c_void_p).value)
        self._keep = callback
        rc = libcupti.cuptiSubscribe(ctypes.byref(self.handle), callback, None)
        if rc:
            raise BenchError(f"cuptiSubscribe failed (CUPTI error {rc})")
        for domain, cbid in self.cbids():
            if cbid is None:
                rc = libcupti.cuptiEnableDomain(1, self.handle, domain)
            else:
                rc = libcupti.cuptiEnableCallback(1, self.handle, domain, cbid)
            if rc:
                raise BenchError(f"CUPTI refused callback {domain}/{cbid} (error {rc})")

    def cbids(self) -> list[tuple[int, int | None]]:
        """(domain, cbid) to enable; cbid None: the whole domain."""
        if self.enable is None:
            return []
        if self.enable == "all":
            return [(1, None), (2, None)]
        from proton.cupti import collector as col

        drv, rt = launch_cbids(self.cupti, col)
        return ([(1, c) for c in drv] if self.enable in ("driver", "launch") else []) + \
            ([(2, c) for c in rt] if self.enable in ("runtime", "launch") else [])

    def scope(self, name: str):
        return contextlib.nullcontext()

    def begin(self) -> None:
        """The measured steps start: count from here."""
        if self.lib is not None:
            self.lib.count_clear()

    def stop(self) -> dict:
        cupti = self.cupti
        out = {}
        if self.subscribe:
            self.libcupti.cuptiUnsubscribe(self.handle)
            out["calls"] = self.counts()
        cupti.activity_flush_all(1)
        cupti.activity_disable(cupti.ActivityKind.CONCURRENT_KERNEL)
        return out

    def counts(self) -> dict:
        """Calls by 'domain/cbid' (enters), and the driver calls made inside runtime calls."""
        calls, nested, same = (self.lib.count_calls(), self.lib.count_nested(),
                               self.lib.count_same())
        out = {"calls": {}, "nested": {}, "same_corr": {}}
        for domain in (1, 2):
            for cbid in range(CBIDS):
                n = calls[domain * CBIDS + cbid]
                if n:
                    out["calls"][f"{domain}/{cbid}"] = n
        for cbid in range(CBIDS):
            if nested[cbid]:
                out["nested"][f"1/{cbid}"] = nested[cbid]
                out["same_corr"][f"1/{cbid}"] = same[cbid]
        return out


def launch_cbids(cupti, col) -> tuple[list[int], list[int]]:
    """The driver's and the runtime's launch (and graph launch) cbids, as proton names
    them."""
    from proton.cupti.subscriber import cupti_enum

    drv = cupti_enum(cupti, "driver_api_trace_cbid", "DriverApiTraceCbid")
    rt = cupti_enum(cupti, "runtime_api_trace_cbid", "RuntimeApiTraceCbid")
    pick = lambda enum, names: [int(enum[n]) for n in names if n in enum.__members__]  # noqa
    return (pick(drv, col._DRIVER_LAUNCHES + col._DRIVER_GRAPHS),
            pick(rt, col._RUNTIME_LAUNCHES + col._RUNTIME_GRAPHS))


class Proton:
    """Ours (shadow, hook="triton", context="python") or Triton's Proton."""

    def __init__(self, which: str) -> None:
        if which == "triton":
            import triton.profiler as mod
        else:
            import proton as mod
        self.mod, self.which = mod, which
        self.path = os.path.join(tempfile.mkdtemp(), "step")

    def start(self) -> None:
        hook = "triton" if self.which == "hook" else None
        context = "python" if self.which == "python" else "shadow"
        self.mod.start(self.path, hook=hook, context=context)

    def scope(self, name: str):
        return self.mod.scope(name)

    def begin(self) -> None:
        pass

    def stop(self) -> dict:
        out = {"scope_us": self.scope_cost()}
        if self.which != "triton":
            out["enabled"] = enabled_callbacks()
        t0 = time.perf_counter()
        self.mod.finalize()
        out["finalize_s"] = time.perf_counter() - t0
        return out

    def scope_cost(self, n: int = 2000) -> float:
        """Microseconds a scope's enter and exit take, the session live (no launch inside)."""
        scope = self.mod.scope
        t0 = time.perf_counter()
        for _ in range(n):
            with scope("step"):
                pass
        return (time.perf_counter() - t0) / n * 1e6


def enabled_callbacks() -> list[str]:
    """'domain/cbid' of every callback our live collector enabled (Subscriber.enabled)."""
    from proton.runtime.profiler import profiler

    sub = getattr(profiler.collector, "_subscriber", None)
    return [f"{d}/{c}" for d, c in getattr(sub, "enabled", [])]


def make(which: str):
    if which in ("floor", "subscribed") or which.startswith("cb-"):
        enable = {"floor": None, "subscribed": None}.get(which, which[3:])
        return Counting(enable, subscribe=which != "floor")
    return Proton(which)


# -- one worker process -------------------------------------------------------------------
def phase(run, n: int, scope, main: int) -> dict:
    before = thread_cpu()
    wall, cpu = run(n, scope)
    threads = cpu_by_thread(before, thread_cpu(), main)
    return {"step_ms": statistics.median(wall) * 1e3, "cpu_ms": statistics.median(cpu) * 1e3,
            "threads_ms": {k: v / n * 1e3 for k, v in threads.items()}}


def worker(profilers: list[str], n: int, warmup: int, device: str, rounds: int = 1) -> dict:
    """bare, P1, bare, P2, ..., bare in this process, `rounds` times (those in LAST once, at
    the end): each phase's figures."""
    if device == "cuda":
        need_gpu()
    model, opt, batches = build(device)
    main = threading.get_native_id()
    bare = lambda name: contextlib.nullcontext()  # noqa: E731

    def run(k, scope):
        return steps(model, opt, batches, k, scope, device)

    run(warmup, bare)
    phases = [{"profiler": "none", **phase(run, n, bare, main)}]
    turns = [(r, p) for r in range(rounds) for p in profilers if p not in LAST]
    turns += [(rounds - 1, p) for p in profilers if p in LAST]
    for turn, which in turns:
        prof = make(which)
        prof.start()
        run(2, prof.scope)  # the first launches after a profiler attaches
        prof.begin()
        figures = phase(run, n, prof.scope, main)
        extra = prof.stop()
        phases.append({"profiler": which, "round": turn, **figures, **extra,
                       "steps_counted": n})
        phases.append({"profiler": "none", **phase(run, n, bare, main)})
    return {"device": device, "steps": n, "phases": phases}


# -- many processes, and the table --------------------------------------------------------
def paired(result: dict) -> list[dict]:
    """Each profiled phase against the faster of the bare phases beside it."""
    ph = result["phases"]
    out = []
    for i in range(1, len(ph) - 1, 2):
        before, prof, after = ph[i - 1], ph[i], ph[i + 1]
        base = min((before, after), key=lambda p: p["step_ms"])
        both = lambda p: p["threads_ms"]["main"] + p["threads_ms"]["autograd"]  # noqa: E731
        out.append({"profiler": prof["profiler"], "x": prof["step_ms"] / base["step_ms"],
                    "cpu_x": prof["cpu_ms"] / base["cpu_ms"], "round": prof.get("round", 0),
                    "threads_x": both(prof) / both(base),
                    "bare_ms": base["step_ms"], "step_ms": prof["step_ms"],
                    "added_cpu_ms": prof["cpu_ms"] - base["cpu_ms"],
                    "added_threads_ms": {k: v - base["threads_ms"][k]
                                         for k, v in prof["threads_ms"].items()},
                    **{k: prof[k] for k in ("scope_us", "calls", "enabled", "steps_counted")
                       if k in prof}})
    return out


def run_processes(profilers: list[str], processes: int, n: int, warmup: int, rounds: int,
                  results: str) -> None:
    ours = [p for p in profilers if p not in ("triton", *LAST)]
    last = [p for p in profilers if p in LAST]
    for i in range(processes):
        plan = []
        if ours or last:  # each process starts the turn at another profiler: no order favoured
            k = i % max(len(ours), 1)
            plan.append(ours[k:] + ours[:k] + last)
        if "triton" in profilers:
            plan.append(["triton"])
        for which in plan:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", ",".join(which),
                   "--steps", str(n), "--warmup", str(warmup),
                   "--rounds", str(1 if which == ["triton"] else rounds)]
            t0 = time.monotonic()
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=580)
            if done.returncode:
                print(f"worker {which} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            with open(results, "a") as f:
                f.write(done.stdout.strip().splitlines()[-1] + "\n")
            print(f"process {i + 1}/{processes} {','.join(which)}: "
                  f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)


def table(results: str) -> str:
    """Per profiler, the median over its phases (a few a process, many processes) of the step
    time, the main thread's CPU a step and the main and autograd threads' CPU a step, each over
    the faster bare phase beside it; the same over the floor's phase of the same round and
    process; what it adds a step by thread; the cost of a scope; the census of calls."""
    rows: dict[str, list[dict]] = {}
    over: dict[str, list[tuple[float, float, float]]] = {}
    processes: dict[str, int] = {}
    with open(results) as f:
        for line in f:
            if not line.strip():
                continue
            pairs = paired(json.loads(line))
            floors = {p["round"]: p for p in pairs if p["profiler"] == "floor"}
            for p in pairs:
                rows.setdefault(p["profiler"], []).append(p)
                fl = floors.get(p["round"])
                if fl is not None and p["profiler"] != "floor":
                    over.setdefault(p["profiler"], []).append(
                        (p["x"] / fl["x"], p["cpu_x"] / fl["cpu_x"],
                         p["threads_x"] / fl["threads_x"]))
            for name in {p["profiler"] for p in pairs}:
                processes[name] = processes.get(name, 0) + 1
    med = statistics.median
    lines = ["| profiler | phases (processes) | step x bare | main CPU x bare | main+autograd "
             "CPU x bare | over the floor: step, main CPU, main+autograd | added ms a step: "
             "main, autograd, other threads | bare ms a step |",
             "|---|---|---|---|---|---|---|---|"]
    order = [p for p in ALL if p in rows]
    for name in order:
        r = rows[name]
        th = [med([p["added_threads_ms"][k] for p in r]) for k in ("main", "autograd", "other")]
        o = over.get(name)
        floor = "-" if not o else ", ".join(f"{med([t[i] for t in o]):.3f}" for i in range(3))
        lines.append(f"| {name} | {len(r)} ({processes[name]}) | {_spread([p['x'] for p in r])} "
                     f"| {_spread([p['cpu_x'] for p in r])} "
                     f"| {_spread([p['threads_x'] for p in r])} | {floor} "
                     f"| {th[0]:+.3f}, {th[1]:+.3f}, {th[2]:+.3f} "
                     f"| {med([p['bare_ms'] for p in r]):.2f} |")
    lines.append("(x: median [quartiles]; over the floor: median of the ratio to the floor's "
                 "phase of the same round)")
    scopes = {n: med([p["scope_us"] for p in rows[n]]) for n in order
              if all("scope_us" in p for p in rows[n])}
    if scopes:
        lines.append("Scope enter+exit, us (x4 a step): " +
                     ", ".join(f"{n} {us:.2f}" for n, us in scopes.items()))
    lines += census(rows)
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    """Median and quartiles."""
    if len(values) < 4:
        return f"{statistics.median(values):.3f}"
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return f"{q2:.3f} [{q1:.2f}-{q3:.2f}]"


def census(rows: dict[str, list[dict]]) -> list[str]:
    """Calls per step by API (cb-all's counts, one process), and those that reach the
    callbacks each of our modes enables."""
    counted = next((p for p in rows.get("cb-all", []) if "calls" in p), None)
    if counted is None:
        return []
    names, n = cbid_names(), counted["steps_counted"]
    calls = counted["calls"]
    per_step = {k: v / n for k, v in calls["calls"].items()}
    top = sorted(per_step.items(), key=lambda kv: -kv[1])
    out = ["", f"CUDA API calls a step (cb-all, one process): {sum(per_step.values()):.0f} "
           f"of {len(per_step)} kinds; " +
           ", ".join(f"{names.get(k, k)} {v:.0f}" for k, v in top[:25])]
    nested = sorted(calls.get("nested", {}).items(), key=lambda kv: -kv[1])
    same = calls.get("same_corr", {})
    if nested:
        out.append("driver calls inside runtime calls a step (with the runtime call's "
                   "correlation id): " +
                   ", ".join(f"{names.get(k, k)} {v / n:.0f} ({same.get(k, 0) / n:.0f})"
                             for k, v in nested[:8]))
    for mode in ("shadow", "hook", "python"):
        enabled = next((p["enabled"] for p in rows.get(mode, []) if p.get("enabled")), None)
        if enabled is not None:
            hit = {k: per_step.get(k, 0) for k in enabled}
            out.append(f"{mode}: {len(enabled)} callbacks enabled, called "
                       f"{sum(hit.values()):.0f} times a step: " +
                       ", ".join(f"{names.get(k, k)} {v:.0f}" for k, v in
                                 sorted(hit.items(), key=lambda kv: -kv[1]) if v))
    return out


def cbid_names() -> dict[str, str]:
    try:
        from cupti import cupti

        from proton.cupti.subscriber import cupti_enum
    except ImportError:
        return {}
    out = {}
    for domain, names in ((1, ("driver_api_trace_cbid", "DriverApiTraceCbid")),
                          (2, ("runtime_api_trace_cbid", "RuntimeApiTraceCbid"))):
        for name, member in cupti_enum(cupti, *names).__members__.items():
            out.setdefault(f"{domain}/{int(member)}", name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40, help="steps a phase")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2,
                        help="each profiler's phases a process (cb-all: once)")
    parser.add_argument("--profilers", default=",".join((*DEFAULT, "triton")),
                        help=f"of {','.join(ALL)}")
    parser.add_argument("--results", default="step_cost.jsonl")
    parser.add_argument("--table", metavar="RESULTS", help="print the table of RESULTS only")
    parser.add_argument("--worker", metavar="PROFILERS", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    try:
        if args.table:
            print(table(args.table))
            return
        if args.worker is not None:
            which = [p for p in args.worker.split(",") if p and p != "none"]
            unknown = set(which) - set(ALL)
            if unknown:
                raise BenchError(f"unknown profilers {sorted(unknown)}; choose from {ALL}")
            if args.device == "cpu" and which:
                raise BenchError("--device cpu runs the step bare only (--worker none)")
            print(json.dumps(worker(which, args.steps, args.warmup, args.device, args.rounds)))
            return
        need_gpu()
        profilers = args.profilers.split(",")
        unknown = set(profilers) - set(ALL)
        if unknown:
            raise BenchError(f"unknown profilers {sorted(unknown)}; choose from {ALL}")
        run_processes(profilers, args.processes, args.steps, args.warmup, args.rounds,
                      args.results)
        print(table(args.results))
    except BenchError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
