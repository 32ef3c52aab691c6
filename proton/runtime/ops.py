"""The runtime as launch hooks see it (hooks/ uses this module and nothing else of the runtime).

An op is the node one kernel launch is counted on, named by the hook (e.g. after the kernel's
launch_metadata), with the hook's metrics (flops, bytes) on it. Per launch:

    if ops.collecting():
        with ops.frame(LAUNCH_METADATA):     # kernels the hook itself launches go here
            md = compute_metadata()
        ops.enter_op("matmul_4096", {"flops16": 2 * 4096**3})
    launch()                                 # counted on the op's node
    ops.exit_op()                            # at the launch's exit hook

An op is not a scope: it is never on the thread's stack, and any scope change, or the next
enter_op, ends it (a launch that raised never reaches its exit hook).
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from ..context import frames
from ..context.stack import depth
from ..data.paths import OP, ROOT, paths
from .profiler import profiler


def collecting() -> bool:
    """A session is live and kernels are being collected (ops would be counted)."""
    return profiler.collector is not None and profiler.recording


def enter_op(name: str, metrics: dict[str, float] | None = None) -> int:
    """The calling thread's next launch is counted on a node `name` under where that launch
    goes (the innermost scope, or its Python call path with context="python"); `metrics` are
    added to that node. Returns its path id."""
    frames.pop_op()  # the last launch raised before its exit hook ran
    parent = profiler.context.launch_path(sys._getframe(1))
    path = paths.intern(ROOT if parent is None else parent, name, OP)
    frames.push_op(path)
    if metrics:
        profiler.add_metrics(path, metrics)
    return path


exit_op = frames.pop_op
"""exit_op() -> None: the launch's exit; later launches go where they would without the op.
(The frames' own function, not a wrapper: it runs at every launch.)"""


@contextmanager
def frame(name: str) -> Iterator[None]:
    """A frame for the kernels launched inside (LAUNCH_METADATA for a hook's own launches)."""
    before = depth()
    frames.enter_frame(name, {})
    try:
        yield
    finally:
        frames.unwind(before)
