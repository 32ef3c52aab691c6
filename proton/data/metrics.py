"""Metric values as sessions hold them, and checks on the metrics users give."""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import ScopeError
from ..format import COUNT, CPU_TIME, DEVICE_ID, DEVICE_TYPE, EXCLUSIVE, TIME

DEVICE_CUDA = 1
"""DEVICE_TYPE's value in memory for NVIDIA GPUs (written as format.CUDA)."""
RESERVED = frozenset({TIME, COUNT, DEVICE_ID, DEVICE_TYPE, CPU_TIME, "cpu_time", "time"})
"""Names the profiler writes itself: user metrics may not take them."""


def check_user_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """Numbers by name, ready to add; raise ScopeError for a reserved name or a non-number."""
    if not metrics:
        return {}
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
