"""--diagnose's rules on what a step loses outside its kernels: pageable copies made again and
again, the host waiting on the GPU inside a scope, a scope whose GPU idles, a scope whose own
allocations stay allocated entry after entry (a leak), and where the job's memory peak was.

Each rule is `rule(ctx, kernels, out) -> str | None` as diagnose.RULES runs them, and says ""
(does not apply: the profile has none of its metrics) when the profile lacks what it reads.
Thresholds are in `STEP_RULES`, in words.
"""
from __future__ import annotations

from typing import Any

from .graph import under
from ..format import (BYTES, COPY_FRAME, COUNT, CPU_TIME, GPU_IDLE, MEM_COUNT, MEM_DEVICE,
                      MEM_JUDGED, MEM_KEPT, MEM_KEPT_COUNT, MEM_LIVE, MEM_PEAK, PAGEABLE,
                      SCOPE_WALL, STEP_IDLE_HOST, STEP_IDLE_LAUNCH, STEP_IDLE_PROFILER,
                      STEP_IDLE_SYNC, STEP_SLOW_LAUNCH, STEP_WALL, SYNC_COUNT, SYNC_TIME, TIME)

_Context = Any
"""diagnose._Context (not imported: diagnose imports this module)."""

SYNC_SHARE = 0.05
"""A call path whose host waits on the GPU this share of its enclosing scope's wall time."""
IDLE_SHARE = 0.2
"""A scope whose GPU ran nothing this share of its wall time."""
IDLE_MIN_WALL = 0.01
"""...judged when its wall time is at least this share of the longest scope's."""
LEAK_ENTRIES = 3
"""A leak is judged over at least this many entries of the scope after its first."""
LEAK_MIN_BYTES = 1 << 20
"""...that kept at least this much of their own allocations in all..."""
LEAK_SHARE = 0.5
"""...at this share of them or more (a workspace or cache filled once keeps at one)."""


def pageable_copies(ctx: _Context, kernels: list, out: list) -> str | None:
    """A pageable host-device copy made more than once (a copy in the loop)."""
    # row by row: a Series look-up per node hashes Nodes through a Python call
    copies = [(n, name) for n, name in zip(ctx.df.index, ctx.df["name"].astype(str).tolist())
              if COPY_FRAME.match(name)]
    if not copies:
        return ""
    for node, name in copies:
        count, ns = ctx.value(node, COUNT) or 0, ctx.value(node, TIME) or 0
        if not name.endswith(PAGEABLE) or count <= 1 or not ctx.big(ns):
            continue
        nbytes = ctx.value(node, BYTES) or 0
        rate = f", {nbytes / ns:,.1f} GB/s achieved" if nbytes and ns else ""
        to_host = "DtoH" in name
        advice = ("copy into a pinned buffer (torch.empty(..., pin_memory=True)) with "
                  ".to('cpu', non_blocking=True), and read it once the values are needed"
                  if to_host else
                  "copy from pinned memory: tensor.pin_memory() (DataLoader(pin_memory=True)) "
                  "and .to(device, non_blocking=True), so it runs at full bandwidth and "
                  "overlaps the kernels")
        out.append(ctx.finding(
            "pageable copy in a loop", node, ns,
            f"{count:,.0f} copies from pageable memory, {_bytes(nbytes)} in all "
            f"({_bytes(nbytes / count)} each) in {_ms(ns)}{rate}; each one is staged "
            "through a driver buffer and blocks the host", advice, saves=0.5))
    return None


def syncs_in_a_step(ctx: _Context, kernels: list, out: list) -> str | None:
    """A call path under a scope whose host waited on the GPU at every pass."""
    if SYNC_TIME not in ctx.df:
        return ""
    root = ctx.prof.gf.graph.roots[0]
    for node in ctx.df.index:
        ns, count = ctx.value(node, SYNC_TIME) or 0, ctx.value(node, SYNC_COUNT) or 0
        if node is root or count < 2 or not ns:
            continue
        scope, wall = _enclosing_wall(ctx, node)
        if wall and ns > wall:  # waits longer than the scope around them: the file disagrees
            wall = None
        if wall:
            share = ns / wall
            if share < SYNC_SHARE:
                continue
            of = f", {share:.0%} of the {_ms(wall)} of scope {ctx.name(scope)}"
        elif ctx.big(ns):
            of = ""
        else:
            continue
        f = ctx.finding(
            "synchronization in a step", node, ns,
            f"the host waited on the GPU {count:,.0f} times here, {_ms(ns)} in all{of}",
            "read GPU values less often: no .item(), print(loss), .cpu() or "
            "torch.cuda.synchronize() per step; keep running sums on the GPU and read them "
            "every N steps, or copy with non_blocking=True into pinned memory", saves=1.0)
        f.kernel = f"scope {f.kernel}"
        if wall:
            ctx.walls.setdefault(f.kernel, wall)
        out.append(f)
    return None


