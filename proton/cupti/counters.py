"""Hardware counters per kernel (mode="counters"): PM samples of each GPU joined to the kernels,
copies and sets that ran in them.

PM sampling (perfworks.PmSampler) reads one pass of counters of the whole GPU every
`interval` ns into a hardware buffer; a thread here decodes it every TICK seconds. CUPTI's
kernel, copy and set records (start and end on the same clock as the samples: measured on an
H100, the copy and matmul phases fall in their samples with no offset) come from the router.
`Join` splits each sample's counts between the work that ran in it by its time in it (a
sample's idle part holds no counts of its own: everything the GPU did in it is a kernel, a copy
or a set of the records; copies are there because the copy engines' DRAM traffic is in the
samples too), and hands a kernel's sums on when no later sample can touch it; memory holds the
samples of one tick and the kernels still running, however long the run. `Rates` keeps the
normal equations of every sample (per pair of nodes that shared one: bounded by the tree, not
the run) and, when a session is written, fits each node's own rates, which replace the split's
blur, with each rate's standard error. A node whose rates the samples do not pin down (within
RESOLUTION of the GPU's peak), or whose fit is more than the GPU can do (format.PEAK_SLACK), is
written as not measured (format.COUNTERS_UNRESOLVED_NS) rather than with numbers that are not
its own.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .. import format as fmt
from ..report import warn
from .perfworks import CountersError

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
           "sm__pipe_tensor_cycles_active.sum",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
           "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
           "lts__t_bytes.sum.pct_of_peak_sustained_elapsed",
           "l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed")
"""One pass on GA10x, AD10x, GH100 and GB100, PM sampling and the range profiler alike
(checked with CUPTI 13.0's profiler host, 2026-11-28). The last two are the L2's and the L1
data pipe's throughput as a share of their own peaks: the hierarchical roofline's upper levels.
What else fits GH100's one pass beside the first seven: dram__bytes.sum.pct_of_peak_sustained_
elapsed and l1tex__data_pipe_lsu_wavefronts_mem_shared.sum(.pct...) do; l1tex__t_bytes.sum (2
passes), lts__throughput (4) and l1tex__throughput (6) do not."""
BASE_METRICS = METRICS[:7]
"""What the sampler falls back to where the full set is refused (the file then has no
l2_throughput_ns nor l1_throughput_ns, and the viewer judges L2 by its bytes)."""
(_DRAM_R, _DRAM_W, _L2, _TENSOR_CYCLES, _TENSOR_PCT, _ISSUE_PCT, _SM_PCT, _L2_PCT,
 _L1_PCT) = range(len(METRICS))
_PCT = (_TENSOR_PCT, _ISSUE_PCT, _SM_PCT, _L2_PCT, _L1_PCT)
"""The metrics that are a share of the sample's time (%), summed as fraction x ns."""

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
               fmt.ISSUE_ACTIVE_NS, fmt.SM_ACTIVE_NS, fmt.L2_THROUGHPUT_NS,
               fmt.L1_THROUGHPUT_NS, fmt.COUNTERS_SHARED_NS)
"""A kernel's sums, column by column, as the file names them (None: tensor-pipe cycles,
written as TENSOR_FLOPS where the chip's rate is known)."""
KERNEL_FIELDS = len(SUM_METRICS)
_SHARED = KERNEL_FIELDS - 1

Finished = Callable[[list], None]
"""Takes [(node, launch ts, device, sums (KERNEL_FIELDS floats))] of kernels joined."""


RATE_FIELDS = KERNEL_FIELDS - 2
"""The sums Rates fits: KERNEL_FIELDS 1..8 (bytes, cycles and activity-ns), per ns."""
_SOURCES = ((_DRAM_R, _DRAM_W), (_L2,), (_TENSOR_CYCLES,), *((m,) for m in _PCT))
"""The METRICS each rate field adds up."""

RESOLUTION = 0.05
"""A node is measured when the fit knows each of its rates to within this share of the GPU's
peak (one standard error): its bandwidth fraction, its activity, to +-5 points."""
NOISE_FLOOR = 0.01
"""The least relative error assumed of a sample's counts (where the fit's residuals say less):
a sample's edges are known to a microsecond or so of its 250."""
ZERO_SIGMAS = 2.0
"""A fitted rate under this many standard errors is written as 0: the samples cannot tell it
from none (an fp32 add's tensor FLOPs, an L2-resident kernel's DRAM bytes)."""
COVARIANCE_NODES = 1000
"""Nodes that share samples with each other (a connected group) up to this many get their
rates' errors from the full covariance; a larger group, from each node's own samples alone
(optimistic where nodes always run together)."""


