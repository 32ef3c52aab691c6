"""Hardware counters per kernel (mode="counters"): PM samples of each GPU joined to the kernels
that ran in them.

PM sampling (perfworks.PmSampler) reads one pass of counters of the whole GPU every
`interval` ns into a hardware buffer; a thread here decodes it every TICK seconds. CUPTI's
kernel records (start and end on the same clock as the samples: measured on an H100, the
copy and matmul phases fall in their samples with no offset) come from the router. `Join`
splits each sample's counts between the kernels that ran in it by their time in it, and hands
a kernel's sums on when no later sample can touch it; memory holds the samples of one tick and
the kernels still running, however long the run. `Rates` keeps the normal equations of every
sample (per pair of kernel nodes that shared one: bounded by the tree, not the run) and, when a
session is written, fits each node's own rates, which replace the split's blur.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Sequence

import numpy as np

from .. import format as fmt
from ..report import warn
from .perfworks import CountersError

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
           "sm__pipe_tensor_cycles_active.sum",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
           "sm__cycles_active.avg.pct_of_peak_sustained_elapsed")
"""One pass on GA10x, AD10x, GH100 and GB100 (checked with the profiler host here)."""
_DRAM_R, _DRAM_W, _L2, _TENSOR_CYCLES, _TENSOR_PCT, _ISSUE_PCT, _SM_PCT = range(len(METRICS))

FLOPS_PER_TENSOR_CYCLE = {"GH100": 1024.0}
"""16-bit dense FLOPs per sub-partition tensor-pipe cycle (sm__pipe_tensor_cycles_active.sum
counts per SMSP): H100 SXM's 989 TFLOP/s / (132 SMs x 4 SMSPs x 1.83 GHz). Measured on an
H100: 5 bf16 8192^3 matmuls, 5.453e9 cycles x 1024 = 1.016x their 2MNK. Chips not listed get
no tensor_flops (their rate is not checked)."""

TICK = 0.1
"""Seconds between decodes."""
HARDWARE_BUFFER = 512 << 20
"""A GH100 sample of METRICS takes about 40 KB of it (a 256 MB buffer held 6,147 samples and a
128 MB one overflowed at about 3,200: decodes then fail with CUPTI_ERROR_OUT_OF_MEMORY): 512 MB
hold 13,000 samples, 3 s at 250 us, through a GIL-bound stretch (imports) that delays the
thread's decodes."""
OVERFLOW = 8
"""CUPTI_ERROR_OUT_OF_MEMORY from a decode: the hardware buffer overflowed."""
SUM_METRICS = (fmt.COUNTER_NS, fmt.DRAM_BYTES, fmt.L2_BYTES, None, fmt.TENSOR_ACTIVE_NS,
               fmt.ISSUE_ACTIVE_NS, fmt.SM_ACTIVE_NS, fmt.COUNTERS_SHARED_NS)
"""A kernel's sums, column by column, as the file names them (None: tensor-pipe cycles,
written as TENSOR_FLOPS where the chip's rate is known)."""
KERNEL_FIELDS = len(SUM_METRICS)

Finished = Callable[[list], None]
"""Takes [(node, launch ts, device, sums (KERNEL_FIELDS floats))] of kernels joined."""


RATE_FIELDS = 6
"""The sums Rates fits: KERNEL_FIELDS 1..6 (bytes, cycles and activity-ns), per ns."""