def idle_gpu(ctx: _Context, kernels: list, out: list) -> str | None:
    """A step (steps.py) in which the GPU waited on the host, or ran nothing while the host
    waited on it, over IDLE_SHARE of the step, per rank; slow launch calls over that share
    as information (not the job's steady state). Profiles without step breakdowns (older
    files): a scope whose GPU ran nothing over IDLE_SHARE of the host's time in it."""
    from .steps import breakdown, spreads

    merged = getattr(ctx, "merged", None)
    rows = breakdown(ctx.prof, merged)
    spread = spreads(merged) if merged is not None and not merged.ranks else []
    if not rows and not spread:
        return _idle_scopes(ctx, out)
    frames = {label: rank.gf.dataframe for label, rank in zip(merged.labels, merged.ranks)} \
        if merged is not None and merged.ranks else {}
    for st in rows:
        df = frames.get(st.rank, ctx.df) if st.rank is not None else ctx.df
        who = f"rank {st.rank}: " if frames else ""
        of = f"of its {st.steps:,.0f} steps' {_ms(st.wall_ns)}"
        host, sync = st.parts.get(STEP_IDLE_HOST, 0.0), st.parts.get(STEP_IDLE_SYNC, 0.0)
        left_out = _left_out(st.parts)
        if host / st.wall_ns > IDLE_SHARE:
            where = _most_idle(df, st.node)
            _step_finding(ctx, out, st.node, host, st.wall_ns, "idle GPU",
                          f"{who}the GPU waited on the host {_ms(host)} {of} "
                          f"({host / st.wall_ns:.0%}): it ran nothing while the host ran "
                          f"without launching{where}{left_out}", _FEED)
        if sync / st.wall_ns > IDLE_SHARE:
            _step_finding(ctx, out, st.node, sync, st.wall_ns, "idle GPU",
                          f"{who}the GPU ran nothing for {_ms(sync)} {of} "
                          f"({sync / st.wall_ns:.0%}) while the host waited on it in "
                          f"synchronizing calls{left_out}", _SYNC_IDLE)
        slow = st.parts.get(STEP_IDLE_LAUNCH, 0.0)
        if slow / st.wall_ns > IDLE_SHARE:
            _step_finding(ctx, out, st.node, slow, st.wall_ns, "first launches",
                          f"{who}the GPU waited {_ms(slow)} {of} ({slow / st.wall_ns:.0%}) "
                          f"for launch calls that held the host {STEP_SLOW_LAUNCH / 1e6:g} ms "
                          "or more: a kernel's first launch (CUDA loading a kernel never run "
                          "before), or CUPTI's work inside the launch call (the profiler's: a "
                          "DDP rank's launches held 1.2 ms a step under Proton and none under "
                          "torch.profiler, H200); not counted as the job's idle time", _WARM,
                          info=True)
    for sp in spread:
        if STEP_WALL not in sp.high or STEP_IDLE_HOST not in sp.high:
            continue
        wall = sp.high[STEP_WALL][0]
        host, rank = sp.high[STEP_IDLE_HOST]
        if wall and host / wall > IDLE_SHARE:
            _step_finding(ctx, out, sp.node, host, wall, "idle GPU",
                          f"rank {rank}: the GPU waited on the host {_ms(host)} in its "
                          f"steps, {host / wall:.0%} of the longest rank's {_ms(wall)} in "
                          f"them (the job file keeps each part's least and most rank: "
                          f"--diagnose the rank files for every rank's breakdown)", _FEED)
    return None


_FEED = ("keep the GPU fed: no host waits per step (.item(), print), input prepared ahead "
         "(DataLoader workers, pin_memory, non_blocking copies), fewer and larger launches "
         "(torch.compile, CUDA graphs)")
