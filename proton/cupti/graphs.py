"""Where each kernel of a CUDA graph was captured, so its replays can show it (the graph's
launch, then CAPTURED_AT, then that path; attribution.Attributor.captured), and when each thread
was capturing (Attributor.capturing: launches then run nothing, so none is waited for).

CUPTI calls back on the capturing thread as each node is added to a graph (stream capture or
the graph API) and again when a node is cloned (cudaGraphClone, and instantiation, whose copies
the replays' kernel records name); a node created by instantiation takes the path of the node
it copies, not where instantiate was called. A node created while no session recorded (all
deactivated) is attribution.UNRECORDED: its kernels are no session's, as in Triton's Proton.
A node made by the runtime's metric kernel (runtime/graph_metrics.py) is noted with its tag in
`metric_nodes`. Nodes added while no collector ran are not known: their kernels go under the
launch (attribution says so once per graph).
"""
from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, Callable

from ..data.paths import ROOT
from ..report import callback_failed
from .attribution import UNRECORDED
from .subscriber import callback_fields, caller, cupti_enum, passes_on

KERNEL_NODE = 0
"""CU_GRAPH_NODE_TYPE_KERNEL"""
BEGIN = {"runtime": ("cudaStreamBeginCapture_v10000", "cudaStreamBeginCapture_ptsz_v10000",
                     "cudaStreamBeginCaptureToGraph_v12030",
                     "cudaStreamBeginCaptureToGraph_ptsz_v12030"),
         "driver": ("cuStreamBeginCapture", "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2",
                    "cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCaptureToGraph",
                    "cuStreamBeginCaptureToGraph_ptsz")}
END = {"runtime": ("cudaStreamEndCapture_v10000", "cudaStreamEndCapture_ptsz_v10000"),
       "driver": ("cuStreamEndCapture", "cuStreamEndCapture_ptsz")}


class GraphCaptures:
    """A taker of CUPTI callbacks (a settings.CallbackUser) that fills `captured`
    (graph node id -> path id) through `launch_path(frame)`, the context's; `active()` says
    whether a session records (None: always); `metric_tag()` the tag of the metric kernel the
    calling thread launches (None: none), noted in `metric_nodes` (graph node id -> tag)."""

    def __init__(self, cupti, captured: dict[int, int], capturing: dict[int, list[list[int]]],
                 launch_path: Callable[[Any], int | None], *,
                 active: Callable[[], bool] | None = None,
                 metric_tag: Callable[[], int | None] | None = None,
                 metric_nodes: dict[int, int] | None = None) -> None:
        self.captured, self.capturing = captured, capturing
        self._launch_path = launch_path
        self._active, self._metric_tag = active, metric_tag
        self.metric_nodes: dict[int, int] = {} if metric_nodes is None else metric_nodes
        self._now = cupti.get_timestamp
        self._site_at = callback_fields(cupti)[0]
        self._node_id = cupti.get_graph_node_id
        self._descriptor_at = cupti.resource_data_dtype.fields["resource_descriptor"][1]
        fields = cupti.graph_data_dtype.fields
        self._node_at, self._original_at = fields["node"][1], fields["original_node"][1]
        self._type_at = fields["node_type"][1]
        ids = cupti.CallbackIdResource
        self.domain = int(cupti.CallbackDomain.RESOURCE)
        self.created, self.cloned = int(ids.GRAPHNODE_CREATED), int(ids.GRAPHNODE_CLONED)
        self.callbacks = [(self.domain, self.created), (self.domain, self.cloned)]
        self._calls: dict[tuple[int, int], bool] = {}
        """(domain, cbid) of the stream capture calls -> True for a begin, False for an end."""
        for kind, domain, enum in (
                ("runtime", cupti.CallbackDomain.RUNTIME_API,
                 cupti_enum(cupti, "runtime_api_trace_cbid", "RuntimeApiTraceCbid")),
                ("driver", cupti.CallbackDomain.DRIVER_API,
                 cupti_enum(cupti, "driver_api_trace_cbid", "DriverApiTraceCbid"))):
            for begin, names in ((True, BEGIN[kind]), (False, END[kind])):
                for name in names:
                    if name in enum.__members__:
                        self._calls[int(domain), int(enum[name])] = begin
        self.callbacks += list(self._calls)

    def prepare(self, libcupti: str) -> None:
        pass

    def release(self) -> None:
        pass

    def wrap(self, on_api):
        domain, mine, handle = self.domain, (self.created, self.cloned), self.handle
        calls, capture = self._calls, self.capture

        @passes_on
        def on_call(userdata, dom, cbid, data) -> None:
            if dom == domain and cbid in mine:
                handle(cbid, data, caller(sys._getframe().f_back))
            elif (dom, cbid) in calls:
                capture(calls[dom, cbid], data)
            elif on_api is not None:
                on_api(userdata, dom, cbid, data)

        return on_call

    def capture(self, begin: bool, data: int) -> None:
        """A stream capture call's enter or exit: its thread's window opens at a begin's enter
        and closes at an end's exit (the runtime's call and the driver's inside it both come)."""
        try:
            enter = ctypes.c_uint32.from_address(data + self._site_at).value == 0
            if begin != enter:
                return
            windows = self.capturing.setdefault(threading.get_ident() & 0xFFFFFFFF, [])
            is_open = bool(windows) and windows[-1][1] == -1
            if begin and not is_open:
                windows.append([self._now(), -1])
            elif not begin and is_open:
                windows[-1][1] = self._now()
        except BaseException as exc:
            callback_failed("while noting a CUDA graph capture", exc)

    def handle(self, cbid: int, data: int, frame) -> None:
        try:
            descriptor = ctypes.c_void_p.from_address(data + self._descriptor_at).value
            if not descriptor:
                return
            node = ctypes.c_void_p.from_address(descriptor + self._node_at).value
            if not node:
                return
            if cbid == self.created:
                if ctypes.c_int32.from_address(descriptor + self._type_at).value != KERNEL_NODE:
                    return
                self.created_node(self._node_id(node), frame)
                return
            original = ctypes.c_void_p.from_address(descriptor + self._original_at).value
            if original:
                self.cloned_node(self._node_id(node), self._node_id(original))
        except BaseException as exc:
            callback_failed("while noting where a CUDA graph node was captured", exc)

    def created_node(self, node_id: int, frame) -> None:
        """A kernel node was created on this thread (`frame`: its Python caller)."""
        if self._active is not None and not self._active():
            path: int | None = UNRECORDED
        else:
            path = self._launch_path(frame)
        # setdefault: instantiation creates and clones each node (in either order); the
        # clone's source path wins over where instantiate was called
        self.captured.setdefault(node_id, ROOT if path is None else path)
        tag = self._metric_tag() if self._metric_tag is not None else None
        if tag is not None:
            self.metric_nodes[node_id] = tag

    def cloned_node(self, node_id: int, original: int) -> None:
        """`node_id` copies `original` (a graph cloned or instantiated)."""
        source = self.captured.get(original)
        if source is not None:
            self.captured[node_id] = source
        tag = self.metric_nodes.get(original)
        if tag is not None:
            self.metric_nodes[node_id] = tag
