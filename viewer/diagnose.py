"""`proton-viewer --diagnose`: why a kernel is slow, and one thing to try, from one profile.

Each rule reads what the profile has and says when it could not run. Findings are grouped by
the kernel (or scope) they concern, and the groups ranked by what fixing the worst of them could
save of the run's wall time (`saves_ns`, an upper estimate per rule: a kernel at its roof, a
full last wave, every SM busy; the GPU's idle time in a launch-bound scope), not by GPU time
alone: a launch-bound scope whose GPU waits 60 ms ranks above a 3 ms kernel.

The figures, one definition each (the line after the findings states them):
  * GPU time: the time of what ran on the GPU, kernels, copies and sets (memcpy, memset),
    each counted once. A frame's GPU time is the inclusive time of the kernels, copies and
    sets under it (a kernel's: its own); the profile's is all of them (`Diagnosis.gpu_ns`).
  * % of GPU time: a frame's (or a group's) GPU time over the profile's. A group's frames are
    a kernel's every call path, or the frames of a scope's findings, a frame inside another
    counted once: a part of the whole, so never over 100%.
  * A group's headline gives its GPU time, and the wall time of a timed scope; never its idle
    time: an idle-GPU finding states its idle time as idle, in its evidence.
  * could save up to (`saves_ns`): of the run's wall time, at most. A frame's wall time holds
    its descendants', so findings on a frame and on frames inside it do not both claim the
    same time: a finding's saving leaves out what the findings inside its frame claim (each
    frame's claim is the most one of its own findings saves, or what the frames inside it
    claim, whichever is more), `inside_ns` says how much; a finding whose whole saving is
    claimed inside is left out, and a note names it.
Only kernels (and scopes) with at least MIN_SHARE of the profile's GPU time are judged. RULES
names each rule with its threshold in words (the command prints those of the rules that ran
when nothing crosses them); in short:
  * too few programs, tail effect: the grid against the SMs and the blocks resident per SM;
    not judged for the kernels of a launch-bound scope (there the host, not the grid, costs
    the time).
  * low occupancy: a warning only when the kernel also reaches less than half its roof (tuned
    Hopper matmuls run at 1-2 blocks per SM by design), else informational.
  * far from the roofline: each kernel against the roof of its flops' precision on its GPU
    (specs.py) and the GPU's memory bandwidth; measured (tensor FLOPs and DRAM bytes from
    the hardware counters) where the profile has counters, declared (launch_metadata)
    elsewhere. A kernel with counters and no tensor work is judged by its DRAM bandwidth
    fraction, except when instruction issue keeps it busy (then the roofline of tensor FLOPs
    and DRAM bytes does not see what limits it) or it is NCCL's (it waits on its peers).
  * memory-, compute- or latency-bound (mode="counters"): every kernel with counters,
    library kernels (cuBLAS, PyTorch's, NCCL) too, from its measured DRAM bandwidth fraction
    and its busiest SM pipe (sm_throughput: tensor pipe or instruction issue), as Nsight
    Compute's Speed of Light reads them; memory- and compute-bound are informational (the
    kernel is at a hardware limit), latency-bound is a warning (NCCL's: informational, they
    wait on their peers).
  * launch-bound: informational without the scope's CPU time (short kernels alone do not
    show the GPU idle).
  * stall-dominated lines: `selected`, a warp issuing, is not a stall; informational when the
    kernel reaches half its roof or more (a tuned matmul waits on its loads too) or when its
    top reason is `not_selected` (another warp issued: nothing is lost).
  * no tensor cores / no wgmma: counted by nvdisasm when the profile was written.
  * pageable copy in a loop, synchronization in a step, idle GPU, memory leak, memory peak:
    step_rules.py. Copy and set nodes (memcpy, memset) are never judged as kernels.
  * straggler, imbalance (a job's rank files merged, or its job file; judged within its
    steps, the outermost timed scopes): stragglers.py. Communication kernels
    (NCCL) are not judged by the launch-shape or roofline rules: NCCL picks their grid, and
    their time is mostly waiting on the other ranks.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, TypeGuard, cast

import numpy as np
import pandas as pd

from ..format import (BLOCK_THREADS, CPU_TIME, CUDA, DEVICE_ID, FLOPS, GRID_BLOCKS, NUM_SAMPLES,
                      REGISTERS, SASS_PREFIX, SHARED_MEMORY, TIME, TL_DOT, DOT_NO_TENSOR_CORES,
                      DOT_NO_WGMMA)
from .derive import (COMM_KERNEL, DECLARED, NO_TENSOR_WORK, Counters, KernelRoof, kernel_counters,
                     kernel_mask, kernel_roofs, unmeasured, unmeasured_text)
from .errors import ViewerError
from .graph import ancestors, post_order
from .names import readable
from .occupancy import occupancy
from .reader import Profile, level_sums, subtree_sums, tree_levels
from .specs import bandwidth, peak, peak_known
from . import steps
from .step_rules import STEP_RULES
from .stragglers import IMBALANCE, MIN_COST, OUTLIER, Late, find, ranks_text

if TYPE_CHECKING:
    from .ranks import Merged

MIN_SHARE = 0.01
TAIL_IDLE = 0.2
LOW_OCCUPANCY = 0.25
FAR_FROM_ROOF = 0.3
LAUNCH_COUNT = 100
SHORT_KERNEL_US = 10.0
BUSY = 0.5
HOT_LINE = 0.10
STALLED = 0.5
BOUND = 0.6
"""A kernel whose measured DRAM bandwidth fraction and busiest SM pipe are both under this is
latency-bound; above it, the busier of the two bounds it. Nsight Compute's Speed of Light rule
uses the same 60%: compute and memory throughput both under it 'typically indicate latency
issues', and tuned kernels reach 80-90% of the one that limits them."""
SMS_IDLE = 0.6
"""A latency-bound kernel whose SMs had a warp resident less than this share of its time
(sm_active) leaves SMs idle: too few blocks, or too short to fill the GPU."""
SHARED_NOTE = 0.1
"""Above this share of its sampled time beside another kernel, the evidence says so: its
counts were split between them by time."""

STALL_WORDS = {
    "long_scoreboard": ("waiting on global or local memory loads",
                        "load less or earlier: keep reused data in shared memory, prefetch "
                        "(more num_stages), coalesce the loads"),
    "short_scoreboard": ("waiting on shared memory or special-function results",
                         "fewer shared-memory round trips or transcendental calls on this line"),
    "math_pipe_throttle": ("the math pipe is busy (compute-bound here)",
                           "use the tensor cores (tl.dot in fp16/bf16/fp8) or lower precision"),
    "wait": ("a fixed-latency dependency between instructions",
             "more independent work per thread (larger tiles, unrolling)"),
    "barrier": ("waiting at a barrier for the other warps",
                "balance the warps' work before the barrier, or fewer barriers"),
    "mio_throttle": ("the memory I/O queue is full (shared-memory, special-math or "
                     "scattered memory instructions)",
                     "fewer, wider accesses: coalesced or vectorised loads and stores, fewer "
                     "shared-memory round trips"),
    "lg_throttle": ("the local/global memory queue is full",
                    "fewer, wider memory instructions (vectorised loads and stores)"),
    "tex_throttle": ("the texture unit is busy", "fewer texture or sampled loads"),
    "drain": ("writes draining to memory at the kernel's end", "store less, or earlier"),
    "no_instruction": ("waiting for instructions (instruction cache)", "smaller code: less "
                       "unrolling or fewer specialisations"),
    "branch_resolving": ("resolving branches", "fewer divergent branches"),
    "dispatch_stall": ("the dispatcher stalled", "nothing to change in the kernel, usually"),
    "membar": ("a memory barrier", "fewer memory fences"),
    "sleeping": ("warps sleeping", "fewer sleeps or nanosleep calls"),
    "not_selected": ("eligible, but another warp issued (enough parallelism)",
                     "nothing: the scheduler had other work"),
    "imc_miss": ("a constant cache miss", "fewer divergent constant-memory accesses"),
}


