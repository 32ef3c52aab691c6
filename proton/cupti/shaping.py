"""Records shaped for their sinks: one buffer's columns as the pipelines read them
(records.ExternalFields, ApiFields, KernelFields, the copies' and sets') joined by the
Attributor, with kernel names and launch configurations, and what the runtime's parts take of
them (the busy intervals, the launch calls). The collector makes one `Shaper` and hands it to
its pipeline (pipeline.py), which needs nothing else of the collector's records side.

Runs on CUPTI's buffer thread holding the GIL (and on the flushing thread under `lock`).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..format import COMM_KERNEL, COPY_NAMES
from ..report import callback_failed
from . import records
from .attribution import Attributor, GroupSink, KernelSink, LaunchConfigs
from .records import ApiFields, Busy, KernelFields

# busy(starts, ends, kinds, correlation ids): a buffer's records that kept the GPU busy
BusySink = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]


class Shaper:
    """One collector's records side: CUPTI's record kinds and launch calls, the sinks, the
    Attributor and its lock, the kernel names and launch configurations seen."""

    def __init__(self, cupti: Any, attributor: Attributor, sink: KernelSink,
                 groups: GroupSink | None, *, custom: int, kernel_kind: int, external_kind: int, copy_kinds: list[int],
                 api_cbids: dict[int, tuple[np.ndarray, np.ndarray]],
                 busy: BusySink | None = None,
                 launched: Callable[[Any, Any], None] | None = None,
                 buffered: Callable[[], None] | None = None,
                 recorded: list | None = None) -> None:
        self.cupti = cupti
        """cupti-python's module (its record dtypes and activity calls)."""
        self.attributor = attributor
        self.lock = threading.Lock()
        """Guards the Attributor (the buffer thread, flushes, the launch callbacks' settles)."""
        self.sink, self.groups = sink, groups
        """Each buffer's attributed kernels; or their sums per path (the C join's)."""
        self.busy, self.launched, self.buffered = busy, launched, buffered
        """Told the busy intervals, the launch calls taken, each buffer's end (collector's)."""
        self.custom = custom
        """The external correlation kind scopes push (CUPTI's CUSTOM2)."""
        self.kernel_kind, self.external_kind = kernel_kind, external_kind
        self.copy_kinds = copy_kinds
        """The copy record kinds the pipelines read (none come when copies are off)."""
        self.api_cbids = api_cbids
        """Per API record kind: (its launch cbids, its graph-launch cbids), for np.isin."""
        self.launch_configs = LaunchConfigs()
        """Each kernel's grid, block, registers and shared memory, numbered (the analyzer's)."""
        self.names: dict[int, str] = {}
        """Kernel names by CUPTI's pointer to them (one string per kernel, shared by records)."""
        self.comm: dict[int, bool] = {}
        """Kernel name pointer -> whether it names an NCCL kernel (the busy time's class)."""
        self.recorded = recorded
        """With PROTON_RECORD_CUPTI=FILE, every buffer's records, saved at stop for replay tests."""
        self.records = 0
        self.callback_seconds = 0.0
        """Records read and time spent reading them on CUPTI's thread (holding the GIL)."""
        self.callback_errors: list[str] = []

    def note_busy(self, kernels: Sequence, copies: Sequence = ()) -> None:
        """A buffer's records that kept the GPU busy, on CUPTI's thread: its kernels
        (KernelFields columns) and its copies and sets (CopyFields twice, then SetFields)."""
        if self.busy is None:
            return
        CF, SF = records.CopyFields, records.SetFields
        names = np.asarray(kernels[KernelFields.name])
        starts, ends = [kernels[KernelFields.start]], [kernels[KernelFields.end]]
        corrs = [kernels[KernelFields.correlation_id]]
        kinds = [np.where(np.isin(names, self.comm_names(names)), Busy.comm, Busy.compute)]
        for columns, (corr, start, end) in zip(copies, ((CF.correlation_id, CF.start, CF.end),
                                                        (CF.correlation_id, CF.start, CF.end),
                                                        (SF.correlation_id, SF.start, SF.end))):
            starts.append(columns[start])
            ends.append(columns[end])
            corrs.append(columns[corr])
            kinds.append(np.full(len(columns[start]), Busy.copy))
        if sum(map(len, starts)):
            self.busy(*(np.concatenate(c).astype(np.int64, copy=False)
                         for c in (starts, ends, kinds, corrs)))

    def note_launches(self, corrs: Sequence | np.ndarray,
                      starts: Sequence | np.ndarray) -> None:
        """Launch calls taken (correlation ids, CUPTI start times), before their records are
        told to `busy`."""
        if self.launched is not None and len(corrs):
            self.launched(corrs, starts)

    def comm_names(self, names: np.ndarray) -> list[int]:
        """Of a buffer's kernel name pointers, those of NCCL kernels (format.COMM_KERNEL),
        each pointer's answer kept (CUPTI shares one name string among a kernel's records)."""
        comm = self.comm
        if len(comm) > 65536:  # as _names: pointers of unloaded modules may be reused
            comm.clear()
        out = []
        for p in np.unique(names).tolist():
            found = comm.get(p)
            if found is None:
                found = comm[p] = p > 0 and bool(COMM_KERNEL.match(self.names.get(p) or
                                                                    self.name(p)))
            if found:
                out.append(p)
        return out

    def after_buffer(self) -> None:
        if self.buffered is not None:
            try:
                self.buffered()
            except BaseException as exc:
                callback_failed("while taking waits and idle time", exc, self.callback_errors)

    def configs(self, blocks, threads, regs, shared) -> list[int]:
        """Each kernel's launch configuration number; a copy's (0 blocks: records.CopyName)
        is minus its bytes. The four numbers are packed into one integer (blocks above bit
        37; threads, registers and shared memory below), so finding a buffer's few distinct
        ones is one sort of integers."""
        if not len(blocks):
            return []
        copies = blocks == 0
        if copies.any():
            out = np.where(copies, -shared, 0)
            kernels = ~copies
            if kernels.any():
                out[kernels] = self.configs(blocks[kernels], threads[kernels], regs[kernels],
                                             shared[kernels])
            return out.tolist()
        number = self.launch_configs.number
        if blocks.max() >= 1 << 26 or shared.max() >= 1 << 18 or threads.max() >= 1 << 11 \
                or regs.max() >= 1 << 8:  # too large to pack: one row at a time
            rows = np.stack([blocks, threads, regs, shared], axis=1)
            return [number(tuple(row)) for row in rows.tolist()]
        keys = (blocks << 37) | (threads << 26) | (regs << 18) | shared
        distinct, where = np.unique(keys, return_inverse=True)
        ids = np.array([number((k >> 37, (k >> 26) & 0x7FF, (k >> 18) & 0xFF, k & 0x3FFFF))
                        for k in distinct.tolist()], dtype=np.int64)
        return ids[where.reshape(-1)].tolist()

    def texts(self, pointers: np.ndarray) -> list[str]:
        """Kernel names for an array of CUPTI's name pointers."""
        names = self.names
        return [names.get(p) or self.name(p) for p in pointers.tolist()]

    def name(self, pointer: int) -> str:
        """A kernel's name: CUPTI shares one string among all records of a kernel; a copy's
        (a negative number: records.CopyName)."""
        if pointer < 0:
            return COPY_NAMES[-1 - pointer]
        if len(self.names) > 65536:  # module unloads may free names: never keep too many
            self.names.clear()
        text = ctypes.string_at(pointer).decode(errors="replace") if pointer else "<unnamed>"
        self.names[pointer] = text
        return text

    def digest(self, ext: Sequence, api: Sequence, kernels: Sequence,
                copies: Sequence = ()) -> None:
        """One buffer's columns as the pipelines read them (records.ExternalFields, ApiFields,
        KernelFields; copies: CopyFields of MEMCPY and MEMCPY2 records, SetFields of MEMSET
        ones) joined by the Attributor."""
        X, A, KF = records.ExternalFields, ApiFields, KernelFields
        mine = ext[X.external_kind] == self.custom
        external = (ext[X.correlation_id][mine], ext[X.external_id][mine])
        api_kinds, cbid = api[A.kind], api[A.cbid]
        # Only launch calls that succeeded wait for a kernel: API records of other calls
        # (made while the per-call filters were being set) and failed launches would
        # never be matched and would hold every flush to its timeout.
        launch, graph = np.zeros(len(cbid), dtype=bool), np.zeros(len(cbid), dtype=bool)
        for kind, (launches, graphs) in self.api_cbids.items():
            this = api_kinds == kind
            launch |= this & np.isin(cbid, launches)
            graph |= this & np.isin(cbid, graphs)
        launch &= api[A.return_value] == 0
        api = (api[A.correlation_id][launch], api[A.start][launch], graph[launch],
               api[A.thread_id][launch])  # records.Launch
        self.note_launches(api[0], api[1])
        k = [a.astype(np.int64, copy=False) for a in kernels]
        kernels = (k[KF.correlation_id], k[KF.name], k[KF.device_id], k[KF.start], k[KF.end],
                   k[KF.stream_id], k[KF.grid_x] * k[KF.grid_y] * k[KF.grid_z],
                   k[KF.block_x] * k[KF.block_y] * k[KF.block_z], k[KF.registers_per_thread],
                   k[KF.static_shared_memory] + k[KF.dynamic_shared_memory],
                   k[KF.graph_node_id])  # records.Kernel
        if any(len(c[0]) for c in copies):
            kernels = tuple(np.concatenate(parts) for parts in zip(kernels,
                                                                   copy_kernels(*copies)))
        with self.lock:
            self.attribute(external, api, kernels)

    def attribute(self, external, api, kernels) -> None:
        """Columns (numpy) of external ids, launch calls and kernels (records.External, Launch,
        Kernel) to the Attributor, as lists. Under the lock."""
        external = tuple(a.tolist() for a in external)
        api = tuple(a.tolist() for a in api)
        kernels = self.kernel_columns(kernels)
        node = records.Placed.graph_node
        if not any(kernels[node]):  # kernels of graph launches: placed by where captured
            kernels = kernels[:node]
        if self.recorded is not None:  # rows, as the record classes take them
            self.recorded.append([[list(row) for row in zip(*part)]
                                  for part in (external, api,
                                               kernels[:records.Placed.config])])
        self.attributor.add_columns(external, api, kernels)

    def kernel_columns(self, kernels) -> tuple[list, ...]:
        """Kernels as numpy columns (records.Kernel) -> lists (records.Placed)."""
        K = records.Kernel
        return (kernels[K.correlation_id].tolist(), self.texts(kernels[K.name]),
                kernels[K.device].tolist(), kernels[K.start].tolist(), kernels[K.end].tolist(),
                kernels[K.stream].tolist(), self.configs(*(kernels[c] for c in records.CONFIG)),
                kernels[K.graph_node].tolist())