class Rates:
    """Each kernel node's counts per ns of its time, fitted to every sample at once.

    Splitting a sample by time gives every kernel in it the sample's average rate: at 250 us
    a sample holds ~10 kernels of a GPT step, and an elementwise kernel beside a matmul was
    given tensor work (measured on an H200: 29 TFLOP/s on a reduce kernel). A sample's counts
    are the sum over its kernel nodes of (time in it x node's rate); across thousands of
    samples the kernels fall at different places, so the rates are found by non-negative
    least squares. Only the normal equations are kept (node pairs that shared a sample, and
    each node's time-weighted counts), so memory does not grow with the run.
    """

    def __init__(self) -> None:
        self._pairs: list = []  # (node_a << 32 | node_b keys, time x time) per tick
        self._rhs: dict[int, np.ndarray] = {}
        self._gram: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0))
        self._held = 0

    def add(self, sample: np.ndarray, node: np.ndarray, overlap: np.ndarray,
            counts: np.ndarray) -> None:
        """Pairs (sample index, node id, ns) of one batch and the samples' counts."""
        if not len(sample):
            return
        # ns per (sample, node): a node's kernels in one sample add up
        key, where = np.unique(sample * (1 << 32) + node, return_inverse=True)
        ns = np.bincount(where, overlap)
        smp, nd = key >> 32, key & 0xFFFFFFFF
        for n, row in zip(*_sum_rows(nd, ns[:, None] * counts[smp])):
            old = self._rhs.get(n)
            self._rhs[n] = row if old is None else old + row
        # node pairs within each sample: a self-join on the sample column
        order = np.argsort(smp, kind="stable")
        smp, nd, ns = smp[order], nd[order], ns[order]
        starts = np.searchsorted(smp, smp, side="left")
        left, right = _spans(starts, np.searchsorted(smp, smp, side="right") - starts)
        self._pairs.append((nd[left] * (1 << 32) + nd[right], ns[left] * ns[right]))
        self._held += len(left)
        if self._held > 1_000_000:
            self._coalesce()

    def _coalesce(self) -> None:
        keys = np.concatenate([self._gram[0], *(k for k, _ in self._pairs)])
        vals = np.concatenate([self._gram[1], *(v for _, v in self._pairs)])
        unique, where = np.unique(keys, return_inverse=True)
        self._gram = (unique, np.bincount(where, vals))
        self._pairs, self._held = [], 0

    def solve(self, start: dict[int, np.ndarray], iterations: int = 3000) -> dict:
        """{node: counts per ns (RATE_FIELDS)}: exact non-negative least squares up to
        DENSE_NODES nodes; beyond, Lee and Seung's multiplicative updates from `start` (the
        time split's rates)."""
        self._coalesce()
        keys, vals = self._gram
        if not len(keys):
            return {}
        nodes = np.array(sorted(self._rhs), dtype=np.int64)
        index = {int(n): i for i, n in enumerate(nodes)}
        rows = np.searchsorted(nodes, keys >> 32)
        cols = np.searchsorted(nodes, keys & 0xFFFFFFFF)
        rhs = np.stack([self._rhs[int(n)] for n in nodes])
        if len(nodes) <= DENSE_NODES:
            gram = np.zeros((len(nodes), len(nodes)))
            np.add.at(gram, (rows, cols), vals)
            rate = np.stack([_nnls(gram, rhs[:, f]) for f in range(RATE_FIELDS)], axis=1)
            return {int(n): rate[index[int(n)]] for n in nodes}
        rate = np.stack([start.get(int(n), np.ones(RATE_FIELDS)) for n in nodes])
        rate = np.maximum(rate, 1e-12 * (rhs.max(axis=0) + 1e-30))  # zeros stay zero
        deadline = time.monotonic() + FIT_SECONDS
        for i in range(iterations):
            if i % 100 == 99 and time.monotonic() > deadline:
                break
            gram_rate = np.zeros_like(rate)
            for f in range(RATE_FIELDS):
                gram_rate[:, f] = np.bincount(rows, vals * rate[cols, f], minlength=len(nodes))
            rate *= rhs / np.maximum(gram_rate, 1e-300)
        return {int(n): rate[index[int(n)]] for n in nodes}


FIT_SECONDS = 5.0
"""The multiplicative updates stop after this long (finalize waits for them)."""
DENSE_NODES = 3000
"""Up to this many kernel nodes the fit is solved exactly (a dense matrix of 72 MB at most);
beyond, by multiplicative updates, which approach a zero rate slowly."""


