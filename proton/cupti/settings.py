"""What a collector is made with: one typed object (CuptiCollector(settings)).

The profiler builds CollectorSettings from its router, timeline, context and graph metrics;
the parts (runtime/parts) build its `parts` field, each replacing what it asks for. The next
measurement adds a field to PartAsks and its part's `collector_asks`, not a parameter
threaded through the profiler. Nothing here imports numpy or cupti: the parts build these
before CUPTI is loaded.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

if TYPE_CHECKING:
    from ..options import PCOptions
    from .attribution import Graft, GroupSink, KernelSink, Unscoped
    from .shaping import BusySink

LaunchPath = Callable[["FrameType | None"], "int | None"]
"""launch_path(the launching frame, or None) -> the launch's path id; None for a thread with
no Python frames and no scope open (then `unscoped` decides)."""


class CallbackUser(Protocol):
    """A taker of CUPTI callbacks besides the collector (runtime.nvtx.NvtxScopes,
    graphs.GraphCaptures)."""

    @property
    def callbacks(self) -> Sequence[tuple[int, int]]:
        """(domain, cbid) to enable."""

    def prepare(self, lib_path: str) -> None:
        """Called with libcupti's path before CUPTI starts."""

    def release(self) -> None:
        """Called after CUPTI stopped (or could not start)."""

    def wrap(self, on_api: Any) -> Any:
        """The callback that handles its domain and passes the rest to `on_api`."""


@dataclass(frozen=True, slots=True)
class PartAsks:
    """What the parts a session asks for want of the collector (each part's collector_asks)."""

    pc: PCOptions | None = None
    """Sample instructions too, with these options (mode="pcsampling")."""
    callback_users: tuple[CallbackUser, ...] = ()
    """More takers of CUPTI callbacks (NVTX ranges)."""
    busy: BusySink | None = None
    """Told each buffer's kernels' and copies' (starts, ends, kinds, correlation ids) (numpy,
    CUPTI's clock; kinds records.Busy: compute, NCCL kernel, copy or set): when the GPU was
    busy, with what, and which launch call made it (runtime/idle.py)."""
    launched: Callable[[Sequence, Sequence], None] | None = None
    """Told the launch calls (correlation ids, starts) as they are taken, before their records
    are told to `busy` (a record's launch time: which step launched it)."""
    buffered: Callable[[], None] | None = None
    """Called after each buffer was read, on CUPTI's thread (the waits and the idle time are
    taken then)."""
    copies: bool = True
    """Record copies and sets (options.PARTS: the user may leave them out)."""
    waits: bool = True
    """Time the synchronizing calls (options.PARTS: the user may leave them out)."""


@dataclass(frozen=True, slots=True)
class GraphHooks:
    """The CUDA graph metrics' side (runtime/graph_metrics.GraphMetrics)."""

    active: Callable[[], bool] | None = None
    """Whether a session records (graphs.GraphCaptures notes captures only then)."""
    metric_tag: Callable[[], int | None] | None = None
    """The tag of the metric kernel the calling thread launches (None: not one)."""
    executed: Callable[[int, int, int, Any], None] | None = None
    """A metric kernel ran at a replay (attribution.Attributor.on_metric)."""
    flushed: Callable[[Any], None] | None = None
    """Called with the collector at the end of each flush, on the flushing thread (the metric
    ring is read then: the GPU is synchronized)."""


@dataclass(frozen=True, slots=True)
class CollectorSettings:
    """Everything a CuptiCollector is made with."""

    sink: KernelSink
    """Takes each buffer's attributed kernels at once (see attribution.Kernel)."""
    _: KW_ONLY
    groups: GroupSink | None = None
    """Takes a buffer's kernels summed per path instead, when the C helper joins the records
    (the shadow context; see attribution.GroupSink)."""
    unscoped: Unscoped | None = None
    """Where a launch goes from a thread with no scope of its own (the main thread's scope
    at its time, runtime/timeline.py)."""
    moved: Callable[[int, int], None] | None = None
    """Told (CUPTI timestamp, path id) each time the main thread's innermost scope changes,
    where launches are placed from their records (`unscoped` reads it); not called when the C
    launch log reads the main thread's scope at each launch."""
    graft: Graft | None = None
    """Places a CUDA graph's kernels under where they were captured (graphs.GraphCaptures
    notes where, when launch_path is given)."""
    launch_path: LaunchPath | None = None
    """The context's (see LaunchPath); needed by in_callback and exact sampling."""
    in_callback: bool = False
    """Attribute each launch in a CUPTI launch callback, by launch_path (the python context),
    instead of by the external correlation ids that scopes push."""
    walk: Any = None
    """With in_callback, the context's python.Walk: the C helper answers a launch whose stack
    it has seen before (native.c's walk) with no Python."""
    native: bool | None = None
    """The pipeline (pipeline.choose): None, the C helper's unless it cannot be built or
    PROTON_NATIVE=0; False, Python's; True, the C helper's or an error."""
    graphs: GraphHooks = field(default_factory=GraphHooks)
    """The CUDA graph metrics' callbacks."""
    parts: PartAsks = field(default_factory=PartAsks)
    """What the parts ask for."""