@dataclass(slots=True)
class Finding:
    rule: str
    kernel: str
    """What it is about: a kernel's (or copy's) name, or `scope NAME`."""
    path: str
    time_ns: float
    """The GPU time of its frame: the kernels, copies and sets at or under it (never idle
    time nor host time: the evidence gives those)."""
    share: float
    """time_ns over the profile's GPU time (0 to 1)."""
    evidence: str
    advice: str
    info: bool = False
    """Worth knowing, not a problem."""
    saves_ns: float = 0.0
    """What fixing it could save of the run's wall time at most (0 for info), less what the
    findings inside its frame claim (inside_ns)."""
    inside_ns: float = 0.0
    """Of what it would save alone, what findings on frames inside its frame already claim."""
    frame: object = field(default=None, repr=False, compare=False)
    """Its hatchet node (not written out)."""
    memory_share: float | None = None
    """A memory finding's rank (a leak: step_rules.leaks): the share of the device's memory it
    will hold by the run's end, set against a time finding's saves_ns over the GPU time."""
    headline: str = ""
    """A memory finding's headline for its group, in place of the time one."""


@dataclass(slots=True)
class Group:
    """The findings of one kernel (its call paths folded together, as the kernels table
    does) or one scope."""

    kernel: str
    time_ns: float
    """Its GPU time: the kernels, copies and sets at or under its frames (a kernel's every
    call path; a scope's frames with findings), a frame inside another counted once."""
    share: float
    """time_ns over the profile's GPU time (0 to 1)."""
    saves_ns: float
    """The most one of its findings could save (they overlap: not summed)."""
    findings: list[Finding]
    """Warnings first, most saved first."""
    wall_ns: float | None = None
    """A scope's CPU (wall) time, when it was timed (cpu_timed_scope)."""
    memory_share: float | None = None
    """Its memory findings' highest memory_share."""
    headline: str = ""
    """What it costs in memory, when that ranks it (render's headline; else its time)."""

    @property
    def info(self) -> bool:
        return all(f.info for f in self.findings)

    @property
    def inside_ns(self) -> float:
        """What findings inside its frames claim of its top finding's saving."""
        return max((f.inside_ns for f in self.findings if f.saves_ns == self.saves_ns),
                   default=0.0)


@dataclass(slots=True)
class Diagnosis:
    findings: list[Finding]
    """In the groups' order (groups() gives them grouped)."""
    notes: list[str]
    """Why each rule that could not run did not, and what was left unjudged."""
    ran: dict[str, str]
    """The rules that ran: name -> threshold in words (RULES)."""
    groups: list[Group] = field(default_factory=list)
    """The findings by kernel (or scope): warnings before info, most saved first."""
    gpu_ns: float = 0.0
    """The profile's GPU time: its kernels', copies' and sets' (what shares are of)."""
    steps: list[str] = field(default_factory=list)
    """Each step's GPU time by what the GPU did, per rank, as text (steps.lines)."""
    step_rows: list = field(default_factory=list)
    """The same as steps.Step rows (for --output json)."""


def diagnose(prof: Profile, style: str = "folded", merged: Merged | None = None) -> Diagnosis:
    """The findings grouped by kernel or scope (most wall time to save first), a note for
    each rule that could not run, and the rules that ran. `merged`: a job's ranks, whose
    merged tree `prof` is (ranks.merge): then its stragglers are named too.

    Usage:
        got = diagnose(load("run.hatchet"))
        print(render(got))
    """
    df = prof.gf.dataframe
    if TIME not in df:
        raise ViewerError("--diagnose needs kernel times: the profile has none (profile a "
                          "run on a GPU)")
    own = pd.to_numeric(df[TIME], errors="coerce")
    # copies and sets (memcpy, memset nodes) have time and bytes but are no kernels: no grid,
    # occupancy nor roofline judges them; they are GPU time all the same
    mask, ran = kernel_mask(prof), kernel_mask(prof, copies=True)
    kernels = [n for n, yes in mask.items() if yes]
    levels = tree_levels(prof.gf)
    ctx = _Context(prof, own, _gpu_time(prof, own, ran, levels), style, levels)
    ctx.ran = ran
    ctx.kernel, ctx.judged = mask, _judged(ctx, mask, kernels)
    roofs = kernel_roofs(prof, ctx.judged)
    ctx.roofs = {node: roofs.get(node) for node in ctx.judged}
    ctx.merged = merged
    ctx.scopes = _launch_scopes(ctx, kernels)
    found = Diagnosis([], [], {})
    for rule, thresholds in RULES:
        why_not = rule(ctx, kernels, found.findings)
        if why_not:
            found.notes.append(why_not)
        elif why_not is None:  # "": the rule does not apply to this kind of profile
            found.ran.update(thresholds)
    if ctx.comm_skipped:
        n = len({ctx.name(node) for node in ctx.comm_skipped})
        found.notes.append(f"{n} communication kernel{'s' * (n != 1)} (NCCL) not judged by "
                           "the launch-shape and roofline rules: NCCL picks their grid, and "
                           "their time is mostly waiting on the other ranks")
    found.notes += ctx.notes
    kept, claimed = _unclaimed(ctx, found.findings)
    if claimed:
        found.notes.append(_claimed_note(claimed))
    found.groups = _group(ctx, kept)
    found.step_rows = steps.breakdown(prof, merged)
    found.steps = steps.lines(found.step_rows, steps.spreads(merged) if merged is not None
                              and not merged.ranks else None)
    found.findings = [f for g in found.groups for f in g.findings]
    found.gpu_ns = ctx.total
    return found


def _gpu_time(prof: Profile, own: pd.Series, ran: dict, levels: list | None) -> dict:
    """Node -> its GPU time: the time of the kernels, copies and sets (`ran`: kernel_mask's
    with copies) at or under it (a negative or non-finite time counts as none). Summed by
    numpy on a tree of `levels` (reader.tree_levels), with subtree_sums' digits."""
    if levels is not None:  # rows are node ids; kernel_mask keeps the table's row order
        ns = own.to_numpy(dtype=float)
        keep = np.fromiter(ran.values(), dtype=bool, count=len(ran)) & np.isfinite(ns) & (ns > 0)
        sums = level_sums(np.where(keep, ns, 0.0), levels)
        return dict(zip(own.index, sums.tolist()))
    work = {n: float(v) if ran.get(n) and math.isfinite(v) and v > 0 else 0.0
            for n, v in own.items()}
    return subtree_sums(post_order(prof.gf.graph), work)


