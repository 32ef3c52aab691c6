"""backend="instrumentation": kernels compiled while the session lives record their
proton.language scopes; their buffers are read in batches, never with a sync per launch.

While installed:
- Triton's nvidia backend runs the proton passes at `make_llir` (its `instrumentation` hook)
  and `knobs.compilation.instrumentation_mode` is set, which is part of Triton's cache key:
  kernels compile anew, instrumented, and a kernel compiled outside the session is neither
  changed nor reused (uninstall puts both back).
- Triton's launcher asks the profile allocator for `grid * profile_scratch_size` bytes before
  each launch. The Arena hands out consecutive slices of one device buffer; the launch hooks
  note (kernel, slice, call-path node). When a launch does not fit, and at the end, the arena
  is read at once: one device sync and one copy for all the launches it holds (Triton's Proton
  syncs and copies after every launch), then decoded a kernel at a time (data/intra.py).
- What each loaded instrumented kernel is (KernelInfo) is kept for the process: a later session
  with the same mode launches the kernel Triton keeps in memory, which is not loaded again.
- Host copies (InstrumentationHook.enable_host_buffer, through runtime/ops.py): only while
  switched on, a launch exit hook copies each launch's buffer, with Triton's header, to the
  host (`host_buffer`); that costs a sync per launch, as in Triton's Proton.

Triton 3.6.0 and 3.9.0 (_PASS_HOOKS: how each takes the passes; both write data/intra.py's
layout, 3.9 adds events); another version fails at start() with one line.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import settings
from ..context.frames import launch_parent
from ..context.stack import per_thread
from ..data import intra
from ..data.paths import SCOPE, paths
from ..data.chrome_trace import WarpSpan
from ..errors import SessionError
from ..format import (CYCLES, DEVICE_ID, EXCLUSIVE, NORMALIZED_CYCLES, PROPERTY, WARP_CYCLES,
                      WARP_EVENTS)
from ..mode import InstrumentationMode
from ..report import warn
from . import intra_native

ARENA_BYTES = settings.value("PROTON_INSTRUMENTATION_ARENA")
"""Device bytes the launches' buffers are cut from before a read (one sync per fill)."""
ALIGN = 128
"""Triton (3.6 and 3.9) asks its profile allocator for this alignment."""
MAX_SCRATCH_BYTES = 1 << 31
SHARED_MAX_BYTES = 8192
"""Triton (3.6 and 3.9) sizes a shared record buffer at most this per CTA (larger buffer_size asks are
cut to it; checked by compiling for sm_90); a global one takes any size."""
MEDIAN_SAMPLE = 1 << 20
"""Warp events kept per scope for the median (min and max are exact)."""
TIMELINE_EVENTS = 32768
"""Warp events of one launch a tree profile keeps per kernel for the warp timeline (its
first CTAs' when the launch has more)."""
compiling = False
"""True while a session compiles kernels instrumented (proton.language's records are on)."""
host_copy = False
"""InstrumentationHook.enable_host_buffer: copy each launch's raw buffer to `host_buffer`."""
host_buffer: Any = None
"""The last instrumented launch's buffer on the host (a torch uint8 CPU tensor) in the layout
of Triton's InstrumentationHook.host_buffer (intra.host_header, then the raw CTA blocks); None
before the first such launch, at each launch's start and once the session ends."""


def check_triton() -> None:
    """Raises SessionError unless the installed Triton is one whose passes and buffers we
    know (_PASS_HOOKS)."""
    pass_hook()


def pass_hook() -> "_BackendAttribute | _Registered":
    """How the installed Triton takes the compiler passes: the one place that reads its
    version (SessionError for one we do not know)."""
    try:
        import triton
    except ImportError:
        raise SessionError("backend='instrumentation' needs Triton (pip install triton==3.9.0)"
                           ) from None
    hook = _PASS_HOOKS.get(triton.__version__)
    if hook is None:
        raise SessionError(f"backend='instrumentation' reads Triton {' and '.join(_PASS_HOOKS)}'s "
                           f"buffers; this is Triton {triton.__version__}: install "
                           f"triton=={max(_PASS_HOOKS)} or use triton.profiler for this version")
    return hook()


