"""Triton 3.9's `triton.profiler.metric`: how metric values are split before they are added
(the implementation is data/metrics.py's; metric kernels: runtime/graph_metrics.py)."""
from __future__ import annotations

from .data.metrics import transform_tensor_metrics
from .format import FLOPS_WIDTHS

__all__ = ["FLOPS_WIDTHS", "transform_tensor_metrics"]