_SYNC_IDLE = ("the GPU waited on something other than the host's launches while the host "
              "waited for it: a copy from pageable memory being staged (pin the host memory), "
              "an event of another stream or device, a host callback")
_WARM = ("profile after a warm-up step: run each kernel once before proton.start() (or before "
         "the steps you measure); CUDA_MODULE_LOADING=EAGER loads every kernel at start-up")


def _step_finding(ctx: _Context, out: list, node, ns: float, wall: float, rule: str,
                  evidence: str, advice: str, info: bool = False) -> None:
    f = ctx.finding(rule, node, ns, evidence, advice, info=info, saves=1.0)
    f.kernel = f"scope {f.kernel}"
    ctx.walls.setdefault(f.kernel, wall)
    out.append(f)


def _left_out(parts: dict) -> str:
    """What a step's idle figure leaves out, in words (nothing when nothing was)."""
    said = [f"{_ms(parts[STEP_IDLE_PROFILER])} of Proton's own work"
            * bool(parts.get(STEP_IDLE_PROFILER)),
            f"{_ms(parts[STEP_IDLE_LAUNCH])} of slow launch calls"
            * bool(parts.get(STEP_IDLE_LAUNCH))]
    said = [x for x in said if x]
    return f" (not counted: {' and '.join(said)})" if said else ""


def _most_idle(df, step) -> str:
    """The scope under `step` with the most of the job's GPU idle time (its host interval's),
    in words."""
    if GPU_IDLE not in df:
        return ""
    best, most = None, 0.0
    for node in df.index:
        if node is step or not under(node, step):
            continue
        try:
            v = float(df.at[node, GPU_IDLE])
        except (TypeError, ValueError):
            continue
        if v == v and v > most:
            best, most = node, v
    if best is None:
        return ""
    return f", most of it while the host was in scope {best.frame.get('name', '?')} " \
           f"({_ms(most)})"


def _idle_scopes(ctx: _Context, out: list) -> str | None:
    """The rule on a profile without step breakdowns: each scope's idle time over the host's
    time in it."""
    if GPU_IDLE not in ctx.df or SCOPE_WALL not in ctx.df:
        return ""
    walls = {n: ctx.value(n, SCOPE_WALL) or 0 for n in ctx.df.index}
    longest = max(walls.values(), default=0)
    for node, wall in walls.items():
        idle = ctx.value(node, GPU_IDLE) or 0
        if not wall or wall < IDLE_MIN_WALL * longest or idle / wall <= IDLE_SHARE:
            continue
        syncs = ctx.value(node, f"{SYNC_TIME} (inc)") or 0
        why = (f"; the host waited on the GPU {_ms(syncs)} inside it (see the synchronization "
               "findings)" if syncs else "")
        _step_finding(ctx, out, node, idle, wall, "idle GPU",
                      f"the GPU ran nothing for {_ms(idle)} of the {_ms(wall)} the host spent "
                      f"in the scope ({idle / wall:.0%}){why}", _FEED)
    return None