@dataclass(slots=True)
class KernelInfo:
    """What one loaded instrumented kernel needs to be read."""

    name: str
    scratch: int
    """profile_scratch_size: bytes per CTA."""
    num_warps: int
    scope_names: dict[int, str]
    scope_parents: dict[int, int]
    warps: tuple[int, ...] = ()
    """The warps that record, a buffer segment each (intra.recorded_warps; () for all)."""

    @property
    def recorded(self) -> tuple[int, ...]:
        return self.warps or tuple(range(self.num_warps))


_kernels: dict[int, KernelInfo] = {}
"""Every instrumented kernel loaded in this process, by its CUfunction handle."""


@dataclass(slots=True)
class ScopeStats:
    """A scope under one kernel node, summed over its launches."""

    cycles: int = 0
    normalized: float = 0.0
    events: int = 0
    lo: int = -1
    hi: int = 0
    sample: list = field(default_factory=list)
    kept: int = 0

    def add(self, cycles: np.ndarray, normalized: float) -> None:
        self.cycles += int(cycles.sum())
        self.normalized += normalized
        self.events += cycles.size
        lo, hi = int(cycles.min()), int(cycles.max())
        self.lo = lo if self.lo < 0 else min(self.lo, lo)
        self.hi = max(self.hi, hi)
        if self.kept < MEDIAN_SAMPLE:
            self.sample.append(cycles[:MEDIAN_SAMPLE - self.kept])
            self.kept += self.sample[-1].size

    def metrics(self, device: int) -> dict:
        """The scope node's metrics, each its own: written without a 0 on the root, as
        Triton's files hold them (a viewer sums a node's children into it, Triton's
        included, when the root carries the key)."""
        med = float(np.median(np.concatenate(self.sample))) if self.sample else 0.0
        own, fixed = EXCLUSIVE, PROPERTY
        return {CYCLES + own: self.cycles, NORMALIZED_CYCLES + own: self.normalized,
                DEVICE_ID: str(device), WARP_EVENTS + own: self.events,
                WARP_CYCLES[0] + fixed: self.lo, WARP_CYCLES[1] + fixed: med,
                WARP_CYCLES[2] + fixed: self.hi}


