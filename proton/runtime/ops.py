"""The runtime as launch hooks see it (hooks/ uses this module and nothing else of the runtime).

An op is the node one kernel launch is counted on, named by the hook (e.g. after the kernel's
launch_metadata), with the hook's metrics (flops, bytes) on it. Per launch:

    ops.exit_op()                            # the last launch's op, if its exit never came
    if ops.collecting():                     # before work done only for a counted launch
        with ops.frame(LAUNCH_METADATA):     # a state: kernels the hook itself launches
            md = compute_metadata()
    ops.enter_op("matmul_4096", {"flops16": 2 * 4096**3})   # nothing unless collecting
    launch()                                 # counted on the op's node
    ops.exit_op()                            # at the launch's exit hook

An op is not a scope: it is never on the thread's stack, and any scope change, or the next
enter_op, ends it (a launch that raised never reaches its exit hook).
"""
from __future__ import annotations

import sys

from ..context import frames
from ..context.stack import depth, per_thread
from ..data.paths import OP, ROOT, STATE, paths
from .graph_metrics import metric_frame
from .profiler import profiler


def collecting() -> bool:
    """A session is live and kernels are being collected (ops would be counted)."""
    return profiler.collector is not None and profiler.recording


def enter_op(name: str, metrics: dict[str, float] | None = None,
             kernel: str | None = None) -> int | None:
    """The calling thread's next launch is counted on a node `name` under where that launch
    goes (the innermost scope, or its Python call path with context="python"); `metrics` are
    added to that node (inside a CUDA graph capture, at each replay: runtime/graph_metrics),
    their GPU work under parent / LAUNCH_METADATA / `kernel` (the launch's own kernel name;
    default `name`) / METRIC_FRAME. Returns its path id; None, doing nothing, unless
    collecting()."""
    collector = profiler.collector
    if collector is None or not profiler.recording:
        return None
    st = per_thread.stacks
    if st.op_path is not None:  # the last launch raised before its exit hook ran
        frames.pop_op()
    parent = profiler.context.launch_path(sys._getframe(1))
    parent = ROOT if parent is None else parent
    path = paths.intern(parent, name, OP)
    if metrics:  # a launch never fails on a type: untyped
        profiler.add_metrics(path, metrics, typed=False,
                             metric_at=metric_frame(path, kernel or name, parent))
    st.op_path = path  # the python context's launch callback and exact PC sampling read it
    if collector.pushes_ids:  # shadow: for this one launch
        collector.push(path)
        st.op = collector  # frames.pop_op pops it
    return path


exit_op = frames.pop_op
"""exit_op() -> None: the launch's exit; later launches go where they would without the op.
(The frames' own function, not a wrapper: it runs at every launch.)"""


class frame:
    """Frames for the kernels launched inside, as a context manager: the launch hook's one
    state, LAUNCH_METADATA, as Triton's Proton sets it around a launch_metadata function (a
    state is the last frame of every path, so those kernels sit right under it). A class, not
    a generator: its methods' frames are the profiler's, so the python context leaves them out
    of paths."""

    __slots__ = ("names", "_before")

    def __init__(self, *names: str) -> None:
        self.names = names

    def __enter__(self) -> "frame":
        self._before = depth()
        for name in self.names:
            frames.enter_frame(name, {}, kind=STATE)
        return self

    def __exit__(self, *exc) -> None:
        frames.unwind(self._before)


# -- backend="instrumentation": InstrumentationHook's host copies -------------------------------
def copy_host_buffers(on: bool) -> None:
    """Copy each instrumented launch's raw profile buffer to the host from the next launch on
    (a sync per launch: for inspecting the buffer, not for profiling)."""
    from . import instrumentation

    instrumentation.set_host_copy(on)


def copying_host_buffers() -> bool:
    from . import instrumentation

    return instrumentation.host_copy


def host_buffer():
    """The last instrumented launch's buffer on the host (runtime/instrumentation.host_buffer),
    or None."""
    from . import instrumentation

    return instrumentation.host_buffer


def set_host_buffer(value) -> None:
    from . import instrumentation

    instrumentation.set_host_buffer(value)
