"""What a host-bound bf16 training step pays under each profiler (issue 37), and why.

A 4-layer GPT (dim 512, seq 256, batch 16, vocab 8192) under torch.autocast(bf16), fused AdamW,
a DataLoader with 2 workers, 4 scopes a step (step, forward, backward, optimizer): PyTorch
issues ~280 kernels in ~9 ms, so every microsecond added to a launch or a CUDA call shows.

Each worker process runs --rounds rounds of short phases (--steps steps each after 2 settling
steps, --warmup warm-up steps first): bare and every profiler once a round, in an order that
turns from round to round and from process to process (and runs backwards every other round),
so the host's slow drift hits every mode alike. Per phase: each step's time and the main
thread's CPU seconds (time.thread_time), every thread's CPU (/proc/self/task/*/schedstat):
main, autograd's (the backward pass), the rest (CUPTI's buffer thread among them); and the
host's speed (ns a trivial Python call) just before and after it, outside any session.
Triton's Proton runs in processes of its own, with bare and the floor (one CUPTI subscriber
a process); the census (cb-all) once, last, in the first process. A profiler that fails is
reported and left out of its process's later rounds; the other modes' phases stand, and the
parent keeps every phase a worker printed even if the worker dies.

bench/step_stats.py turns the phases into the verdict table: each mode over the floor (the
floor over bare) in step time, main-thread CPU a step, and that CPU in host Python calls; the
median over processes of each process's pooled steps, a bootstrap interval, and met / missed /
not resolved against issue 37's targets (shadow 1.03, hook 1.05, python 1.15).

Profilers: floor (CUPTI kernel activity, buffers handed back unread: what any CUPTI profiler
pays), subscribed (floor + a CUPTI subscriber with no callback enabled), cb-runtime /
cb-driver / cb-launch (floor + a counting C callback on the runtime's, the driver's or both
domains' launch calls), cb-all (floor + the counting callback on every runtime and driver
call: the cost of a callback per API call, and the census of calls per step by API), shadow,
hook (hook="triton"), python (context="python"), counters (mode="counters", issue 48),
memory (memory=True, issue 50), shadow-kernels / shadow-no-copies / -no-waits / -no-idle
(shadow with issue 50's parts left out by PROTON_OFF: what each costs), triton (Triton's
Proton, shadow).

    python bench/step_cost.py [--processes 6] [--triton-processes 4] [--rounds 12] [--steps 15]
                              [--deadline 420] [--results F.jsonl]
        ~6 minutes on the H100 (a step ~13 ms, a process start ~15 s): 6 processes of 12
        rounds of bare, floor, shadow, hook, python (~38 s each) and 4 of bare, floor, triton
        (~28 s each); no process starts that would end after --deadline seconds
    python bench/step_cost.py --table F.jsonl        the tables of earlier results (also the
                                                     older layout: session 7's files)
    python bench/step_cost.py --worker floor,shadow  one process; a JSON line a phase as it
                                                     ends, the whole result last
    python bench/step_cost.py --worker none --device cpu --steps 3   a dry run of the step
                                                     (--small: at small sizes, in seconds)
        (--device cpu with profilers: each fails to start without a GPU, is reported, and
        the bare phases go on)

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
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_stats  # noqa: E402 - beside this file
from hostspeed import host_speed  # noqa: E402 - beside this file (workloads' imports Triton)

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 8192, 512, 8, 4, 256, 16
SMALL = (512, 64, 4, 2, 32, 4)
"""--small: the same step (model, bf16 autocast, loader, scopes) at sizes a CPU runs in a tenth
of the time: a dry run that checks the harness, not the step's cost (the tests' run)."""
OURS = ("floor", "subscribed", "cb-runtime", "cb-driver", "cb-launch", "cb-all", "shadow",
        "hook", "python", "counters", "memory", "shadow-kernels", "shadow-no-copies",
        "shadow-no-waits", "shadow-no-idle")
PARTS_OFF = {"shadow-kernels": "copies,waits,idle", "shadow-no-copies": "copies",
             "shadow-no-waits": "waits", "shadow-no-idle": "idle"}
"""Shadow with issue 50's parts left out (PROTON_OFF): what each part costs."""
ALL = (*OURS, "triton")
DEFAULT = ("floor", "shadow", "hook", "python", "cb-all")
ONCE = ("triton",)
"""In the first round only: Triton's Proton cannot subscribe to CUPTI again in a process it
has finalized in (CUPTI error 39, multiple subscribers, on the H100), so its processes run it
once and then bare and the floor."""
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
        from proton.cupti.buffers import loaded_libcupti
        from proton.cupti.subscriber import CALLBACK, callback_fields

        cupti = self.cupti
        cupti.get_timestamp()  # loads libcupti
        path = loaded_libcupti()
        self._raw = _floor_buffers(path)
        self._raw.register()  # again: a proton session in between registered its own
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

    def stop(self, details: bool = True) -> dict:
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


