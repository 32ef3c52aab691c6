"""Instruction sampling for a `mode="pcsampling"` session: CUPTI's PC sampling on the current
CUDA context, cubins for source lines, and the samples' way onto the session's kernel nodes.

Continuous (default): sampling runs while the session is active and is read once at the end;
launches pay nothing. A function's samples are split over the call paths that ran it by GPU time
(pc_samples). Exact (`pcsampling:serialize=1`): CUPTI's KERNEL_SERIALIZED collection runs each
kernel alone and has its samples ready when the launch call returns; the launch callback reads
them there, so they go to that launch's path (measured on an H200: 2.8 ms a launch, against 4.7
for start/stop around each launch).

Source lines need the cubin whose CRC each PC carries: Triton kernels' cubins come from
compiler.kernels (also those loaded before the session started); any other module loaded while
sampling is copied at CUPTI's MODULE_LOADED callback.

At the end, `place_samples` puts the counts on the session's kernel nodes and their source-line
children (`file:line@function`).
"""
from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, cast

from ..data.paths import LINE, ROOT, paths
from ..data.pc_samples import SampleTable
from ..format import frame_name
from ..options import PCOptions
from ..report import callback_failed, debug, debugging, warn
from . import main_thread
from .main_thread import MainThreadBusy
from .pcsampling import Library, PCSamplingError, Sampler
from .subscriber import passes_on

if TYPE_CHECKING:
    from ..compiler.kernels import KernelTable

NO_CUBIN = ("its module loaded before sampling started and is no Triton kernel, so Proton does "
            "not hold its cubin (library kernels such as cuBLAS's and PyTorch's seldom carry "
            "lines anyway); start profiling before its first launch to read it")
NO_LINE_INFO = ("its cubin has no line table (a library kernel, or one compiled without "
                "-lineinfo)")


def _context() -> tuple[int, int, bool]:
    """(CUcontext, device ordinal, retained): the calling thread's current context, else device
    0's primary context (what torch and Triton use), retained until `release`."""
    from cuda.bindings import driver

    ok = driver.CUresult.CUDA_SUCCESS
    err, ctx = driver.cuCtxGetCurrent()
    if err == ok and int(ctx):
        err, device = driver.cuCtxGetDevice()
        return int(ctx), int(device) if err == ok else 0, False
    err, device = driver.cuDeviceGet(0)
    err2, ctx = driver.cuDevicePrimaryCtxRetain(device) if err == ok else (err, None)
    if err2 != ok:
        raise PCSamplingError(f"no CUDA context to sample ({err2.name})")
    return int(cast(Any, ctx)), 0, True


