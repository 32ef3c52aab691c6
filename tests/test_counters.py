"""mode="counters" without a GPU: the options, the join of samples to kernels, and CUPTI's
profiler host (metric names to a configuration, which runs on the host alone)."""
import glob
import os

import numpy as np
import pytest

from proton import format as fmt
from proton.cupti.counters import KERNEL_FIELDS, METRICS, Join, kernel_metrics

SHARED = KERNEL_FIELDS - 1  # counters_shared_ns, the last of a kernel's sums
from proton.errors import SessionError
from proton.options import parse_options


def values(dram=0.0, l2=0.0, tensor_cycles=0.0, tensor=0.0, issue=0.0, sm=0.0, l2_pct=0.0,
           l1_pct=0.0) -> list:
    return [dram / 2, dram / 2, l2, tensor_cycles, tensor, issue, sm, l2_pct, l1_pct]


def test_counters_mode_parses_and_bad_options_get_one_line():
    assert parse_options("x", mode="counters").counters.interval == 250
    assert parse_options("x", mode="counters:interval=20").counters.interval == 20
    with pytest.raises(SessionError, match="10 to 100000 microseconds"):
        parse_options("x", mode="counters:interval=5")
    with pytest.raises(SessionError, match="use interval=US"):
        parse_options("x", mode="counters:period=5")
    assert parse_options("x", mode="counters:scopes=fwd,bwd").counters.scopes == ("fwd", "bwd")
    with pytest.raises(SessionError, match="data='tree'"):
        parse_options("x", mode="counters", data="trace")


def test_a_sample_is_split_between_its_kernels_by_their_time_in_it():
    join = Join()
    # two samples of 100 ns: kernel A runs 0-60, B 60-150, C 150-200 (one stream)
    join.add_kernels([0, 60, 150], [60, 150, 200], [(1, 1), (2, 2), (3, 3)])
    join.add_samples([0, 100], [100, 200], [values(dram=1000, tensor=50),
                                            values(dram=400, issue=100)])
    done = {node: sums for node, _, sums in join.join()}
    assert done[1][0] == 60 and done[2][0] == 90 and done[3][0] == 50
    assert done[1][1] == pytest.approx(600) and done[3][1] == pytest.approx(200)
    assert done[2][1] == pytest.approx(400 + 200)
    # activity: 50% of sample 1 (50 ns) split 60/40 between A and B
    assert done[1][4] == pytest.approx(30) and done[2][4] == pytest.approx(20)
    assert sum(s[1] for s in done.values()) == pytest.approx(1400)  # nothing lost or made
    assert all(s[SHARED] == 0 for s in done.values())  # one stream: not shared


def test_kernels_that_ran_at_once_share_by_time_and_are_said_to_be_shared():
    join = Join()
    join.add_kernels([0, 0], [100, 50], [(1, 1), (2, 1)])
    join.add_samples([0], [100], [values(dram=300)])
    done = {node: sums for node, _, sums in join.join()}
    assert done[1][1] == pytest.approx(200) and done[2][1] == pytest.approx(100)
    assert done[1][SHARED] == 100 and done[2][SHARED] == 50


def test_a_kernel_waits_for_its_last_sample_and_samples_without_kernels_are_idle():
    join = Join()
    join.add_samples([0, 100, 200], [100, 200, 300], [values(dram=10), values(dram=20),
                                                      values(dram=30)])
    join.add_kernels([120], [250], [(9, 7)])
    assert join.join(until=200) == []  # K runs on into the third sample
    (node, launch, sums), = join.join(until=300)
    assert (node, launch) == (9, 7)
    assert sums[0] == 130 and sums[1] == pytest.approx(50)
    assert join.idle[0] + join.idle[1] == pytest.approx(10)  # the first sample: no kernel


def test_a_kernel_record_that_comes_after_its_samples_were_joined_is_counted_late():
    join = Join()
    join.add_samples([0, 100], [100, 200], [values(dram=10), values(dram=20)])
    join.add_kernels([0], [90], [(1, 1)])
    join.join(until=200)
    join.add_kernels([110], [190], [(2, 2)])
    assert join.late_ns == 80