def _floor_buffers(path: str):
    """The floor's buffer callbacks: the process's one set (RawBuffers.shared), buffers handed
    back unread."""
    from proton.cupti.buffers import RawBuffers

    raw = RawBuffers.shared(path, 8 << 20)
    raw.detach()  # unread
    return raw


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
        mode = "counters" if self.which == "counters" else None  # issue 48: PM sampling
        memory = {"memory": True} if self.which == "memory" else {}  # issue 50: allocator
        off = PARTS_OFF.get(self.which)
        if off:
            os.environ["PROTON_OFF"] = off  # read as the collector starts
        try:
            self.mod.start(self.path, hook=hook, context=context, mode=mode, **memory)
        finally:
            os.environ.pop("PROTON_OFF", None)

    def scope(self, name: str):
        return self.mod.scope(name)

    def begin(self) -> None:
        pass

    def stop(self, details: bool = True) -> dict:
        """Finalize; with details (the mode's first phase in the process) first the cost of a
        scope and the callbacks enabled."""
        out = {}
        if details:
            out["scope_us"] = self.scope_cost()
            if self.which != "triton":
                out["enabled"] = enabled_callbacks()
        t0 = time.perf_counter()
        self.mod.finalize()
        out["finalize_s"] = time.perf_counter() - t0
        return out

    def scope_cost(self, n: int = 1000) -> float:
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
    """`n` steps: each one's ms and main-thread CPU ms; every thread's CPU ms a step."""
    before = thread_cpu()
    wall, cpu = run(n, scope)
    threads = cpu_by_thread(before, thread_cpu(), main)
    return {"step_ms": [w * 1e3 for w in wall], "cpu_ms": [c * 1e3 for c in cpu],
            "threads_ms": {k: v / n * 1e3 for k, v in threads.items()}}


def order(modes: list[str], rnd: int, offset: int = 0) -> list[str]:
    """Round `rnd`'s order: turned by rnd + offset, backwards every other round (each mode
    comes at every place, and after every other mode, about as often)."""
    k = (rnd + offset) % len(modes)
    turned = modes[k:] + modes[:k]
    return turned[::-1] if rnd % 2 else turned


def worker(profilers: list[str], n: int, warmup: int, device: str, rounds: int = 1, *,
           offset: int = 0, settle: int = 2, emit=None) -> dict:
    """Bare and each profiler once a round, `rounds` rounds (those in LAST once, at the end):
    every phase's figures, and each profiler that failed (left out of later rounds).
    `emit(line)` gets a JSON line for each phase or failure as it ends."""
    if device == "cuda":
        need_gpu()
    model, opt, batches = build(device)
    main = threading.get_native_id()
    bare = lambda name: contextlib.nullcontext()  # noqa: E731

    def run(k, scope):
        return steps(model, opt, batches, k, scope, device)

    run(warmup, bare)
    modes = ["none", *(p for p in profilers if p not in LAST)]
    plan = [(r, m) for r in range(rounds) for m in order(modes, r, offset)
            if r == 0 or m not in ONCE]
    plan += [(rounds, m) for m in profilers if m in LAST]
    out = {"device": device, "steps": n, "rounds": rounds, "modes": modes, "phases": [],
           "errors": []}
    failed: set[str] = set()
    for rnd, mode in plan:
        if mode in failed:
            continue
        first = not any(p["mode"] == mode for p in out["phases"])
        try:
            item = {"mode": mode, "round": rnd,
                    **one_phase(mode, run, n, settle, main, bare, details=first)}
            kind = "phases"
        except Exception as exc:  # noqa: BLE001 - one profiler's failure ends only its phases
            failed.add(mode)
            item = {"mode": mode, "round": rnd, "error": f"{type(exc).__name__}: {exc}"}
            kind = "errors"
        out[kind].append(item)
        if emit is not None:
            emit(json.dumps({kind[:-1]: item}))
        if "none" in failed:  # the step itself fails bare: nothing else can run
            raise BenchError(f"the bare step failed: {item['error']}")
    return out