class PCCollector:
    """The process's PC sampling, shared by its pcsampling sessions (they run with the first
    one's options): it samples while any of them is active."""

    def __init__(self, options: PCOptions, lib_path: str, cupti) -> None:
        """The callbacks work from here on; sampling starts with `enable()`."""
        self.options = options
        self.lib = Library(lib_path)
        self.sampler: Sampler | None = None
        self.table: SampleTable | None = None
        self.context = self.device = 0
        self._retained = False
        self._modules: list[bytes] = []
        """Cubins of modules loaded while sampling (copied: CUPTI's pointer dies at unload)."""
        self._lock = threading.Lock()
        self.active = False
        """The session is active: exact mode samples launches only then."""
        self.closed = False
        fields = cupti.resource_data_dtype.fields
        self._descriptor_at = fields["resource_descriptor"][1]
        fields = cupti.module_resource_data_dtype.fields
        self._size_at, self._cubin_at = fields["cubin_size"][1], fields["p_cubin"][1]
        self.module_cbid = int(cupti.CallbackIdResource.MODULE_LOADED)
        self.resource_domain = int(cupti.CallbackDomain.RESOURCE)
        self._kernels: KernelTable | None = None
        try:
            from ..compiler.kernels import cached_cubins, kernels

            kernels.install()  # Triton kernels loaded so far, and every later load
            self._kernels = kernels
            self._cached_cubins = cached_cubins
        except ImportError:  # no Triton: CUDA modules loaded while sampling still get lines
            self._kernels = None

    def enable(self) -> None:
        """Enable and configure sampling on the context, on the main thread (main_thread.py).
        CUPTI refuses activity kinds enabled after it (ERROR_NOT_COMPATIBLE), so this comes
        last. Raises PCSamplingError (one line: why, and the fix) when sampling cannot run
        here."""
        try:
            main_thread.call(self._enable, timeout=main_thread.TIMEOUT,
                             what="switching PC sampling on")
        except MainThreadBusy as exc:
            raise PCSamplingError(str(exc)) from None

    def _enable(self) -> None:
        self.context, self.device, self._retained = _context()
        try:
            self.sampler = Sampler(self.lib, self.context, period=self.options.interval,
                                   serialized=self.options.serialize)
        except PCSamplingError:
            self._release()
            raise
        self.table = SampleTable(self.sampler.stall_reasons)

    # -- running ------------------------------------------------------------------------------
    def resume(self) -> None:
        """The session became active: sampling starts (on the main thread)."""
        self.active = True
        sampler = self.sampler
        if not self.options.serialize and sampler is not None and not self.closed:
            try:
                main_thread.call(sampler.start, timeout=main_thread.TIMEOUT,
                                 what="starting PC sampling")
            except (MainThreadBusy, PCSamplingError) as exc:
                warn(f"PC sampling did not start: {exc}; the profile gets kernel times only")

    def pause(self) -> None:
        """The session became inactive: stop and keep what was sampled (on the main thread;
        when it is busy, the stop waits for it and these samples are lost)."""
        self.active = False
        if self.sampler is not None and self.sampler.started:
            self._read_on_main(self._stop, "stopping PC sampling", "this stretch's samples")

    def counted(self) -> dict:
        """A copy of the counts so far (SampleTable.since takes what came after)."""
        return dict(self.table.counts) if self.table is not None else {}

    def read(self) -> None:
        """Take in what was sampled so far and go on sampling (a session ends beside another
        that still samples)."""
        if self.active and self.sampler is not None and self.sampler.started:
            self.pause()
            self.resume()

    def _read_on_main(self, read, what: str, lost: str) -> bool:
        """read() on the main thread (kept for it when it is busy), its samples into the
        table; whether it ran in time (if not, says what was `lost`)."""
        try:
            drained = main_thread.call(read, timeout=main_thread.TIMEOUT, what=what, keep=True)
        except (MainThreadBusy, PCSamplingError) as exc:
            # CUPTI refusing a stop (an H200 once gave cuptiPCSamplingStop error 1 at a job's
            # end) costs these samples, never the profile or the job's exit status
            warn(f"PC sampling lost {lost}: {exc}")
            return False
        cast(SampleTable, self.table).add(drained)  # made by enable()
        return True

    def _stop(self) -> list:
        sampler = cast(Sampler, self.sampler)  # made by enable()
        with self._lock:  # one sampling buffer: one reader at a time
            sampler.stop()
            return sampler.drain()

    def on_module(self, cbdata: int) -> None:
        """CUPTI's MODULE_LOADED callback: keep a copy of the cubin."""
        descriptor = ctypes.c_void_p.from_address(cbdata + self._descriptor_at).value
        if not descriptor or self.closed:
            return
        size = ctypes.c_size_t.from_address(descriptor + self._size_at).value
        cubin = ctypes.c_void_p.from_address(descriptor + self._cubin_at).value
        if cubin and size:
            self._modules.append(ctypes.string_at(cubin, size))  # list.append is atomic

    def launch_callback(self, on_launch, launch_path, cupti_fields):
        """Exact mode: a subscriber callback that notes the launch's path at a launch call's
        enter (`launch_path(cbdata)`, on the launching thread) and, at its exit, reads the
        kernel's samples (ready then: CUPTI serialises) and counts them under that path.
        `on_launch` is the collector's own launch callback, if it has one; module loads go to
        on_module."""
        site_at, _, _ = cupti_fields
        local = threading.local()

        @passes_on
        def on_launch_call(userdata, domain, cbid, data) -> None:
            if on_launch is not None:
                on_launch(userdata, domain, cbid, data)
            try:
                sampler = self.sampler
                if sampler is None or self.closed:
                    return
                if not ctypes.c_uint32.from_address(data + site_at).value:  # the enter
                    local.path = launch_path(data) if self.active else None
                    return
                path = getattr(local, "path", None)
                with self._lock:  # launches from several threads share one sampling buffer
                    drained = sampler.drain()  # inactive stretches' kernels: read, dropped
                    if path is not None and drained:
                        cast(SampleTable, self.table).add(drained, path)
            except BaseException as exc:
                callback_failed("in PC sampling around a launch", exc)

        return self.module_callback(on_launch_call)

    def module_callback(self, on_launch):
        """The subscriber callback: module loads go to on_module, launch calls to `on_launch`
        (if any)."""
        resource, module = self.resource_domain, self.module_cbid

        @passes_on
        def on_api(userdata, domain, cbid, data) -> None:
            if domain != resource:
                if on_launch is not None:
                    on_launch(userdata, domain, cbid, data)
            elif cbid == module:
                try:
                    self.on_module(data)
                except BaseException as exc:
                    callback_failed("while keeping a loaded module's cubin", exc)

        return on_api

    # -- the end --------------------------------------------------------------------------------
    def finish(self) -> None:
        """Stop, read the rest, disable and release the context (on the main thread); report
        dropped samples and a full buffer."""
        self.closed = True
        if self._read_on_main(self._finish, "switching PC sampling off", "its last samples"):
            self._report()

    def _finish(self) -> list:
        sampler = cast(Sampler, self.sampler)  # made by enable()
        try:
            drained = self._stop() if sampler.started else []
            if self.options.serialize:
                sampler.drain()  # kernels launched by no launch call we saw: dropped
            return drained
        finally:
            sampler.disable()
            self._release()

    def _report(self) -> None:
        """Say what the sampling lost."""
        s, table = cast(Sampler, self.sampler), cast(SampleTable, self.table)
        if debugging():
            debug(f"PC sampling: {table.samples} samples over {len(table.counts)} "
                  f"(PC, reason) pairs; CUPTI total {s.total_samples}, non-user kernels "
                  f"{s.non_user_samples}")
        # CUPTI's non-user kernels are the driver's own, memsets above all (H100: every
        # sample of cudaMemsetAsync, 14% of a uint8 fill_, 0.1% of a bf16 matmul, about 8% of
        # a GPT training step; bench/probes/pc_non_user_kinds.py): no kernel of the profile
        # misses them. Most of a session's samples there means something else went wrong.
        if s.non_user_samples > 0.5 * max(s.total_samples, 1):
            warn(f"PC sampling: {s.non_user_samples} of {s.total_samples} samples fell in "
                 "kernels CUPTI counts as non-user (the driver's own, such as memsets) and "
                 "gives no PC records for; no kernel of the profile has them")
        if s.dropped_samples or s.hardware_buffer_full:
            warn(f"PC sampling lost samples: {s.dropped_samples} dropped by the hardware, "
                 f"buffer full {s.hardware_buffer_full} times; sample less often "
                 f"(pcsampling:interval={self.options.interval + 2})")

    def _release(self) -> None:
        if self._retained:
            from cuda.bindings import driver

            driver.cuDevicePrimaryCtxRelease(driver.CUdevice(self.device))
            self._retained = False

    def line_finder(self):
        """lines(crc, function, offset) for pc_samples: (file, line) or why there is none."""
        cubins: dict[int, bytes] = {}
        sources = list(self._modules)
        if self._kernels is not None:
            sources += [c for c in (k.cubin() for k in list(self._kernels.by_function.values()))
                        if c]
        searched: set[str] = set()

        def add(found) -> None:
            for cubin in found:
                try:
                    cubins.setdefault(self.lib.cubin_crc(cubin), cubin)
                except PCSamplingError:
                    continue

        add(sources)

        def lines(crc: int, function: str, offset: int):
            cubin = cubins.get(crc)
            if cubin is None and self._kernels is not None and function not in searched:
                searched.add(function)  # a Triton kernel Triton's launcher did not load
                add(self._cached_cubins(function))
                cubin = cubins.get(crc)
            if cubin is None:
                return NO_CUBIN
            return self.lib.source_line(cubin, function, offset) or NO_LINE_INFO

        return lines


