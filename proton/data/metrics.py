"""Metric values as sessions hold them, and checks on the metrics users give."""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import ScopeError
from ..format import COUNT, CPU_TIME, DEVICE_ID, DEVICE_TYPE, EXCLUSIVE, TIME

DEVICE_CUDA = 1
"""DEVICE_TYPE's value in memory for NVIDIA GPUs (written as format.CUDA)."""
RESERVED = frozenset({TIME, COUNT, DEVICE_ID, DEVICE_TYPE, CPU_TIME, "cpu_time", "time"})
"""Names the profiler writes itself: user metrics may not take them."""


def check_scope_name(name: Any, what: str = "scope name") -> str:
    """A frame name as the user gave it: a non-empty string (ScopeError otherwise)."""
    if not isinstance(name, str) or not name:
        raise ScopeError(f"{what} {name!r} ({type(name).__name__}) is not accepted; give a "
                         "non-empty string, e.g. proton.scope('forward')")
    return name


def check_user_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """Numbers by name, ready to add; raise ScopeError for a reserved name or a non-number."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ScopeError(f"metrics {metrics!r} ({type(metrics).__name__}) is not accepted; give "
                         "a mapping of names to numbers, e.g. {'tokens': 4096}")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise ScopeError(f"metric name {name!r} must be a non-empty string")
        base = name[: -len(EXCLUSIVE)] if name.endswith(EXCLUSIVE) else name
        if base.strip() in RESERVED:
            raise ScopeError(f"metric name {name!r} is reserved for the profiler; rename it "
                             f"(reserved: {', '.join(sorted(RESERVED))})")
        if hasattr(value, "item") and not isinstance(value, (int, float)):
            value = value.item()  # 0-d tensors and numpy scalars
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScopeError(f"metric {name!r} has value {value!r}; metrics must be int or float")
        out[name] = value
    return out
