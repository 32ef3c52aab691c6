"""What a figure can be, checked where derived columns are made: a share lies between none and
all of its whole, a rate at most the peak of its GPU (specs.py). A value outside that comes
from a file whose numbers disagree (a scope's idle time over its wall time, a child's CPU time
over its parent's, a user metric with negative parts) or overstate the work (launch_metadata
declaring more flops or bytes than the GPU can do in the kernel's time): it is left blank,
never clamped, and a note says how many cells and why.

Measured rates and activities (mode="counters") are the counters' own to bound (derive.py).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..format import CUDA, DEVICE_ID
from .reader import Profile
from .specs import PRECISIONS, bandwidth, peak


def share(header: str, part: pd.Series, whole: pd.Series | float) -> tuple[pd.Series, list[str]]:
    """(part over whole in %, notes): blank where the whole is not above 0 or the part is not
    between 0 and the whole."""
    p = part.to_numpy(dtype=float, na_value=np.nan)
    w = whole.reindex(part.index).to_numpy(dtype=float, na_value=np.nan) \
        if isinstance(whole, pd.Series) else np.full(len(p), whole, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN compares False: not known
        known = ~np.isnan(p) & (w > 0)
        fits = known & (p >= 0) & (p <= w)
        values = np.where(fits, p / np.where(fits, w, 1.0) * 100, np.nan)
    return pd.Series(values, index=part.index), _blank(
        header, int((known & ~fits).sum()), "part negative or more than the whole, which no "
        "share can be (the file's numbers disagree)")


def under_peak(header: str, rate: pd.Series, peaks: pd.Series) -> tuple[pd.Series, list[str]]:
    """(rate, notes): blank where it is over `peaks` (per node, per second as `rate`; NaN: no
    known peak, not judged)."""
    over = rate.notna() & peaks.notna() & (rate > peaks)
    return rate.mask(over), _blank(header, int(over.sum()),
                                   "more than the GPU can do at its peak in the time (the "
                                   "declared flops or bytes overstate the work)")


def _blank(header: str, count: int, why: str) -> list[str]:
    """The note on `count` cells of a column left blank, and why."""
    return [f"{header}: {count:,} frame{'s' * (count != 1)} left blank: {why}"] if count else []


def rate_peaks(profile: Profile, what: str, width: str | None = None) -> pd.Series:
    """The fastest a node's GPU moves bytes (`what` "byte": DRAM bandwidth) or does
    flops<width> (`what` "flop", the fastest roof of that width; no width: of any), per node;
    a frame without a GPU of its own (a scope) the fastest GPU of the device table's. NaN where
    a figure is missing."""
    gpus = profile.devices.get(CUDA) if isinstance(profile.devices, dict) else None
    gpus = gpus if isinstance(gpus, dict) else {}
    names = PRECISIONS[int(width)] if width else [n for p in PRECISIONS.values() for n in p]

    def top(gpu) -> float | None:
        if not isinstance(gpu, dict):
            return None
        if what == "byte":
            return bandwidth(gpu)
        roofs = [r for r in (peak(gpu, n) for n in names) if r]
        return max(roofs) if roofs else None

    tops = {str(dev): top(gpu) for dev, gpu in gpus.items()}
    known = [t for t in tops.values() if t]
    fastest = max(known) if known and len(known) == len(tops) else None
    df = profile.gf.dataframe
    devices = df[DEVICE_ID] if DEVICE_ID in df else pd.Series(None, index=df.index, dtype=object)
    # per distinct device, not per node (a Series by node hashes each through Node.__hash__)
    known_dev: dict = {}

    def of(dev) -> float | None:
        if dev not in known_dev:
            known_dev[dev] = tops.get(str(dev), fastest) if pd.notna(dev) else fastest
        return known_dev[dev]

    return pd.Series([of(dev) for dev in devices.tolist()], index=df.index, dtype=float)