def one_phase(mode: str, run, n: int, settle: int, main: int, bare, *, details: bool) -> dict:
    """One phase of `mode`: the host's speed, the profiler started, `settle` steps, `n`
    measured steps, the profiler stopped (in finally: a failure leaves no session live), the
    host's speed again (outside the session: the python context must not slow its loop)."""
    speed0 = host_speed()
    prof = None if mode == "none" else make(mode)
    scope = bare if prof is None else prof.scope
    extra: dict = {}
    try:
        if prof is not None:
            prof.start()
        run(settle, scope)  # the first launches after a profiler attaches
        if prof is not None:
            prof.begin()
        figures = phase(run, n, scope, main)
        if prof is not None:
            extra = prof.stop(details)
            prof = None
    finally:
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.stop(False)
    figures["speed_ns"] = [speed0, host_speed()]
    if mode.startswith("cb-") or mode == "subscribed":
        figures["steps_counted"] = n  # the calls counted are these steps' (the census)
    return {**figures, **extra}


# -- many processes -----------------------------------------------------------------------
def plan_processes(profilers: list[str], processes: int, triton_processes: int
                   ) -> list[tuple[str, list[str]]]:
    """(kind, profilers) for each worker process, ours and Triton's interleaved so that a run
    cut by its deadline keeps both: ours run every one of ours (the census, cb-all, in the first
    only); Triton's run triton and the floor (when asked for)."""
    ours = [p for p in profilers if p not in ("triton", *LAST)]
    last = [p for p in profilers if p in LAST]
    mine = [("ours", ours + (last if i == 0 else [])) for i in range(processes)
            if ours or (last and i == 0)]
    theirs = [("triton", ["triton"] + (["floor"] if "floor" in profilers else []))
              for _ in range(triton_processes if "triton" in profilers else 0)]
    out = []
    for i in range(max(len(mine), len(theirs))):
        out += mine[i:i + 1] + theirs[i:i + 1]
    return out


