"""Where each kernel of a CUDA graph was captured, so its replays can show it (the graph's
launch, then CAPTURED_AT, then that path; attribution.Attributor.captured).

CUPTI calls back on the capturing thread as each node is added to a graph (stream capture or
the graph API) and again when a node is cloned (cudaGraphClone, and instantiation); a kernel
record of a replay names its node by CUPTI's id. Nodes added while no session collected are not
known: their kernels go under the launch, as before.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Callable

from ..data.paths import ROOT
from ..report import callback_failed

KERNEL_NODE = 0
"""CU_GRAPH_NODE_TYPE_KERNEL"""


class GraphCaptures:
    """A taker of CUPTI callbacks (see CuptiCollector's callback_users) that fills `captured`
    (graph node id -> path id) through `launch_path(frame)`, the context's."""

    def __init__(self, cupti, captured: dict[int, int],
                 launch_path: Callable[[object], int | None]) -> None:
        self.captured = captured
        self._launch_path = launch_path
        self._node_id = cupti.get_graph_node_id
        self._descriptor_at = cupti.resource_data_dtype.fields["resource_descriptor"][1]
        fields = cupti.graph_data_dtype.fields
        self._node_at, self._original_at = fields["node"][1], fields["original_node"][1]
        self._type_at = fields["node_type"][1]
        ids = cupti.CallbackIdResource
        self.domain = int(cupti.CallbackDomain.RESOURCE)
        self.created, self.cloned = int(ids.GRAPHNODE_CREATED), int(ids.GRAPHNODE_CLONED)
        self.callbacks = [(self.domain, self.created), (self.domain, self.cloned)]

    def prepare(self, libcupti: str) -> None:
        pass

    def release(self) -> None:
        pass

    def wrap(self, on_api):
        domain, mine, handle = self.domain, (self.created, self.cloned), self.handle

        def on_call(userdata, dom, cbid, data) -> None:
            if dom == domain and cbid in mine:
                handle(cbid, data, sys._getframe().f_back)
            elif on_api is not None:
                on_api(userdata, dom, cbid, data)

        return on_call

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
                path = self._launch_path(frame)
                self.captured[self._node_id(node)] = ROOT if path is None else path
                return
            original = ctypes.c_void_p.from_address(descriptor + self._original_at).value
            source = self.captured.get(self._node_id(original)) if original else None
            if source is not None:
                self.captured[self._node_id(node)] = source
        except BaseException as exc:
            callback_failed("while noting where a CUDA graph node was captured", exc)