def peaks_per_ns(bus_width: int, memory_clock_khz: int, num_sms: int,
                 clock_khz: int) -> np.ndarray:
    """The GPU's peak of each rate field per ns (NaN where not known: L2 bytes): DRAM bytes
    (double data rate over the bus, as viewer/specs.bandwidth), tensor-pipe cycles (4 per SM per
    clock, at the highest clock: sm__pipe_tensor_cycles_active counts per sub-partition),
    and 1 for every share of time."""
    out = np.ones(RATE_FIELDS)
    out[0] = 2 * bus_width * memory_clock_khz * 1e3 / 8 / 1e9
    out[1] = np.nan
    out[2] = 4 * num_sms * clock_khz * 1e3 / 1e9
    return out


class Rates:
    """Each node's counts per ns of its time, fitted to every sample at once, with their
    standard errors.

    Splitting a sample by time gives every kernel in it the sample's average rate: at 250 us
    a sample holds ~10 kernels of a GPT step, and an elementwise kernel beside a matmul was
    given tensor work (measured on an H200: 29 TFLOP/s on a reduce kernel). A sample's counts
    are the sum over its nodes of (time in it x node's rate); across thousands of samples the
    kernels fall at different places, so the rates are found by non-negative least squares.
    Only the normal equations are kept (node pairs that shared a sample, and each node's
    time-weighted counts), so memory does not grow with the run.

    The errors: a sample's counts are taken to be off by a share of themselves that grows with
    the nodes in it (each edge between two kernels is placed to within the clocks' agreement):
    sd(count) = eta x count x sqrt(nodes in the sample), eta from the fit's own residuals (at
    least NOISE_FLOOR). A node's rates then have the sandwich covariance G^-1 H G^-1 (G the
    pairs' time products, H the same weighted by each sample's squared error), which is small
    for a node alone in its samples (its counts are its own whatever its length) and large for
    a short kernel among long ones (its rate is a small difference of large counts).
    """

    def __init__(self) -> None:
        self._pairs: list = []  # (node_a << 32 | node_b keys, weights) per batch
        self._rhs: dict[int, np.ndarray] = {}
        self._gram: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64),
                                                     np.zeros((0, 1 + RATE_FIELDS)))
        self._held = 0
        self.squares = np.zeros(RATE_FIELDS)
        """Over the samples fitted: the sum of each field's squared counts (the residuals'
        sum of squares is this less what the fit explains)."""
        self.scale = np.zeros(RATE_FIELDS)
        """The same, each sample's weighted by the nodes in it: the noise model's total."""
        self.samples = 0
        """Samples fitted (those with a node in them)."""

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
        fitted, nodes_in = np.unique(smp, return_counts=True)
        self.samples += len(fitted)
        noise = counts[fitted] ** 2 * nodes_in[:, None]  # each sample's variance / eta^2
        self.squares += (counts[fitted] ** 2).sum(axis=0)
        self.scale += noise.sum(axis=0)
        # node pairs within each sample: a self-join on the sample column
        order = np.argsort(smp, kind="stable")
        smp, nd, ns = smp[order], nd[order], ns[order]
        starts = np.searchsorted(smp, smp, side="left")
        left, right = _spans(starts, np.searchsorted(smp, smp, side="right") - starts)
        weights = np.empty((len(left), 1 + RATE_FIELDS))
        weights[:, 0] = ns[left] * ns[right]
        weights[:, 1:] = weights[:, :1] * noise[np.searchsorted(fitted, smp[left])]
        self._pairs.append((nd[left] * (1 << 32) + nd[right], weights))
        self._held += len(left)
        if self._held > 250_000:
            self._coalesce()

    def _coalesce(self) -> None:
        keys = np.concatenate([self._gram[0], *(k for k, _ in self._pairs)])
        vals = np.concatenate([self._gram[1], *(v for _, v in self._pairs)])
        unique, where = np.unique(keys, return_inverse=True)
        summed = np.stack([np.bincount(where, vals[:, c], minlength=len(unique))
                           for c in range(vals.shape[1])], axis=1) if len(unique) else vals
        self._gram = (unique, summed)
        self._pairs, self._held = [], 0

    def solve(self, start: dict[int, np.ndarray], iterations: int = 3000
              ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """{node: (counts per ns, their standard errors) (RATE_FIELDS each)}: exact
        non-negative least squares up to DENSE_NODES nodes; beyond, Lee and Seung's
        multiplicative updates from `start` (the time split's rates)."""
        self._coalesce()
        keys, vals = self._gram
        if not len(keys):
            return {}
        nodes = np.array(sorted(self._rhs), dtype=np.int64)
        rows = np.searchsorted(nodes, keys >> 32)
        cols = np.searchsorted(nodes, keys & 0xFFFFFFFF)
        rhs = np.stack([self._rhs[int(n)] for n in nodes])
        if len(nodes) <= DENSE_NODES:
            gram = np.zeros((len(nodes), len(nodes)))
            np.add.at(gram, (rows, cols), vals[:, 0])
            rate = np.stack([_nnls(gram, rhs[:, f]) for f in range(RATE_FIELDS)], axis=1)
        else:
            rate = self._updates(nodes, rows, cols, vals[:, 0], rhs, start, iterations)
        sd = self._errors(len(nodes), rows, cols, vals, rhs, rate)
        return {int(n): (rate[i], sd[i]) for i, n in enumerate(nodes)}

    @staticmethod
    def _updates(nodes, rows, cols, gram, rhs, start, iterations) -> np.ndarray:
        rate = np.stack([start.get(int(n), np.ones(RATE_FIELDS)) for n in nodes])
        rate = np.maximum(rate, 1e-12 * (rhs.max(axis=0) + 1e-30))  # zeros stay zero
        deadline = time.monotonic() + FIT_SECONDS
        for i in range(iterations):
            if i % 100 == 99 and time.monotonic() > deadline:
                break
            gram_rate = np.zeros_like(rate)
            for f in range(RATE_FIELDS):
                gram_rate[:, f] = np.bincount(rows, gram * rate[cols, f], minlength=len(nodes))
            rate *= rhs / np.maximum(gram_rate, 1e-300)
        return rate

    def _errors(self, n: int, rows, cols, vals, rhs, rate) -> np.ndarray:
        """Each rate's standard error (see the class): eta per field from the residual sum of
        squares the normal equations give, the sandwich per connected group of nodes."""
        gram = vals[:, 0]
        explained = np.array([np.sum(gram * rate[rows, f] * rate[cols, f])
                              for f in range(RATE_FIELDS)])
        residual = np.maximum(self.squares - 2 * np.einsum("if,if->f", rate, rhs) + explained,
                              0.0)
        spare = self.samples - n
        with np.errstate(divide="ignore", invalid="ignore"):
            eta2 = np.where((spare > 0) & (self.scale > 0),
                            residual / self.scale * self.samples / max(spare, 1), 1.0)
        eta2 = np.maximum(np.nan_to_num(eta2, nan=1.0), NOISE_FLOOR ** 2)
        var = np.full((n, RATE_FIELDS), np.inf)
        group = _groups(n, rows, cols)
        order = np.argsort(group[rows], kind="stable")
        bounds = np.searchsorted(group[rows][order], np.arange(group.max() + 2))
        for g in range(group.max() + 1):
            members = np.flatnonzero(group == g)
            pick = order[bounds[g]:bounds[g + 1]]
            if len(members) > COVARIANCE_NODES:  # each node on its own samples
                diag = pick[rows[pick] == cols[pick]]
                g_ii = np.maximum(gram[diag], 1e-300)
                var[rows[diag]] = vals[diag, 1:] / g_ii[:, None] ** 2
                continue
            local = np.searchsorted(members, rows[pick]), np.searchsorted(members, cols[pick])
            m = len(members)
            dense = np.zeros((m, m))
            np.add.at(dense, local, gram[pick])
            inverse = _inverse(dense)
            for f in range(RATE_FIELDS):
                h = np.zeros((m, m))
                np.add.at(h, local, vals[pick, 1 + f])
                var[members, f] = np.einsum("ij,ij->i", inverse @ h, inverse)
        return np.sqrt(np.maximum(var, 0.0) * eta2)



def _groups(n: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Each node's connected group (nodes linked by sharing a sample), numbered from 0."""
    label = np.arange(n)
    while True:
        new = label.copy()
        np.minimum.at(new, rows, label[cols])
        np.minimum.at(new, cols, label[rows])
        new = new[new]  # pointer jumping: a chain folds in log steps
        if (new == label).all():
            return np.unique(label, return_inverse=True)[1]
        label = new


def _inverse(gram: np.ndarray) -> np.ndarray:
    """G^-1 through its eigenvalues, the ones near 0 (nodes that always run in the same
    proportion: no sample tells them apart) kept near 0, so their errors come out huge."""
    values, vectors = np.linalg.eigh(gram)
    top = values.max() if len(values) else 0.0
    values = np.maximum(values, 1e-12 * top if top > 0 else 1e-300)
    return (vectors / values) @ vectors.T


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
    """Samples and kernel records of one device, joined as both arrive (see the module).
    `peaks`: the device's peak of each rate field per ns (peaks_per_ns; None: shares of time
    alone are judged); `metrics`: how many of METRICS its sampler reads (BASE_METRICS' length
    where the full set was refused)."""

    def __init__(self, peaks: np.ndarray | None = None, metrics: int = len(METRICS)) -> None:
        self.peaks = peaks
        self.absent = frozenset(_absent(metrics))
        """Rate fields the device's sampler does not read (left out of what is written)."""
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
        """Samples' spans and values (one column per METRICS entry the sampler reads; the rest
        are 0)."""
        values = np.asarray(values, dtype=float).reshape(len(starts), -1)
        if values.shape[1] < len(METRICS):
            values = np.pad(values, ((0, 0), (0, len(METRICS) - values.shape[1])))
        self._s = np.concatenate([self._s, np.stack([np.asarray(starts, dtype=np.int64),
                                                     np.asarray(ends, dtype=np.int64)], 1)])
        self._v = np.concatenate([self._v, values])

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
        # a sample's counts go to the work recorded in it, by its time there: its idle part
        # did nothing of its own (copies and sets are records too)
        share = overlap / busy[sample]
        counts = _counts(s, v)
        add = np.empty((len(sample), KERNEL_FIELDS))
        add[:, 0] = overlap
        add[:, 1:_SHARED] = counts[sample] * share[:, None]
        concurrent = busy[sample] > span[sample] * 1.001
        add[:, _SHARED] = np.where(concurrent, overlap, 0.0)
        np.add.at(self._sums, kernel, add)
        nodes = np.fromiter((self._meta[i][0] for i in kernel), dtype=np.int64, count=len(kernel))
        self.rates.add(sample, nodes, overlap, counts)


def _counts(s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Each sample's counts as rate fields (bytes, cycles; shares of time as active ns)."""
    length = (s[:, 1] - s[:, 0]).astype(float)
    counts = np.empty((len(s), RATE_FIELDS))
    for f, metrics in enumerate(_SOURCES):
        counts[:, f] = v[:, list(metrics)].sum(axis=1)
        if metrics[0] in _PCT:
            counts[:, f] *= length / 100.0
    return counts


def _absent(metrics: int) -> list[int]:
    """The rate fields a sampler of the first `metrics` METRICS does not read."""
    return [f for f, sources in enumerate(_SOURCES) if max(sources) >= metrics]


@dataclass(slots=True)
class NodeFit:
    """One node's fitted rates (counts per ns, RATE_FIELDS), their standard errors, and its
    GPU's peaks (peaks_per_ns; None where unknown)."""

    rate: np.ndarray
    sd: np.ndarray
    peaks: np.ndarray | None = None
    absent: frozenset = frozenset()

    @property
    def measured(self) -> bool:
        """Whether the samples pin its rates down: each within RESOLUTION of its peak, and none
        more than the GPU can do (format.PEAK_SLACK). Fields with no known peak (L2 bytes) and
        fields not read are not judged."""
        peaks = np.ones(RATE_FIELDS) if self.peaks is None else self.peaks.copy()
        if self.peaks is None:
            peaks[:3] = np.nan  # bytes and cycles: no peak given
        judged = np.isfinite(peaks) & (peaks > 0)
        judged[list(self.absent)] = False
        over = self.rate[judged] > peaks[judged] * (1 + fmt.PEAK_SLACK)
        return not over.any() and bool((self.sd[judged] <= RESOLUTION * peaks[judged]).all())


def fitted(join: Join) -> dict[int, NodeFit]:
    """{node: NodeFit} fitted over the join's samples (Rates), from the time split's."""
    start = {node: sums[1:1 + RATE_FIELDS] / sums[0] for node, sums in join.split.items()
             if sums[0] > 0}
    return {node: NodeFit(rate, sd, join.peaks, join.absent)
            for node, (rate, sd) in join.rates.solve(start).items()}


_OWN = (fmt.COUNTER_NS, fmt.DRAM_BYTES, fmt.L2_BYTES, fmt.TENSOR_FLOPS, fmt.TENSOR_ACTIVE_NS,
        fmt.ISSUE_ACTIVE_NS, fmt.SM_ACTIVE_NS, fmt.L2_THROUGHPUT_NS, fmt.L1_THROUGHPUT_NS,
        fmt.COUNTERS_SHARED_NS)


def refit(nodes: dict, fits: dict[int, NodeFit], chip: dict[int, str]) -> int:
    """Replace the time split's counter sums of each node in `nodes` (a session's, path id ->
    metrics) by its fitted rate x its sampled time (a rate under ZERO_SIGMAS standard errors
    as 0); a node the samples do not measure (NodeFit.measured) keeps only its sampled time,
    as COUNTERS_UNRESOLVED_NS. Returns how many nodes changed. `chip`: node -> its GPU's chip
    (for TENSOR_FLOPS)."""
    changed = 0
    for node, metrics in nodes.items():
        fit = fits.get(node)
        ns = metrics.get(fmt.COUNTER_NS)
        if fit is None or not ns:
            continue
        changed += 1
        if not fit.measured:
            for name in _OWN:
                metrics.pop(name, None)
            metrics[fmt.COUNTERS_UNRESOLVED_NS] = ns
            continue
        rate = np.where(fit.rate < ZERO_SIGMAS * fit.sd, 0.0, fit.rate)
        sums = np.concatenate([[ns], rate * ns, [0.0]])  # as a kernel's (KERNEL_FIELDS)
        new = kernel_metrics(sums, chip.get(node, ""), fit.absent)
        del new[fmt.COUNTER_NS], new[fmt.COUNTERS_SHARED_NS]  # the split's, kept
        metrics.update(new)
    return changed


def kernel_metrics(sums: np.ndarray, chip: str, absent: frozenset = frozenset()
                   ) -> dict[str, float]:
    """A finished kernel's sums as the file's metrics (format.COUNTER_METRICS); `absent`: rate
    fields its sampler does not read, left out."""
    out = {name: float(value) for f, (name, value) in enumerate(zip(SUM_METRICS, sums))
           if name and f - 1 not in absent}
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
        self.metrics: dict[int, tuple[str, ...]] = {}
        """What each device samples: METRICS, or BASE_METRICS where the full set is refused."""
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
        from .gpu import context_keeper, device_table, enter_context

        restore = context_keeper()
        try:
            try:
                table = device_table()
            except Exception:  # the peaks only judge the fit: shares of time are still judged
                table = {}
            for d in self.devices:
                enter_context(d)
                sampler = self._sampler(d)
                self.samplers[d] = sampler
                self.chips[d] = sampler.chip
                info = table.get(d)
                peaks = None if info is None else peaks_per_ns(
                    info.bus_width, info.memory_clock_rate, info.num_sms, info.clock_rate)
                self.joins.setdefault(d, Join(peaks, len(self.metrics[d])))
                sampler.start()
        except BaseException:
            self._close_samplers()
            raise
        finally:
            restore()

    def _sampler(self, device: int):
        """A PM sampler of METRICS on `device` (its context current), or of BASE_METRICS where
        the full set is refused (the error of the base set is the one raised)."""
        from .perfworks import PmSampler

        metrics = self.metrics.get(device, METRICS)
        try:
            sampler = PmSampler(self.cupti, device, metrics, self.interval_us * 1000,
                                HARDWARE_BUFFER)
        except CountersError:
            if metrics == BASE_METRICS:
                raise
            metrics = BASE_METRICS
            sampler = PmSampler(self.cupti, device, metrics, self.interval_us * 1000,
                                HARDWARE_BUFFER)
        self.metrics[device] = metrics
        return sampler

    def kernels(self, device: int, starts, ends, meta: list) -> None:
        """Kernel, copy and set records of `device`: (node, launch ts) in `meta` (CUPTI's
        thread)."""
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
                self._finished([(node, launch, device, kernel_metrics(sums, chip, join.absent))
                                for node, launch, sums in done])

    def _restart(self, device: int) -> None:
        """A device's hardware buffer overflowed: a new PM sampling object (the old one
        decodes nothing more)."""
        from .gpu import enter_context

        self.overflows += 1
        old = self.samplers.pop(device)
        try:
            old.close()
        except CountersError:
            pass
        enter_context(device)
        sampler = self._sampler(device)
        self.samplers[device] = sampler
        sampler.start()

    def fitted(self) -> tuple[dict[int, NodeFit], dict[int, str]]:
        """({node: NodeFit}, {node: chip}) over every device's samples so far."""
        rates: dict[int, NodeFit] = {}
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