def _nnls(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """min |Ax - c| with x >= 0, given A'A and A'c: least squares on the nodes whose rate is
    positive, dropping those it makes negative, until none is (Lawson-Hanson's outer loop)."""
    free = rhs > 0
    x = np.zeros(len(rhs))
    for _ in range(50):
        if not free.any():
            return x
        idx = np.flatnonzero(free)
        sol = np.linalg.lstsq(gram[np.ix_(idx, idx)], rhs[idx], rcond=None)[0]
        if (sol >= 0).all():
            x[:] = 0
            x[idx] = sol
            return x
        free[idx[sol < 0]] = False
    x[:] = 0
    x[idx] = np.maximum(sol, 0)
    return x


def _spans(starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, index) for each index in starts[row] .. starts[row] + sizes[row] - 1, row by row:
    which samples each kernel overlaps, which entries share a sample."""
    row = np.repeat(np.arange(len(starts)), sizes)
    offsets = np.repeat(np.cumsum(sizes) - sizes, sizes)
    return row, np.repeat(starts, sizes) + (np.arange(len(row)) - offsets)


def _sum_rows(keys: np.ndarray, rows: np.ndarray) -> tuple[list, np.ndarray]:
    """Rows summed per key."""
    unique, where = np.unique(keys, return_inverse=True)
    out = np.zeros((len(unique), rows.shape[1]))
    np.add.at(out, where, rows)
    return unique.tolist(), out


class Join:
    """Samples and kernel records of one device, joined as both arrive (see the module)."""

    def __init__(self) -> None:
        self._k = np.zeros((0, 2), dtype=np.int64)  # start, end of kernels waiting
        self._meta: list = []  # (node, launch) of each
        self._sums = np.zeros((0, KERNEL_FIELDS))
        self._s = np.zeros((0, 2), dtype=np.int64)  # samples not joined yet
        self._v = np.zeros((0, len(METRICS)))
        self.joined_to = 0
        """Samples ending up to here are joined: a kernel record of earlier work comes late."""
        self.late_ns = 0
        """Kernel time that came after its samples were joined (got no counters)."""
        self.idle = np.zeros(len(METRICS))
        """Counts of samples in which no kernel ran (copies, other processes)."""
        self.rates = Rates()
        """Each kernel node's counts per ns, fitted over every sample (see Rates)."""
        self.split: dict[int, np.ndarray] = {}
        """Each kernel node's sums as the time split gave them (the fit starts there)."""

    def add_kernels(self, starts, ends, meta: list) -> None:
        starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        late = starts < self.joined_to
        if late.any():
            self.late_ns += int((np.minimum(ends[late], self.joined_to) - starts[late]).sum())
        self._k = np.concatenate([self._k, np.stack([starts, ends], axis=1)])
        self._meta += meta
        self._sums = np.concatenate([self._sums, np.zeros((len(meta), KERNEL_FIELDS))])

    def add_samples(self, starts, ends, values) -> None:
        self._s = np.concatenate([self._s, np.stack([np.asarray(starts, dtype=np.int64),
                                                     np.asarray(ends, dtype=np.int64)], 1)])
        self._v = np.concatenate([self._v, np.asarray(values, dtype=float).reshape(-1,
                                                                                 len(METRICS))])

    def join(self, until: int | None = None) -> list:
        """Join the samples that end by `until` (all with None) to the kernels waiting; the
        kernels that end by then are finished: [(node, launch, sums)]."""
        s, v = self._s, self._v
        n = len(s) if until is None else int(np.searchsorted(s[:, 1], until, side="right"))
        if n:
            self._split(s[:n], v[:n])
            self.joined_to = max(self.joined_to, int(s[n - 1, 1]))
            self._s, self._v = s[n:], v[n:]
        done = self._k[:, 1] <= self.joined_to if until is not None else \
            np.ones(len(self._k), dtype=bool)
        out = [(*self._meta[i], self._sums[i]) for i in np.flatnonzero(done)]
        for node, _, sums in out:
            old = self.split.get(node)
            self.split[node] = sums.copy() if old is None else old + sums
        keep = np.flatnonzero(~done)
        self._k, self._sums = self._k[keep], self._sums[keep]
        self._meta = [self._meta[i] for i in keep]
        return out

    def _split(self, s: np.ndarray, v: np.ndarray) -> None:
        """Each sample's counts to the kernels in it, by their time in it."""
        k = self._k
        if not len(k):
            self.idle += v.sum(axis=0)
            return
        order = np.argsort(s[:, 0], kind="stable")
        s, v = s[order], v[order]
        first = np.searchsorted(s[:, 1], k[:, 0], side="right")  # first sample ending after
        last = np.searchsorted(s[:, 0], k[:, 1], side="left")  # samples starting before end
        kernel, sample = _spans(first, np.maximum(last - first, 0))
        overlap = (np.minimum(s[sample, 1], k[kernel, 1]) -
                   np.maximum(s[sample, 0], k[kernel, 0])).astype(float)
        keep = overlap > 0
        kernel, sample, overlap = kernel[keep], sample[keep], overlap[keep]
        busy = np.bincount(sample, overlap, minlength=len(s))
        self.idle += v[busy == 0].sum(axis=0)
        # the span the kernels of a sample cover: their overlaps sum past it when two streams
        # ran at once; their shares are then split by time and said to be shared
        lo = np.full(len(s), np.iinfo(np.int64).max)
        hi = np.zeros(len(s), dtype=np.int64)
        np.minimum.at(lo, sample, np.maximum(k[kernel, 0], s[sample, 0]))
        np.maximum.at(hi, sample, np.minimum(k[kernel, 1], s[sample, 1]))
        span = np.where(busy > 0, hi - lo, 0).astype(float)
        share = overlap / busy[sample]
        length = (s[:, 1] - s[:, 0]).astype(float)
        vs = v[sample]
        add = np.empty((len(sample), KERNEL_FIELDS))
        add[:, 0] = overlap
        add[:, 1] = (vs[:, _DRAM_R] + vs[:, _DRAM_W]) * share
        add[:, 2] = vs[:, _L2] * share
        add[:, 3] = vs[:, _TENSOR_CYCLES] * share
        for col, metric in ((4, _TENSOR_PCT), (5, _ISSUE_PCT), (6, _SM_PCT)):
            add[:, col] = vs[:, metric] / 100.0 * length[sample] * share
        concurrent = busy[sample] > span[sample] * 1.001
        add[:, 7] = np.where(concurrent, overlap, 0.0)
        np.add.at(self._sums, kernel, add)
        nodes = np.fromiter((self._meta[i][0] for i in kernel), dtype=np.int64, count=len(kernel))
        counts = np.empty((len(s), RATE_FIELDS))
        counts[:, 0] = v[:, _DRAM_R] + v[:, _DRAM_W]
        counts[:, 1] = v[:, _L2]
        counts[:, 2] = v[:, _TENSOR_CYCLES]
        for col, metric in ((3, _TENSOR_PCT), (4, _ISSUE_PCT), (5, _SM_PCT)):
            counts[:, col] = v[:, metric] / 100.0 * length
        self.rates.add(sample, nodes, overlap, counts)


def fitted(join: Join) -> dict[int, np.ndarray]:
    """{node: counts per ns} fitted over the join's samples (Rates), from the time split's."""
    start = {node: sums[1:1 + RATE_FIELDS] / sums[0] for node, sums in join.split.items()
             if sums[0] > 0}
    return join.rates.solve(start)


def refit(nodes: dict, rates: dict[int, np.ndarray], chip: dict[int, str]) -> int:
    """Replace the time split's counter sums of each node in `nodes` (a session's, path id ->
    metrics) by its fitted rate x its sampled time; returns how many nodes changed.
    `chip`: node -> its GPU's chip (for TENSOR_FLOPS)."""
    changed = 0
    for node, metrics in nodes.items():
        rate = rates.get(node)
        ns = metrics.get(fmt.COUNTER_NS)
        if rate is None or not ns:
            continue
        sums = np.concatenate([[ns], rate * ns, [0.0]])  # as a kernel's (KERNEL_FIELDS)
        fitted = kernel_metrics(sums, chip.get(node, ""))
        del fitted[fmt.COUNTER_NS], fitted[fmt.COUNTERS_SHARED_NS]  # the split's, kept
        metrics.update(fitted)
        changed += 1
    return changed


def kernel_metrics(sums: np.ndarray, chip: str) -> dict[str, float]:
    """A finished kernel's sums as the file's metrics (format.COUNTER_METRICS)."""
    out = {name: float(value) for name, value in zip(SUM_METRICS, sums) if name}
    rate = FLOPS_PER_TENSOR_CYCLE.get(chip)
    if rate is not None:
        out[fmt.TENSOR_FLOPS] = float(sums[3]) * rate
    return out


class CounterSampler:
    """PM sampling of `devices`, decoded every TICK on a thread of its own and joined to the
    kernels the router hands `kernels()`; finished kernels go to `finished`."""

    def __init__(self, lib_path: str, devices: Sequence[int], interval_us: int,
                 finished: Callable[[list], None]) -> None:
        """Sampling starts on the calling thread, with each device's primary context current
        (gpu.enter_context), as in every run that worked on the H200; whether PM sampling
        needs the context was not isolated (the failures first put down to it were the
        hardware buffer overflowing: HARDWARE_BUFFER)."""
        from .perfworks import Cupti

        self.cupti = Cupti(lib_path)
        self.interval_us = interval_us
        self.devices = list(devices)
        self._finished = finished
        self._lock = threading.Lock()
        """Guards the joins (CUPTI's thread adds kernels, the sampling thread joins)."""
        self._decoding = threading.Lock()
        """Held while the hardware buffers are read (the thread's ticks, a fork's pause)."""
        self.samplers: dict = {}
        self.chips: dict[int, str] = {}
        self.joins: dict[int, Join] = {}
        self.failed: str | None = None
        """Why sampling stopped early (said once)."""
        self.forks = 0
        self.overflows = 0
        self.samples = 0
        self.decode_s = 0.0
        self.kernels_in = self.kernels_out = self.unsampled = 0
        """Kernels handed in, joined, and handed in for a device that does not sample."""
        self._start_samplers()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="proton-counters", daemon=True)
        self._thread.start()
        _live.append(self)

    def _start_samplers(self) -> None:
        """A new PM sampling object per device (a second configuration of one gives no
        samples)."""
        from .gpu import context_keeper, enter_context
        from .perfworks import PmSampler

        restore = context_keeper()
        try:
            for d in self.devices:
                enter_context(d)
                sampler = PmSampler(self.cupti, d, METRICS, self.interval_us * 1000,
                                    HARDWARE_BUFFER)
                self.samplers[d] = sampler
                self.chips[d] = sampler.chip
                self.joins.setdefault(d, Join())
                sampler.start()
        except BaseException:
            self._close_samplers()
            raise
        finally:
            restore()

    def kernels(self, device: int, starts, ends, meta: list) -> None:
        """Kernel records of `device`: (node, launch ts) in `meta` (CUPTI's thread)."""
        join = self.joins.get(device)
        if join is None:
            self.unsampled += len(meta)
            return
        with self._lock:
            self.kernels_in += len(meta)
            join.add_kernels(starts, ends, meta)

    def _run(self) -> None:
        while not self._stop.wait(TICK):
            try:
                self.tick(final=False)
            except Exception as exc:  # a thread's exception would be lost: one line, go on
                self.failed = str(exc)
                warn(f"counters stopped: {exc}; kernel times go on without counters")
                self._stop.set()

    def before_fork(self) -> None:
        """The process forks (a DataLoader's workers): read what was sampled and let the GPUs
        go, so that the child shares none of the pages the GPU writes samples to (CUDA keeps
        its own memory out of a child; CUPTI's sample buffer was not shown to need this: a
        precaution, ~0.6 s a fork); after_fork_in_parent starts again. Kernels in between get
        no counters."""
        if not self.samplers or self.failed:
            return
        with self._decoding:
            for sampler in self.samplers.values():
                sampler.stop()
            self.tick(final=False, locked=True)
            self._close_samplers()

    def after_fork_in_parent(self) -> None:
        if self.failed or self.samplers:
            return
        with self._decoding:
            self._start_samplers()
        self.forks += 1

    def tick(self, final: bool, locked: bool = False) -> None:
        """Decode every device and join what can be joined (everything when `final`)."""
        if not locked:
            with self._decoding:
                return self.tick(final, locked=True)
        for device, sampler in list(self.samplers.items()):
            t0 = time.perf_counter()
            try:
                samples = sampler.decode()
            except CountersError as exc:
                if exc.code != OVERFLOW:
                    raise
                if final:  # what it held is lost: counted, and said at the end
                    self.overflows += 1
                else:
                    self._restart(device)  # likewise
                continue
            self.decode_s += time.perf_counter() - t0
            self.samples += len(samples.starts)
            join = self.joins[device]
            with self._lock:
                if len(samples.starts):
                    join.add_samples(samples.starts, samples.ends, samples.values)
                # kernel records lag their samples: join up to the last kernel seen ended
                seen = int(join._k[:, 1].max()) if len(join._k) else join.joined_to
                done = join.join(None if final else seen)
            self.kernels_out += len(done)
            if done:
                chip = sampler.chip
                self._finished([(node, launch, device, kernel_metrics(sums, chip))
                                for node, launch, sums in done])

    def _restart(self, device: int) -> None:
        """A device's hardware buffer overflowed: a new PM sampling object (the old one
        decodes nothing more)."""
        from .gpu import enter_context
        from .perfworks import PmSampler

        self.overflows += 1
        old = self.samplers.pop(device)
        try:
            old.close()
        except CountersError:
            pass
        enter_context(device)
        sampler = PmSampler(self.cupti, device, METRICS, self.interval_us * 1000,
                            HARDWARE_BUFFER)
        self.samplers[device] = sampler
        sampler.start()

    def fitted(self) -> tuple[dict[int, np.ndarray], dict[int, str]]:
        """({node: counts per ns}, {node: chip}) over every device's samples so far."""
        rates: dict[int, np.ndarray] = {}
        chips: dict[int, str] = {}
        with self._lock:
            for device, join in self.joins.items():
                found = fitted(join)
                rates.update(found)
                chips.update(dict.fromkeys(found, self.chips.get(device, "")))
        return rates, chips

    @property
    def lost(self) -> int:
        """Decodes that found a full hardware buffer, and restarts after one (samples
        dropped)."""
        return self.overflows + sum(s.overflowed for s in self.samplers.values())

    def finish(self) -> None:
        """After CUPTI's last flush: stop sampling, decode and join the rest."""
        if self in _live:
            _live.remove(self)
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            if self.failed is None:
                for sampler in self.samplers.values():
                    sampler.stop()
                self.tick(final=True)
        finally:
            self._close_samplers()

    def _close_samplers(self) -> None:
        """Under _decoding, or when no thread runs."""
        samplers, self.samplers = self.samplers, {}
        for sampler in samplers.values():
            self.overflows += sampler.overflowed  # kept: `lost` is read after the end
            try:
                sampler.close()
            except Exception:
                pass


_live: list[CounterSampler] = []
"""The process's sampler while one runs (the fork hooks find it here)."""


def _at_fork(step: str) -> None:
    for sampler in _live:
        try:
            getattr(sampler, step)()
        except Exception as exc:  # a fork must go on: without counters
            sampler.failed = str(exc)
            warn(f"counters stopped at a fork: {exc}; kernel times go on without counters")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: _at_fork("before_fork"),
                        after_in_parent=lambda: _at_fork("after_fork_in_parent"))