def _judged(ctx: _Context, mask: dict, kernels: list) -> list:
    """The kernels with MIN_SHARE or more of the GPU time (ctx.big of their time), in
    `kernels`' order: the only ones the kernel rules judge. `mask`: kernel_mask's, in the
    table's row order."""
    column = ctx.df[TIME]
    if column.dtype != np.float64:  # text or objects: value() reads each
        return [n for n in kernels if ctx.big(ctx.value(n, TIME))]
    if ctx.total <= 0:
        return []
    ns = column.to_numpy()
    with np.errstate(invalid="ignore"):
        big = np.isfinite(ns) & (ns != 0) & (ns / ctx.total >= MIN_SHARE)
    big &= np.fromiter(mask.values(), dtype=bool, count=len(mask))
    return ctx.df.index.values[big].tolist()


def _unclaimed(ctx: _Context, findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(the findings with their savings less what findings inside their frames claim, those
    whose whole saving is claimed there). A frame's claim is the most one of its own findings
    saves or the sum of the claims of the frames inside it, whichever is more: each stretch of
    wall time is claimed once, by the innermost findings that name it."""
    own: dict = {}
    for f in findings:
        own[f.frame] = max(own.get(f.frame, 0.0), f.saves_ns)
    inside: dict = {}
    claim: dict = {}
    for node in _claiming(ctx, own):
        below = sum(claim.get(c, 0.0) for c in node.children)
        inside[node] = below
        claim[node] = max(own.get(node, 0.0), below)
    kept, claimed = [], []
    for f in findings:
        below = inside.get(f.frame, 0.0)
        if f.saves_ns > 0 and below > 0:
            if f.saves_ns <= below:
                claimed.append(f)
                continue
            f.saves_ns -= below
            f.inside_ns = below
        kept.append(f)
    return kept, claimed


def _claiming(ctx: _Context, own: dict) -> list:
    """The frames with findings and those above them, each after its children: elsewhere
    nothing is claimed (a claim of 0 adds nothing to a sum). On a tree (ctx.levels) only
    these are walked; on another graph, every frame."""
    if ctx.levels is None:
        return post_order(ctx.prof.gf.graph)
    seen: dict = {}  # id -> node, each frame once, a frame before those above it
    for frame in own:
        for node in (frame, *ancestors(frame)) if frame is not None else ():
            if id(node) in seen:
                break
            seen[id(node)] = node
    return sorted(seen.values(), key=lambda node: -node._depth)


def _claimed_note(claimed: list[Finding]) -> str:
    named = ", ".join(dict.fromkeys(f"{f.kernel} ({f.rule})" for f in claimed))
    return (f"{len(claimed)} finding{'s' * (len(claimed) != 1)} left out, all of what "
            f"{'they' if len(claimed) != 1 else 'it'} could save claimed by findings inside "
            f"{'their frames' if len(claimed) != 1 else 'its frame'}: {named}")


def _group(ctx: _Context, findings: list[Finding]) -> list[Group]:
    """The findings by kernel name (its call paths together) or scope, each group with the
    GPU time of what it names (its frames, one inside another counted once)."""
    if not findings:
        return []
    named = {f.kernel for f in findings}
    frames: dict[str, set] = {}
    for node, ran in ctx.ran.items():
        if ran and (name := ctx.name(node)) in named:
            frames.setdefault(name, set()).add(node)
    wall: dict[str, float] = dict(ctx.walls)
    for scope in ctx.scopes:
        if scope.cpu:
            wall[f"scope {ctx.name(scope.node)}"] = scope.cpu
    by: dict[str, list[Finding]] = {}
    for f in findings:
        by.setdefault(f.kernel, []).append(f)
    out = []
    for name, found in by.items():
        found.sort(key=lambda f: (f.info, -f.saves_ns, -f.time_ns))
        nodes = frames.get(name, set()) | {f.frame for f in found if f.frame is not None}
        ns = sum(ctx.gpu_ns.get(n, 0.0) for n in nodes if not _inside(n, nodes))
        out.append(_memory(Group(name, ns, ctx.share(ns), max(f.saves_ns for f in found), found,
                                 wall.get(name)), ctx.total))
    out.sort(key=lambda g: (g.info, -_rank(g, ctx.total), -g.saves_ns, -g.time_ns))
    return out


# -- memory findings' rank and headline (a leak costs memory, not time) -----------------------

def _time_share(g: Group, total: float) -> float:
    return min(g.saves_ns / total, 1.0) if total else 0.0


def _rank(g: Group, total: float) -> float:
    """The larger of the share of the GPU time a group could save and the share of the
    device's memory its memory findings will hold: groups of either kind ranked together."""
    return max(_time_share(g, total), g.memory_share or 0.0)


def _memory(g: Group, total: float) -> Group:
    """A group with memory findings: their highest share, and their headline when memory
    ranks the group (or it saves no time)."""
    costs = [f for f in g.findings if f.headline]
    if costs:
        top = max(costs, key=lambda f: f.memory_share or 0.0)
        g.memory_share = top.memory_share
        if not g.saves_ns or (top.memory_share or 0.0) >= _time_share(g, total):
            g.headline = top.headline
    return g


def _inside(node, nodes: set) -> bool:
    """Whether an ancestor of `node` is one of `nodes`."""
    return any(up in nodes for up in ancestors(node))


class _Context:
    def __init__(self, prof: Profile, own: pd.Series, gpu_ns: dict, style: str,
                 levels: list | None = None) -> None:
        self.prof, self.own, self.style, self.levels = prof, own, style, levels
        """levels: reader.tree_levels of the profile's tree (None for another graph)."""
        self.gpu_ns = gpu_ns
        """Node -> its GPU time (kernels, copies and sets at or under it)."""
        self.total = float(sum(gpu_ns.get(root, 0.0) for root in prof.gf.graph.roots))
        """The profile's GPU time."""
        self.df = prof.gf.dataframe
        gpus = prof.devices.get(CUDA, {}) if isinstance(prof.devices, dict) else {}
        self.gpus = gpus if isinstance(gpus, dict) else {}
        self.kernel: dict = {}
        """Node -> whether it is a kernel (kernel_mask)."""
        self.ran: dict = {}
        """Node -> whether it is a kernel, copy or set (kernel_mask with copies)."""
        self.judged: list = []
        """The kernels with MIN_SHARE of the GPU time or more (_judged), in table order."""
        self.roofs: dict = {}
        """Node -> KernelRoof, of the judged kernels and of each other frame asked (roof)."""
        self.counters: dict = kernel_counters(prof)
        self.scopes: list[_Scope] = []
        self.notes: list[str] = []
        """What a rule that ran left unjudged."""
        self.merged: Merged | None = None
        self.walls: dict[str, float] = {}
        """A scope's CPU time summed over the ranks, by its group's name (stragglers)."""
        self.comm_skipped: set = set()
        self.columns: dict[str, dict] = {}
        """Column -> node -> value, made at a column's first value (a dict look-up, where
        the data frame's .at took 25x as long)."""

    def column(self, column: str) -> dict | None:
        values = self.columns.get(column)
        if values is None and column in self.df:
            values = self.columns[column] = self.df[column].to_dict()
        return values

    def value(self, node, column: str) -> float | None:
        values = self.column(column)
        if values is None:
            return None
        try:
            v = float(values[node])
        except (TypeError, ValueError):
            return None
        return v if math.isfinite(v) else None

    def gpu(self, node) -> dict | None:
        values = self.column(DEVICE_ID)
        if values is None:
            return None
        gpu = self.gpus.get(str(values[node]))
        return gpu if isinstance(gpu, dict) else None

    def name(self, node) -> str:
        return readable(node.frame.get("name", "?"), self.style)

    def path(self, node) -> str:
        names, up = [], node
        while up.parents:
            up = up.parents[0]
            names.append(readable(up.frame.get("name", "?"), self.style))
        return " / ".join(reversed(names))

    def finding(self, rule: str, node, ns: float, evidence: str, advice: str,
                info: bool = False, saves: float | None = None) -> Finding:
        """A finding on `node`, its time and share the node's GPU time. `ns`: the time at
        stake (a kernel's time, a scope's idle or waits); `saves`: the fraction of it fixing
        it would save at most (default: what reaching the roof would, else all of it)."""
        if saves is None:
            frac = self.roof_fraction(node)
            saves = 1 - min(frac, 1.0) if frac is not None else 1.0
        gpu = self.gpu_ns.get(node, 0.0)
        stake = ns if math.isfinite(ns) and ns > 0 else 0.0
        return Finding(rule, self.name(node), self.path(node), gpu, self.share(gpu), evidence,
                       advice, info, 0.0 if info else stake * max(saves, 0.0), frame=node)

    def share(self, ns: float) -> float:
        """`ns` of GPU time (a part of the profile's) over the profile's GPU time."""
        return ns / self.total if self.total else 0.0

    def big(self, ns: float | None) -> TypeGuard[float]:
        """A time worth a finding (MIN_SHARE of the profile's GPU time): never None where it
        is."""
        if not ns:
            return False
        return self.total > 0 and ns / self.total >= MIN_SHARE

    def roof_share(self, node) -> float | None:
        """roof_fraction where it can be shown as a share of the roof (at most 1: over it, the
        kernel's flops or bytes overstate its work)."""
        frac = self.roof_fraction(node)
        return frac if frac is not None and frac <= 1 else None

    def roof_fraction(self, node) -> float | None:
        """Achieved FLOP/s over the roof at the kernel's intensity; None when unknown."""
        kernel = self.roof(node)
        frac = kernel.fraction() if kernel is not None else None
        return frac if frac is not None and math.isfinite(frac) else None

    def roof(self, node) -> KernelRoof | None:
        """The kernel's KernelRoof (None for a frame that has none)."""
        roof = self.roofs.get(node)
        if roof is not None or node in self.roofs or (node.parents and not self.kernel.get(node)):
            return roof  # a scope or a copy has none (a root may have a device of its own)
        # a kernel not judged (a stalled line's, a straggler's): every kernel's, once
        self.roofs = kernel_roofs(self.prof)
        return self.roofs.get(node)

    def comm(self, node) -> bool:
        """A communication kernel (NCCL's): its grid is NCCL's choice and its time mostly
        waiting on the other ranks, so the launch-shape and roofline rules do not judge it."""
        if COMM_KERNEL.match(str(node.frame.get("name", ""))):
            if self.big(self.value(node, TIME)):
                self.comm_skipped.add(node)
            return True
        return False

    def host_bound(self, node) -> bool:
        """Whether the kernel is one of a launch-bound scope's, where the GPU waits on the
        host: its own shape is not what costs the time there."""
        return any(s.waiting and node in s.kernels for s in self.scopes)


def _launch_shape(ctx: _Context, kernels: list, out: list) -> str | None:
    if GRID_BLOCKS not in ctx.df:
        return ("too few programs, tail effect, occupancy: not checked; the profile has no "
                "launch configuration (grid, block, registers, shared memory per kernel)")
    for node in ctx.judged:  # (the others: not big)
        ns = ctx.value(node, TIME)
        gpu = ctx.gpu(node)
        grid, threads = ctx.value(node, GRID_BLOCKS), ctx.value(node, BLOCK_THREADS)
        if not ctx.big(ns) or gpu is None or not grid or not threads or ctx.host_bound(node) \
                or ctx.comm(node):
            continue
        sms = int(gpu.get("num_sms", 0))
        regs = int(ctx.value(node, REGISTERS) or 0)
        shared = int(ctx.value(node, SHARED_MEMORY) or 0)
        occ = occupancy(str(gpu.get("arch")), int(threads), regs, shared)
        if sms and grid < sms:
            out.append(ctx.finding(
                "too few programs", node, ns,
                f"{grid:,.0f} block{'s' * (grid != 1)} on {sms} SMs: {sms - grid:,.0f} SMs idle "
                "the whole kernel",
                "more programs: split the work finer (smaller BLOCK sizes, split-K), or a "
                "persistent kernel with one program per SM", saves=1 - grid / sms))
        elif occ is not None and sms:
            capacity = sms * occ.blocks
            waves = grid / capacity
            if waves > 1:
                busy = waves / math.ceil(waves)
                if 1 - busy > TAIL_IDLE:
                    out.append(ctx.finding(
                        "tail effect", node, ns,
                        f"{grid:,.0f} blocks = {waves:.2f} waves of {capacity:,} ({sms} SMs x "
                        f"{occ.blocks} resident); the last wave is {waves % 1:.0%} full, the "
                        f"GPU {1 - busy:.0%} idle on average",
                        f"a grid that is a multiple of {capacity:,} blocks (other block "
                        "sizes), or a persistent kernel", saves=1 - busy))
        if occ is not None and occ.fraction < LOW_OCCUPANCY:
            frac = ctx.roof_share(node)
            limit = {"registers": f"{regs} registers per thread",
                     "shared memory": f"{shared:,} B shared memory per block",
                     "warps": f"{threads:.0f} threads per block",
                     "blocks": "the blocks per SM"}[occ.limiter]
            advice = {"registers": "fewer registers per thread: smaller tiles, fewer "
                                   "num_stages, or maxnreg",
                      "shared memory": "less shared memory per block: fewer num_stages or "
                                       "smaller tiles",
                      "warps": "more warps per block (num_warps)",
                      "blocks": "larger blocks (more num_warps)"}[occ.limiter]
            out.append(ctx.finding(
                "low occupancy", node, ns,
                f"theoretical occupancy {occ.fraction:.0%} ({occ.blocks} block"
                f"{'s' * (occ.blocks != 1)} of "
                f"{math.ceil(threads / 32)} warps per SM), limited by {limit}"
                + (f"; {frac:.0%} of its roof" if frac is not None else ""),
                advice, info=frac is None or frac >= 0.5))
    return None


LIBRARY_KERNEL = re.compile(r"^(_Z|sm\d+_|nvjet|cutlass|cublas|cudnn|ampere_|volta_|turing_"
                            r"|hopper_|gemv|gemmk|nccl)", re.IGNORECASE)
"""A library's kernel, by the name CUPTI gives it: C++ (mangled: torch's ATen, CUTLASS; a
Triton kernel's name never is) or cuBLAS/cuDNN/NCCL's own names. The tensor-core rule reads a
Triton kernel's tl.dot, so it does not apply to these."""


def _tensor_cores(ctx: _Context, kernels: list, out: list) -> str | None:
    if TL_DOT not in ctx.df:
        timed = ctx.judged
        if timed and all(LIBRARY_KERNEL.match(str(n.frame.get("name", ""))) for n in timed):
            return ("tensor cores: does not apply; the kernels here are libraries' (cuBLAS, "
                    "CUTLASS, torch's ATen), and the rule reads a Triton kernel's tl.dot")
        return ("tensor cores: not checked; the profile has no Triton kernel with a tl.dot "
                "whose machine code was at hand when it was written")
    for node in ctx.judged:  # (the others: not big)
        ns, dots = ctx.value(node, TIME), ctx.value(node, TL_DOT)
        if not dots or not ctx.big(ns):
            continue
        none = int(ctx.value(node, DOT_NO_TENSOR_CORES) or 0)
        sync = int(ctx.value(node, DOT_NO_WGMMA) or 0)
        variants = f"{none or sync} of its {dots:.0f} compiled variant{'s' * (dots != 1)}"
        gpu = ctx.gpu(node) or {}
        if none:
            ffma = int(ctx.value(node, SASS_PREFIX + "ffma") or 0)
            out.append(ctx.finding(
                "no tensor cores", node, ns,
                f"{variants}: the tl.dot runs on the FMA units (no HMMA or HGMMA in the "
                f"machine code; {ffma:,} FFMA over all variants)",
                "fp16, bf16 or fp8 inputs to tl.dot (for fp32, input_precision='tf32')"))
        elif sync and str(gpu.get("arch")) == "90":
            out.append(ctx.finding(
                "no wgmma", node, ns,
                f"{variants}: on Hopper the tl.dot uses mma.sync (HMMA), not the warpgroup "
                "MMA (HGMMA)",
                "BLOCK_M of 64 or more with num_warps a multiple of 4, fp16/bf16/fp8 inputs, "
                "and a K block of at least 16"))
    return None


def _roofline(ctx: _Context, kernels: list, out: list) -> str | None:
    judged, unjudged = 0, []
    for node in ctx.judged:  # (the others: not big, and comm() only asked of big ones)
        kernel, ns = ctx.roof(node), ctx.value(node, TIME)
        if kernel is None or kernel.fraction() is None and kernel.point() is None \
                or not ctx.big(ns) or ctx.comm(node):
            continue  # a communication kernel waits on its peers: no roof says why
        if kernel.source == NO_TENSOR_WORK and (ctx.counters[node].issue_active or 0) >= BOUND:
            continue  # busy issuing (FMA, ALU work): not bound by a memory level
        frac = ctx.roof_fraction(node)
        if frac is None:
            unjudged.append(kernel)
            continue
        judged += 1
        if frac < FAR_FROM_ROOF:
            out.append(ctx.finding("far from the roofline", node, ns, *_far(kernel, frac)))
    if unjudged:
        ctx.notes.append(_unjudged(ctx, unjudged))
    if not judged and not unjudged and not ctx.counters \
            and not any(FLOPS.fullmatch(str(c)) for c in ctx.df.columns):
        return ("far from the roofline: not checked; no kernel has flops and bytes, neither "
                "measured (hardware counters, mode=\"counters\") nor declared (Triton kernels "
                "give them through launch_metadata, with -k triton)")
    return None


LEVEL_WORDS = {"DRAM": "the DRAM bandwidth", "L2": "the L2's bandwidth",
               "L1": "the L1/shared-memory data pipe"}


def _levels(kernel: KernelRoof | Counters) -> str:
    """A measured kernel's memory levels, each against its own roof, nearest first."""
    got = sorted(kernel.levels.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {value:.0%}" for name, value in got)


def _far(kernel: KernelRoof, frac: float) -> tuple[str, str]:
    """(evidence, advice) of a kernel under FAR_FROM_ROOF of its roof: measured, the nearest of
    its roofs (hierarchical: DRAM, L2, L1, the tensor peak); declared, its roofline's."""
    fuse = ("move fewer bytes: fuse with the neighbouring ops, reuse tiles from shared "
            "memory, lower precision")
    if kernel.source != DECLARED:
        level = kernel.level()
        rates = [f"DRAM {kernel.nbytes / kernel.seconds / 1e9:,.0f} GB/s",
                 f"L2 {kernel.l2_bytes / kernel.seconds / 1e9:,.0f} GB/s"]
        if kernel.flops:
            rates.append(f"{kernel.flops / kernel.seconds / 1e12:,.2f} tensor TFLOP/s")
        evidence = (f"{frac:.0%} of {LEVEL_WORDS.get(level, 'the tensor peak')}, its nearest "
                    f"roof (measured, each level against its own roof: {_levels(kernel)}; "
                    f"{', '.join(rates)})")
        if kernel.source == NO_TENSOR_WORK:
            evidence += ", no tensor work"
        if level == "compute":
            return evidence, ("keep the tensor cores fed: larger tiles, more warps, more "
                              "num_stages to hide the loads")
        return evidence, ("keep more bytes in flight (more blocks, wider vectorised loads), "
                          "or " + fuse)
    # the caller knew the roof fraction: intensity, peak and bandwidth are all known
    x, peak, bw = (cast(float, v) for v in (kernel.intensity, kernel.peak, kernel.bandwidth))
    memory = bw * x < peak
    if memory:
        advice = fuse
    elif all(p.endswith("tensor") for p in kernel.precisions):
        advice = ("keep the tensor cores fed: larger tiles, more warps, more num_stages to "
                  "hide the loads")
    else:  # fp32 or fp64 on the FMA units
        advice = ("use the tensor cores: tl.dot in fp16/bf16/fp8, or for fp32 "
                  "input_precision='tf32'")
    evidence = (f"{frac:.0%} of the {'memory' if memory else 'compute'} roof: "
                f"{kernel.flops / kernel.seconds / 1e12:,.2f} TFLOP/s and "
                f"{kernel.nbytes / kernel.seconds / 1e9:,.1f} GB/s at {x:,.2f} FLOP/byte "
                f"({' + '.join(dict.fromkeys(kernel.precisions))} peak "
                f"{peak / 1e12:,.1f} TFLOP/s, {bw / 1e9:,.0f} GB/s, ridge {peak / bw:,.0f} "
                "FLOP/byte)")
    return evidence, advice


def _unjudged(ctx: _Context, kernels: list[KernelRoof]) -> str:
    """Why kernels with flops and bytes were not put under a roof."""
    gpus = [ctx.gpus[k.device] for k in kernels]
    unknown = sorted({f"sm{gpu.get('arch')}" for gpu in gpus
                      if not peak_known(str(gpu.get("arch")))})
    if unknown:
        why = f"no peaks known for {', '.join(unknown)} (sm80, sm89, sm90 and sm100 are)"
    elif any(peak(gpu, "fp32") is None or bandwidth(gpu) is None for gpu in gpus):
        why = "the device table lacks their GPU's figures"
    else:
        why = ("their flops name no precision (launch_metadata gives flops8, flops16, "
               "flops32 or flops64)")
    return (f"far from the roofline: {len(kernels)} kernel{'s' * (len(kernels) != 1)} with "
            f"flops and bytes not judged; {why}")


def _bound(ctx: _Context, kernels: list, out: list) -> str | None:
    """Memory-, compute- or latency-bound, from each kernel's counters (BOUND): its memory
    side is the nearest of its levels to their own roofs (DRAM, L2, L1: hierarchical)."""
    _unmeasured(ctx, kernels)
    if not ctx.counters:  # not a counters profile: said nowhere, as --diagnose said before
        return ""
    for node in ctx.judged:  # (the others: not big)
        c, ns = ctx.counters.get(node), ctx.value(node, TIME)
        if c is None or not ctx.big(ns):
            continue
        levels, busiest = c.levels, c.sm_throughput
        if not levels and busiest is None:
            continue
        level = max(levels, key=lambda k: levels[k]) if levels else "DRAM"
        d, sm = levels.get(level, 0.0), busiest or 0.0
        evidence = _measured(c)
        if max(d, sm) < BOUND:
            comm = bool(COMM_KERNEL.match(str(node.frame.get("name", ""))))
            if comm:
                advice = ("a communication kernel waits on its peers and the links, not on "
                          "this GPU: overlap it with compute, or send fewer, larger messages")
            elif c.sm_active is not None and c.sm_active < SMS_IDLE:
                advice = ("SMs sit idle: more blocks (split the work finer, larger batches), "
                          "or fuse short kernels and launch them as a CUDA graph")
            else:
                advice = ("warps wait on latency: more work in flight per SM (more warps, "
                          "more num_stages, independent loads), fewer dependent round trips "
                          "to memory")
            host = ctx.host_bound(node)
            if host:  # the GPU waits on the host there: a faster kernel would wait longer
                advice = "its scope is launch-bound (see that finding): launch fewer kernels first"
            out.append(ctx.finding("latency-bound", node, ns, evidence, advice,
                                   info=comm or host, saves=1 - max(d, sm)))
        elif d >= sm:
            where = {"DRAM": "at the DRAM bandwidth: only fewer bytes make it faster (fuse it "
                             "with its neighbours, lower precision, keep reused data in L2 or "
                             "shared memory)",
                     "L2": "at the L2's bandwidth (its data stays in L2: DRAM is not what "
                           "limits it): only less traffic through L2 makes it faster (fuse it "
                           "with its neighbours, reuse tiles from shared memory, lower "
                           "precision)",
                     "L1": "at the L1/shared-memory data pipe: fewer, wider accesses "
                           "(vectorised loads, no bank conflicts), or less shared-memory "
                           "traffic per FLOP"}[level]
            out.append(ctx.finding("memory-bound", node, ns, evidence, where, info=True))
        elif (c.tensor_active or 0.0) >= (c.issue_active or 0.0):
            out.append(ctx.finding(
                "compute-bound", node, ns, evidence,
                "at the tensor pipe's limit: fewer or cheaper FLOPs (fp8, skip padded work)",
                info=True))
        else:
            out.append(ctx.finding(
                "compute-bound", node, ns, evidence,
                "instruction issue is the limit: fewer instructions (tensor cores for matrix "
                "work, vectorised memory access, less index arithmetic)", info=True))
    return None


def _unmeasured(ctx: _Context, kernels: list) -> None:
    """A note on the kernels (with MIN_SHARE of the time or more) whose counters the samples
    did not measure: no rule judges them by counters, and the note says how to measure them."""
    missed = unmeasured(ctx.prof)
    big = [node for node in ctx.judged if node in missed]
    if big:
        names = sorted({ctx.name(node) for node in big})
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        ctx.notes.append(f"{unmeasured_text(len(big), sum(missed[n][1] for n in big))} "
                         f"({shown})")


def _measured(c: Counters) -> str:
    """A kernel's counters as evidence: each memory level against its own roof (nearest
    first), the SM pipes' activity."""
    rate = c.dram_bytes / c.seconds
    parts = []
    for name, value in sorted(c.levels.items(), key=lambda kv: -kv[1]):
        if name == "DRAM":
            parts.append(f"DRAM {value:.0%} of peak ({rate / 1e9:,.0f} of "
                         f"{cast(float, c.bandwidth) / 1e9:,.0f} GB/s)")
        elif name == "L2":
            parts.append(f"L2 {value:.0%} of its peak ({c.l2_bytes / c.seconds / 1e9:,.0f} "
                         "GB/s)")
        else:
            parts.append(f"L1 data pipe {value:.0%} of its peak")
    if "DRAM" not in c.levels:
        parts.append(f"DRAM {rate / 1e9:,.0f} GB/s")
    if "L2" not in c.levels:
        parts.append(f"L2 {c.l2_bytes / c.seconds / 1e9:,.0f} GB/s")
    for label, active, tail in (("tensor pipe", c.tensor_active, " active"),
                                ("issue", c.issue_active, ""), ("SMs", c.sm_active, " active")):
        if active is not None:
            parts.append(f"{label} {active:.0%}{tail}")
    text = ", ".join(parts) + f"; over {_ms(c.seconds * 1e9)} sampled"
    if c.shared > SHARED_NOTE:
        text += f" ({c.shared:.0%} of it beside another kernel: counts split by time)"
    return text


@dataclass(slots=True)
class _Scope:
    """A scope whose own kernels are many and short."""

    node: object
    kernels: set
    count: float
    ns: float
    cpu: float | None
    """The scope's CPU time (cpu_timed_scope), when it has one."""

    @property
    def waiting(self) -> bool:
        """Launch-bound for certain: the GPU is busy under BUSY of the scope's time."""
        if not self.cpu:
            return False
        return self.ns / self.cpu < BUSY


def _launch_scopes(ctx: _Context, kernels: list) -> list[_Scope]:
    """Scopes with at least MIN_SHARE of the GPU time in LAUNCH_COUNT or more own kernels
    that average under SHORT_KERNEL_US."""
    is_kernel, out = set(kernels), []
    for node in _launching(ctx, is_kernel):
        mine = [c for c in node.children if c in is_kernel]
        count = sum(ctx.value(c, "count") or 0 for c in mine)
        ns = sum(ctx.value(c, TIME) or 0 for c in mine)
        if count >= LAUNCH_COUNT and ctx.big(ns) and ns / count / 1e3 < SHORT_KERNEL_US:
            out.append(_Scope(node, set(mine), count, ns, ctx.value(node, CPU_TIME)))
    return out


def _launching(ctx: _Context, is_kernel: set) -> list:
    """The frames that are no kernels, in traverse's order, that _launch_scopes tests; on a
    tree of levels (ctx.levels) only those that pass its tests, its sums over each frame's
    kernels made by numpy with the same digits (the children's in their order)."""
    graph = ctx.prof.gf.graph
    count, ns = _as_read(ctx, "count"), _as_read(ctx, TIME)
    if ctx.levels is None or count is None or ns is None:
        return [node for node in graph.traverse() if node not in is_kernel]
    kernel = np.fromiter(ctx.kernel.values(), dtype=bool, count=len(ctx.kernel))
    if not ctx.levels or ctx.total <= 0:
        return []
    rows = np.concatenate([r for r, _ in ctx.levels])
    up = np.concatenate([u for _, u in ctx.levels])
    mine = kernel[rows]
    rows, up = rows[mine], up[mine]
    counts, times = np.zeros(len(kernel)), np.zeros(len(kernel))
    np.add.at(counts, up, count[rows])
    np.add.at(times, up, ns[rows])
    with np.errstate(divide="ignore", invalid="ignore"):
        many_short = (counts >= LAUNCH_COUNT) & (times != 0) & (times / ctx.total >= MIN_SHARE) \
            & (times / counts / 1e3 < SHORT_KERNEL_US) & ~kernel
    found = ctx.df.index.values[many_short].tolist()
    if len(found) < 2:
        return found
    ids = {id(node) for node in found}
    return [node for node in graph.traverse() if id(node) in ids]


def _as_read(ctx: _Context, column: str) -> np.ndarray | None:
    """A column's values by row as ctx.value reads them, 0 where it reads none (missing, not
    finite); zeros where the table lacks it; None where its values are no floats (value()
    converts each)."""
    if column not in ctx.df:
        return np.zeros(len(ctx.df))
    values = ctx.df[column]
    if values.dtype != np.float64:
        return None
    values = values.to_numpy()
    return np.where(np.isfinite(values), values, 0.0)


def _launch_bound(ctx: _Context, kernels: list, out: list) -> str | None:
    advice = ("launch fewer kernels: CUDA graphs (torch.compile mode='reduce-overhead', "
              "torch.cuda.graphs), fuse elementwise ops (torch.compile), batch the work")
    for scope in ctx.scopes:
        avg_us = scope.ns / scope.count / 1e3
        if scope.cpu and not scope.waiting:
            continue
        if scope.cpu:
            evidence = (f"the GPU is busy {scope.ns / scope.cpu:.0%} of the scope's "
                        f"{scope.cpu / 1e6:,.3f} ms: {scope.count:,.0f} kernels averaging "
                        f"{avg_us:.1f} us")
        else:
            evidence = (f"{scope.count:,.0f} kernels averaging {avg_us:.1f} us (time the scope "
                        "with proton.cpu_timed_scope to see how long the GPU waits)")
        finding = ctx.finding("launch-bound", scope.node, scope.ns, evidence, advice,
                              info=not scope.cpu)
        if scope.cpu:  # the time the GPU waits: what launching less could give back
            finding.saves_ns = scope.cpu - scope.ns
        finding.kernel = f"scope {finding.kernel}"
        out.append(finding)
    return None


def _stalls(ctx: _Context, kernels: list, out: list) -> str | None:
    if NUM_SAMPLES not in ctx.df:
        return "stall-dominated lines: not checked; no PC samples (profile with -m pcsampling)"
    from .source import find_kernel

    time_by_name: dict[str, float] = {}
    for node in kernels:
        raw = node.frame.get("name", "")
        time_by_name[raw] = time_by_name.get(raw, 0.0) + (ctx.value(node, TIME) or 0)
    first: dict = {}  # kernel name -> its first hatchet node
    for node in kernels:
        first.setdefault(node.frame.get("name", ""), node)
    for raw, ns in time_by_name.items():
        if not ctx.big(ns):  # before reading its samples: a profile may hold thousands
            continue
        node = first[raw]
        try:
            kernel = find_kernel(ctx.prof, raw)
        except ViewerError:
            continue
        if not kernel.total.samples:
            continue
        for ls in kernel.lines[:3]:
            share = ls.counts.samples / kernel.total.samples
            stalled = ls.counts.stalled / ls.counts.samples if ls.counts.samples else 0
            top = ls.counts.top_stalls(1)
            if share < HOT_LINE or stalled < STALLED or not top:
                continue
            reason, part = top[0]
            words, advice = STALL_WORDS.get(reason, (reason.replace("_", " "), "see Nsight "
                                                     "Compute's stall reasons"))
            frac, shown = ctx.roof_fraction(node), ctx.roof_share(node)
            finding = ctx.finding(
                "stalled line", node, ns * share,
                f"line {ls.line} of {ls.file.rsplit('/', 1)[-1]}: {share:.0%} of the kernel's "
                f"samples, {stalled:.0%} stalled, mostly {reason} ({part:.0%}): {words}"
                + (f"; the kernel reaches {shown:.0%} of its roof" if shown is not None else ""),
                advice, info=reason == "not_selected" or (frac is not None and frac >= 0.5),
                saves=stalled)
            if kernel.paths > 1:  # its samples are summed over every call path
                finding.path = f"{kernel.paths} call paths, e.g. {finding.path}"
            out.append(finding)
    return None


def _stragglers(ctx: _Context, kernels: list, out: list) -> str | None:
    """A job's stragglers: the rank each step's collectives wait for, where, why and what it
    costs a step; frames out of balance over the ranks (stragglers.py)."""
    if ctx.merged is None or len(ctx.merged.labels) < 2:
        return ""  # one process's profile: nothing to compare
    got = find(ctx.merged)
    world = len(ctx.merged.labels)
    for late in got.late:
        out.append(_late(ctx, late, world))
    is_kernel = set(kernels)
    of_job = f"of the job's {_ms(got.job_ns)} ({got.job_what} of its slowest rank)"
    for s in got.found:
        node, x = s.node, s.values
        who = ranks_text(s.slow, world)
        share = f"{s.cost_ns / got.job_ns:.0%} " if got.job_ns else ""
        rest = [i for i, label in enumerate(ctx.merged.labels) if label not in s.slow]
        verb = "spends" if len(s.slow) == 1 else "spend up to"
        what = s.what if node in is_kernel or s.what != "GPU time" else \
            "GPU time in its kernels (communication kernels left out)"
        others = x[rest].mean() if len(x) else s.top_ns - s.cost_ns
        evidence = (f"{who} {verb} {_ms(s.top_ns)} of {what} here against "
                    f"{_ms(others)} on the other ranks on average (max/mean "
                    f"{s.ratio:.2f}): costs {_ms(s.cost_ns)}, {share}{of_job}")
        advice = (f"give {who} no more work than the others, or find why it is slower "
                  f"there: proton-viewer --rank {s.slow[0]} shows its tree")
        finding = _job_finding(ctx, "imbalance", node, is_kernel, evidence, advice, s.cost_ns)
        if s.what == "cpu time" and len(x) and node not in is_kernel:
            ctx.walls[finding.kernel] = float(x.sum())
        out.append(finding)
    return None


def _late(ctx: _Context, late: Late, world: int) -> Finding:
    """The finding of a step whose collectives wait for one rank."""
    n, r = late.steps, late.rank
    a_step = " a step" if n > 1 else ""

    def num(ns: float) -> str:  # a step's share of the ns summed over the steps
        return f"{ns / n / 1e6:,.3f}"

    step = f"scope {ctx.name(late.step)}" if late.step.parents else "the run"
    where = f"scope {ctx.name(late.where)}" if late.where.parents else "the run"
    others = "the other rank spends" if world == 2 else f"the other {world - 1} ranks spend"
    evidence = (f"rank {r} arrives last at the collectives of {step}"
                f"{f' ({n} steps)' if n > 1 else ''}: {others} {num(late.others_ns)} ms{a_step} "
                f"in them, rank {r} {num(late.mine_ns)} ms (most in "
                f"{ctx.name(late.collective)}), waiting for it; ")
    of_step = f" of the step's {num(late.step_ns)} ms" if late.step_ns else ""
    if late.cause == "host":
        evidence += (f"rank {r} is slow on the host: it spends +{num(late.where_ns)} ms{a_step} "
                     f"over the others in {where} ({late.where_what})")
        if late.idle_ns is not None:
            evidence += f", and its GPU idles +{num(late.idle_ns)} ms{a_step} over theirs"
        evidence += f": costs {num(late.cost_ns)} ms{a_step}"
        if of_step:
            evidence += f", {late.cost_ns / late.step_ns:.0%}{of_step}"
        advice = (f"speed up or move off the step what rank {r}'s host does in {where} (a data "
                  "loader: more DataLoader workers, pin_memory, prefetching; work only it does: "
                  "logging, checkpoints): the collectives are not slow, they wait for it")
    else:
        over = (f"take +{num(late.where_ns)} ms{a_step} over the others'"
                if late.where_ns > 0 else "take no more than the others'")
        evidence += (f"rank {r} is slow on the GPU: its kernels in {where} {over} (theirs run "
                     "slower beside the collective that waits for it), and its GPU idles no "
                     f"more than theirs: costs {num(late.cost_ns)} to {num(late.waits_ns)} "
                     f"ms{a_step} (at least its kernels' excess, or the others' extra wait in "
                     f"one of its {late.calls:g} collectives{a_step}; at most all of it)")
        if of_step and late.waits_ns <= late.step_ns:  # (a host that ran ahead: no share)
            evidence += (f", {late.cost_ns / late.step_ns:.0%} to "
                         f"{late.waits_ns / late.step_ns:.0%}{of_step}")
        advice = (f"give rank {r} no more GPU work than the others (an even batch, even "
                  "sequence lengths), or find why its GPU is slower (clocks, another job on it): "
                  f"proton-viewer --rank {r} shows its tree")
    saves = late.cost_ns if late.cause == "host" else late.waits_ns
    # on the scope it spent the time in: what fixing it saves is that scope's to claim
    return _job_finding(ctx, "straggler", late.where, set(), evidence, advice, saves)


def _job_finding(ctx: _Context, rule: str, node, is_kernel: set, evidence: str, advice: str,
                 saves_ns: float) -> Finding:
    """A job rule's finding on a frame: a kernel, a scope, or ROOT (the whole run)."""
    gpu = ctx.value(node, f"{TIME} (inc)") or 0.0
    finding = ctx.finding(rule, node, gpu, evidence, advice, saves=0.0)
    finding.saves_ns = saves_ns
    if not node.parents:  # the whole run
        finding.path = "ROOT"
    elif node not in is_kernel:
        finding.kernel = f"scope {finding.kernel}"
    return finding

RULES = [
    (_launch_shape, {
        "too few programs": "a grid of fewer blocks than the GPU has SMs",
        "tail effect": f"over one wave of blocks, the last leaving the GPU over {TAIL_IDLE:.0%} "
                       "idle on average",
        "low occupancy": f"theoretical occupancy under {LOW_OCCUPANCY:.0%}"}),
    (_tensor_cores, {
        "no tensor cores": "a tl.dot with no HMMA, HGMMA or IMMA in its machine code",
        "no wgmma": "a tl.dot on Hopper with no HGMMA"}),
    (_roofline, {
        "far from the roofline": f"under {FAR_FROM_ROOF:.0%} of the roof of its precision at "
                                 "its intensity"}),
    (_bound, {
        "memory-bound": f"measured DRAM bandwidth {BOUND:.0%}+ of peak, above the busiest SM "
                        "pipe (mode=\"counters\")",
        "compute-bound": f"the tensor pipe or instruction issue {BOUND:.0%}+ active, above "
                         "the DRAM bandwidth fraction",
        "latency-bound": f"DRAM bandwidth and the busiest SM pipe both under {BOUND:.0%}"}),
    (_launch_bound, {
        "launch-bound": f"a scope of {LAUNCH_COUNT}+ kernels averaging under "
                        f"{SHORT_KERNEL_US:g} us, the GPU busy under {BUSY:.0%} of its time"}),
    (_stalls, {
        "stalled line": f"a line with {HOT_LINE:.0%}+ of a kernel's samples, {STALLED:.0%}+ "
                        "of them stalled"}),
    (_stragglers, {
        "imbalance": f"a kernel's GPU time or a CPU-timed scope's over {IMBALANCE:g}x its mean "
                     f"over the ranks, costing {MIN_COST:.0%}+ of the job's time",
        "straggler": f"a step whose collectives (NCCL) the other ranks spend over {IMBALANCE:g}x "
                     f"the time of one rank in, it standing {OUTLIER:g}x their spread apart: "
                     "the rank they wait for, slow on its host or its GPU"}),
    *STEP_RULES,
]
"""Each rule, and the findings it can make with their thresholds in words. Only kernels and
scopes with MIN_SHARE or more of the profile's GPU time are judged."""


def as_dicts(diagnosis: Diagnosis) -> dict:
    """The diagnosis for scripts (--output json) and the report page: the findings in order,
    and the groups (by kernel or scope) as indices into them."""
    found = diagnosis.findings
    index = {id(f): i for i, f in enumerate(found)}
    names = [x.name for x in fields(Finding) if x.name != "frame"]
    return {"gpu_time_ns": diagnosis.gpu_ns,
            "findings": [{name: getattr(f, name) for name in names} for f in found],
            "groups": [{"kernel": g.kernel, "time_ns": g.time_ns, "share": g.share,
                       "wall_ns": g.wall_ns, "saves_ns": g.saves_ns,
                        "inside_ns": g.inside_ns, "info": g.info,
                        "memory_share": g.memory_share, "headline": g.headline,
                        "findings": [index[id(f)] for f in g.findings]}
                       for g in diagnosis.groups],
            "notes": diagnosis.notes, "rules_run": list(diagnosis.ran),
            "steps": [{"scope": r.name, "rank": r.rank, "steps": r.steps, "wall_ns": r.wall_ns,
                       "parts_ns": r.parts} for r in diagnosis.step_rows]}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


GPU_TIME = ("GPU time: what ran on the GPU (kernels, copies, sets), a scope's what ran under "
            "it; {total} in all, the whole each % of GPU time is of")
SAVINGS = ("could save: of the run's wall time, at most, less what findings inside the same "
           "frame claim")
"""The figures' definitions, as the line after the findings gives them (the module
docstring)."""


def _percent(share: float) -> str:
    """A share (0 to 1) as --diagnose writes it: whole percents, `<1%` for a part under one."""
    return "<1%" if 0 < share < 0.005 else f"{share:.0%}"


def render(diagnosis: Diagnosis) -> str:
    """The findings for a terminal: one numbered block per kernel or scope (most to save
    first), a line per finding with what to try, then the rules not run."""
    lines = list(diagnosis.steps)
    if not diagnosis.findings:
        lines.append(f"no findings: nothing crosses a threshold of the {len(diagnosis.ran)} "
                     f"rule{'s' * (len(diagnosis.ran) != 1)} that ran (on kernels and scopes "
                     f"with {MIN_SHARE:.0%}+ of the GPU time)"
                     + (":" if diagnosis.ran else ""))
        lines += [f"  {rule}: {threshold}" for rule, threshold in diagnosis.ran.items()]
    for i, g in enumerate(diagnosis.groups, 1):
        gain = (f"; fixing it could save up to {_ms(g.saves_ns)}" if g.saves_ns
                else "; worth knowing")
        if g.saves_ns and g.inside_ns:
            gain += f" besides the {_ms(g.inside_ns)} the findings inside it claim"
        wall = f"{_ms(g.wall_ns)} of wall time, " if g.wall_ns else ""
        if g.headline:  # a memory finding ranks it: what it costs in memory
            lines.append(f"{i}. {g.kernel}: {g.headline}")
        else:
            lines.append(f"{i}. {g.kernel}: {wall}{_ms(g.time_ns)} of GPU time "
                         f"({_percent(g.share)}){gain}")
        one = len({f.path for f in g.findings}) == 1
        if one:
            lines.append(f"   at {g.findings[0].path}")
        for f in g.findings:
            tag = f"info: {f.rule}" if f.info else f.rule
            at = "" if one else f" (at {f.path})"
            lines.append(f"   [{tag}] {f.evidence}{at}")
            lines.append(f"     try: {f.advice}")
    if diagnosis.groups:
        lines.append(f"{GPU_TIME.format(total=_ms(diagnosis.gpu_ns))}. {SAVINGS[0].upper()}"
                     f"{SAVINGS[1:]}.")
    for note in diagnosis.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"