def copy_kernels(memcpy: Sequence, peer: Sequence, memset: Sequence) -> tuple[np.ndarray, ...]:
    """Copy and set records' columns (records.CopyFields twice, SetFields) as kernels'
    (records.Kernel): named -1 - their records.CopyName, no launch configuration but their
    bytes in the shared memory column, as native.c's copy_row makes them."""
    CF, SF, N = records.CopyFields, records.SetFields, records.CopyName
    columns: list[tuple[list, int, np.ndarray]] = []  # (columns, graph node's, names)
    for c in (memcpy, peer):
        c = [a.astype(np.int64, copy=False) for a in c]
        kind, src, dst = c[CF.copy_kind], c[CF.src_kind], c[CF.dst_kind]
        pageable = int(records.MemoryKind.pageable)
        name = np.full(len(kind), int(N.other), dtype=np.int64)
        for copy_kind, code in ((records.CopyKind.dtod, N.dtod), (records.CopyKind.ptop, N.ptop),
                                (records.CopyKind.htoh, N.htoh)):
            name[kind == copy_kind] = code
        htod, dtoh = kind == records.CopyKind.htod, kind == records.CopyKind.dtoh
        name[htod] = np.where(src[htod] == pageable, N.htod_pageable, N.htod_pinned)
        name[dtoh] = np.where(dst[dtoh] == pageable, N.dtoh_pageable, N.dtoh_pinned)
        columns.append((c, CF.graph_node_id, -1 - name))
    s = [a.astype(np.int64, copy=False) for a in memset]
    columns.append((s, SF.graph_node_id, np.full(len(s[0]), -1 - N.memset, dtype=np.int64)))
    out = []
    for c, node, name in columns:  # a set's other columns sit where a copy's do (SetFields)
        zero = np.zeros(len(name), dtype=np.int64)
        out.append((c[CF.correlation_id], name, c[CF.device_id], c[CF.start], c[CF.end],
                    c[CF.stream_id], zero, zero, zero, c[CF.bytes], c[node]))
    return tuple(np.concatenate(parts) for parts in zip(*out))


records.unpacks(records.Kernel, "correlation_id name device start end stream blocks threads "
                "registers shared graph_node")  # copy_kernels builds its rows in this order