class _Slice:
    """What the launcher takes from an allocator: something with data_ptr()."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


class Instrumentation:
    """One process-wide installation, shared by the instrumentation sessions."""

    def __init__(self, mode: InstrumentationMode, clock_khz: dict[int, int]) -> None:
        self.mode = mode
        self.clock_khz = clock_khz
        """Device -> SM clock (kHz), to put cycles on the trace's clock."""
        self.kernels = _kernels
        self.arena: Any = None  # torch uint8 tensor, made at the first launch
        self.host: Any = None  # its pinned host copy
        self.used = 0
        self.pending: list[tuple] = []
        """(KernelInfo, offset, bytes, kernel node, device, ordinal, sequence) of launches not
        read yet; ordinal: the launch's number among its kernel node's (matched to CUPTI's
        records); sequence: among all the session's launches."""
        self.launches: dict[int, int] = {}
        """Kernel node -> its instrumented launches so far (the session counts only kernels
        on these nodes)."""
        self.sequence = 0
        self.kernel_names: dict[int, str] = {}
        """Kernel node -> the name of the kernel launched there (its Triton function's), noted
        as its launches are read, for the trace's spans."""
        self.last: tuple | None = None
        """(function, offset, bytes) of the launch under way, while host copies are on."""
        self.exits = False
        self.next_slice: tuple[int, int] | None = None
        self.stats: dict[tuple[int, int], ScopeStats] = {}
        """(kernel node, scope node) -> stats."""
        self.latest: dict[int, tuple] = {}
        """Kernel node -> (KernelInfo, device, its latest launch's events as columns): the
        one launch per kernel a tree profile keeps for the warp timeline."""
        self.spans: list[dict] = []
        self.cta_times: list[np.ndarray] = []
        """Trace sessions: each CTA read, as (sequence, program id, pre-final ns, post-final
        ns) rows: its spans' Post Final and Finalization times."""
        """Trace sessions: batches of warp events as arrays (see _add_spans)."""
        self.keep_spans = False
        self.recording = True
        self.dropped = 0
        self.needed = 0
        self.unbalanced: dict[str, int] = {}
        self.reordered: dict[str, int] = {}
        self.bad_blocks = 0
        self.reads = 0
        self.lock = threading.Lock()
        self._saved: tuple | None = None

    # -- install / uninstall --------------------------------------------------------------------
    def install(self) -> None:
        import triton
        from triton.runtime._allocation import _profile_allocator, set_profile_allocator

        global compiling
        hook = pass_hook()
        hook.install(_Passes(self.mode))  # first: it refuses when another tool holds the points
        self._saved = (hook, triton.knobs.compilation.instrumentation_mode,
                       _profile_allocator.get(), _triton_flag())
        triton.knobs.compilation.instrumentation_mode = str(self.mode)
        set_profile_allocator(self.allocate)
        compiling = True
        _set_triton_flag(True)
        knobs = triton.knobs.runtime
        knobs.kernel_load_end_hook.add(self.on_load)
        if hasattr(knobs, "kernel_unload_hook"):  # Triton 3.9: a handle may be used again
            knobs.kernel_unload_hook.add(self.on_unload)
        knobs.launch_enter_hook.add(self.on_enter)
        self.watch_exits(host_copy)

    def watch_exits(self, on: bool) -> None:
        """The launch exit hook, installed only while host copies are on (else a launch pays
        no Python call at its exit)."""
        import triton

        if on == self.exits:
            return
        chain = triton.knobs.runtime.launch_exit_hook
        if on:
            chain.add(self.on_exit)
        else:
            chain.remove(self.on_exit)
        self.exits = on

    def uninstall(self) -> None:
        import triton
        from triton.runtime._allocation import set_profile_allocator

        global compiling
        if self._saved is None:
            return
        hook, mode, allocator, flag = self._saved
        self._saved = None
        hook.uninstall()
        triton.knobs.compilation.instrumentation_mode = mode
        set_profile_allocator(allocator)
        compiling = False
        _set_triton_flag(flag)
        knobs = triton.knobs.runtime
        knobs.kernel_load_end_hook.remove(self.on_load)
        if hasattr(knobs, "kernel_unload_hook"):
            knobs.kernel_unload_hook.remove(self.on_unload)
        knobs.launch_enter_hook.remove(self.on_enter)
        self.watch_exits(False)
        set_host_buffer(None)

    # -- Triton's hooks (per kernel load, per launch) ------------------------------------------
    def on_load(self, module, function, name, metadata_group, hash) -> None:
        if not function:
            return
        meta_path = next((p for k, p in metadata_group.items() if k.endswith("json")), None)
        ttgir = next((p for k, p in metadata_group.items() if k.endswith("ttgir")), None)
        if meta_path is None or ttgir is None:
            return
        with open(meta_path) as f:
            meta = json.load(f)
        if not meta.get("instrumentation_mode"):
            return  # compiled before the session
        warps = intra.recorded_warps(meta["num_warps"], self.mode.sampling_strategy,
                                     self.mode.sampling_options)
        if not meta.get("profile_scratch_size"):  # no scopes: known for host copies alone
            self.kernels[function] = KernelInfo(name, 0, meta["num_warps"], {}, {}, warps)
            return
        names, parents = scope_table(ttgir)
        self.kernels[function] = KernelInfo(name, meta["profile_scratch_size"],
                                            meta["num_warps"], names, parents, warps)

    def on_unload(self, module, function, name, metadata_group, hash) -> None:
        """Triton 3.9 unloads a kernel whose last reference went: its CUfunction handle may
        name another kernel later (launches not read yet keep their KernelInfo)."""
        self.kernels.pop(function, None)

    def allocate(self, size: int, alignment: int, stream) -> _Slice:
        """Triton's profile allocator: a slice of the arena (read first if it is full)."""
        import torch

        if size > MAX_SCRATCH_BYTES:
            raise SessionError(f"an instrumented launch asks {size} bytes of profile buffer; "
                               "launch fewer CTAs or give a smaller buffer_size")
        if self.arena is None or size > self.arena.numel():
            with self.lock:
                self.read()
                self.arena = torch.empty(max(ARENA_BYTES, _aligned(size)), dtype=torch.uint8,
                                         device="cuda")
                # its pinned host copy now, not at the first read (pinning 64 MiB takes ms)
                self.host = torch.empty(self.arena.numel(), dtype=torch.uint8, pin_memory=True)
        offset = _aligned(self.used)
        if offset + size > self.arena.numel():
            with self.lock:
                self.read()
            offset = 0
        self.used = offset + size
        self.next_slice = (offset, size)
        return _Slice(self.arena.data_ptr() + offset)

    def on_enter(self, metadata) -> None:
        taken, self.next_slice = self.next_slice, None
        function = metadata.data.get("function")
        info = self.kernels.get(function)
        if self.exits:  # host copies: none for this launch unless it is recorded
            self.last = None
            set_host_buffer(None)
            if info is not None and self.recording:  # no slice: Triton's header alone
                self.last = (function, *(taken or (0, 0)))
        if taken is None or info is None or not self.recording:
            return
        st = per_thread.stacks
        from triton.runtime import driver

        device = driver.active.get_current_device()
        node = st.op_path  # the Triton hook named this launch's op: its kernel is counted there
        if node is None:
            node = paths.intern(launch_parent(), info.name, f"kernel{device}")
        ordinal = self.launches.get(node, 0)
        self.launches[node] = ordinal + 1
        self.pending.append((info, taken[0], taken[1], node, device, ordinal, self.sequence))
        self.sequence += 1

    def on_exit(self, metadata) -> None:
        """Host copies on: the launch's buffer to the host, after the kernel ran (the copy
        waits for it on the current stream), with Triton's header before it."""
        last, self.last = self.last, None
        if last is None or not host_copy or (self.arena is None and last[2]):
            return
        import torch

        function, offset, size = last
        info = self.kernels[function]
        header = intra.host_header(size // info.scratch if info.scratch else 0, info.num_warps,
                                   info.scratch, info.recorded, size)
        out = torch.empty(len(header) + size, dtype=torch.uint8)
        out[:len(header)] = torch.frombuffer(bytearray(header), dtype=torch.uint8)
        if size:
            out[len(header):] = self.arena[offset:offset + size].cpu()
        set_host_buffer(out)

    # -- reading --------------------------------------------------------------------------------
    def read(self) -> None:
        """Read every launch the arena holds (one sync, one copy) and clear it."""
        pending, self.pending = self.pending, []
        used, self.used = self.used, 0
        if not pending or self.arena is None:
            return
        import torch

        torch.cuda.synchronize()
        if self.host is None or self.host.numel() < used:
            self.host = torch.empty(self.arena.numel(), dtype=torch.uint8, pin_memory=True)
        self.host[:used].copy_(self.arena[:used])  # pinned: one fast copy, kept for the next
        host = self.host[:used].numpy()
        self.reads += 1
        by_kernel: dict[int, list] = {}  # id(KernelInfo) -> its launches
        for launch in pending:
            by_kernel.setdefault(id(launch[0]), []).append(launch)
        for launches in by_kernel.values():
            self._read_kernel(launches[0][0], host, launches)

    def _read_kernel(self, info: KernelInfo, host: np.ndarray, launches: list) -> None:
        """All of one kernel's launches in `host` at once: decoded in one C call (numpy
        without a compiler), then summed per (kernel node, scope) with a bincount."""
        offsets = np.array([launch[1] for launch in launches], np.int64)
        sizes = np.array([launch[2] for launch in launches], np.int64)
        counts = sizes // info.scratch
        dec = intra_native.decode_launches(host, offsets, sizes, info.scratch, info.num_warps,
                                           info.recorded)
        self.dropped += dec.dropped
        self.needed = max(self.needed, dec.needed_bytes)
        self.bad_blocks += dec.bad_blocks
        for sid, n in dec.unbalanced.items():
            key = f"{info.name}/{info.scope_names.get(sid, sid)}"
            self.unbalanced[key] = self.unbalanced.get(key, 0) + n
        for sid, n in dec.reordered.items():
            key = f"{info.name}/{info.scope_names.get(sid, sid)}"
            self.reordered[key] = self.reordered.get(key, 0) + n
        if not dec.scope.size:
            return
        cycles = dec.cycles
        # launches' nodes are few: number them, then one key per (node, scope) in 0..n*256
        nodes, node_idx = np.unique(np.array([launch[3] for launch in launches]),
                                    return_inverse=True)
        per_warp = counts[dec.launch] * info.num_warps  # Triton's normalisation, per launch
        key = node_idx[dec.launch] * 256 + dec.scope
        norm = np.bincount(key, weights=cycles / per_warp)
        self._keep_latest(info, launches, node_idx, nodes, dec)
        present = np.nonzero(np.bincount(key))[0]
        order = np.argsort(key, kind="stable")  # each (node, scope)'s events side by side
        bounds = np.searchsorted(key[order], present).tolist() + [key.size]
        ordinals = np.array([launch[5] for launch in launches])
        sequence = np.array([launch[6] for launch in launches])
        devices = np.array([launch[4] for launch in launches])
        cross = None
        if self.keep_spans:
            ctas = dec.ctas
            self.cta_times.append(np.stack([sequence[ctas[:, 0]], ctas[:, 1], ctas[:, 2],
                                            ctas[:, 3]], axis=1))
            if (dec.end_warp != dec.warp).any():  # an event's end warp (-1: its start's)
                cross = np.where(dec.end_warp == dec.warp, -1, dec.end_warp)
        for j, k in enumerate(present.tolist()):
            kernel, sid = int(nodes[k // 256]), k % 256
            scope_node = self._scope_node(kernel, info, sid)
            sel = order[bounds[j]:bounds[j + 1]]
            stats = self.stats.setdefault((kernel, scope_node), ScopeStats())
            stats.add(cycles[sel], float(norm[k]))
            if self.keep_spans:
                self.kernel_names[kernel] = info.name
                picked = dec.launch[sel]
                self.spans.append({
                    "scope": np.full(picked.size, scope_node), "kernel": np.full(picked.size,
                                                                                  kernel),
                    "sequence": sequence[picked],
                    "ordinal": ordinals[picked], "device": devices[picked],
                    "sm": dec.sm[sel], "cta": dec.block[sel], "warp": dec.warp[sel],
                    "init": dec.init_ns[sel], "since": dec.start[sel] - dec.block_min_clock[sel],
                    "cycles": cycles[sel],
                    "end_warp": np.full(sel.size, -1) if cross is None else cross[sel],
                    "event": dec.event[sel]})

    def _keep_latest(self, info: KernelInfo, launches: list, node_idx: np.ndarray,
                     nodes: np.ndarray, dec: intra.Decoded) -> None:
        last = np.full(nodes.size, -1)
        np.maximum.at(last, node_idx, np.arange(node_idx.size))
        for k, i in enumerate(last.tolist()):
            # a warp's own spans (an event ended in another warp is no span of either)
            sel = np.nonzero((dec.launch == i) & (dec.end_warp == dec.warp))[0][:TIMELINE_EVENTS]
            if sel.size:
                self.latest[int(nodes[k])] = (info, launches[i][4], {
                    "sm": dec.sm[sel], "cta": dec.block[sel], "warp": dec.warp[sel],
                    "scope": dec.scope[sel], "init": dec.init_ns[sel],
                    "since": dec.start[sel] - dec.block_min_clock[sel],
                    "cycles": dec.cycles[sel]})

    def timelines(self) -> dict[int, str]:
        """Kernel node -> its latest launch's warp timeline (format.WARP_TIMELINE, JSON text):
        each warp's pass through each scope, its start in ns from the launch's first CTA
        (the CTA's %globaltimer start plus cycles at the device's clock)."""
        out = {}
        for node, (info, device, c) in self.latest.items():
            khz = self.clock_khz.get(int(device)) or 1_000_000
            start = (c["init"] - c["init"].min()) + c["since"] / (khz / 1e6)
            ids = sorted(set(c["scope"].tolist()))
            index = {sid: j for j, sid in enumerate(ids)}
            out[node] = json.dumps({
                "device": int(device), "clock_khz": int(khz), "warps": info.num_warps,
                "scopes": [" > ".join(self._scope_chain(info, sid)) for sid in ids],
                "sm": c["sm"].tolist(), "cta": c["cta"].tolist(), "warp": c["warp"].tolist(),
                "scope": [index[s] for s in c["scope"].tolist()],
                "start_ns": np.round(start, 1).tolist(), "cycles": c["cycles"].tolist()},
                separators=(",", ":"))
        return out

    def trace_spans(self, kernels: list[tuple]) -> list[WarpSpan]:
        """The warp events on the kernel records' clock (each CTA's start in whole ns, each
        scope's start after it and its length in fractions of one): each launch's first CTA
        starts with its CUPTI kernel record (`kernels`: (kernel node, record), matched per node
        in launch order); cycles become ns at the device's clock rate. %globaltimer and CUPTI's
        timestamps differ by an offset (3.5 ms on an H100), so a launch without its record
        takes the others' median offset."""
        if not self.spans:
            return []
        cols = {k: np.concatenate([b[k] for b in self.spans]) for k in self.spans[0]}
        records: dict[int, list] = {}
        for node, rec, *_ in kernels:  # (node, record[, launch start])
            records.setdefault(node, []).append(rec)
        first: dict[tuple[int, int], int] = {}
        for k, o, t in zip(cols["kernel"].tolist(), cols["ordinal"].tolist(),
                           cols["init"].tolist()):
            first[k, o] = min(first.get((k, o), t), t)
        offsets = {}
        for (k, o), t in first.items():
            recs = sorted(records.get(k, []), key=lambda r: r.start)
            if o < len(recs):
                offsets[k, o] = recs[o].start - t
        fallback = int(np.median(list(offsets.values()))) if offsets else 0
        shift = np.array([offsets.get((k, o), fallback) for k, o in
                          zip(cols["kernel"].tolist(), cols["ordinal"].tolist())], np.int64)
        khz = np.array([self.clock_khz.get(int(d)) or 1_000_000 for d in cols["device"]],
                       dtype=np.float64)
        per_ns = khz / 1e6
        origin = cols["init"] + shift  # int64: exact to the ns (a float64 is not, near 2**60)
        names = [self.kernel_names.get(k, "") for k in cols["kernel"].tolist()]
        return list(map(WarpSpan, cols["scope"].tolist(), cols["kernel"].tolist(), names,
                        cols["device"].tolist(), cols["sm"].tolist(), cols["cta"].tolist(),
                        cols["warp"].tolist(), origin.tolist(),
                        (cols["since"] / per_ns).tolist(), (cols["cycles"] / per_ns).tolist(),
                        cols["cycles"].tolist(), cols["sequence"].tolist(),
                        cols["init"].tolist(), khz.astype(np.int64).tolist(),
                        cols["end_warp"].tolist(), *self._final_times(cols),
                        cols["event"].tolist()))

    def _final_times(self, cols: dict) -> tuple[list, list]:
        """Each span's CTA's pre- and post-final times (cta_times, by launch and CTA)."""
        table = np.concatenate(self.cta_times)
        key = table[:, 0] * (1 << 32) + table[:, 1]
        order = np.argsort(key, kind="stable")
        at = np.searchsorted(key[order], cols["sequence"] * (1 << 32) + cols["cta"])
        row = table[order[np.minimum(at, key.size - 1)]]
        return row[:, 2].tolist(), row[:, 3].tolist()

    @staticmethod
    def _scope_chain(info: KernelInfo, sid: int) -> list[str]:
        """The scope's name and its enclosing scopes', outermost first."""
        chain = []
        seen = set()
        while sid in info.scope_names and sid not in seen:
            seen.add(sid)
            chain.append(info.scope_names[sid])
            sid = info.scope_parents.get(sid, -1)
        return list(reversed(chain)) or [f"scope_{sid}"]

    def _scope_node(self, kernel: int, info: KernelInfo, sid: int) -> int:
        node = kernel
        for name in self._scope_chain(info, sid):
            node = paths.intern(node, name, SCOPE)
        return node

    def report(self) -> None:
        """Say what could not be read (once, at the session's end)."""
        if self.dropped:
            need = 1 << max(self.needed - 1, 1).bit_length()
            # Triton keeps a shared buffer at 8 KiB per CTA whatever buffer_size asks
            where = "buffer_type=global:" if need > SHARED_MAX_BYTES else ""
            warn(f"instrumentation: {self.dropped} scope records were lost to full per-warp "
                 f"buffers (the oldest of each warp); mode='{self.mode.name}:{where}"
                 f"buffer_size={need}' would hold them all")
        if self.unbalanced:
            shown = ", ".join(f"{k} ({n})" for k, n in sorted(self.unbalanced.items())[:5])
            warn(f"instrumentation: scope records with no partner were left out: {shown}; "
                 "enter and exit each scope on every path through the kernel")
        if self.reordered:
            shown = ", ".join(f"{k} ({n})" for k, n in sorted(self.reordered.items())[:5])
            warn(f"instrumentation: scopes whose end came before their start (the compiler "
                 f"moved a record) were left out: {shown}")
        if self.bad_blocks:
            warn(f"instrumentation: {self.bad_blocks} CTA buffers had no header (not Triton's "
                 "layout, or a CTA that exited early) and were skipped")


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _triton_flag() -> bool:
    try:
        from triton.profiler.flags import flags
    except ImportError:
        return False
    return flags.instrumentation_on


def _set_triton_flag(on: bool) -> None:
    """Kernels written with triton.profiler.language check Triton's flag."""
    try:
        from triton.profiler.flags import flags
    except ImportError:
        return
    flags.instrumentation_on = on


def scope_table(ttgir_path: str) -> tuple[dict[int, str], dict[int, int]]:
    """Scope id -> name and scope id -> parent id, from a kernel's TTGIR (the compiler's)."""
    from triton._C.libtriton import ir, nvidia
    from triton._C.libtriton import proton as tp

    context = ir.context()
    ir.load_dialects(context)
    nvidia.load_dialects(context)
    tp.load_dialects(context)
    module = ir.parse_mlir_module(ttgir_path, context)
    module.context = context
    names = dict(tp.get_scope_id_names(module))
    parents = dict(tp.get_scope_id_parents(module))
    return names, parents


class _Passes:
    """The proton passes for our mode, at the two points of Triton's make_llir."""

    def __init__(self, mode: InstrumentationMode) -> None:
        self.mode = mode
        self.global_scratch_pass = False
        """Triton 3.6 allocates the global record buffer in a pass of its own (3.9 in the
        lowering)."""

    def load_dialects(self, ctx) -> None:
        from triton._C.libtriton import proton as tp

        tp.load_dialects(ctx)

    def to_llvmir(self, pm) -> None:
        """ttgpuir -> llvmir: scopes and events become record stores into the buffer."""
        from triton._C.libtriton import passes
        from triton._C.libtriton import proton as tp

        m = self.mode
        tp.add_convert_proton_to_protongpu(
            pm, tp.METRIC_TYPE.CYCLE, _enum(tp.SAMPLING_STRATEGY, m.sampling_strategy),
            m.sampling_options, _enum(tp.GRANULARITY, m.granularity),
            _enum(tp.BUFFER_STRATEGY, m.buffer_strategy), _enum(tp.BUFFER_TYPE, m.buffer_type),
            m.buffer_size, _max_shared(), 1, ALIGN, "clock32" not in m.optimizations)
        passes.common.add_cse(pm)
        if "sched_stores" in m.optimizations:
            tp.add_schedule_buffer_store(pm)
        tp.add_allocate_proton_shared_memory(pm)

    def to_llvm(self, pm) -> None:
        from triton._C.libtriton import proton as tp

        if self.global_scratch_pass:
            tp.add_allocate_proton_global_scratch_buffer(pm)
        tp.add_convert_proton_nvidia_gpu_to_llvm(pm)

    def patch(self, stage: str, pm, ctx) -> None:
        """Triton 3.6's interface (the backend's `instrumentation` attribute)."""
        self.load_dialects(ctx)
        if stage == "ttgpuir_to_llvmir":
            self.to_llvmir(pm)
        elif stage == "llvmir_to_llvm":
            self.to_llvm(pm)


class _BackendAttribute:
    """Triton 3.6.0: the nvidia backend calls its `instrumentation` attribute's patch()."""

    def install(self, passes: _Passes) -> None:
        from triton.backends import backends

        passes.global_scratch_pass = True
        self.backend = backends["nvidia"].compiler
        self.saved = self.backend.instrumentation
        self.backend.instrumentation = passes

    def uninstall(self) -> None:
        self.backend.instrumentation = self.saved


class _Registered:
    """Triton 3.9.0: passes registered by point with triton._instrumentation."""

    def install(self, passes: _Passes) -> None:
        from triton import _instrumentation as ti

        points = {"load-dialects": passes.load_dialects, "ttgpuir-to-llvmir": passes.to_llvmir,
                  "llvmir-to-llvm": passes.to_llvm}
        self.points: list[str] = []
        for point, callback in points.items():
            try:
                ti.register_instrumentation(point=point, backend="nvidia", callback=callback)
            except RuntimeError:  # Triton's: "Instrumentation already registered"
                self.uninstall()
                raise SessionError(f"Triton's instrumentation point {point!r} is taken (a "
                                   "session of Triton's own Proton, or another tool): finalize "
                                   "it before starting backend='instrumentation'") from None
            self.points.append(point)

    def uninstall(self) -> None:
        from triton import _instrumentation as ti

        for point in self.points:
            ti.unregister_instrumentation(point=point, backend="nvidia")


_PASS_HOOKS: dict[str, type[_BackendAttribute] | type[_Registered]] = {
    "3.6.0": _BackendAttribute, "3.9.0": _Registered}
"""The Triton versions whose passes' arguments and buffer layout (data/intra.py) we know."""


def _enum(enum, text: str):
    return getattr(enum, text.upper())


def _max_shared() -> int:
    """The device's shared memory per block (the passes size the record buffer within it)."""
    try:
        from triton.runtime import driver

        device = driver.active.get_current_device()
        return driver.active.utils.get_device_properties(device)["max_shared_mem"]
    except Exception:  # no GPU (compiling for tests): an H100's
        return 232448


# -- the sessions' side (runtime/profiler.py) -------------------------------------------------
_installed: Instrumentation | None = None


def set_host_copy(on: bool) -> None:
    """InstrumentationHook.enable_host_buffer = on (runtime/ops.py): from the next launch."""
    global host_copy
    host_copy = bool(on)
    if _installed is not None:
        _installed.watch_exits(host_copy)


def set_host_buffer(value: Any) -> None:
    global host_buffer
    host_buffer = value


def check_start(another: bool) -> None:
    """Raises SessionError when an instrumentation session cannot start now (`another`: one
    is live)."""
    check_triton()
    if another:
        raise SessionError("an instrumentation session is live; finalize it before starting "
                           "another (kernels compile with one mode at a time)")


def start(mode: InstrumentationMode, data: str) -> Instrumentation:
    global _installed
    inst = Instrumentation(mode, {})
    inst.keep_spans = data == "trace"
    intra_native.helper()  # built (once per machine) now, not at a read between launches
    inst.install()
    _installed = inst
    return inst


def clock_table(devices: dict) -> dict[int, int]:
    """Device -> SM clock (kHz) from the profiler's device table ({"0": {...}}) or a file's
    ({"CUDA": {"0": {...}}})."""
    table = devices.get("CUDA", devices)
    return {int(d): int(v.get("clock_rate") or 0) for d, v in table.items()
            if str(d).isdigit() and isinstance(v, dict)}


def finish(inst: Instrumentation, session, devices: dict) -> tuple[list, dict]:
    """Read what is left, put it on `session`'s tree nodes, say what was lost, and put Triton
    back as it was; return a trace's kernel scopes' spans per warp and a tree's kernel nodes'
    warp timelines. `devices`: the file's device table (clock rates)."""
    global _installed
    spans: list = []
    timelines: dict = {}
    try:
        with inst.lock:
            inst.read()
        inst.clock_khz = clock_table(devices)
        if session.data == "trace":
            with session.lock:
                kernels = list(session.events)
            spans = inst.trace_spans(kernels)
        else:
            timelines = inst.timelines()
            for (kernel, node), stats in inst.stats.items():
                device = int(paths.frames[kernel].kind.removeprefix("kernel") or 0) \
                    if paths.frames[kernel].kind.startswith("kernel") else 0
                session.add(node, stats.metrics(device))
        inst.report()
    finally:
        inst.uninstall()
        _installed = None
    return spans, timelines
