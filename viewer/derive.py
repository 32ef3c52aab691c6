"""Turn metric specs such as `time/ms` or `tflop16/s` into columns of numbers per node.

Derive, then render: everything here returns data (pandas Series keyed by hatchet node).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from ..format import BYTES, COUNT, CPU_TIME, CUDA, DEVICE_ID, FLOPS, TIME
from .errors import ViewerError
from .reader import Profile
from .specs import max_bytes_per_s, max_flops

TIME_UNITS = {"s": 1e-9, "ms": 1e-6, "us": 1e-3, "ns": 1.0}
RATE_PREFIX = {"": 1.0, "g": 1e-9, "t": 1e-12}
_RATE = re.compile(r"^(?P<prefix>[gt]?)(?P<what>flop(?P<width>8|16|32|64)?|byte)/s$")
_TIME = re.compile(r"^(?P<what>avg_time|time|cpu_time|avg_cpu_time)/(?P<unit>s|ms|us|ns)$")


@dataclass(slots=True)
class Column:
    """One derived metric: its header and its value per node (NaN where it has no meaning)."""

    header: str
    values: pd.Series


def available(profile: Profile) -> list[str]:
    """Derived metric specs this profile can compute."""
    have = {m.lower() for m in profile.inclusive + profile.exclusive}
    out = []
    if TIME in have:
        out += [f"time/{u}" for u in TIME_UNITS]
        if COUNT in have:
            out += [f"avg_time/{u}" for u in TIME_UNITS]
        for metric in sorted(have):
            m = FLOPS.fullmatch(metric)
            if m:
                out += [f"{p}flop{m.group(1) or ''}/s" for p in RATE_PREFIX]
        if BYTES in have:
            out += [f"{p}byte/s" for p in RATE_PREFIX]
    if TIME in have and profile.devices and (BYTES in have or any(
            (m := FLOPS.fullmatch(metric)) and m.group(1) for metric in have)):
        out.append("util")
    if CPU_TIME in have:
        out += [f"cpu_time/{u}" for u in TIME_UNITS]
        if COUNT in have:
            out += [f"avg_cpu_time/{u}" for u in TIME_UNITS]
    out += [f"{m}/%" for m in profile.inclusive]
    return out


def derive(profile: Profile, spec: str) -> Column:
    """Compute one metric spec; raise ViewerError naming the choices when it cannot."""
    s = spec.strip().lower()
    if s == "util":
        return Column("util", _util(profile, spec))
    m = _TIME.match(s)
    if m:
        what, unit = m.group("what"), m.group("unit")
        if what in ("time", "avg_time"):
            values = _column(profile, TIME, spec) * TIME_UNITS[unit]
            if what == "avg_time":
                values = values / _column(profile, COUNT, spec).replace(0, float("nan"))
        else:
            values = _column(profile, CPU_TIME, spec) * TIME_UNITS[unit]
            if what == "avg_cpu_time":
                values = values / _column(profile, COUNT, spec).replace(0, float("nan"))
        return Column(f"{what} ({unit})", values)
    m = _RATE.match(s)
    if m:
        metric = BYTES if m.group("what") == "byte" else f"flops{m.group('width') or ''}"
        seconds = _column(profile, TIME, spec) * 1e-9
        values = _column(profile, metric, spec) / seconds.replace(0, float("nan"))
        return Column(s, values * RATE_PREFIX[m.group("prefix")])
    if s.endswith("/%"):
        base = _match(profile, spec[:-2], spec)
        values = _column(profile, base, spec)
        root = profile.gf.graph.roots[0]
        root_total = values[root] if base in profile.inclusive else values.sum()
        return Column(f"{base} (%)", values / root_total * 100 if root_total else values * 0)
    base = _match(profile, spec, spec)
    return Column(base, _column(profile, base, spec))


def _util(profile: Profile, spec: str) -> pd.Series:
    """Achieved over peak: the larger of (flops at each width / peak) and (bytes / peak
    bandwidth), over the kernel's time; blank for frames that are not kernels."""
    df = profile.gf.dataframe
    seconds = _column(profile, TIME, spec) * 1e-9
    device = df[DEVICE_ID].astype(str) if DEVICE_ID in df else pd.Series("", index=df.index)
    flops_time = pd.Series(0.0, index=df.index)
    bytes_time = pd.Series(0.0, index=df.index)
    for index, dev in profile.devices.get(CUDA, {}).items():
        rows = device == str(index)
        for width in (8, 16, 32, 64):
            if f"flops{width}" in df:
                peak = max_flops(str(dev["arch"]), width, dev["num_sms"], dev["clock_rate"])
                flops_time[rows] += pd.to_numeric(df.loc[rows, f"flops{width}"],
                                                  errors="coerce").fillna(0) / peak
        if BYTES in df:
            peak = max_bytes_per_s(dev["bus_width"], dev["memory_clock_rate"])
            bytes_time[rows] += pd.to_numeric(df.loc[rows, BYTES], errors="coerce") / peak
    util = flops_time.combine(bytes_time, max) / seconds
    util[~device.isin([str(i) for i in profile.devices.get(CUDA, {})])] = float("nan")
    return util


def _match(profile: Profile, name: str, spec: str) -> str:
    """The file's metric for `name`: exact or without its unit, case-insensitive."""
    want = name.strip().lower()
    for metric in profile.inclusive + profile.exclusive:
        if want in (metric.lower(), metric.split("(")[0].strip().lower()):
            return metric
    raise _unknown(profile, spec)


def _column(profile: Profile, metric: str, spec: str) -> pd.Series:
    df = profile.gf.dataframe
    metric = _match(profile, metric, spec)
    col = f"{metric} (inc)" if metric in profile.inclusive else metric
    return pd.to_numeric(df[col], errors="coerce").astype(float)


def _unknown(profile: Profile, spec: str) -> ViewerError:
    choices = ", ".join(available(profile) + profile.inclusive + profile.exclusive) or "none"
    return ViewerError(f"unknown metric {spec!r} for this profile; available: {choices} "
                       "(see proton-viewer -l FILE)")