# kernel_path(path id, kernel name, device) -> the kernel's node (the session's kernel router)
KernelPath = Callable[[int, str, int], int]


def place_samples(pc: PCCollector, kernel_times: dict[str, list[tuple[int, float]]],
                  kernel_path: KernelPath, since: dict | None = None,
                  finish: bool = True) -> Iterator[tuple[int, dict[str, int], str]]:
    """Finish sampling (or, with `finish` False, read what was sampled so far); yield (node,
    metrics, why) for each group of the samples counted after `since` (PCCollector.counted;
    None: all): a kernel node's source-line child with `why` "", or the kernel node itself
    with why its samples have no line. `kernel_times`: {kernel name: [(kernel node, GPU ns)]}
    of the session, by which a continuously sampled function's samples are split over its
    call paths."""
    if finish:
        pc.finish()
    else:
        pc.read()

    def kernel_nodes(path: int | None, function: str) -> list[tuple[int, float]]:
        if path is None:  # continuous: the function's nodes, weighted by their GPU time
            return kernel_times.get(function) or [(kernel_path(ROOT, function, pc.device), 1)]
        return [(kernel_path(path, function, pc.device), 1)]

    table = cast(SampleTable, pc.table).since(since)
    for group in table.attribute(pc.line_finder(), kernel_nodes):
        if group.line is None:
            yield group.kernel, table.metrics(group.counts), group.why
        else:
            file, line = group.line
            node = paths.intern(group.kernel, frame_name(file, line, group.function), LINE)
            yield node, table.metrics(group.counts), ""