def test_memory_holds_only_what_waits():
    join = Join()
    for tick in range(200):  # 200 ticks of 100 samples and 300 kernels each
        t0 = tick * 10_000
        join.add_samples(np.arange(t0, t0 + 10_000, 100), np.arange(t0 + 100, t0 + 10_100, 100),
                         np.ones((100, len(METRICS))))
        starts = np.arange(t0, t0 + 10_000, 33)[:300]
        join.add_kernels(starts, starts + 30, [(i, 0) for i in range(len(starts))])
        join.join(until=t0 + 10_000)
    assert len(join._s) == 0 and len(join._k) <= 1


@pytest.mark.parametrize("solver", ["exact", "updates"])
def test_fitted_rates_undo_the_blur_of_samples_longer_than_kernels(solver, monkeypatch):
    """A step of short kernels, sampled every 250 us: the time split gives each kernel its
    samples' average; the fit over many steps gives each its own rate (within 5%)."""
    from proton.cupti import counters
    from proton.cupti.counters import fitted, refit

    if solver == "updates":  # what a profile of more than DENSE_NODES kernel nodes gets
        monkeypatch.setattr(counters, "DENSE_NODES", 0)
    rng = np.random.default_rng(0)
    # node: (ns, DRAM bytes per ns, tensor cycles per ns): a matmul beside elementwise kernels
    kinds = {1: (40_000, 300.0, 0.0), 2: (12_000, 2500.0, 0.0), 3: (90_000, 100.0, 400.0),
             4: (7_000, 1500.0, 0.0), 5: (25_000, 50.0, 0.0)}
    join, t = Join(), 0
    starts, ends, meta = [], [], []
    for step in range(300):
        t += int(rng.integers(1_000, 40_000))  # the host's gaps move kernels across samples
        for node, (ns, _, _) in kinds.items():
            starts.append(t)
            ends.append(t + ns)
            meta.append((node, step))
            t += ns + 2_000
    join.add_kernels(starts, ends, meta)
    edges = np.arange(0, t + 250_000, 250_000)
    vals = np.zeros((len(edges) - 1, len(METRICS)))
    for a, b, (node, _) in zip(starts, ends, meta):  # the truth, binned into samples
        _, dram, tensor = kinds[node]
        for i in range(a // 250_000, (b - 1) // 250_000 + 1):
            ov = min(b, edges[i + 1]) - max(a, edges[i])
            vals[i, 0] += dram * ov / 2
            vals[i, 1] += dram * ov / 2
            vals[i, 3] += tensor * ov
    join.add_samples(edges[:-1], edges[1:], vals)
    done = join.join()
    nodes: dict = {}
    for node, _, sums in done:
        nodes.setdefault(node, np.zeros(KERNEL_FIELDS))
        nodes[node] += sums
    split = {n: {fmt.COUNTER_NS: v[0], fmt.DRAM_BYTES: v[1]} for n, v in nodes.items()}
    blurred = abs(split[4][fmt.DRAM_BYTES] / split[4][fmt.COUNTER_NS] - 1500.0) / 1500.0
    assert blurred > 0.3  # the time split is far off for the short, fast kernel
    rates = fitted(join)
    assert refit(split, rates, dict.fromkeys(rates, "GH100")) == 5
    for node, (_, dram, tensor) in kinds.items():
        ns = split[node][fmt.COUNTER_NS]
        assert split[node][fmt.DRAM_BYTES] / ns == pytest.approx(dram, rel=0.05), node
        if solver == "updates":
            continue  # a zero rate is only approached
        assert split[node][fmt.TENSOR_FLOPS] / ns == pytest.approx(tensor * 1024, rel=0.05,
                                                                    abs=0.02 * 400 * 1024)


def test_kernel_metrics_give_tensor_flops_only_for_a_chip_whose_rate_is_known():
    sums = np.arange(KERNEL_FIELDS, dtype=float)
    assert kernel_metrics(sums, "GH100")[fmt.TENSOR_FLOPS] == 3 * 1024
    assert fmt.TENSOR_FLOPS not in kernel_metrics(sums, "GA102")
    assert kernel_metrics(sums, "GH100")[fmt.DRAM_BYTES] == 1


def _libcupti() -> str | None:
    import site

    for root in site.getsitepackages():
        for path in glob.glob(os.path.join(root, "nvidia", "cu*", "lib", "libcupti.so.*")):
            return path
    return None


@pytest.mark.skipif(_libcupti() is None, reason="no libcupti wheel (nvidia-cuda-cupti) here")
def test_the_default_metrics_fit_one_pass_on_the_gpus_that_sample():
    """The profiler host runs without a GPU: the set must be one pass wherever PM sampling is."""
    from proton.cupti.perfworks import CountersError, Cupti, MetricConfig

    cupti = Cupti(_libcupti())
    try:
        MetricConfig(cupti, "GH100", METRICS[:1]).close()
    except CountersError as exc:  # CUPTI 13.5's profiler host loads libcuda, 13.0's did not
        if exc.code != 999:
            raise
        pytest.skip(f"this libcupti's profiler host needs a CUDA driver ({exc})")
    for chip in ("GA102", "AD102", "GH100", "GB100"):
        config = MetricConfig(cupti, chip, METRICS)
        assert config.passes == 1, chip
        config.close()
    with pytest.raises(CountersError, match="cannot sample"):
        MetricConfig(cupti, "GH100", ["no__such_metric.sum"])


def test_the_counters_flag_and_another_mode_are_refused_together_in_one_line(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    out = subprocess.run([sys.executable, "-m", "proton", "--counters", "-m", "pcsampling",
                          str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2 and "ran" not in out.stdout
    assert "--counters and -m pcsampling cannot run together" in out.stderr
    assert "Traceback" not in out.stderr
    ok = subprocess.run([sys.executable, "-m", "proton", "--counters", str(script)],
                        capture_output=True, text=True, cwd=tmp_path)
    assert ok.returncode == 0 and "ran" in ok.stdout  # no GPU here: CPU time, said once
    assert (tmp_path / "proton.hatchet").exists()


def test_the_c_reader_fills_spans_and_values_with_the_13_0_struct_sizes():
    """pm_native's loop calls CUPTI's sample-info and evaluate functions with the 13.0 layouts
    (structSize 64 and 72) for each sample asked, and stops at the first error, naming it."""
    import ctypes

    from proton.cupti import pm_native
    lib = pm_native.helper()
    if lib is None:
        pytest.skip("no C compiler: PmSampler reads samples in Python")
    seen = []
    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    def info(p):
        f = ctypes.cast(p, ctypes.POINTER(ctypes.c_uint64))
        seen.append(("info", f[0], f[5]))
        f[6], f[7] = 1000 * f[5], 1000 * f[5] + 250
        return 0

    def evaluate(p):
        f = ctypes.cast(p, ctypes.POINTER(ctypes.c_uint64))
        seen.append(("evaluate", f[0], f[5]))
        out = ctypes.cast(f[8], ctypes.POINTER(ctypes.c_double))
        for j in range(f[7]):
            out[j] = 10 * f[5] + j
        return 8 if f[5] == 6 else 0

    keep = [callback(info), callback(evaluate)]
    fns = [ctypes.cast(c, ctypes.c_void_p).value for c in keep]
    image, names = (ctypes.c_uint8 * 8)(), (ctypes.c_char_p * 2)(b"a", b"b")
    code, at, spans, values = pm_native.read(lib, *fns, 1, 2, image, 8, names, 2, 3, 3)
    assert code == 0 and spans.tolist() == [[3000, 3250], [4000, 4250], [5000, 5250]]
    assert values.tolist() == [[30, 31], [40, 41], [50, 51]]
    assert {(kind, size) for kind, size, _ in seen} == {("info", 64), ("evaluate", 72)}
    code, at, _, _ = pm_native.read(lib, *fns, 1, 2, image, 8, names, 2, 5, 3)
    assert (code, at) == (8, 6)


# -- what the samples can and cannot tell (issue 57): replayed kernels against known truth ----
H200_PEAKS = dict(bus_width=6016, memory_clock_khz=3201000, num_sms=132, clock_khz=1980000)
BW = 2 * 6016 * 3201000 * 1e3 / 8 / 1e9  # H200 DRAM bytes per ns (4.8 TB/s)


def replay(kernels: list, interval: int = 250_000, noise: float = 0.0, seed: int = 0,
           distort=None) -> dict:
    """Kernels (start, end, node, DRAM share of the peak, SM active share) run on a GPU
    sampled every `interval` ns: each sample holds what the kernels in it did (times `1 + a
    normal error of sd noise`, and `distort(sample index, values)` after); then the join, the
    fit and the refit as a session writes them. {node: the metrics it is written with}."""
    from proton.cupti.counters import peaks_per_ns

    rng = np.random.default_rng(seed)
    end = max(k[1] for k in kernels)
    edges = np.arange(0, end + interval, interval)
    vals = np.zeros((len(edges) - 1, len(METRICS)))
    for start, stop, _, dram, sm in kernels:
        for i in range(start // interval, (stop - 1) // interval + 1):
            ov = min(stop, edges[i + 1]) - max(start, edges[i])
            vals[i, 0] += dram * BW * ov / 2
            vals[i, 1] += dram * BW * ov / 2
            vals[i, 2] += 1.5 * dram * BW * ov
            vals[i, 6] += sm * ov / interval * 100
    vals *= 1 + noise * rng.standard_normal((len(vals), 1))
    if distort is not None:
        distort(vals)
    join = Join(peaks_per_ns(**H200_PEAKS))
    join.add_kernels([k[0] for k in kernels], [k[1] for k in kernels],
                     [(k[2], i) for i, k in enumerate(kernels)])
    join.add_samples(edges[:-1], edges[1:], vals)
    return written(join)


def written(join: Join) -> dict:
    """The join's nodes as a session writes them: the time split's sums, then the refit."""
    from proton.cupti.counters import fitted, refit

    nodes: dict = {}
    for node, _, sums in join.join():
        mine = nodes.setdefault(node, {})
        for name, value in kernel_metrics(sums, "GH100").items():
            mine[name] = mine.get(name, 0.0) + value
    fits = fitted(join)
    refit(nodes, fits, dict.fromkeys(fits, "GH100"))
    return nodes


def sequence(steps: int, parts: list, seed: int = 0, gap: tuple = (2_000, 60_000)) -> list:
    """`steps` repeats of parts [(node, ns, DRAM share, SM share)] run back to back, the host's
    gap before each step drawn between `gap` ns."""
    rng = np.random.default_rng(seed)
    t, out = 0, []
    for _ in range(steps):
        t += int(rng.integers(*gap))
        for node, ns, dram, sm in parts:
            out.append((t, t + ns, node, dram, sm))
            t += ns + 1_500
    return out


def test_a_short_kernel_between_long_ones_is_marked_unmeasured_not_given_their_work():
    """A 5 us kernel between two 1 ms kernels, sampled every 250 us with 3% noise in each
    sample: its own bytes are a sliver of each sample's, and the samples cannot tell them
    apart. It is written as not measured (its sampled time as counters_unresolved_ns, no bytes,
    no activity); the long kernels beside it are measured within 5%."""
    nodes = replay(sequence(100, [(1, 1_000_000, 0.9, 0.99), (2, 5_000, 0.5, 0.6),
                                  (3, 1_000_000, 0.3, 0.95)]), noise=0.03)
    short = nodes[2]
    assert short.get(fmt.COUNTERS_UNRESOLVED_NS, 0) > 0, short
    assert fmt.DRAM_BYTES not in short and fmt.SM_ACTIVE_NS not in short
    for node, dram in ((1, 0.9), (3, 0.3)):
        m = nodes[node]
        assert fmt.COUNTERS_UNRESOLVED_NS not in m
        assert m[fmt.DRAM_BYTES] / m[fmt.COUNTER_NS] == pytest.approx(dram * BW, rel=0.05)


def test_a_short_kernel_alone_in_its_samples_is_measured_whatever_its_length():
    """2 us kernels the host launches 0.9 ms apart (as a launch-bound loop does): each sample
    holds one of them and idle time, so their counts are their own. Measured within 10%, as is
    a 20 us kernel run 20 times back to back."""
    kernels = [(t, t + 2_000, 1, 0.13, 0.5) for t in range(100_000, 20_000_000, 900_000)]
    t = 21_000_000
    for _ in range(20):
        kernels.append((t, t + 20_000, 2, 0.7, 0.9))
        t += 21_000
    nodes = replay(kernels, noise=0.02)
    for node, dram in ((1, 0.13), (2, 0.7)):
        m = nodes[node]
        assert fmt.COUNTERS_UNRESOLVED_NS not in m, (node, m)
        assert m[fmt.DRAM_BYTES] / m[fmt.COUNTER_NS] == pytest.approx(dram * BW, rel=0.1)


def test_no_kernel_is_written_doing_more_than_the_gpu_can():
    """Three warm-up launches of a 64M add (184 us each) and a cuBLAS warm-up on a GPU coming
    out of idle: the SM clock rises within their first samples, and a share of elapsed
    cycles (sm__cycles_active.pct_of_peak_sustained_elapsed) then reads more than the share of
    time (seen on an H200: 126% sm_active, 114% of the DRAM bandwidth). No kernel is written
    with a rate past the GPU's peak (beyond format.PEAK_SLACK): what the samples cannot hold is
    marked not measured; the same adds later, at a steady clock, are measured."""
    kernels = sequence(1, [(1, 184_000, 0.9, 0.99)] * 3 + [(2, 176_000, 0.15, 0.83)],
                       gap=(30_000, 30_001))
    t = kernels[-1][1] + 3_000_000
    kernels += [(t + i * 185_500, t + i * 185_500 + 184_000, 3, 0.9, 0.99) for i in range(10)]

    def ramp(vals):  # the first two samples: cycles counted at a rising clock
        vals[:2, 6] *= 1.3
        vals[:2, :2] *= 1.2

    nodes = replay(kernels, noise=0.005, distort=ramp)
    peaks = {fmt.DRAM_BYTES: BW, fmt.SM_ACTIVE_NS: 1.0}
    for node, m in nodes.items():
        for metric, peak in peaks.items():
            if metric in m:
                assert m[metric] / m[fmt.COUNTER_NS] <= peak * (1 + fmt.PEAK_SLACK), (node, m)
    assert fmt.COUNTERS_UNRESOLVED_NS in nodes[1]
    later = nodes[3]
    assert later[fmt.SM_ACTIVE_NS] / later[fmt.COUNTER_NS] == pytest.approx(0.99, rel=0.03)


SEED = 0  # the fit leaves the add 1.8 tensor cycles a ns and 0% tensor active (as on the H200)


def test_a_kernel_with_no_tensor_work_is_written_with_none():
    """An fp32 add beside bf16 matmuls in the same samples: the fit leaves it a sliver of the
    matmuls' tensor cycles, under its own error. Written as 0 tensor FLOPs (the samples cannot
    tell it from none: an fp32 add read 1.9e9 tensor FLOPs and 0% tensor active on an H200);
    the matmuls keep theirs."""
    from proton.cupti.counters import peaks_per_ns

    rng = np.random.default_rng(SEED)
    join = Join(peaks_per_ns(**H200_PEAKS))
    t, starts, ends, meta = 0, [], [], []
    kinds = {1: (120_000, 0.0), 2: (30_000, 700.0)}  # node: (ns, tensor cycles per ns)
    for step in range(200):
        t += int(rng.integers(1_000, 80_000))
        for node, (ns, _) in kinds.items():
            starts.append(t)
            ends.append(t + ns)
            meta.append((node, step))
            t += ns + 1_000
    edges = np.arange(0, t + 250_000, 250_000)
    vals = np.zeros((len(edges) - 1, len(METRICS)))
    for a, b, (node, _) in zip(starts, ends, meta):
        for i in range(a // 250_000, (b - 1) // 250_000 + 1):
            ov = min(b, edges[i + 1]) - max(a, edges[i])
            vals[i, 3] += kinds[node][1] * ov
            vals[i, 4] += (kinds[node][1] / 1045) * ov / 250_000 * 100
            vals[i, 0] += 2000 * ov
    vals *= 1 + 0.03 * rng.standard_normal(vals.shape)  # each counter its own error
    join.add_kernels(starts, ends, meta)
    join.add_samples(edges[:-1], edges[1:], vals)
    nodes = written(join)
    assert nodes[1][fmt.TENSOR_FLOPS] == 0 and nodes[1][fmt.TENSOR_ACTIVE_NS] == 0
    assert nodes[2][fmt.TENSOR_FLOPS] / nodes[2][fmt.COUNTER_NS] == pytest.approx(
        700 * 1024, rel=0.1)


def test_copies_and_sets_go_to_the_counters_join_with_their_own_node():
    """The router hands copies (a memcpy DtoD between two kernels) to the counters' join as
    well: the copy engines' DRAM traffic is in the samples, and a copy left out gave its bytes
    to the kernels beside it (200 L2-resident adds after a 256 MiB copy read 618 GB/s of DRAM
    on an H200) and had none of its own."""
    from proton.data.paths import ROOT, SCOPE, paths
    from proton.runtime.router import KernelRouter

    handed: list = []

    class Counters:
        def kernels(self, device, starts, ends, meta):
            handed.extend(zip(starts, ends, [m[0] for m in meta]))

    router = KernelRouter({})
    router.listener = Counters()  # type: ignore[assignment]
    scope = paths.intern(ROOT, "d2d", SCOPE)
    copy = -1 - 4  # a copy row's configuration (collector: -1 - records.CopyName)
    router.on_kernels([(scope, 10, 1, "add_kernel", 0, 100, 200, 7, 0),
                       (scope, 11, 2, fmt.MEMCPY_DTOD, 0, 210, 400, 7, copy),
                       (scope, 12, 3, "add_kernel", 0, 410, 500, 7, 0)])
    assert [(s, e) for s, e, _ in handed] == [(100, 200), (210, 400), (410, 500)]
    names = [paths.frames[node].name for _, _, node in handed]
    assert names == ["add_kernel", fmt.MEMCPY_DTOD, "add_kernel"]


def test_a_copy_in_the_samples_gets_its_dram_bytes_and_its_neighbours_keep_theirs():
    """A 256 MiB device-to-device copy (2N DRAM bytes: read and write) between adds, all in
    the join: the copy's node has its 2N within 3%, the L2-resident adds after it none."""
    mib = 1 << 20
    copy_ns = 128_000
    kernels = [(t, t + copy_ns, 9, 2 * 256 * mib / copy_ns / BW, 0.0)
               for t in range(1_000_000, 1_000_000 + 10 * 130_000, 130_000)]
    t = kernels[-1][1] + 2_000
    kernels += [(t + i * 2_300, t + i * 2_300 + 2_000, 5, 0.0, 0.8) for i in range(200)]
    nodes = replay(kernels, noise=0.01)
    assert nodes[9][fmt.DRAM_BYTES] == pytest.approx(10 * 2 * 256 * mib, rel=0.03)
    assert nodes[5].get(fmt.DRAM_BYTES, 0) < 0.01 * BW * nodes[5][fmt.COUNTER_NS]