def run_worker(which: list[str], args: list[str], timeout: float) -> dict:
    """One worker process: its phases and failures as it printed them (kept if it dies or
    runs out of time), its exit status, its seconds."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", ",".join(which), *args]
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as err, \
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                             start_new_session=True) as proc:  # its DataLoader workers go too
        try:
            out, _ = proc.communicate(timeout=timeout)
            status = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
            status = "timeout"
        err.seek(0)
        stderr = err.read()
    result = collect(out, status, stderr)
    result["profilers"] = which
    result["exit"], result["seconds"] = status, time.monotonic() - t0
    return result


def collect(out: str, status: int | str, stderr: str) -> dict:
    """A worker's result from the lines it printed: every phase and failure that came before
    it ended, and, if it did not end well, why (exit status or time, its last stderr line)."""
    result: dict = {"phases": [], "errors": []}
    for line in out.splitlines():
        try:
            item = json.loads(line) if line.startswith("{") else None
        except ValueError:
            item = None
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("phase"), dict):
            result["phases"].append(item["phase"])
        elif isinstance(item.get("error"), dict):
            result["errors"].append(item["error"])
        elif "device" in item:  # the whole result, last: its header only (phases came one by one)
            result.update({k: item[k] for k in ("device", "steps", "rounds", "modes") if k in item})
    if status != 0:
        why = "ran out of time" if status == "timeout" else f"exited with status {status}"
        last = stderr.strip().splitlines()[-1:] or [""]
        result["errors"].append({"mode": "process", "error": f"{why} after "
                                 f"{len(result['phases'])} phases: {last[0][:300]}"})
    return result


def run_processes(profilers: list[str], processes: int, n: int, warmup: int, rounds: int,
                  results: str, *, triton_processes: int = 4, deadline: float = 420.0,
                  device: str = "cuda") -> None:
    """Each planned worker in turn, each one's result a line of `results`; none starts that
    would end after `deadline` seconds (by the longest of its kind so far)."""
    t0 = time.monotonic()
    longest: dict[str, float] = {}
    plan = plan_processes(profilers, processes, triton_processes)
    for i, (kind, which) in enumerate(plan):
        left = deadline - (time.monotonic() - t0)
        if longest.get(kind, 0.0) >= left:
            print(f"process {i + 1}/{len(plan)} ({kind}) not started: {max(left, 0):.0f} s left "
                  f"before --deadline, one took {longest.get(kind, 0.0):.0f} s",
                  file=sys.stderr, flush=True)
            continue
        # ours turn their order by their index; Triton's all start at bare, triton, floor:
        # triton loads its CUPTI (libcupti.so.12) before the floor loads cupti-python's, so if
        # the two cannot share a process it is the floor that fails there (judged through bare)
        offset = sum(k == "ours" for k, _ in plan[:i]) if kind == "ours" else 0
        args = ["--steps", str(n), "--warmup", str(warmup), "--rounds", str(rounds),
                "--offset", str(offset), "--device", device]
        # a hung worker (a CUPTI deadlock) must not take the whole call
        cap = 4 * max(longest.values()) if longest else 180.0
        result = run_worker(which, args, timeout=max(60.0, min(left + 30, cap)))
        result.update(process=i, kind=kind)
        longest[kind] = max(longest.get(kind, 0.0), result["seconds"])
        with open(results, "a") as f:
            f.write(json.dumps(result) + "\n")
        errors = "; ".join(f"{e['mode']}: {e['error'][:120]}" for e in result["errors"])
        print(f"process {i + 1}/{len(plan)} {','.join(which)}: {result['seconds']:.0f} s, "
              f"{len(result['phases'])} phases" + (f"; failed: {errors}" if errors else ""),
              file=sys.stderr, flush=True)


def table(results: str, reps: int = 1000) -> str:
    """The verdict table and the rest (bench/step_stats.py) of a results file."""
    if not os.path.exists(results):
        raise BenchError(f"no results file {results!r}: give the file a run wrote (its "
                         "--results), or, after a run, see above why no worker process ran")
    return step_stats.table(step_stats.load(results), reps=reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=6, help="processes of ours")
    parser.add_argument("--triton-processes", type=int, default=4,
                        help="processes of Triton's Proton (with bare and the floor)")
    parser.add_argument("--steps", type=int, default=15, help="measured steps a phase")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=12,
                        help="rounds a process, each mode once a round (cb-all: once)")
    parser.add_argument("--deadline", type=float, default=420.0,
                        help="seconds: start no process that would end later")
    parser.add_argument("--profilers", default=",".join((*DEFAULT, "triton")),
                        help=f"of {','.join(ALL)}")
    parser.add_argument("--results", default="step_cost.jsonl")
    parser.add_argument("--table", metavar="RESULTS", help="print the tables of RESULTS only")
    parser.add_argument("--reps", type=int, default=1000, help="bootstrap replicates")
    parser.add_argument("--worker", metavar="PROFILERS", help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cpu: a dry run (profilers fail to start and are reported)")
    parser.add_argument("--small", action="store_true",
                        help="with --worker: the step at small sizes (a dry run of the harness)")
    args = parser.parse_args()
    if args.small:
        global VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH
        VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = SMALL
    try:
        if args.table:
            print(table(args.table, args.reps))
            return
        if args.worker is not None:
            which = [p for p in args.worker.split(",") if p and p != "none"]
            check(which)
            emit = functools.partial(print, flush=True)
            result = worker(which, args.steps, args.warmup, args.device, args.rounds,
                            offset=args.offset, emit=emit)
            print(json.dumps(result), flush=True)
            return
        if args.device == "cuda":
            need_gpu()
        profilers = args.profilers.split(",")
        check(profilers)
        run_processes(profilers, args.processes, args.steps, args.warmup, args.rounds,
                      args.results, triton_processes=args.triton_processes,
                      deadline=args.deadline, device=args.device)
        print(table(args.results, args.reps))
    except BenchError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(2)


def check(profilers: list[str]) -> None:
    unknown = set(profilers) - set(ALL) - {"none"}
    if unknown:
        raise BenchError(f"unknown profilers {sorted(unknown)}; choose from {','.join(ALL)}")


if __name__ == "__main__":
    main()