def leaks(ctx: _Context, kernels: list, out: list) -> str | None:
    """A scope whose own allocations stay allocated, entry after entry: what its entries after
    the first allocated (inside none of its child scopes) and still allocated at the
    profile's end (MEM_KEPT, from torch's allocator history). Live memory at its exit is not
    what it keeps: another scope's tensors grow it too, and what it allocates may be freed by
    another scope later."""
    if MEM_COUNT not in ctx.df:
        return ""
    if MEM_JUDGED not in ctx.df:
        return ("memory leak: not judged; the profile does not say what each scope keeps "
                "(memory=True records it from torch's allocator history with torch 2.10 or "
                "later); live memory at a scope's exit grows with what other scopes keep")
    peak = max((v for n in ctx.df.index if (v := ctx.value(n, MEM_PEAK))), default=0.0)
    for node in ctx.df.index:
        judged = ctx.value(node, MEM_JUDGED) or 0
        kept = ctx.value(node, MEM_KEPT) or 0
        keeping = ctx.value(node, MEM_KEPT_COUNT) or 0
        if judged < LEAK_ENTRIES or kept < LEAK_MIN_BYTES or keeping < LEAK_SHARE * judged:
            continue
        per = kept / judged
        entries = max(ctx.value(node, MEM_COUNT) or 0, judged + 1)
        run = per * (entries - 1)  # its entries after the first, all keeping as judged ones
        device = ctx.value(node, MEM_DEVICE)
        of = f" ({run / device:.2%} of the GPU's {_bytes(device)})" if device else ""
        left = ""
        if device and device > peak:
            left = (f"; at this rate the {_bytes(device - peak)} above the job's peak is gone "
                    f"after {(device - peak) / per:,.0f} more entries")
        f = ctx.finding(
            "memory leak", node, ctx.value(node, f"{TIME} (inc)") or 0,
            f"in {keeping:,.0f} of its {judged:,.0f} entries after the first it allocated "
            f"memory still allocated at the profile's end: {_bytes(kept)}, {_bytes(per)} per "
            "entry (its own allocations: not its child scopes', nor those another scope "
            "freed)",
            "find what keeps tensors alive across steps: a list that gets a tensor per step "
            "(keep .item() or .detach().cpu() instead), a loss kept with its graph (add "
            "loss.detach()), a cache keyed by step; torch.cuda.memory._record_memory_history "
            "shows the allocations' stacks", saves=0.0)
        f.kernel = f"scope {f.kernel}"
        f.memory_share = run / device if device else None
        f.headline = (f"keeps {_bytes(per)} of memory per entry, {_bytes(run)} over its "
                      f"{entries:,.0f} entries{of}{left}")
        out.append(f)
    return None


def memory_peak(ctx: _Context, kernels: list, out: list) -> str | None:
    """Where the job's peak allocation happened: the innermost scope holding the highest
    mem_peak_bytes."""
    if MEM_PEAK not in ctx.df:
        return ""
    peaks = {n: ctx.value(n, MEM_PEAK) for n in ctx.df.index}
    top = max((v for v in peaks.values() if v is not None), default=0)
    if not top:
        return ""
    at = [n for n, v in peaks.items() if v == top]
    node = max(at, key=lambda n: len(ctx.path(n)))
    f = ctx.finding(
        "memory peak", node, ctx.value(node, f"{TIME} (inc)") or 0,
        f"the job's peak, {_bytes(top)} allocated at once (torch's caching allocator), was "
        f"reached inside this scope (live at its last exit: {_bytes(last_live(ctx, node))})",
        "to lower it: free large temporaries sooner (del, in-place ops), activation "
        "checkpointing, a smaller micro-batch", info=True)
    f.kernel = f"scope {f.kernel}"
    out.append(f)
    return None


def last_live(ctx: _Context, node) -> float:
    return ctx.value(node, MEM_LIVE) or 0


def _enclosing_wall(ctx: _Context, node):
    """The nearest frame at or above `node` with a wall time (scope_wall, else cpu_time)."""
    up = node
    while True:
        for metric in (SCOPE_WALL, CPU_TIME):
            wall = ctx.value(up, metric)
            if wall:
                return up, wall
        if not up.parents:
            return None, None
        up = up.parents[0]


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


STEP_RULES = [
    (pageable_copies, {
        "pageable copy in a loop": "a host-device copy from pageable memory made more than "
                                   "once"}),
    (syncs_in_a_step, {
        "synchronization in a step": f"a call path whose host waited on the GPU at least "
                                     f"twice, {SYNC_SHARE:.0%}+ of its scope's wall time"}),
    (idle_gpu, {
        "idle GPU": f"a step (per rank) whose GPU waited on the host, or ran nothing while the "
                    f"host waited on it, over {IDLE_SHARE:.0%} of the step (a scope's host "
                    "time in files without step breakdowns)",
        "first launches": f"a step whose GPU waited on slow launch calls over "
                          f"{IDLE_SHARE:.0%} of it"}),
    (leaks, {
        "memory leak": f"a scope whose own allocations of {LEAK_ENTRIES}+ entries after its "
                       f"first stay allocated, {_bytes(LEAK_MIN_BYTES)}+ in all, from "
                       f"{LEAK_SHARE:.0%}+ of those entries; ranked by the device's memory "
                       "it will hold over its entries"}),
    (memory_peak, {
        "memory peak": "where the highest allocation happened (always, with memory=True)"}),
]
"""The rules with their thresholds in words (diagnose.RULES takes them)."""
