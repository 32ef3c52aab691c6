"""Turn metric specs such as `time/ms` or `tflop16/s` into columns of numbers per node.

Derive, then render: everything here returns data (pandas Series keyed by hatchet node).
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..rank_merge import FACTS, is_fact  # noqa: F401 (FACTS: re-exported)
from ..format import COMM_KERNEL as _COMM_KERNEL
from ..format import GPU_IDLE_EXCLUDED, STEP_PARTS, STEP_WALL
from ..format import (BYTES, COPY_FRAME, COUNT, COUNTER_NS, COUNTERS_SHARED_NS,
                      COUNTERS_UNRESOLVED_NS, CPU_COUNT, CPU_TIME, CUDA, DEVICE_ID, DEVICE_TYPE,
                      DOT_NO_TENSOR_CORES, DOT_NO_WGMMA, DRAM_BYTES, FLOPS, GPU_IDLE,
                      ISSUE_ACTIVE_NS, L1_THROUGHPUT_NS, L2_BYTES, L2_THROUGHPUT_NS,
                      LAUNCH_CONFIGS, LAUNCH_METRICS, PEAK_SLACK, SASS_PREFIX, SCOPE_WALL,
                      SM_ACTIVE_NS, SYNC_TIME, TENSOR_ACTIVE_NS, TENSOR_FLOPS, TIME, TL_DOT)
from . import bounds
from .errors import ViewerError, did_you_mean
from .reader import Profile, subtree_sums
from .specs import bandwidth, compute_roof, l2_bandwidth, peak, peak_known, unknown_arch

TIME_UNITS = {"s": 1e-9, "ms": 1e-6, "us": 1e-3, "ns": 1.0}
RATE_PREFIX = {"": 1.0, "g": 1e-9, "t": 1e-12}
RATE = re.compile(r"^(?P<cpu>cpu_)?(?P<prefix>[gt]?)(?P<what>flop(?P<width>8|16|32|64)?|byte)/s$")
"""flops or bytes over kernel time (`tflop16/s`), or with `cpu_` over the scopes' CPU time
(`cpu_gflop/s`: what a run without a GPU can say of a scope's declared work)."""
_NS_METRICS = {"sync_time": SYNC_TIME, "gpu_idle": GPU_IDLE, "scope_wall": SCOPE_WALL,
               **{_m.split(" (")[0]: _m for _m in (GPU_IDLE_EXCLUDED, STEP_WALL, *STEP_PARTS)}}
_TIME = re.compile(r"^(?P<what>avg_time|time|cpu_time|avg_cpu_time|comm_time|"
                   + "|".join(_NS_METRICS) + r")/(?P<unit>s|ms|us|ns)$")
"""Times in ns that `NAME/<unit>` converts: waits (inclusive), a scope's idle and wall time, a
step's parts (their own values)."""
STEP_SHARES = {f"{m.split(' (')[0]}/%": m for m in STEP_PARTS}
"""`step_comm/%` and the like: a step part over its step's window (step_wall); the parts of a
step sum to 100%."""
IDLE_SHARE = "gpu_idle/%"
"""GPU_IDLE over SCOPE_WALL of each scope: the share of its wall time its GPU ran nothing."""
COUNTER_RATE = re.compile(r"^(?P<what>dram|l2|tensor)_(?P<prefix>[gt]?)"
                          r"(?P<unit>byte|flop)/s$")
"""Measured rates (mode="counters"): dram_gbyte/s, l2_gbyte/s, tensor_tflop/s, each over the
kernel time the PM samples covered (counter_ns)."""
_COUNTER_RATES = {"dram": (DRAM_BYTES, "byte"), "l2": (L2_BYTES, "byte"),
                  "tensor": (TENSOR_FLOPS, "flop")}
ACTIVE = {"tensor_active": TENSOR_ACTIVE_NS, "issue_active": ISSUE_ACTIVE_NS,
          "sm_active": SM_ACTIVE_NS, "l2_throughput": L2_THROUGHPUT_NS,
          "l1_throughput": L1_THROUGHPUT_NS}
"""Measured activity (%): the time-weighted active fraction over counter_ns of the tensor pipe,
of instruction issue, of the SMs (a warp resident); the L2's and the L1 data pipe's throughput
as a share of their own peaks (the GPU's measure of them)."""
LEVELS = ("DRAM", "L2", "L1")
"""The memory levels a measured kernel is judged against, each by its own roof (Nsight
Compute's hierarchical roofline): DRAM bytes over the bandwidth, the L2's throughput (the GPU's
own share of its peak, else L2 bytes over specs.l2_bandwidth), the L1 data pipe's."""
SM_THROUGHPUT = "sm_throughput"
"""The busier of tensor_active and issue_active (%): the busiest SM pipe we sample. Nsight
Compute's sm__throughput is the max over some 19 SM sub-unit counters, too many for the one
pass PM sampling runs in; issue covers every instruction, the tensor pipe a matmul's work."""
DRAM_THROUGHPUT = "dram_throughput"
"""Measured DRAM bytes/s over the GPU's peak bandwidth (%)."""
INTENSITY = "tensor_flop/byte"
"""Measured arithmetic intensity: tensor_flops over dram_bytes."""
DRAM_FLOOR = 1e8
"""Bytes/s: a measured kernel with less DRAM traffic than this (an L2-resident kernel, or a
short one whose fitted share came to zero) is drawn as if it moved this much, so that every
kernel with counters has a place on the roofline (the note counts them)."""
NOMINAL_INTENSITY = 1 / 8
"""FLOP per byte at which the roofline places a kernel with counters but no tensor work
(elementwise ops, copies, reductions: their measured FLOPs are 0, so they have no intensity of
their own). It lies left of every GPU's ridge (tens to hundreds of FLOP per byte), where the
roof is bandwidth x NOMINAL_INTENSITY; drawn at NOMINAL_INTENSITY x its measured DRAM bytes/s,
the kernel sits under the memory roof by exactly its measured DRAM bandwidth fraction."""
MEASURED_PRECISION = "16-bit tensor"
"""The roof measured FLOPs are judged by: tensor_flops counts tensor-pipe work at the 16-bit
dense rate (format.TENSOR_FLOPS)."""
COMM_KERNEL = _COMM_KERNEL
"""Communication kernels (format.COMM_KERNEL): NCCL's, by their name as CUPTI gives it."""


@dataclass(slots=True)
class Column:
    """One derived metric: its header and its value per node (NaN where it has no meaning)."""

    header: str
    values: pd.Series
    additive: bool = False
    """A quantity that adds up over ranks (time, count, flops); not a ratio (rates, averages,
    shares, util)."""
    notes: list[str] = field(default_factory=list)
    """Why cells are blank that the file has numbers for (bounds.py: no share over its whole,
    no rate over its GPU's peak)."""


def available(profile: Profile) -> list[str]:
    """Derived metric specs this profile can compute: exactly those `derive` accepts, besides
    the file's own metric names (`count`, `time (ns)`, ...). Worked out once a view
    (Profile.derived; derive asks for each share it makes): a new list each call."""
    if (known := profile.derived.get("available")) is None:
        known = profile.derived["available"] = _available(profile)
    return list(known)


def _available(profile: Profile) -> list[str]:
    have = {m.lower() for m in profile.inclusive + profile.exclusive}
    out = []
    if TIME in have:
        out += [f"time/{u}" for u in TIME_UNITS]
        if COUNT in have:
            out += [f"avg_time/{u}" for u in TIME_UNITS]
        out += _rates(have)
        out += [f"comm_time/{u}" for u in TIME_UNITS] + ["comm/%"]
    if _has_util(profile, have):
        out.append("util")
    out += _counter_specs(profile, have)
    for what, metric in _NS_METRICS.items():
        if metric in have:
            out += [f"{what}/{u}" for u in TIME_UNITS]
    if GPU_IDLE in have and SCOPE_WALL in have:
        out.append(IDLE_SHARE)
    if STEP_WALL in have:
        out += [share for share, metric in STEP_SHARES.items() if metric in have]
    if CPU_TIME in have:
        out += [f"cpu_time/{u}" for u in TIME_UNITS]
        if _cpu_counts(have):
            out += [f"avg_cpu_time/{u}" for u in TIME_UNITS]
        out += [f"cpu_{rate}" for rate in _rates(have)]
    out += [x for x in dict.fromkeys(f"{_short(m)}/%" for m in _shares(profile)) if x not in out]
    return out


def _rates(have: set[str]) -> list[str]:
    """The rates (RATE, without `cpu_`) of the flops and bytes metrics in `have`."""
    out = []
    for metric in sorted(have):
        m = FLOPS.fullmatch(metric)
        if m:
            out += [f"{p}flop{m.group(1) or ''}/s" for p in RATE_PREFIX]
    if BYTES in have:
        out += [f"{p}byte/s" for p in RATE_PREFIX]
    return out


def cpu_fallback(profile: Profile, specs: list[str]) -> tuple[list[str], list[str]]:
    """cpu_specs of the profile's metrics."""
    return cpu_specs(profile.inclusive + profile.exclusive, specs)


def cpu_specs(metrics: list[str], specs: list[str]) -> tuple[list[str], list[str]]:
    """In a profile without kernel time but with CPU time (a run without a GPU; `metrics`: the
    file's metric names), `time/<unit>`, `avg_time/<unit>`, `time/%`, `count`, `count/%` and
    a rate such as `gflop/s` mean the scopes' `cpu_time/<unit>`, `avg_cpu_time/<unit>`,
    `cpu_time/%`, `cpu_count`, `cpu_count/%` and `cpu_gflop/s`, so the README's examples work
    on a CPU run. (the specs; a note saying what changed, or none)."""
    have = {m.lower() for m in metrics}
    if TIME in have or CPU_TIME not in have:
        return specs, []
    counts = COUNT not in have and CPU_COUNT in have  # a file's own count stays its own
    out, was, now = [], [], []
    for spec in specs:
        s = spec.strip().lower()
        m = _TIME.match(s)
        cpu = None
        if s == "time/%":
            cpu = "cpu_time/%"
        elif m and (m.group("what") == "time" or m.group("what") == "avg_time"
                    and _cpu_counts(have)):
            cpu = f"{'avg_' if m.group('what') == 'avg_time' else ''}cpu_time/{m.group('unit')}"
        elif counts and s in (COUNT, f"{COUNT}/%"):
            cpu = CPU_COUNT + s[len(COUNT):]
        elif s in _rates(have):
            cpu = f"cpu_{s}"
        if cpu:
            was.append(spec.strip())
            now.append(cpu)
            spec = cpu
        out.append(spec)
    if not was:
        return out, []
    return out, [f"no kernel ran in this profile (a run without a GPU): {', '.join(was)} "
                 f"{'shows' if len(was) == 1 else 'show'} the scopes' {', '.join(now)}"]


def expand_vectors(profile: Profile, specs: list[str]) -> list[str]:
    """`-m lens` for a vector metric means each of its elements: lens[0], lens[1], ..."""
    out = []
    for spec in specs:
        name = spec.strip().lower()
        elements = [m for m in profile.exclusive
                    if m.lower().startswith(name + "[") and m.endswith("]")]
        out += elements if elements and name not in (m.lower() for m in profile.exclusive) \
            else [spec]
    return out


def _cpu_counts(have: set[str]) -> str | None:
    """What avg_cpu_time divides by: the scopes' own entries (cpu_count), or in a file
    written without them (Triton's, ours before) the kernel launches under them, as Triton's
    viewer does; None when there is neither."""
    return CPU_COUNT if CPU_COUNT in have else COUNT if COUNT in have else None


def _has_util(profile: Profile, have: set[str]) -> bool:
    """util needs kernel time, the GPUs' figures, and bytes or flops of a known width (then
    on GPUs whose peak is known)."""
    gpus = _gpus(profile, have)
    if not gpus:
        return False
    widths = any((m := FLOPS.fullmatch(metric)) and m.group(1) for metric in have)
    known = all(peak_known(str(gpu["arch"])) for gpu in gpus.values())
    if COUNTER_NS in have and DRAM_BYTES in have:  # measured: at least DRAM bytes over bandwidth
        return known or TENSOR_FLOPS not in have
    return (BYTES in have or widths) and (known or not widths) and _kernel_work(profile)


def _kernel_work(profile: Profile) -> bool:
    """Whether a node other than a copy or set has bytes or flops of its own: a copy's bytes
    (which every profile that records copies has) are no kernel's work."""
    df = profile.gf.dataframe
    work = [c for c in df.columns if c == BYTES or FLOPS.fullmatch(str(c))]
    own = df[work].apply(pd.to_numeric, errors="coerce").fillna(0).abs().sum(axis=1) > 0
    return bool((own & ~_copy_frames(df)).any())


def _counter_specs(profile: Profile, have: set[str]) -> list[str]:
    """The measured metrics (mode="counters") this profile can derive."""
    if COUNTER_NS not in have:
        return []
    out = []
    for what, (metric, unit) in _COUNTER_RATES.items():
        if metric in have:
            out += [f"{what}_{p}{unit}/s" for p in RATE_PREFIX]
    if TENSOR_FLOPS in have and DRAM_BYTES in have:
        out.append(INTENSITY)
    out += [name for name, metric in ACTIVE.items() if metric in have]
    if TENSOR_ACTIVE_NS in have or ISSUE_ACTIVE_NS in have:
        out.append(SM_THROUGHPUT)
    if DRAM_BYTES in have and _gpus(profile, have):
        out.append(DRAM_THROUGHPUT)
    return out


_GPU_KEYS = {"arch", "num_sms", "clock_rate", "bus_width", "memory_clock_rate"}


def _gpus(profile: Profile, have: set[str]) -> dict | None:
    """The device table's GPUs, when the profile has kernel time and each GPU its figures."""
    gpus = profile.devices.get(CUDA) if isinstance(profile.devices, dict) else None
    if TIME not in have or not isinstance(gpus, dict) or not gpus or not all(
            isinstance(gpu, dict) and _GPU_KEYS <= gpu.keys() for gpu in gpus.values()):
        return None
    return gpus


def _check_peaks(profile: Profile) -> None:
    """Raise the error naming the archs util knows when an unknown GPU is what keeps util
    from a profile."""
    have = {m.lower() for m in profile.inclusive + profile.exclusive}
    for gpu in (_gpus(profile, have) or {}).values():
        if not peak_known(str(gpu["arch"])):
            raise unknown_arch(str(gpu["arch"]))


def linear(profile: Profile, spec: str) -> tuple[str, float] | None:
    """(the file's metric, factor) when `spec` is that metric times a constant (time/ms,
    count, a metric's own name), whose spread over ranks the job's statistics give; else
    None."""
    s = spec.strip().lower()
    m = _TIME.match(s)
    if m:
        what = {"time": TIME, "cpu_time": CPU_TIME}.get(m.group("what"))
        try:
            metric = _match(profile, what, spec) if what else None
        except ViewerError:
            return None
        # cpu_time: rank_merge keeps timed_or_inside's values
        return None if metric is None else (metric, TIME_UNITS[m.group("unit")])
    if s in ("util", "comm/%") or s.endswith("/%") or RATE.match(s):
        return None
    try:
        base = _match(profile, spec, spec)
    except ViewerError:
        return None
    # an exclusive cpu_time's statistics are of its filled-in values, not of the own ones
    return None if is_fact(base) or (base == CPU_TIME and base not in profile.inclusive) \
        else (base, 1.0)


def _shares(profile: Profile) -> list[str]:
    """The metrics `NAME/%` applies to: inclusive ones, and exclusive numbers (cpu_time, user
    metrics) but not a kernel's facts (a share of all registers per thread means nothing)."""
    return profile.inclusive + [m for m in profile.exclusive if not is_fact(m)]


def _short(metric: str) -> str:
    """A metric's name without its unit: `time (ns)` -> `time`."""
    return metric.split("(")[0].strip().lower() or metric


def derive(profile: Profile, spec: str) -> Column:
    """Compute one metric spec: one that `available` lists, or a metric's own name (any case,
    with or without its unit); raise ViewerError naming the choices for any other. ROOT's
    cpu_time on a frame not timed itself (ROOT, a python frame) is the time of the outermost
    timed scopes inside it (`root_total` for ROOT).

    Usage:
        derive(load("run.hatchet"), "time/ms").values  # a Series by hatchet node
    """
    s = spec.strip().lower()
    if s == "comm/%":
        comm = _comm_time(profile, spec)
        values, notes = bounds.share("comm/%", comm, _column(profile, TIME, spec))
        return Column("comm/%", values, notes=notes)
    if s == IDLE_SHARE:
        if IDLE_SHARE not in available(profile):
            raise _unknown(profile, spec)
        values, notes = bounds.share(IDLE_SHARE, _column(profile, GPU_IDLE, spec),
                                     _column(profile, SCOPE_WALL, spec))
        return Column(IDLE_SHARE, values, notes=notes)
    if s in STEP_SHARES:
        if s not in available(profile):
            raise _unknown(profile, spec)
        values, notes = bounds.share(s, _column(profile, STEP_SHARES[s], spec),
                                     _column(profile, STEP_WALL, spec))
        return Column(s, values, notes=notes)
    if s == "util":
        if "util" not in available(profile):
            _check_peaks(profile)
            raise _unknown(profile, spec)
        values, notes = _util(profile, spec)
        return Column("util", values, notes=notes)
    m = _TIME.match(s)
    if m:
        what, unit = m.group("what"), m.group("unit")
        if what in _NS_METRICS:
            metric = _match(profile, _NS_METRICS[what], spec)
            return Column(f"{what} ({unit})", _column(profile, metric, spec) * TIME_UNITS[unit],
                          additive=True)
        if what == "comm_time":
            return Column(f"comm_time ({unit})", _comm_time(profile, spec) * TIME_UNITS[unit],
                          additive=True)
        if what in ("time", "avg_time"):
            values = _column(profile, TIME, spec) * TIME_UNITS[unit]
            if what == "avg_time":
                values = values / _column(profile, COUNT, spec).replace(0, float("nan"))
        else:
            values = _column(profile, CPU_TIME, spec)
            if what == "avg_cpu_time":
                counts = _cpu_counts({m.lower() for m in profile.inclusive + profile.exclusive})
                if counts is None:
                    raise _unknown(profile, spec)
                values = values / _column(profile, counts, spec).replace(0, float("nan"))
            else:
                values = timed_or_inside(profile.gf.graph, values)
            values = values * TIME_UNITS[unit]
        return Column(f"{what} ({unit})", values, additive=not what.startswith("avg"))
    if s in _counter_specs(profile, {m.lower() for m in profile.inclusive + profile.exclusive}):
        return _counter_column(profile, s)
    m = RATE.match(s)
    if m:
        metric = BYTES if m.group("what") == "byte" else f"flops{m.group('width') or ''}"
        if m.group("cpu"):  # over host time: no GPU peak bounds it
            seconds = timed_or_inside(profile.gf.graph, _column(profile, CPU_TIME, spec)) * 1e-9
            values = _column(profile, metric, spec) / seconds.replace(0, float("nan"))
            return Column(s, values * RATE_PREFIX[m.group("prefix")])
        seconds = _column(profile, TIME, spec) * 1e-9
        values = _column(profile, metric, spec) / seconds.replace(0, float("nan"))
        values, notes = bounds.under_peak(s, values, bounds.rate_peaks(
            profile, m.group("what")[:4], m.group("width")))
        return Column(s, values * RATE_PREFIX[m.group("prefix")], notes=notes)
    if s.endswith("/%"):
        base = _match(profile, spec.strip()[:-2], spec)
        if base not in _shares(profile):
            raise _unknown(profile, spec)
        values = _column(profile, base, spec)
        root = profile.gf.graph.roots[0]
        if base == CPU_TIME:
            values = timed_or_inside(profile.gf.graph, values)
        whole = values[root] if base in profile.inclusive or base == CPU_TIME else values.sum()
        values, notes = bounds.share(f"{_short(base)}/%", values, whole)
        return Column(f"{_short(base)}/%", values, notes=notes)
    base = _match(profile, spec, spec)
    return Column(base, _column(profile, base, spec), additive=not is_fact(base))


def _counter_column(profile: Profile, spec: str) -> Column:
    """A measured metric (one _counter_specs lists) per node, from the inclusive sums: a
    scope's rate is its kernels' bytes (or FLOPs) over their counter time. Blank where no
    sample covered a kernel."""
    seconds = _column(profile, COUNTER_NS, spec).where(lambda v: v > 0) * 1e-9
    m = COUNTER_RATE.match(spec)
    if m:
        metric = _COUNTER_RATES[m.group("what")][0]
        rate = _column(profile, metric, spec) / seconds
        if metric == L2_BYTES and L2_THROUGHPUT_NS in profile.inclusive:  # the GPU's own share
            rate = at_peak(rate, _column(profile, L2_THROUGHPUT_NS, spec) / (seconds * 1e9))
        else:
            top = {DRAM_BYTES: _bandwidths, TENSOR_FLOPS: _tensor_peaks,
                   L2_BYTES: _l2_roofs}[metric](profile)
            rate = at_peak(rate, rate / top.reindex(rate.index))
        return Column(spec, rate * RATE_PREFIX[m.group("prefix")])
    if spec == INTENSITY:
        dram = _column(profile, DRAM_BYTES, spec)
        return Column(spec, _column(profile, TENSOR_FLOPS, spec) / dram.where(dram > 0))
    if spec == DRAM_THROUGHPUT:
        rate = _column(profile, DRAM_BYTES, spec) / seconds
        share = rate / _bandwidths(profile).reindex(rate.index)
        return Column(f"{spec} (%)", at_peak(share, share) * 100)
    if spec == SM_THROUGHPUT:
        have = {m.lower() for m in profile.inclusive + profile.exclusive}
        parts = [_column(profile, metric, spec) for metric in (TENSOR_ACTIVE_NS, ISSUE_ACTIVE_NS)
                 if metric in have]
        busiest = pd.concat(parts, axis=1).max(axis=1, skipna=True) / (seconds * 1e9)
        return Column(f"{spec} (%)", at_peak(busiest, busiest) * 100)
    share = _column(profile, ACTIVE[spec], spec) / (seconds * 1e9)
    return Column(f"{spec} (%)", at_peak(share, share) * 100)


def at_peak(values: pd.Series, share: pd.Series) -> pd.Series:
    """The rule for a measured rate past the GPU's peak (`share`: the rate over its peak): up
    to format.PEAK_SLACK over, it reads as the peak (at the peak within what the samples can
    tell); beyond, it is left out (blank): the samples did not measure that node (its kernels
    shared their samples with work they could not be told from). Never a rate past the peak."""
    share = share.reindex(values.index)
    out = values.where(~(share > 1 + PEAK_SLACK))
    return out.where(~(share > 1), out / share)


def _l2_roofs(profile: Profile) -> pd.Series:
    """The L2 roof per node (specs.l2_bandwidth), as _bandwidths."""
    return _per_gpu(profile, l2_bandwidth)


def _tensor_peaks(profile: Profile) -> pd.Series:
    """The measured tensor FLOP/s roof per node (MEASURED_PRECISION), as _bandwidths."""
    return _per_gpu(profile, lambda gpu: peak(gpu, MEASURED_PRECISION))


def _bandwidths(profile: Profile) -> pd.Series:
    """Peak DRAM bytes/s per node: a kernel's GPU's; a scope's when every GPU of the device
    table has the same (NaN otherwise: its kernels may have run on different GPUs)."""
    return _per_gpu(profile, bandwidth)


def _per_gpu(profile: Profile, figure) -> pd.Series:
    """`figure(gpu)` per node: a kernel's GPU's; a scope's when every GPU of the device table
    has the same (NaN otherwise)."""
    df = profile.gf.dataframe
    gpus = profile.devices.get(CUDA) if isinstance(profile.devices, dict) else None
    gpus = gpus if isinstance(gpus, dict) else {}
    peaks = {dev: figure(gpu) if isinstance(gpu, dict) else None for dev, gpu in gpus.items()}
    same = set(peaks.values())
    common = next(iter(same)) if len(same) == 1 else None
    devices = df[DEVICE_ID] if DEVICE_ID in df else pd.Series(None, index=df.index, dtype=object)
    out = {node: peaks.get(str(dev)) if pd.notna(dev) else common
           for node, dev in devices.items()}
    return pd.Series(out, dtype=float).reindex(df.index)


def kernel_mask(profile: Profile, copies: bool = False) -> dict:
    """Node -> whether it is a kernel: kernel time or a device of its own (ROOT, which carries
    a 0 for each inclusive metric, is not); a copy or set (format.COPY_FRAME) only with
    `copies` (what ran on the GPU): no rule that judges kernels applies to one."""
    df = profile.gf.dataframe
    if TIME not in df:
        return {}
    own = pd.to_numeric(df[TIME], errors="coerce").notna()
    if DEVICE_ID in df:
        own |= df[DEVICE_ID].notna()
    if not copies:
        own &= ~_copy_frames(df)
    for root in profile.gf.graph.roots:
        own[root] = False
    return own.to_dict()


def _copy_frames(df: pd.DataFrame) -> pd.Series:
    """Which nodes are copies or sets (format.COPY_FRAME), by name."""
    return df["name"].astype(str).str.match(COPY_FRAME.pattern)


def _comm_kernels(profile: Profile) -> pd.Series:
    """Which nodes are communication kernels: COMM_KERNEL names with kernel time of their own
    (not a device id: ranks merged on one graph may disagree on it)."""
    df = profile.gf.dataframe
    own = pd.to_numeric(df[TIME], errors="coerce").notna()
    return own & df["name"].astype(str).str.match(COMM_KERNEL)


def _comm_time(profile: Profile, spec: str) -> pd.Series:
    """GPU ns in communication kernels under each node (0 under a node with kernel time but
    none of them)."""
    df = profile.gf.dataframe
    if TIME not in df:
        raise _unknown(profile, spec)  # no kernels: nothing to share out
    if (sums := profile.derived.get("comm_time")) is None:  # once a view (comm/%, ...)
        comm = _comm_kernels(profile)
        own = pd.to_numeric(df[TIME], errors="coerce").where(comm, 0.0)
        from .graph import post_order

        order = post_order(profile.gf.graph)
        sums = profile.derived["comm_time"] = pd.Series(
            subtree_sums(order, own.to_dict())).reindex(df.index)
    return sums


def root_total(profile: Profile, values: pd.Series) -> float:
    """ROOT's value of an exclusive time metric (cpu_time): the sum over the timed nodes that
    have no timed ancestor. A scope's time already covers the scopes inside it, so nested
    values are never added twice. NaN when no node is timed."""
    return float(timed_or_inside(profile.gf.graph, values)[profile.gf.graph.roots[0]])


def timed_or_inside(graph, values: pd.Series) -> pd.Series:
    """`values` of a host time metric (cpu_time) with each untimed frame's blank (ROOT, the
    python frames of `-c python`, a plain scope) filled by the sum over the timed frames
    inside it that have no timed frame between: a timed scope covers the ones it holds, so
    nothing is counted twice. Blank stays blank where nothing inside is timed."""
    from .graph import post_order

    own = values.to_dict()
    filled: dict = {}
    for node in post_order(graph):
        value = own.get(node)
        if value is None or value != value:
            inside = [filled[c] for c in node.children if filled.get(c, float("nan")) == filled.get(c)]
            value = float(sum(inside)) if inside else float("nan")
        filled[node] = value
    return pd.Series(filled, dtype=float).reindex(values.index)


DECLARED, MEASURED, NO_TENSOR_WORK = "declared", "measured", "no tensor work"
"""Where a kernel's roofline point comes from: the flops and bytes its launch_metadata
declared; its hardware counters (tensor_flops, dram_bytes); its counters when it did no
tensor work (placed at NOMINAL_INTENSITY)."""


@dataclass(slots=True)
class Counters:
    """A kernel node's hardware counters (mode="counters"), over the GPU time PM samples
    covered; activities as fractions (None where the file lacks the counter). Every rate is at
    most the GPU's peak (at_peak's rule: a node measured past it is not in kernel_counters)."""

    seconds: float
    """The kernel time the samples covered (counter_ns; its GPU time where that is missing)."""
    dram_bytes: float
    l2_bytes: float
    tensor_flops: float
    tensor_active: float | None
    issue_active: float | None
    sm_active: float | None
    shared: float
    """Of `seconds`, the share another kernel ran at once (its counts were split by time)."""
    bandwidth: float | None
    """Its GPU's peak DRAM bytes/s."""
    l2_throughput: float | None = None
    """The L2's throughput as a share of its peak, as the GPU measured it."""
    l1_throughput: float | None = None
    """The L1 data pipe's throughput as a share of its peak."""
    l2_roof: float | None = None
    """Its GPU's L2 bytes/s (specs.l2_bandwidth), where l2_throughput is missing."""

    @property
    def dram_fraction(self) -> float | None:
        """Measured DRAM bytes/s over the peak."""
        return self.dram_bytes / self.seconds / self.bandwidth if self.bandwidth else None

    @property
    def l2_fraction(self) -> float | None:
        """The L2's share of its peak: the GPU's own measure, else bytes over the L2 roof."""
        if self.l2_throughput is not None:
            return self.l2_throughput
        return self.l2_bytes / self.seconds / self.l2_roof if self.l2_roof else None

    @property
    def levels(self) -> dict[str, float]:
        """Each memory level's share of its own roof (LEVELS), where known."""
        found = zip(LEVELS, (self.dram_fraction, self.l2_fraction, self.l1_throughput))
        return {name: value for name, value in found if value is not None}

    @property
    def sm_throughput(self) -> float | None:
        """The busier of the tensor pipe and instruction issue (SM_THROUGHPUT)."""
        busy = [v for v in (self.tensor_active, self.issue_active) if v is not None]
        return max(busy) if busy else None


HOW_TO_MEASURE = ("measure them with a longer run (more steps: the fit separates kernels "
                  "that fall at different places in the samples), a smaller "
                  "mode='counters:interval=US' (250 by default, 10 at least), "
                  "mode='counters:scopes=NAME' (a scope's exact counts, by CUPTI's range "
                  "profiler) or Nsight Compute (ncu --kernel-name NAME)")
"""What a view says of kernels with counters the samples did not measure."""


def unmeasured_text(count: int, ns: float) -> str:
    """The one line every view gives kernels the samples did not measure."""
    return (f"{count:,} kernel{'s' * (count != 1)} ({ns / 1e6:,.3f} ms sampled) not measured "
            "by the counters: the samples they ran in hold other work too much to tell theirs "
            "apart, or read more than the GPU can do in their time; " + HOW_TO_MEASURE)


UNRESOLVED, PAST_PEAK = "unresolved", "past the peak"
"""Why a kernel with counters is not measured: its writer marked it (counters_unresolved_ns:
its samples could not tell its work from its neighbours'), or its file gives it a rate more
than PEAK_SLACK past the GPU's peak (files written before the writer checked)."""


def kernel_counters(profile: Profile) -> dict:
    """Node -> Counters, for kernel nodes that PM samples covered (counter_ns or dram_bytes
    above 0) and measured (see unmeasured)."""
    return _counters(profile)[0]


def unmeasured(profile: Profile) -> dict:
    """Kernel nodes (copies too) with counters the samples did not measure -> (why: UNRESOLVED
    or PAST_PEAK, their sampled ns)."""
    return _counters(profile)[1]


def _counters(profile: Profile) -> tuple[dict, dict]:
    df = profile.gf.dataframe
    if COUNTER_NS not in df and DRAM_BYTES not in df and COUNTERS_UNRESOLVED_NS not in df:
        return {}, {}
    gpus = profile.devices.get(CUDA) if isinstance(profile.devices, dict) else None
    gpus = gpus if isinstance(gpus, dict) else {}
    own = {c: _own(df, c) for c in (TIME, *_COUNTERS)}
    devices = df[DEVICE_ID] if DEVICE_ID in df else {}
    out, missed = {}, {}
    for node, yes in kernel_mask(profile, copies=True).items():
        if not yes:
            continue
        unresolved = _number(own[COUNTERS_UNRESOLVED_NS].get(node))
        if unresolved > 0:
            missed[node] = (UNRESOLVED, unresolved)
        ns = _number(own[COUNTER_NS].get(node))
        dram = _number(own[DRAM_BYTES].get(node))
        if ns <= 0 and dram <= 0:
            continue
        ns = ns if ns > 0 else _number(own[TIME].get(node))
        if ns <= 0:
            continue

        def active(metric: str) -> float | None:
            value = own[metric].get(node)
            return _number(value) / ns if metric in df and value == value else None

        gpu = gpus.get(str(devices.get(node))) if len(devices) else None
        gpu = gpu if isinstance(gpu, dict) else {}
        top = peak(gpu, MEASURED_PRECISION) if gpu else None
        c = Counters(ns * 1e-9, dram, _number(own[L2_BYTES].get(node)),
                     _number(own[TENSOR_FLOPS].get(node)), active(TENSOR_ACTIVE_NS),
                     active(ISSUE_ACTIVE_NS), active(SM_ACTIVE_NS),
                     _number(own[COUNTERS_SHARED_NS].get(node)) / ns,
                     bandwidth(gpu) if gpu else None, active(L2_THROUGHPUT_NS),
                     active(L1_THROUGHPUT_NS), l2_bandwidth(gpu) if gpu else None)
        shares = [c.tensor_active, c.issue_active, c.sm_active, c.l1_throughput,
                  c.dram_fraction, c.l2_fraction,
                  c.tensor_flops / c.seconds / top if top else None]
        if any(v is not None and v > 1 + PEAK_SLACK for v in shares):
            missed[node] = (PAST_PEAK, ns)
            continue
        out[node] = _at_peaks(c, top)
    return out, missed


def _at_peaks(c: Counters, top: float | None) -> Counters:
    """`c` with each rate up to PEAK_SLACK past its peak read as the peak (at_peak's rule)."""
    for name in ("tensor_active", "issue_active", "sm_active", "l1_throughput",
                 "l2_throughput"):
        value = getattr(c, name)
        if value is not None and value > 1:
            setattr(c, name, 1.0)
    if c.bandwidth:
        c.dram_bytes = min(c.dram_bytes, c.bandwidth * c.seconds)
    if c.l2_throughput is None and c.l2_roof:
        c.l2_bytes = min(c.l2_bytes, c.l2_roof * c.seconds)
    if top:
        c.tensor_flops = min(c.tensor_flops, top * c.seconds)
    return c


_COUNTERS = (COUNTER_NS, DRAM_BYTES, L2_BYTES, TENSOR_FLOPS, TENSOR_ACTIVE_NS, ISSUE_ACTIVE_NS,
             SM_ACTIVE_NS, COUNTERS_SHARED_NS, L2_THROUGHPUT_NS, L1_THROUGHPUT_NS,
             COUNTERS_UNRESOLVED_NS)


def _own_values(df: pd.DataFrame, column: str) -> np.ndarray:
    """A metric's own values in the table's row order, _number's (0.0 where missing, not
    finite or not a number; all 0.0 when the file lacks it)."""
    if column not in df:
        return np.zeros(len(df))
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    return np.where(np.isfinite(values), values, 0.0)


def _own(df: pd.DataFrame, column: str) -> dict:
    """A metric's own (exclusive) values by node, as floats ({} when the file lacks it)."""
    if column not in df:
        return {}
    return pd.to_numeric(df[column], errors="coerce").astype(float).to_dict()


@dataclass(slots=True)
class KernelRoof:
    """A kernel node against its GPU's roofs: measured (its hardware counters) where it has
    them, else what its launch_metadata declared."""

    flops: float
    """Its operations: measured tensor_flops; or over its flops<width> metrics, else its plain
    `flops`."""
    nbytes: float
    """Measured DRAM bytes, or its declared `bytes`."""
    seconds: float
    """What its rates are over: the time its counters cover, else its GPU time."""
    peak: float | None
    """Its compute roof, FLOP/s (specs.compute_roof); None for an unknown GPU or flops of no
    width."""
    bandwidth: float | None
    precisions: list[str]
    """The PRECISIONS names of its roofs (one per flops width it has)."""
    device: str
    source: str = DECLARED
    """DECLARED, MEASURED or NO_TENSOR_WORK: where its point comes from."""
    time: float = 0.0
    """Its GPU time (s), all of it (a measured kernel's `seconds` may cover part)."""
    levels: dict = field(default_factory=dict)
    """Measured: each memory level's share of its own roof (Counters.levels)."""
    l2_bytes: float = 0.0
    """Measured L2 bytes (the L2 level's point)."""
    l2_roof: float | None = None
    """The L2's bytes/s: the GPU's own (l2_bytes over its measured share), else specs'."""

    @property
    def intensity(self) -> float | None:
        """FLOP per byte."""
        return self.flops / self.nbytes if self.nbytes else None

    def fraction(self) -> float | None:
        """Achieved over the roof; None where unknown. Declared: FLOP/s over the roof at its
        intensity. Measured: the hierarchical roofline's, the nearest of its roofs: tensor
        FLOP/s over the peak, or a memory level's traffic over that level's own roof (DRAM,
        L2, L1), whichever is highest (at a level's roof, only that level's traffic matters)."""
        if self.source != DECLARED:
            near = list(self.levels.values())
            if self.flops and self.peak:
                near.append(self.flops / self.seconds / self.peak)
            return max(near) if near else None
        x = self.intensity
        if not self.peak or not self.bandwidth or not x:
            return None
        return self.flops / self.seconds / min(self.peak, self.bandwidth * x)

    def level(self) -> str:
        """Measured: the roof it is nearest ("compute" or a LEVELS name); declared: "DRAM"."""
        if self.source == DECLARED:
            return "DRAM"
        near = dict(self.levels)
        if self.flops and self.peak:
            near["compute"] = self.flops / self.seconds / self.peak
        return max(near, key=lambda k: near[k]) if near else "DRAM"

    def drawn(self) -> tuple[str, float, float | None]:
        """The memory level its roofline point is drawn against (DRAM, or L2 where that is the
        nearer of the two: L1's traffic has no bytes to draw), its bytes and its roof."""
        if self.source != DECLARED and self.l2_roof and \
                self.levels.get("L2", 0.0) > self.levels.get("DRAM", 0.0):
            return "L2", self.l2_bytes, self.l2_roof
        return "DRAM", self.nbytes, self.bandwidth

    @property
    def floored(self) -> bool:
        """Measured, with fewer bytes than DRAM_FLOOR over its time at the level it is drawn
        against: drawn at the floor."""
        return self.source != DECLARED and self.seconds > 0 and \
            self.drawn()[1] < DRAM_FLOOR * self.seconds

    def point(self) -> tuple[float, float] | None:
        """(FLOP per byte, FLOP/s) on the roofline, by the bytes of the level it is drawn
        against (drawn); a kernel with no tensor work at NOMINAL_INTENSITY; a measured one
        with (almost) no bytes as if it moved DRAM_FLOOR. None where it has no place (nothing
        measured or declared)."""
        nbytes = self.drawn()[1]
        if self.source != DECLARED:
            nbytes = max(nbytes, DRAM_FLOOR * self.seconds)
        if self.source == NO_TENSOR_WORK:
            y = NOMINAL_INTENSITY * nbytes / self.seconds if self.seconds else 0.0
            return (NOMINAL_INTENSITY, y) if y > 0 else None
        if not self.flops or not nbytes:
            return None
        return self.flops / nbytes, self.flops / self.seconds

    def util(self) -> float:
        """Achieved over peak: the larger of flops over the compute roof and bytes over the
        bandwidth, each as a share of its time (measured: the nearest roof, fraction)."""
        if self.source != DECLARED:
            return self.fraction() or 0.0
        busy = max(self.flops / self.peak if self.peak else 0.0,
                   self.nbytes / self.bandwidth if self.bandwidth else 0.0)
        return busy / self.seconds


def kernel_roofs(profile: Profile, nodes: list | None = None) -> dict:
    """Node -> KernelRoof, for kernel nodes with time on a GPU of the device table: measured
    (kernel_counters) where PM samples covered the kernel, declared otherwise. Derived once
    per profile (Profile.derived): the caller does not change it. `nodes`: only those of
    them (--diagnose judges a few kernels of many), from the profile's table where one was
    derived, else worked out for them alone."""
    roofs = profile.derived.get("kernel_roofs")
    if nodes is not None:
        if roofs is None:
            return _kernel_roofs(profile, table_rows(profile.gf.dataframe.index, nodes))
        return {node: roofs[node] for node in nodes if node in roofs}
    if roofs is None:
        roofs = profile.derived["kernel_roofs"] = _kernel_roofs(profile)
    return roofs


def table_rows(index: pd.Index, nodes: list) -> list[int]:
    """The table rows of `nodes` (those it has), in their order: a node's row is its hatchet
    id where the table is in id order (reader.load's), read without hashing the node."""
    ids = [getattr(node, "_hatchet_nid", -1) for node in nodes]
    if ids and at_id_rows(index, nodes, ids):
        return ids  # every node at its id's row: no look-up one by one
    at = index.values
    rows = []
    for node in nodes:
        row = getattr(node, "_hatchet_nid", -1)
        if not (0 <= row < len(at) and at[row] is node):
            row = index.get_indexer([node])[0]
        if row >= 0:
            rows.append(int(row))
    return rows


def at_id_rows(index: pd.Index, nodes: list, ids: list[int]) -> bool:
    """Whether each of `nodes` (a non-empty list) is at the table row its hatchet id (`ids`)
    names, as in reader.load's tables: then a column's cells are read by row."""
    at = index.values
    return 0 <= min(ids) and max(ids) < len(at) and all(map(operator.is_, at[ids], nodes))


def _kernel_roofs(profile: Profile, rows: list[int] | None = None) -> dict:
    """kernel_roofs of every kernel (in table order), or of those at table `rows`."""
    df = profile.gf.dataframe
    gpus = profile.devices.get(CUDA) if isinstance(profile.devices, dict) else None
    if TIME not in df or DEVICE_ID not in df or not isinstance(gpus, dict):
        return {}
    seconds = _own_values(df, TIME) * 1e-9
    widths = {int(m[1]): _own_values(df, str(c)) for c in df.columns
              if (m := FLOPS.fullmatch(str(c))) and m[1]}
    tensor = np.logical_or.reduce([_own_values(df, SASS_PREFIX + op) != 0
                                   for op in ("hmma", "hgmma")])
    wanted = (seconds > 0) & ~_copy_frames(df).to_numpy(dtype=bool)  # a copy: under no roof
    if rows is not None:
        wanted &= np.isin(np.arange(len(df)), rows)
    devices = df[DEVICE_ID].to_numpy(dtype=object)
    on_gpu = np.zeros(len(df), dtype=bool)
    roof_at: dict[int, tuple | None] = {}  # row -> compute_roof's, a GPU's rows at once
    for dev in pd.unique(devices[wanted]):
        if not isinstance(gpus.get(str(dev)), dict):
            continue
        at = np.flatnonzero(wanted & (devices == dev))
        on_gpu[at] = True
        found = compute_roof(gpus[str(dev)], {w: v[at] for w, v in widths.items()},
                             seconds[at], tensor[at])
        roof_at.update(zip(at.tolist(), found))
    counters = kernel_counters(profile)
    any_flops = np.logical_or.reduce([v != 0 for v in widths.values()]) if widths else \
        np.zeros(len(df), dtype=bool)
    done = np.where(any_flops, sum(widths.values()), _own_values(df, "flops")).tolist()  # plain
    nbytes, secs, index = _own_values(df, BYTES).tolist(), seconds.tolist(), df.index.values
    per_gpu: dict = {}  # device id -> (its table entry, its bandwidth): once a GPU
    out = {}
    for row in np.flatnonzero(on_gpu).tolist() if rows is None else \
            [r for r in rows if on_gpu[r]]:  # in the caller's order
        node, dev = index[row], str(devices[row])
        if dev not in per_gpu:
            per_gpu[dev] = (gpus[dev], bandwidth(gpus[dev]))
        gpu, bw = per_gpu[dev]
        measured = counters.get(node) if counters else None
        if measured is not None:
            top = peak(gpu, MEASURED_PRECISION)
            l2 = measured.l2_fraction
            out[node] = KernelRoof(measured.tensor_flops, measured.dram_bytes, measured.seconds,
                                   top, bw, [MEASURED_PRECISION] if top else [],
                                   dev, MEASURED if measured.tensor_flops else
                                   NO_TENSOR_WORK, secs[row], measured.levels, measured.l2_bytes,
                                   measured.l2_bytes / measured.seconds / l2 if l2 and
                                   measured.l2_throughput is not None else measured.l2_roof)
            continue
        roof = roof_at[row] if any_flops[row] else None  # flops of no width: under no roof
        out[node] = KernelRoof(done[row], nbytes[row], secs[row], roof[0] if roof else None,
                               bw, roof[1] if roof else [], dev, DECLARED, secs[row])
    return out


def _number(value) -> float:
    """A metric's value, 0 where missing or not finite."""
    return value if isinstance(value, float) and math.isfinite(value) else 0.0


def _util(profile: Profile, spec: str) -> tuple[pd.Series, list[str]]:
    """Achieved over peak (util_of) and notes; blank for frames that are not kernels."""
    roofs = kernel_roofs(profile)
    util = {node: util_of(kernel) for node, kernel in roofs.items()}
    return (pd.Series(util, dtype=float).reindex(profile.gf.dataframe.index),
            overstated(roofs, "util"))


def util_of(kernel: KernelRoof) -> float | None:
    """Achieved over peak (KernelRoof.util); None where the kernel's declared work is more
    than its GPU can do in its time (over_roof), or where it has none: a kernel that declared
    no flops or bytes (a library's, or a Triton kernel without launch_metadata) has an unknown
    util, not 0."""
    if kernel.source == DECLARED and not kernel.flops and not kernel.nbytes:
        return None
    util = kernel.util()
    return None if kernel.source == DECLARED and util > 1 else util  # over_roof's test


def over_roof(kernel: KernelRoof) -> bool:
    """A kernel whose declared flops or bytes (launch_metadata) need more than its time at its
    GPU's roofs: the declaration overstates the work; no figure of it can be shown."""
    return kernel.source == DECLARED and kernel.util() > 1


def overstated(roofs: dict, what: str) -> list[str]:
    """A note on the kernels over_roof leaves out of `what`."""
    n = sum(over_roof(k) for k in roofs.values())
    return [f"{what}: {n:,} kernel{'s' * (n != 1)} left out: {'its' if n == 1 else 'their'} "
            "declared flops or bytes need more time at the GPU's peak than "
            f"{'it' if n == 1 else 'they'} ran (launch_metadata overstates the work)"] if n else []


def _match(profile: Profile, name: str, spec: str) -> str:
    """The file's metric for `name`: exact or without its unit, case-insensitive."""
    names: dict[str, str] | None = profile.derived.get("metric_names")
    if names is None:  # each name and its unitless form, lower case; the first one wins
        names = {}
        for metric in profile.inclusive + profile.exclusive:
            names.setdefault(metric.lower(), metric)
            names.setdefault(metric.split("(")[0].strip().lower(), metric)
        profile.derived["metric_names"] = names
    found = names.get(name.strip().lower())
    if found is None:
        raise _unknown(profile, spec)
    return found


def _column(profile: Profile, metric: str, spec: str) -> pd.Series:
    """A metric's column as floats (blank: NaN), made once a view (Profile.derived): the
    derived metrics ask for time and wall again and again. Callers make new Series from it,
    never change it."""
    metric = _match(profile, metric, spec)
    col = f"{metric} (inc)" if metric in profile.inclusive else metric
    key = ("column", col)
    if (got := profile.derived.get(key)) is None:
        got = profile.derived[key] = pd.to_numeric(profile.gf.dataframe[col],
                                                   errors="coerce").astype(float)
    return got


def _unknown(profile: Profile, spec: str) -> ViewerError:
    names = available(profile) + profile.inclusive + profile.exclusive
    have = {m.lower() for m in profile.inclusive + profile.exclusive}
    why = "no kernel ran in it (a run without a GPU); its metrics" if CPU_TIME in have and \
        TIME not in have else "available"
    return ViewerError(f"unknown metric {spec!r} for this profile{did_you_mean(spec, names)}; "
                       f"{why}: {', '.join(names) or 'none'} (see proton-viewer -l FILE)")
