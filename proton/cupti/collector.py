"""The CUPTI side of a session: the only module that imports cupti-python's activity API.

Kernel times come from CONCURRENT_KERNEL activity. How launches are attributed and buffers read
is the collector's pipeline (pipeline.py), chosen once when it is made: the C helper's
(NativePipeline: in the shadow context a scope pushes its path id onto the helper's
thread-local stack and its launch callback logs each launch with it, so attribution costs no
Python per launch), or Python's (PythonPipeline, with no compiler or PROTON_NATIVE=0: the scope
pushes its path id as a CUPTI external correlation id, and CUPTI stamps it on the launch's API
record, DRIVER/RUNTIME activity restricted to the launch calls). In the python context a launch
callback (subscriber.py) runs anyway, so it registers each launch (path, start time, graph or
not) itself and no API records are made. Records are joined in attribution.Attributor on
CUPTI's buffer thread, the shadow context's common case in C first.

The collector knows no context or scope: the session hands it `launch_path`, which says where a
launch made on the calling thread goes, and pushes ids through `push`/`pop`.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, cast

import numpy as np

from ..data.paths import ROOT, paths
from ..errors import ProtonError
from ..files import write_whole
from ..report import callback_failed, debug, debugging, warn
from .attribution import Attributor, Unscoped
from .native import ASYNC_WAIT_NS, WAIT_EVENTS_MAX
from .pipeline import Pipeline, choose
from .settings import CollectorSettings, LaunchPath
from .shaping import Shaper
from .subscriber import caller, cupti_enum, passes_on

if TYPE_CHECKING:  # imported when used (sampling, raw buffers)
    from ..options import PCOptions
    from .buffers import RawBuffers
    from .pc_collector import PCCollector
    from .subscriber import Subscriber

BUFFER_SIZE = 8 << 20
KEEP_STATES_ENV = "PROTON_KEEP_THREAD_STATES"
_u32 = ctypes.c_uint32.from_address
_i32 = ctypes.c_int32.from_address
_ptr = ctypes.c_void_p.from_address


def _ignore(userdata, domain, cbid, data) -> None:
    """The shadow context's subscriber callback when no callback user takes CUPTI's calls
    (the launch calls go to the C launch log, or are not enabled)."""

_DRIVER_LAUNCHES = ("cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync", "cuLaunchKernel",
                    "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
                    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz")
_DRIVER_GRAPHS = ("cuGraphLaunch", "cuGraphLaunch_ptsz")
_RUNTIME_LAUNCHES = ("cudaLaunch_v3020", "cudaLaunch_ptsz_v7000", "cudaLaunchKernel_v7000",
                     "cudaLaunchKernel_ptsz_v7000", "cudaLaunchKernelExC_v11060",
                     "cudaLaunchKernelExC_ptsz_v11060", "cudaLaunchCooperativeKernel_v9000",
                     "cudaLaunchCooperativeKernel_ptsz_v9000")
_RUNTIME_GRAPHS = ("cudaGraphLaunch_v10000", "cudaGraphLaunch_ptsz_v10000")
_DRIVER_COPIES = ("cuMemcpy", "cuMemset", "cu64Memcpy", "cu64Memset")
_RUNTIME_COPIES = ("cudaMemcpy", "cudaMemset")
"""Copy and set calls, by their names' prefixes (every variant: async, 2D/3D, peer, batch,
per-thread stream): each makes a MEMCPY, MEMCPY2 or MEMSET record under its correlation id,
joined as a launch's kernel is. The graph node calls (cuGraphAddMemcpyNode, ...) copy nothing."""


