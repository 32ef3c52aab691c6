"""A kernel frame's warp timeline (format.WARP_TIMELINE) checked before the page draws it.

The timeline is JSON text inside a frame key of a file that may come from anyone: the page
puts its numbers into SVG markup and loops over its warps and events, so every value must be
what the runtime writes (instrumentation.timelines): whole numbers where it writes them, finite
numbers, indices in range, and no more than MAX_EVENTS events, MAX_SCOPES scopes, MAX_WARPS warps.
"""
from __future__ import annotations

import json
import math

from ..format import TIMELINE_COLUMNS

MAX_EVENTS = 1_000_000
"""Warp events one timeline may carry (a 1,024-CTA launch of 8 warps and 4 scopes has 32,768)."""
MAX_SCOPES = 1_000
MAX_WARPS = 64
"""Warps a CTA may have (CUDA allows 32: 1,024 threads)."""
MAX_CLOCK_KHZ = 100_000_000
MIN_CLOCK_KHZ = 1_000
"""A GPU's clock, in kHz, is within these (1 MHz to 100 GHz): a clock of 1e-300 kHz made
every span's end infinite, and the page's time axis with it."""
_WHOLE = ("sm", "cta", "warp", "scope")


def _whole(v) -> bool:
    return type(v) is int and 0 <= v < 1 << 53  # exact in the page's JavaScript numbers


def _real(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and 0 <= v < 1e18


def check(text: str) -> dict | str:
    """The timeline in `text` with only its known keys, or why it cannot be drawn (one phrase).

    Usage:
        t = check(frame.pop(WARP_TIMELINE))
        if isinstance(t, str): notes.append(f"warp timeline left out: {t}")
    """
    try:
        t = json.loads(text)
    except (ValueError, RecursionError):
        return "not JSON"
    if not isinstance(t, dict):
        return "not a JSON object"
    missing = [k for k in ("device", "clock_khz", "warps", "scopes", *TIMELINE_COLUMNS)
               if k not in t]
    if missing:
        return f"no {', '.join(missing)}"
    scopes, warps = t["scopes"], t["warps"]
    if not (isinstance(scopes, list) and 0 < len(scopes) <= MAX_SCOPES
            and all(isinstance(s, str) for s in scopes)):
        return f"scopes must be a list of 1 to {MAX_SCOPES:,} names"
    if not (_whole(warps) and 0 < warps <= MAX_WARPS):
        return f"warps must be a whole number from 1 to {MAX_WARPS}"
    if not (_whole(t["device"]) and _real(t["clock_khz"])
            and MIN_CLOCK_KHZ <= t["clock_khz"] <= MAX_CLOCK_KHZ):
        return "device or clock_khz is not a GPU's"
    columns = {k: t[k] for k in TIMELINE_COLUMNS}
    if not all(isinstance(c, list) for c in columns.values()) or \
            len({len(c) for c in columns.values()}) != 1:
        return f"the columns {', '.join(TIMELINE_COLUMNS)} must be lists of one length"
    if len(columns["cycles"]) > MAX_EVENTS:
        return f"{len(columns['cycles']):,} warp events, more than the {MAX_EVENTS:,} drawn"
    for key, values in columns.items():
        if not all(map(_whole if key in _WHOLE else _real, values)):
            return f"{key} holds a value that is not a " + \
                ("whole number" if key in _WHOLE else "finite number")
    if any(w >= warps for w in columns["warp"]) or \
            any(s >= len(scopes) for s in columns["scope"]):
        return "a warp or scope index is out of range"
    return {"device": t["device"], "clock_khz": t["clock_khz"], "warps": warps,
            "scopes": scopes, **columns}