def copy_calls(enum, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """The names of `enum`'s (a CUPTI cbid enum) copy and set calls."""
    return tuple(n for n in enum.__members__ if n.startswith(prefixes))

_DRIVER_SYNCS = ("cuCtxSynchronize", "cuCtxSynchronize_v2", "cuStreamSynchronize",
                 "cuStreamSynchronize_ptsz", "cuEventSynchronize", "cuMemcpy", "cuMemcpy_ptds",
                 "cuMemcpy_v2", "cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds",
                 "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpyPeer",
                 "cuMemcpyPeer_ptds", "cuMemcpy2D", "cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds",
                 "cuMemcpy3D", "cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds")
"""The driver's calls that block the calling thread until the GPU is done (synchronizations
and synchronous copies): waits (format.SYNC_TIME). torch's `.item()` and `print(tensor)`
copy with cudaMemcpyAsync and then wait in cudaStreamSynchronize (cuStreamSynchronize)."""
_RUNTIME_SYNCS = ("cudaDeviceSynchronize_v3020", "cudaThreadSynchronize_v3020",
                  "cudaStreamSynchronize_v3020", "cudaStreamSynchronize_ptsz_v7000",
                  "cudaEventSynchronize_v3020", "cudaMemcpy_v3020", "cudaMemcpy_ptds_v7000",
                  "cudaMemcpy2D_v3020", "cudaMemcpy2D_ptds_v7000", "cudaMemcpy3D_v3020",
                  "cudaMemcpy3D_ptds_v7000", "cudaMemcpyPeer_v4000",
                  "cudaMemcpyToSymbol_v3020", "cudaMemcpyToSymbol_ptds_v7000",
                  "cudaMemcpyFromSymbol_v3020", "cudaMemcpyFromSymbol_ptds_v7000")
"""The runtime's (each makes its driver call inside it, counted once: the outermost)."""
_DRIVER_ASYNC_COPIES = ("cuMemcpyAsync", "cuMemcpyAsync_ptsz", "cuMemcpyDtoHAsync",
                  "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz", "cuMemcpyHtoDAsync",
                  "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz")
"""Asynchronous copies: one from or to pageable memory waits for the stream's earlier work in
the call (torch's `.cpu()` waited its whole wait in cuMemcpyDtoHAsync_v2, H200, torch 2.11);
timed as a wait when the call held its thread native.ASYNC_WAIT_NS or more."""
_RUNTIME_ASYNC_COPIES = ("cudaMemcpyAsync_v3020", "cudaMemcpyAsync_ptsz_v7000")


def _plain(record) -> tuple:
    return tuple(getattr(record, f) for f in record.__slots__)


def _ids(enum, names) -> dict[int, str]:
    return {int(enum[n]): n for n in names if n in enum.__members__}


class CuptiCollector:
    """Owns the process's CUPTI subscription while at least one session needs kernels."""

    def __init__(self, settings: CollectorSettings) -> None:
        """settings: what it is made with (settings.py says each field)."""
        from cupti import cupti  # lazily: import proton must work without CUDA

        self._cupti = cupti
        self.settings = settings
        asks, graphs = settings.parts, settings.graphs
        in_callback, launch_path = settings.in_callback, settings.launch_path
        unscoped, pc = settings.unscoped, asks.pc
        self.in_callback = in_callback
        self.pushes_ids = not in_callback
        """Scopes push their path ids (shadow context); read on every scope change."""
        self._launch_path = launch_path
        self.walk = settings.walk if in_callback else None
        """With in_callback, the context's python.Walk (the C helper's walk)."""
        self.attributor = Attributor(settings.sink, unscoped, settings.graft)
        self.attributor.on_metric = graphs.executed
        self._unscoped = unscoped
        self._subscriber: Subscriber | None = None
        self._raw: RawBuffers | None = None
        self._pc_options = pc
        self.serial = pc is not None and pc.serialize
        """Exact PC sampling: the launch callback must be Python's for every call."""
        self._users = list(asks.callback_users)
        if settings.graft is not None and launch_path is not None:
            from .graphs import GraphCaptures

            self._users.append(GraphCaptures(cupti, self.attributor.captured,
                                             self.attributor.capturing, launch_path,
                                             active=graphs.active, metric_tag=graphs.metric_tag,
                                             metric_nodes=self.attributor.metric_nodes))
        self.pc: PCCollector | None = None
        """The PCCollector while instructions are sampled."""
        self._custom = int(cupti.ExternalCorrelationKind.CUSTOM2)
        self._kinds = [cupti.ActivityKind.CONCURRENT_KERNEL]
        if not in_callback:  # the launch callback stands for the API and external records
            self._kinds += [cupti.ActivityKind.DRIVER, cupti.ActivityKind.RUNTIME,
                            cupti.ActivityKind.EXTERNAL_CORRELATION]
        K = cupti.ActivityKind
        drv = cupti_enum(cupti, "driver_api_trace_cbid", "DriverApiTraceCbid")
        rt = cupti_enum(cupti, "runtime_api_trace_cbid", "RuntimeApiTraceCbid")
        driver_copies = copy_calls(drv, _DRIVER_COPIES) if asks.copies else ()
        runtime_copies = copy_calls(rt, _RUNTIME_COPIES) if asks.copies else ()
        self._driver_cbids = _ids(drv, _DRIVER_LAUNCHES + _DRIVER_GRAPHS + driver_copies)
        self._runtime_cbids = _ids(rt, _RUNTIME_LAUNCHES + _RUNTIME_GRAPHS + runtime_copies)
        self._copy_kinds = [K.MEMCPY, K.MEMCPY2, K.MEMSET] if asks.copies else []
        """Copies and sets: on with kernel activity, off right after it."""
        self.shaper = Shaper(
            cupti, self.attributor, settings.sink, settings.groups, custom=self._custom,
            kernel_kind=int(K.CONCURRENT_KERNEL), external_kind=int(K.EXTERNAL_CORRELATION),
            copy_kinds=[int(k) for k in (K.MEMCPY, K.MEMCPY2, K.MEMSET)],
            api_cbids={int(kind): (np.array(sorted(launches), dtype=np.uint32),
                                   np.array(sorted(_ids(enum, graphs)), dtype=np.uint32))
                       for kind, launches, enum, graphs in (
                           (K.DRIVER, self._driver_cbids, drv, _DRIVER_GRAPHS),
                           (K.RUNTIME, self._runtime_cbids, rt, _RUNTIME_GRAPHS))},
            busy=asks.busy, launched=asks.launched, buffered=asks.buffered,
            recorded=[] if os.environ.get("PROTON_RECORD_CUPTI") else None)
        """The records side (shaping.py): what the pipeline shapes each buffer with."""
        self._lock = self.shaper.lock
        self.launch_configs = self.shaper.launch_configs
        """Each kernel's grid, block, registers and shared memory, numbered (the analyzer's)."""
        self.callback_errors = self.shaper.callback_errors
        self.recorded = self.shaper.recorded
        """With PROTON_RECORD_CUPTI=FILE, every buffer's records, saved at stop for replay tests."""
        self.opened = 0
        """CUPTI time from which every launch gets its kernel record (kernel activity on): a
        launch logged before it (the log and the API kinds are on first) is not waited for."""
        self._all_driver = [int(v) for v in drv.__members__.values()]
        self._all_runtime = [int(v) for v in rt.__members__.values()]
        driver, runtime = int(cupti.CallbackDomain.DRIVER_API), int(cupti.CallbackDomain.RUNTIME_API)
        self.sync_cbids = {driver: sorted(_ids(drv, _DRIVER_SYNCS)),
                           runtime: sorted(_ids(rt, _RUNTIME_SYNCS))} if asks.waits else {}
        """{callback domain: cbids} of the synchronizing calls, timed as waits."""
        self.async_copy_cbids = {driver: sorted(_ids(drv, _DRIVER_ASYNC_COPIES)),
                                 runtime: sorted(_ids(rt, _RUNTIME_ASYNC_COPIES))} if asks.waits else {}
        """{callback domain: cbids} of the asynchronous copies, waits when they held long."""
        self.python_syncs = PythonSyncs(self.sync_cbids, self.async_copy_cbids, launch_path, unscoped,
                                        self.timestamp)
        """Waits timed in Python where the C launch log is not used."""
        self.pipeline: Pipeline = choose(self.shaper, self, settings.native)
        """How launches are attributed and buffers read (pipeline.py), chosen once."""
        if self.pipeline.logs_launches:  # launch calls go to C first: no API or external records
            self._kinds = [cupti.ActivityKind.CONCURRENT_KERNEL]
        # Scopes call these at every enter and exit: the pipeline's own, bound once.
        self.push: Callable[[int], None] = self.pipeline.push
        """Launches on this thread carry `path_id` until the matching pop (shadow context)."""
        self.pop: Callable[[], None] = self.pipeline.pop
        self._moved = settings.moved
        self.main_path: Callable[[int], None]
        """The main thread's innermost scope is now `path_id`: launches on threads with no
        scope open go there (read by the C launch log at each launch; otherwise noted with
        its time for the `unscoped` callback, which places them from their records)."""
        self.push_main: Callable[[int], None]
        """push and main_path of a scope the main thread entered (one C call with the log)."""
        self.pop_main: Callable[[int], None]
        """pop, and main_path of the main thread's innermost scope after it (ROOT: none)."""
        if self.pipeline.logs_launches:
            self.main_path = self.pipeline.main_path
            self.push_main, self.pop_main = self.pipeline.push_main, self.pipeline.pop_main
        else:
            self.main_path = self._note_main
            self.push_main, self.pop_main = self._push_main, self._pop_main

    # -- lifetime -----------------------------------------------------------------------------
    def start(self) -> None:
        """Raises ProfilerConflictError when another profiler holds CUPTI."""
        from .buffers import loaded_libcupti, timestamp_address, warn_libcupti_mismatch
        from .subscriber import Subscriber, callback_fields

        cupti = self._cupti
        try:
            cupti.get_timestamp()  # loads libcupti
            path = loaded_libcupti()
        except (cupti.cuptiError, OSError) as exc:
            raise ProtonError(f"CUPTI could not start: {exc}") from None
        if path is None:
            raise ProtonError("CUPTI could not start: cupti-python loaded no libcupti")
        warn_libcupti_mismatch(path)
        self.fields = callback_fields(cupti)
        log, enter, on_api = self.pipeline.start(timestamp_address(path))
        if log is not None:
            log.sync_calls(self.sync_cbids, self.async_copy_cbids)
        else:
            self.python_syncs.launches = set(self.launch_callbacks())
            on_api = self.python_syncs.wrap(on_api)
        if self._pc_options is not None:
            on_api = self._start_pc(self._pc_options, path, on_api)
        for user in self._users:
            user.prepare(path)
            on_api = user.wrap(on_api)
        subscriber = Subscriber(path, on_api or _ignore, log, enter)
        try:
            subscriber.subscribe()
        except BaseException:
            self._release_users()
            raise
        self._subscriber = subscriber
        try:
            if self.pc is not None:
                subscriber.enable(self.pc.resource_domain, self.pc.module_cbid)
            for domain, cbid in (c for user in self._users for c in user.callbacks):
                subscriber.enable(domain, cbid)
            if self.in_callback or self.pipeline.logs_launches or (
                    self.pc is not None and self.pc.options.serialize):
                for domain, cbid in self.launch_callbacks():
                    subscriber.enable(domain, cbid)
            for domain, cbids in [*self.sync_cbids.items(), *self.async_copy_cbids.items()]:
                for cbid in cbids:  # these calls alone, never a whole domain
                    try:
                        subscriber.enable(domain, cbid)
                    except ProtonError as exc:  # a call this driver lacks: not timed
                        debug(f"waits: {exc}")
            self._register_buffers(path)
            # The launches are taken before kernel activity is on, so every kernel record has
            # its launch (a job launching on other threads meanwhile: a capture from outside).
            self.pipeline.enable(True)
            kernel, launch_kinds = self._kinds[0], self._kinds[1:]
            for kind in launch_kinds:
                cupti.activity_enable(kind)
            # Only the launch calls make API records: everything else stays off the hot path.
            api_records = not self.in_callback and not self.pipeline.logs_launches
            for cbid in self._all_driver if api_records else ():
                self._enable_api(cupti.activity_enable_driver_api, cbid,
                                 cbid in self._driver_cbids)
            for cbid in self._all_runtime if api_records else ():
                self._enable_api(cupti.activity_enable_runtime_api, cbid,
                                 cbid in self._runtime_cbids)
            for kind in self._copy_kinds:
                cupti.activity_enable(kind)
            cupti.activity_enable(kernel)
            self.opened = self.timestamp()
            if self.pc is not None:
                self._enable_pc()
        except (cupti.cuptiError, ProtonError) as exc:
            self.pipeline.enable(False)
            for kind in [*self._kinds, *self._copy_kinds]:
                try:
                    cupti.activity_disable(kind)
                except cupti.cuptiError:
                    pass
            subscriber.unsubscribe()
            self._subscriber = None
            self._release_users()
            raise ProtonError(f"CUPTI could not start collecting: {exc}") from None

    def launch_callbacks(self) -> list[tuple[int, int]]:
        """(domain, cbid) of the launch callbacks: the driver's launch calls only. A runtime
        launch (cudaLaunchKernel, as PyTorch launches) makes its driver launch call inside it,
        under the same correlation id (H100, CUDA 13: 199 of 199 in a bf16 step,
        bench/step_cost.py): with both domains each PyTorch launch would call back twice (the
        python context's Python too), and every callback costs (~0.45 us, measured there).
        Copies and sets too: a runtime copy or set makes its driver call inside it, under the
        same correlation id (H200, CUDA 13, the bf16 step: cudaMemsetAsync's cuMemsetD8Async
        36 of 36, cudaMemcpyAsync's cuMemcpyHtoDAsync_v2; test_gpu_copies: torch's copies,
        cudaMemcpy, cudaMemsetAsync), so the runtime's would only double the callbacks."""
        domain = int(self._cupti.CallbackDomain.DRIVER_API)
        return [(domain, cbid) for cbid in self._driver_cbids]

    def _release_users(self) -> None:
        for user in self._users:
            user.release()

    def _start_pc(self, options: PCOptions, lib_path: str, on_launch):
        """Set up instruction sampling; the subscriber callback to use. When sampling cannot
        run here, say why once and go on with kernel times (the time profile is still written)."""
        from .pc_collector import PCCollector

        try:
            self.pc = PCCollector(options, lib_path, self._cupti)
        except OSError as exc:
            warn(f"PC sampling is off: {exc}; the profile gets kernel times only")
            return on_launch
        if not self.pc.options.serialize:
            return self.pc.module_callback(on_launch)
        return self.pc.launch_callback(on_launch, self._serial_launch_path(), self.fields)

    def _enable_pc(self) -> None:
        """Start sampling after the activity kinds (CUPTI refuses them once it samples)."""
        from .pcsampling import PCSamplingError

        pc = cast("PCCollector", self.pc)  # made by _start_pc
        try:
            pc.enable()
        except PCSamplingError as exc:
            pc.closed = True  # its callbacks stay subscribed and do nothing
            self.pc = None
            warn(f"PC sampling is off: {exc}; the profile gets kernel times only")

    def _serial_launch_path(self):
        """Exact PC sampling: the path of the launch being made, at its enter (after the
        python context's callback registered it, if that runs)."""
        if not self.in_callback:
            launch_path = self._launch_path
            return lambda data: launch_path(None)
        registered, corr_at = self.attributor.launch_path, self.fields[1]

        def path(data: int) -> int:
            found = registered(_u32(data + corr_at).value)
            return ROOT if found is None else found

        return path

    def _enable_api(self, enable, cbid: int, on: bool) -> None:
        try:
            enable(cbid, int(on))
        except self._cupti.cuptiError:
            if on:  # placeholders (INVALID, SIZE, FORCE_INT) are refused; launch calls must not be
                raise

    def stop(self) -> None:
        """Release CUPTI so another profiler may take it. The sessions' windows were flushed
        when they were finalized; what the job launched since is outside them, not waited
        for. Kernel activity goes off first, so a kernel recorded has its launch taken."""
        cupti = self._cupti
        for kind in [self._kinds[0], *self._copy_kinds, *self._kinds[1:]]:  # records first
            cupti.activity_disable(kind)
        cupti.activity_flush_all(1)
        if self._subscriber is not None:
            self._subscriber.unsubscribe()
            self._subscriber = None
        self.pipeline.enable(False)
        if self._raw is not None:
            self._raw.detach()
        self._release_users()
        self._detach()
        if self.recorded is not None:
            write_whole(os.environ["PROTON_RECORD_CUPTI"],
                        json.dumps({"frames": [list(_plain(fr)) for fr in paths.frames],
                                    "buffers": self.recorded}))

    def _detach(self) -> None:
        """cuptiFinalize: CUPTI leaves the process, and the next session attaches afresh.
        Merely unsubscribed, CUPTI stays attached in a state where a later PC sampling session
        counts the samples of modules loaded before as non-user (H100, driver 580: a --listen
        GPT job, `--steps 3` then `--steps 3 -m pcsampling`, 176,829 of 176,829 samples lost; a
        session ended while another thread launched, 4,671 of 32,046, its torch kernels none;
        with cuptiFinalize after either, none beyond a fresh process's: bench/probes/
        pc_after_sessions.py, pc_listen_orders.py). CUPTI's documentation asks for the
        buffers flushed first, which stop() has done; the GPU is not synchronized, since the
        job may go on launching from other threads."""
        from .buffers import loaded_libcupti

        try:
            path = loaded_libcupti()
            rc = ctypes.CDLL(path).cuptiFinalize() if path else 0
        except (OSError, AttributeError) as exc:
            rc = str(exc)
        if rc:
            warn(f"CUPTI did not detach (cuptiFinalize: {rc}); a later pcsampling session in "
                 "this process may find no samples for modules loaded before it")

    def timestamp(self) -> int:
        return self._cupti.get_timestamp()

    def _note_main(self, path_id: int) -> None:
        if self._moved is not None:
            self._moved(self.timestamp(), path_id)

    def _push_main(self, path_id: int) -> None:
        self.push(path_id)
        self._note_main(path_id)

    def _pop_main(self, path_id: int) -> None:
        self.pop()
        self._note_main(path_id)

    # -- launches (called on the user's threads) ---------------------------------------------
    def launch_enter(self, unscoped_now: Unscoped | None = None):
        """context="python": the launch call's enter, on the launching thread, as
        on_enter(correlation id, CUPTI timestamp, cbid) (a closure: this runs at every launch,
        so every name is local). The launch is registered with its call path and start time
        (a thread with no Python frames, such as PyTorch's autograd thread, gets Attributor's
        unscoped path, or `unscoped_now`'s: the C launch log's, which notes no timeline).
        The C launch log calls it with CUPTI's fields read (its exit stays in C); without the
        helper, launch_callback does.

        A thread that runs no Python gets a fresh Python thread state for each callback unless
        one is kept for it: on a CPU, 16 us a launch (enter and exit) against 0.7 kept
        (bench/probe_foreign_thread.py). With PROTON_KEEP_THREAD_STATES=1 the first callback on
        such a thread keeps its thread state (one PyGILState_Ensure never released); off, as
        PyTorch's autograd threads keep theirs (the model step on an H100 was no faster).

        It returns the path launch_path gave (-1: none, or not placed), which the C helper's
        walk remembers for the launching stack."""
        graphs = self._graph_cbids()
        register = self.attributor.register_launch
        capturing, in_capture = self.attributor.capturing, self.attributor.in_capture
        getframe, thread = sys._getframe, threading.get_ident
        errors, unscoped = self.callback_errors, self._unscoped
        launch_path = cast("LaunchPath", self._launch_path)  # set: the python context's
        unscoped = unscoped_now or unscoped
        kept: set[int] | None = set() if os.environ.get(KEEP_STATES_ENV) == "1" else None
        keep = ctypes.pythonapi.PyGILState_Ensure
        noted = self.shaper.launched

        def on_enter(corr: int, start: int, cbid: int) -> int:
            try:
                if capturing and cbid not in graphs and in_capture(thread() & 0xFFFFFFFF, start):
                    return -1  # recorded into a graph: no kernel record will come for it
                path = found = launch_path(caller(getframe().f_back))
                if path is None:  # no Python frames, no scope: CUPTI's 32-bit thread id
                    me = thread()
                    if kept is not None and me not in kept:
                        keep()
                        kept.add(me)
                    path, found = unscoped(me & 0xFFFFFFFF, start) if unscoped else ROOT, -1
                register(corr, path, start, cbid in graphs)
                if noted is not None:
                    noted((corr,), (start,))
                return found  # type: ignore[return-value]  # -1 where launch_path gave None
            except BaseException as exc:
                callback_failed("in the launch callback", exc, errors)
                return -1

        return on_enter

    def _graph_cbids(self) -> set[int]:
        """The graph launch calls' cbids; they are told apart from the other launch calls' by
        number alone (checked: driver and runtime ids of launch calls do not clash with them)."""
        graphs = {cbid for cbid, name in self._driver_cbids.items() if name in _DRIVER_GRAPHS}
        graphs |= {cbid for cbid, name in self._runtime_cbids.items() if name in _RUNTIME_GRAPHS}
        if graphs & (set(self._driver_cbids) | set(self._runtime_cbids)) - graphs:
            raise ProtonError("CUPTI's graph-launch ids clash with other launch calls' ids")
        return graphs

    def logged_enters(self):
        """context="python" with the C launch log: the launches it logged instead of calling
        launch_enter's on_enter (made on a thread running no Python, with no scope open),
        registered as on_enter would have, as register(correlation ids, paths (-1: none),
        starts, cbids, threads), on the buffer thread before that buffer's kernels are read.
        The C log read the main thread's innermost scope at the enter (-1 when it had none:
        the timeline says, as for on_enter)."""
        graphs, attributor, unscoped = self._graph_cbids(), self.attributor, self._unscoped
        capturing, in_capture = attributor.capturing, attributor.in_capture
        add, noted = attributor.register_launch, self.shaper.note_launches

        def register(corrs, paths_, starts, cbids, threads) -> None:
            noted(corrs, starts)
            for corr, path, start, cbid, thread in zip(corrs, paths_, starts, cbids, threads):
                if capturing and cbid not in graphs and in_capture(thread, start):
                    continue  # recorded into a graph: no kernel record will come for it
                if path < 0:
                    path = unscoped(thread, start) if unscoped else ROOT
                add(corr, path, start, cbid in graphs)

        return register

    def launch_callback(self):
        """context="python" without the C helper: CUPTI's callback at a launch call's enter
        and exit. The enter goes to launch_enter's; at the exit, a failed call is withdrawn:
        no kernel will come for it."""
        site, corr_at, ret_at = self.fields
        on_enter, cancel = self.launch_enter(), self.attributor.cancel_launch
        now, errors = self._cupti.get_timestamp, self.callback_errors

        @passes_on  # on_enter reads the launching frame past this one
        def on_api(userdata, domain, cbid, data) -> None:
            try:
                if _u32(data + site).value:  # the exit
                    if _i32(_ptr(data + ret_at).value).value:  # type: ignore[arg-type]
                        cancel(_u32(data + corr_at).value)
                    return
                on_enter(_u32(data + corr_at).value, now(), cbid)
            except BaseException as exc:
                callback_failed("in the launch callback", exc, errors)

        return on_api

    # -- waits and busy time -----------------------------------------------------------------
    def take_syncs(self) -> tuple[list[int], list[int], list[int]]:
        """(paths, ns, counts): the CPU's time in synchronizing calls since the last take."""
        return self.pipeline.take_syncs()

    def wait_events(self, on: bool) -> None:
        """While on, each wait is also kept as an event (take_wait_events), for a trace."""
        self.pipeline.wait_events(on)

    def take_wait_events(self) -> list[tuple[int, int, int, int]]:
        """The waits kept as events since the last take: (path, start, end, thread id), on
        CUPTI's clock (the kernels'), the thread as threading.get_ident() names it."""
        return self.pipeline.take_wait_events()

    @property
    def wait_events_dropped(self) -> int:
        """Waits not kept as events: more than native.WAIT_EVENTS_MAX between two takes."""
        log = getattr(self.pipeline, "log", None)
        return (log.wait_events_dropped if log is not None else 0) + \
            self.python_syncs.events_dropped

    def watermark(self) -> int:
        """A CUPTI time before which every kernel record has come: the earliest start of the
        launches still waiting for theirs (made with kernel activity on: one made before may
        never get one), else now."""
        now = self.timestamp()
        with self._lock:
            self.pipeline.settle()
            oldest = self.pipeline.oldest(self.opened, now)
        return min(oldest, self.attributor.oldest(self.opened, now))

    # -- records ------------------------------------------------------------------------------
    def deliver(self) -> None:
        """Have CUPTI hand over the records it holds now (no waiting for the GPU)."""
        self._cupti.activity_flush_all(1)

    def own_waits(self, on: bool) -> None:
        """While on, the calling thread's synchronizing calls are not timed as waits."""
        log = getattr(self.pipeline, "log", None)
        if log is not None:
            log.own_waits(on)
        self.python_syncs.own(on)

    def flush(self, timeout_s: float = 10.0, until: int | None = None) -> int:
        """Deliver every record of the launches made by `until` (CUPTI time; None: now, the
        end of the window being closed); return how many never came within `timeout_s`.
        Launches made later (the program runs on, as during a capture) are not waited for;
        on a thread without a CUDA context nothing is synchronized, the records are polled
        for until they come or `timeout_s` passes."""
        from . import gpu

        t0 = time.monotonic()
        until = self.timestamp() if until is None else until
        self.own_waits(True)  # the profiler's wait, not the job's: no sync_time for it
        try:
            gpu.synchronize()
        finally:
            self.own_waits(False)
        deadline = t0 + timeout_s
        rounds = 0
        while True:
            self._cupti.activity_flush_all(1)
            rounds += 1
            waiting = self.waiting_before(until)
            if waiting == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if (flushed := self.settings.graphs.flushed) is not None:
            self.own_waits(True)
            try:
                flushed(self)
            except Exception as exc:  # the records flushed are still worth having
                warn(f"the CUDA graph metric values could not be read: {type(exc).__name__}: "
                     f"{exc}")
            finally:
                self.own_waits(False)
        if debugging():
            debug(f"flush took {time.monotonic() - t0:.3f} s in {rounds} rounds, "
                  f"{waiting} launches still waiting")
        return waiting

    def dropped_records(self) -> int:
        """Records CUPTI dropped, and launches the C launch log could not keep."""
        lost = self.pipeline.lost
        out = np.zeros(1, dtype=np.uint64)
        try:
            self._cupti.activity_get_num_dropped_records(0, 0, out.ctypes.data)
        except self._cupti.cuptiError:
            return lost
        return lost + int(out[0])

    def _register_buffers(self, lib_path: str) -> None:
        from .buffers import RawBuffers

        try:
            self._raw = RawBuffers.shared(lib_path, BUFFER_SIZE)
            self.pipeline.attach(self._raw)
            self._raw.register()
        except (OSError, AttributeError) as exc:
            raise ProtonError(f"CUPTI's activity buffers could not be set up: {exc}") from None

    @property
    def records(self) -> int:
        """Records read (the pipeline counts them in the shaper)."""
        return self.shaper.records

    @property
    def callback_seconds(self) -> float:
        """Time spent reading records on CUPTI's thread (holding the GIL)."""
        return self.shaper.callback_seconds

    @property
    def launches(self) -> int:
        """Launch records joined (a graph launch counts once)."""
        return self.attributor.launches + self.pipeline.launches

    @property
    def kernels(self) -> int:
        """Kernels attributed."""
        return self.attributor.kernels + self.pipeline.kernels

    def waiting_before(self, ts: int) -> int:
        """Launch calls made by `ts`, with kernel activity on, whose kernel record has not
        come yet."""
        with self._lock:
            self.pipeline.settle()
            joined = self.pipeline.waiting(ts, self.opened)
        return joined + self.attributor.waiting_before(ts, self.opened)

    def finish(self, until: int | None = None) -> int:
        """Give kernels whose launch record never came to the root (or the path of their
        external record); return how many of them started while kernel activity was on and
        by `until` (None: no bound): the others are no session's. One that started later may
        have been launched after every session's window ended; one that started before is a
        record CUPTI held back from an earlier session of the process, whose stop cut it off
        (seen on an H100: a kernel launched by the job between the last flush and the end of
        kernel activity, delivered in the next capture)."""
        with self._lock:
            self.pipeline.settle()
            lost = self.pipeline.finish(self.opened, until)
            return lost + self.attributor.finish(self.opened, until)


class PythonSyncs:
    """Waits timed in Python (no C launch log): the subscriber's callback for the synchronizing
    calls, a few dict and clock reads per call (these calls wait anyway); sums per path."""

    def __init__(self, cbids: dict[int, list[int]], copies: dict[int, list[int]],
                 launch_path: LaunchPath | None, unscoped: Unscoped | None,
                 now: Callable[[], int]) -> None:
        """cbids, copies: the synchronizing calls and the asynchronous copies (waits when they
        held native.ASYNC_WAIT_NS or more) by callback domain; launch_path: where the
        calling thread is (None: no scope of its own); unscoped: then where the main thread
        was (as for launches; else the root)."""
        self._cbids = {(d, c): 1 for d, cs in cbids.items() for c in cs}
        self._cbids.update({(d, c): 2 for d, cs in copies.items() for c in cs})
        self._launch_path, self._unscoped, self._now = launch_path, unscoped, now
        self._local = threading.local()
        self._sums: dict[int, list[int]] = {}
        self._lock = threading.Lock()
        self.on = True
        self.keep_events = False
        """Each wait is also kept as an event (take_events) for a trace."""
        self._events: list[tuple[int, int, int, int]] = []
        self.events_dropped = 0
        """Events not kept: past native.WAIT_EVENTS_MAX held (as the C log bounds them)."""
        self.launches: set[tuple[int, int]] = set()
        """(domain, cbid) of the calls the wrapped callback takes as launches (copies among
        them): passed on to it besides being timed."""

    def wrap(self, on_api):
        """The callback that times the synchronizing calls and hands the rest to `on_api`."""
        syncs, local, now, launches = self._cbids, self._local, self._now, self.launches
        sums, lock, launch_path, unscoped = self._sums, self._lock, self._launch_path, \
            self._unscoped
        from .subscriber import callback_fields

        def on_sync(userdata, domain, cbid, data) -> None:
            kind = syncs.get((domain, cbid))
            if kind is None or (domain, cbid) in launches:
                if on_api is not None:  # a copy call is a wait and a launch: both see it
                    on_api(userdata, domain, cbid, data)
                if kind is None:
                    return
            try:
                if getattr(local, "own", False):
                    return
                depth = getattr(local, "depth", 0)
                if _u32(data + at[0]).value == 0:  # the enter
                    local.depth = depth + 1
                    if depth == 0:
                        local.start, local.kind = now(), kind
                    return
                local.depth = depth = max(depth - 1, 0)
                if depth or not self.on:
                    return
                ns = now() - local.start
                if local.kind == 2 and ns < ASYNC_WAIT_NS:
                    return  # an asynchronous copy that did not wait
                path = launch_path(caller(sys._getframe().f_back)) if launch_path else None
                if path is None:
                    path = unscoped(threading.get_ident() & 0xFFFFFFFF, local.start) \
                        if unscoped is not None else ROOT
                with lock:
                    got = sums.setdefault(path, [0, 0])
                    got[0] += ns
                    got[1] += 1
                    if self.keep_events:
                        if len(self._events) < WAIT_EVENTS_MAX:
                            self._events.append((path, local.start, local.start + ns,
                                                 threading.get_ident()))
                        else:
                            self.events_dropped += 1
            except BaseException as exc:
                callback_failed("in the wait callback", exc, [])

        from cupti import cupti

        at = callback_fields(cupti)
        return passes_on(on_sync)

    def own(self, on: bool) -> None:
        """While on, this thread's synchronizing calls are the profiler's own: not timed."""
        self._local.own = on

    def take(self) -> tuple[list[int], list[int], list[int]]:
        with self._lock:
            items = list(self._sums.items())
            self._sums.clear()
        return [p for p, _ in items], [v[0] for _, v in items], [v[1] for _, v in items]

    def take_events(self) -> list[tuple[int, int, int, int]]:
        """The waits kept as events since the last take: (path, start, end, thread)."""
        with self._lock:
            events, self._events = self._events, []
        return events
