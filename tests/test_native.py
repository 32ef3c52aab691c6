"""The C helper for CUPTI buffers (native.c): built at first use and cached, and the two
attribution pipelines (pipeline.py), the C helper's and Python's, giving the same kernels on the
same recorded buffers."""
from __future__ import annotations

import ctypes
import os
import time

import numpy as np
import pytest

from conftest import SANITIZE_ENV, fake_next
from proton.cupti import c_loader, native
from proton.cupti.pipeline import NativePipeline, PythonPipeline, walk

class _Raw:
    """buffers.RawBuffers as a pipeline sees it: cuptiActivityGetNextRecord, and the buffer
    callback it sets."""

    def __init__(self, next_record) -> None:
        self.next_record = next_record
        self.on_buffer = None


@pytest.mark.parametrize("sizes", [[], [24], [24, 40, 16, 232, 24] * 200])
def test_the_helper_walks_a_buffer_as_python_does(helper_cache, sizes):
    """Columns walks every record Python's walk finds (kinds it does not read included)."""
    buffer = (ctypes.c_uint64 * (sum(sizes) // 8 + 1))()
    address, valid = ctypes.addressof(buffer), sum(sizes)
    columns = native.Columns(native.helper(), fake_next(sizes), [([0], [(0, 4, False)], 8)])
    ((kinds,),), walked = columns(address, valid)
    assert walked == len(sizes) == len(kinds)  # every record here is of kind 0
    assert walk(fake_next(sizes), address, valid) == np.cumsum([0, *sizes[:-1]]).tolist()[
        :len(sizes)]


def test_the_helper_is_built_once_and_cached(cache):
    assert native.helper() is not None
    path = native.library_path()
    assert path.startswith(str(cache)) and os.path.exists(path)
    built = os.stat(path).st_mtime_ns
    native.HELPER.built.clear()  # as a new process would
    assert native.helper() is not None and os.stat(path).st_mtime_ns == built


def test_a_damaged_cache_entry_is_built_again(cache):
    path = native.library_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"not a library")
    lib = native.helper()
    assert lib is not None and lib.proton_join_early(lib.proton_join_new()) == 0


def test_without_a_compiler_python_reads_and_says_so_once(cache, monkeypatch, capfd):
    from proton.cupti.collector import CollectorSettings, CuptiCollector

    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", str(cache))  # no cc, gcc or clang
    for _ in range(2):
        assert isinstance(CuptiCollector(CollectorSettings(lambda kernels: None)).pipeline,
                          PythonPipeline)
    err = capfd.readouterr().err
    assert err.count("reading CUPTI buffers in Python") == 1 and "install a C compiler" in err


def test_proton_native_0_chooses_the_python_pipeline_silently(cache, monkeypatch, capfd):
    from proton.cupti.collector import CollectorSettings, CuptiCollector

    monkeypatch.setenv("PROTON_NATIVE", "0")
    collector = CuptiCollector(CollectorSettings(lambda kernels: None, groups=lambda *a: None))
    assert isinstance(collector.pipeline, PythonPipeline) and not collector.pipeline.native
    assert capfd.readouterr().err == ""
    monkeypatch.delenv("PROTON_NATIVE")
    collector = CuptiCollector(CollectorSettings(lambda kernels: None, groups=lambda *a: None))
    assert isinstance(collector.pipeline, NativePipeline) and collector.pipeline.logs_launches


def test_fields_read_in_c_join_as_numpys_do(helper_cache, monkeypatch):
    """The helper reading fields as it walks: a buffer with every record kind the collector
    reads (a failed launch, a graph launch's kernels, a runtime launch, a kind it skips) gives
    the Attributor the same columns as the numpy reads (each pipeline reads the buffer)."""
    from cupti import cupti

    from proton.cupti.collector import CollectorSettings, CuptiCollector

    K = cupti.ActivityKind
    collectors = {way: CuptiCollector(CollectorSettings(lambda kernels: None, native=native))
                  for way, native in (("numpy", False), ("c", True))}
    collector = collectors["c"]
    launch = next(c for c, n in collector._driver_cbids.items() if n == "cuLaunchKernel")
    graph = next(c for c, n in collector._driver_cbids.items() if n == "cuGraphLaunch")
    runtime = next(iter(collector._runtime_cbids))
    name = ctypes.create_string_buffer(b"k")
    records = []
    for corr in range(1, 41):
        ext = np.zeros(1, dtype=cupti.activity_external_correlation_dtype)
        ext["kind"], ext["correlation_id"] = int(K.EXTERNAL_CORRELATION), corr
        ext["external_kind"], ext["external_id"] = collector._custom, 1000 + corr
        api = np.zeros(1, dtype=cupti.activity_api_dtype)
        api["kind"] = int(K.RUNTIME) if corr % 5 == 0 else int(K.DRIVER)
        api["cbid"] = runtime if corr % 5 == 0 else graph if corr % 7 == 0 else launch
        api["correlation_id"], api["start"], api["thread_id"] = corr, corr * 100, 77
        api["return_value"] = 1 if corr % 11 == 0 else 0  # a failed launch
        kern = np.zeros(1, dtype=cupti.activity_kernel10_dtype)
        kern["kind"], kern["correlation_id"], kern["name"] = int(K.CONCURRENT_KERNEL), corr, \
            ctypes.addressof(name)
        kern["start"], kern["end"], kern["device_id"] = corr * 100 + 5, corr * 100 + 9, corr % 2
        kern["grid_x"], kern["block_x"], kern["registers_per_thread"] = corr, 128, 32
        kern["graph_node_id"] = 5000 + corr if corr % 7 == 0 else 0
        other = np.zeros(1, dtype=cupti.activity_api_dtype)
        other["kind"] = int(K.OVERHEAD)  # a kind it does not read
        records += [ext, api, kern, other]
    data = b"".join(r.tobytes() for r in records)
    sizes = [r.dtype.itemsize for r in records]
    raw = (ctypes.c_uint64 * (len(data) // 8 + 1))()
    ctypes.memmove(raw, data, len(data))
    address, valid = ctypes.addressof(raw), len(data)
    step = fake_next(sizes)
    got = {}
    for path, collector in collectors.items():
        seen = []
        monkeypatch.setattr(collector.attributor, "add_columns", lambda *a: seen.append(a))
        holder = _Raw(step)
        collector.pipeline.attach(holder)
        assert holder.on_buffer == collector.pipeline.read
        holder.on_buffer(address, valid)
        assert collector.callback_errors == [] and collector.records == len(records)
        got[path] = seen
    assert got["c"] == got["numpy"] and len(got["c"]) == 1
    external, api, kernels = got["c"][0]
    assert len(external[0]) == 40 and len(api[0]) == 40 - 3  # 11, 22, 33 failed
    assert sum(api[2]) == len([c for c in range(1, 41) if c % 7 == 0 and c % 5 and c % 11])
    assert kernels[7][6] == 5007 and len(kernels) == 8  # graph node ids came along


def _record(dtype, **fields) -> np.ndarray:
    """One CUPTI record of cupti-python's `dtype` with `fields` set, the rest zero."""
    r = np.zeros(1, dtype=dtype)
    for name, value in fields.items():
        r[name] = value
    return r


def _feed(collector, records: list, joined: bool = True) -> None:
    """One buffer of `records` (numpy records of cupti-python's dtypes) through the
    collector's pipeline: the C helper's walk, read and join, or Python's walk, numpy reads
    and the Attributor."""
    data = b"".join(r.tobytes() for r in records)
    raw = (ctypes.c_uint64 * (len(data) // 8 + 1))()
    ctypes.memmove(raw, data, len(data))
    step = fake_next([r.dtype.itemsize for r in records])
    address, valid = ctypes.addressof(raw), len(data)
    pipeline = collector.pipeline
    if pipeline.native and pipeline.columns is not None:  # this buffer's walk; the join kept
        pipeline.columns = native.Columns(native.helper(), step, pipeline.column_groups())
    else:
        pipeline.attach(_Raw(step))
    pipeline.read(address, valid)


def _collector(joined: bool):
    """A collector putting its kernels in a list (through the C join when `joined`, else the
    Attributor), the list, and cuLaunchKernel's cbid."""
    from proton.cupti.collector import CollectorSettings, CuptiCollector

    got: list = []
    collector = CuptiCollector(CollectorSettings(
        got.extend, groups=(lambda g, f, rows: got.extend(rows())) if joined else None,
        native=joined))
    collector.shaper.names = {0x1000: "a"}
    launch = next(c for c, n in collector._driver_cbids.items() if n == "cuLaunchKernel")
    return collector, got, launch


def _stream(seed: int, launches: int, collector, capture: tuple[int, int] | None):
    """A random run as CUPTI buffers (lists of records), and the kernels a correct join gives
    (path, launch start, correlation id, name pointer, device, start, end, stream, launch
    configuration): scoped and unscoped launches, failed ones, graph launches with three
    kernels, kernels in an earlier buffer than their launch record, records shuffled within a
    buffer, and launches inside a stream capture (`capture`: thread 7's window) that run
    nothing."""
    from cupti import cupti

    K = cupti.ActivityKind
    rng = np.random.default_rng(seed)
    launch = next(c for c, n in collector._driver_cbids.items() if n == "cuLaunchKernel")
    graph = next(c for c, n in collector._driver_cbids.items() if n == "cuGraphLaunch")
    runtime = next(c for c, n in collector._runtime_cbids.items() if "LaunchKernel" in n)
    buffers: list[list[np.ndarray]] = [[] for _ in range(launches // 50 + 2)]
    expected = []

    for corr in range(1, launches + 1):
        kind = rng.choice(["scoped", "unscoped", "failed", "graph"], p=[0.8, 0.1, 0.03, 0.07])
        start, thread = corr * 1000, int(rng.choice([7, 8]))
        at = min(corr // 50 + int(rng.integers(0, 2)), len(buffers) - 1)
        path = int(rng.integers(1, 40))
        if kind != "unscoped":
            buffers[at].append(_record(cupti.activity_external_correlation_dtype,
                                      kind=int(K.EXTERNAL_CORRELATION), correlation_id=corr,
                                      external_kind=collector._custom, external_id=path))
        buffers[at].append(_record(cupti.activity_external_correlation_dtype,  # not ours
                                  kind=int(K.EXTERNAL_CORRELATION), correlation_id=corr,
                                  external_kind=collector._custom + 1, external_id=99))
        on_runtime = kind != "graph" and corr % 9 == 0
        buffers[at].append(_record(
            cupti.activity_api_dtype, kind=int(K.RUNTIME if on_runtime else K.DRIVER),
            correlation_id=corr, start=start, thread_id=thread,
            cbid=runtime if on_runtime else graph if kind == "graph" else launch,
            return_value=1 if kind == "failed" else 0))
        captured = capture and thread == 7 and capture[0] <= start <= capture[1]
        if kind == "failed" or (captured and kind != "graph"):
            continue
        where = path if kind != "unscoped" else 900 + thread
        for node in ([1, 2, 3] if kind == "graph" else [0]):
            k_at = max(0, at - int(rng.integers(0, 3)))  # sometimes before its launch record
            name, device = int(rng.choice([0x1000, 0x2000])), int(rng.integers(0, 2))
            blocks, regs = int(rng.choice([1, 132])), int(rng.choice([32, 40]))
            kstart = start + 500 + node
            buffers[k_at].append(_record(
                cupti.activity_kernel10_dtype, kind=int(K.CONCURRENT_KERNEL),
                correlation_id=corr, name=name, device_id=device, start=kstart,
                end=kstart + 100 + node, stream_id=3, grid_x=blocks, grid_y=1, grid_z=1,
                block_x=64, block_y=2, block_z=1, registers_per_thread=regs,
                static_shared_memory=24, dynamic_shared_memory=1000,
                graph_node_id=5000 + corr * 4 + node if node else 0))
            expected.append((where, start, corr, name, device, kstart, kstart + 100 + node, 3,
                             (blocks, 128, regs, 1024)))
    return [[records[i] for i in rng.permutation(len(records))] for records in buffers], \
        expected


def _placed(collector, got: list) -> list:
    """The kernels a run gave, sorted, once nothing waits and nothing is left over: (path,
    launch start, correlation id, name, device, start, end, stream, launch configuration)."""
    assert collector.callback_errors == []
    assert collector.waiting_before(10**12) == 0
    assert collector.finish() == 0
    configs = collector.launch_configs.get
    return sorted(k[:8] + (configs(k[8]),) for k in got)


@pytest.mark.parametrize("seed,capture,launches", [
    (1, None, 3000), (2, None, 3000), (3, (200_000, 900_000), 3000),
    (4, None, 20_000)])  # the tables grow and wrap around several times
def test_the_c_join_gives_each_kernel_where_the_attributor_does(helper_cache, seed, capture,
                                                                 launches):
    """The same random run's buffers through numpy and the Attributor, and through the C
    helper's walk, read and join (Python placing what the join leaves it): every kernel on the
    same path with the same fields, the join's per-path sums equal to its kernels, nothing
    left waiting."""
    from proton.cupti.collector import CollectorSettings, CuptiCollector

    names = {0x1000: "a", 0x2000: "b"}
    results = {}
    for joined in (False, True):
        got, sums, summed = [], {}, []

        def groups(g, first, rows):
            kernels = rows()
            assert first == min(k[1] for k in kernels)
            for path, name, device, config, ns, count in g:
                key = (path, name, device, config)
                sums[key] = [a + b for a, b in zip(sums.get(key, [0, 0]), (ns, count))]
            got.extend(kernels)
            summed.extend(kernels)

        collector = CuptiCollector(CollectorSettings(
            got.extend, unscoped=lambda thread, ts: 900 + thread,
            groups=groups if joined else None, native=joined))
        collector.shaper.names = dict(names)
        if capture:
            collector.attributor.capturing[7] = [list(capture)]
        buffers, expected = _stream(seed, launches, collector, capture)
        for records in buffers:
            _feed(collector, records, joined)
        results[joined] = _placed(collector, got)
        if joined:
            mine = {}
            for k in summed:
                key = (k[0], k[3], k[4], k[8])
                mine[key] = [a + b for a, b in zip(mine.get(key, [0, 0]), (k[6] - k[5], 1))]
            assert sums == mine
            # most joined in C; launches made while a stream capture ran placed in Python
            assert len(summed) > (0.4 if capture else 0.7) * len(got)
            if capture:
                assert not [k for k in summed if capture[0] <= k[1] <= capture[1]]
            assert collector.kernels == len(expected)
    want = sorted((p, t, c, names[n], d, s, e, st, cfg) for p, t, c, n, d, s, e, st, cfg
                  in expected)
    assert results[False] == want
    assert results[True] == want


def test_kernels_whose_launch_record_never_came_go_to_their_external_path(helper_cache):
    """The C join holds a kernel whose launch record has not come; at the end it goes to the
    path of its external record, or the root."""
    from cupti import cupti

    from proton.cupti.collector import CollectorSettings, CuptiCollector

    K = cupti.ActivityKind
    got = []
    collector = CuptiCollector(CollectorSettings(
        got.extend, groups=lambda g, first, rows: got.extend(rows())))
    collector.shaper.names = {0x1000: "a"}
    records = [np.zeros(1, dtype=cupti.activity_external_correlation_dtype)]
    records[0]["kind"], records[0]["correlation_id"] = int(K.EXTERNAL_CORRELATION), 5
    records[0]["external_kind"], records[0]["external_id"] = collector._custom, 17
    for corr, start in ((5, 100), (6, 200)):
        k = np.zeros(1, dtype=cupti.activity_kernel10_dtype)
        k["kind"], k["correlation_id"], k["name"] = int(K.CONCURRENT_KERNEL), corr, 0x1000
        k["start"], k["end"] = start, start + 50
        records.append(k)
    data = b"".join(r.tobytes() for r in records)
    raw = (ctypes.c_uint64 * (len(data) // 8 + 1))()
    ctypes.memmove(raw, data, len(data))
    holder = _Raw(fake_next([r.dtype.itemsize for r in records]))
    collector.pipeline.attach(holder)
    assert collector.pipeline.join is not None
    holder.on_buffer(ctypes.addressof(raw), len(data))
    assert got == [] and collector.callback_errors == []
    assert collector.finish() == 2
    assert sorted(k[:4] for k in got) == [(0, 200, 6, "a"), (17, 100, 5, "a")]


def test_odd_records_give_the_same_kernels_joined_in_c_or_python(helper_cache):
    """Two kernels of one launch before its launch record, a graph kernel and a plain one
    whose launch records never come, a failed launch and a call that is no launch: the C join
    and the Attributor give the same kernels, paths and counts."""
    from cupti import cupti


    K = cupti.ActivityKind

    results = {}
    for joined in (False, True):
        collector, got, launch = _collector(joined)
        other = next(c for c in range(1, 400) if c not in collector._driver_cbids)
        e = cupti.activity_external_correlation_dtype
        kernel = cupti.activity_kernel10_dtype

        def kern(corr, start, node=0):
            return _record(kernel, kind=int(K.CONCURRENT_KERNEL), correlation_id=corr,
                           name=0x1000, start=start, end=start + 10, graph_node_id=node)

        first = [_record(e, kind=int(K.EXTERNAL_CORRELATION), correlation_id=c,
                         external_kind=collector._custom, external_id=p)
                 for c, p in ((5, 17), (8, 21), (9, 30), (10, 31))]
        first += [kern(5, 100), kern(5, 120), kern(8, 130, node=77), kern(6, 140)]
        api = cupti.activity_api_dtype
        second = [_record(api, kind=int(K.DRIVER), cbid=launch, correlation_id=5, start=50),
                  _record(api, kind=int(K.DRIVER), cbid=launch, correlation_id=9, start=60,
                          return_value=1),
                  _record(api, kind=int(K.DRIVER), cbid=other, correlation_id=10, start=70)]
        for records in (first, second):
            _feed(collector, records, joined)
        assert collector.callback_errors == []
        lost = collector.finish()
        results[joined] = (sorted(k[:5] for k in got), lost, collector.launches,
                           collector.kernels)
    assert results[True] == results[False] == (
        [(0, 140, 6, "a", 0), (17, 50, 5, "a", 0), (17, 50, 5, "a", 0), (21, 130, 8, "a", 0)],
        2, 1, 4)


def test_launches_waiting_for_their_kernel_are_counted_by_start(helper_cache):
    """flush waits for the launches made before it: the C join counts them as the Attributor
    does."""
    from cupti import cupti


    K = cupti.ActivityKind
    for joined in (False, True):
        collector, _, launch = _collector(joined)
        calls = []
        for corr, start in ((1, 100), (2, 200)):
            ext = np.zeros(1, dtype=cupti.activity_external_correlation_dtype)
            ext["kind"], ext["correlation_id"] = int(K.EXTERNAL_CORRELATION), corr
            ext["external_kind"], ext["external_id"] = collector._custom, 5
            api = np.zeros(1, dtype=cupti.activity_api_dtype)
            api["kind"], api["cbid"], api["correlation_id"] = int(K.DRIVER), launch, corr
            api["start"] = start
            calls += [ext, api]
        kern = np.zeros(1, dtype=cupti.activity_kernel10_dtype)
        kern["kind"], kern["correlation_id"], kern["name"] = int(K.CONCURRENT_KERNEL), 1, 0x1000
        kern["start"], kern["end"] = 300, 310
        for records, waiting in ((calls, {150: 1, 250: 2}), ([kern], {150: 0, 250: 1})):
            _feed(collector, records, joined)
            assert {ts: collector.waiting_before(ts) for ts in waiting} == waiting, joined


def test_a_burst_of_waiting_launches_then_their_kernels(helper_cache):
    """30,000 launches wait before any kernel comes (the join's tables grow), then small
    buffers of launches and their kernels (the tables shrink back once 64 have come, not at
    the first: full buffers between partly filled ones keep their room): every kernel lands on
    its launch's path, as in the Attributor."""
    from cupti import cupti


    K = cupti.ActivityKind
    n = 30_000
    results = {}
    for joined in (False, True):
        collector, got, launch = _collector(joined)
        calls = []
        for corr in range(1, n + 1):
            calls.append(_record(cupti.activity_external_correlation_dtype,
                                 kind=int(K.EXTERNAL_CORRELATION), correlation_id=corr,
                                 external_kind=collector._custom, external_id=corr % 7 + 1))
            calls.append(_record(cupti.activity_api_dtype, kind=int(K.DRIVER), cbid=launch,
                                 correlation_id=corr, start=corr))
        _feed(collector, calls, joined)
        assert collector.waiting_before(n) == n
        kernels = [_record(cupti.activity_kernel10_dtype, kind=int(K.CONCURRENT_KERNEL),
                           correlation_id=corr, name=0x1000, start=n + corr, end=n + corr + 5)
                   for corr in range(1, n + 1)]
        for half in (kernels[: n // 2], kernels[n // 2:]):
            _feed(collector, half, joined)
        burst = collector.pipeline.join.slots() if joined else 0
        for corr in range(n + 1, n + 700, 10):  # small buffers after the burst
            if joined and corr == n + 11:
                assert collector.pipeline.join.slots() == burst  # one small buffer: room kept
            small = []
            for c in range(corr, corr + 10):
                small += [_record(cupti.activity_external_correlation_dtype,
                                  kind=int(K.EXTERNAL_CORRELATION), correlation_id=c,
                                  external_kind=collector._custom, external_id=9),
                          _record(cupti.activity_api_dtype, kind=int(K.DRIVER), cbid=launch,
                                  correlation_id=c, start=c),
                          _record(cupti.activity_kernel10_dtype, kind=int(K.CONCURRENT_KERNEL),
                                  correlation_id=c, name=0x1000, start=3 * n + c,
                                  end=3 * n + c + 5)]
            _feed(collector, small, joined)
        if joined:
            assert burst > 4 * n and collector.pipeline.join.slots() < burst / 8  # room let go
        assert collector.waiting_before(4 * n) == 0 and collector.finish() == 0
        results[joined] = sorted(k[:3] for k in got)
    assert results[True] == results[False]
    assert len(results[True]) == n + 700 and (7 % 7 + 1, 7, 7) in results[True]
    assert (9, n + 700, n + 700) in results[True]


def _launches(collector, launch: int, calls: list[tuple[int, int]]) -> list[np.ndarray]:
    """The external and API records of launches (correlation id, start) in scope 5."""
    from cupti import cupti

    K = cupti.ActivityKind
    out = []
    for corr, start in calls:
        out.append(_record(cupti.activity_external_correlation_dtype,
                           kind=int(K.EXTERNAL_CORRELATION), correlation_id=corr,
                           external_kind=collector._custom, external_id=5))
        out.append(_record(cupti.activity_api_dtype, kind=int(K.DRIVER), cbid=launch,
                           correlation_id=corr, start=start))
    return out


def _kernel(corr: int, start: int, end: int) -> np.ndarray:
    from cupti import cupti

    return _record(cupti.activity_kernel10_dtype, kind=int(cupti.ActivityKind.CONCURRENT_KERNEL),
                   correlation_id=corr, name=0x1000, start=start, end=end, stream_id=7)


# Measured on an H100 (a --listen GPT job, a --steps 3 capture and then a --duration 1 one):
# the first capture's stop flushed at STOP_FLUSH and turned kernel activity off at
# KERNELS_OFF; kernel 7491, launched by the job in between (after that capture's window),
# was not delivered then but in the next capture's buffers, whose kernel activity was on
# from OPENED, window to WINDOW_END. It was counted as that capture's loss.
STOP_FLUSH, KERNELS_OFF = 1795708476066248205, 1795708476066923497
STALE = (7491, 1795708476066367196, 1795708476066368636)
OPENED, WINDOW_END = 1795708476195542327, 1795708477222042385


def test_a_kernel_an_earlier_session_left_undelivered_is_no_loss_of_the_next(helper_cache):
    """A capture after another: the stale kernel record the first one's stop cut off comes
    with the second one's kernels; it is no launch of the second, so the second has lost
    nothing. A kernel of the second with no launch record inside its window is a loss; one
    that started after the window ended is not (the job runs on until CUPTI stops)."""
    for joined in (False, True):
        first, _, launch = _collector(joined)
        _feed(first, _launches(first, launch, [(7490, STOP_FLUSH - 20_000),
                                               (7491, STOP_FLUSH + 30_000)]), joined)
        _feed(first, [_kernel(7490, STOP_FLUSH - 10_000, STOP_FLUSH - 9_000)], joined)
        assert first.waiting_before(STOP_FLUSH) == 0
        assert first.finish(until=STOP_FLUSH - 40_000) == 0  # 7491's kernel never came

        second, got, launch = _collector(joined)
        second.opened = OPENED
        inside = [(50_000 + i, OPENED + 1_000_000 * (i + 1)) for i in range(3)]
        _feed(second, _launches(second, launch, inside), joined)
        _feed(second, [_kernel(*STALE)] + [_kernel(corr, start + 5_000, start + 9_000)
                                            for corr, start in inside], joined)
        assert second.waiting_before(WINDOW_END) == 0
        assert second.finish(until=WINDOW_END) == 0, joined
        assert sorted(k[2] for k in got) == [7491, 50_000, 50_001, 50_002]  # given, not lost

        third, _, launch = _collector(joined)
        third.opened = OPENED
        _feed(third, [_kernel(60_000, OPENED + 5_000, OPENED + 9_000),  # its launch: lost
                      _kernel(60_001, WINDOW_END + 5_000, WINDOW_END + 9_000)], joined)
        assert third.finish(until=WINDOW_END) == 1, joined


def test_launches_made_before_kernel_activity_was_on_are_not_waited_for(helper_cache):
    """A session takes launches before it turns kernel activity on (so that every kernel
    recorded has its launch): those made before then may never get a kernel record, and a
    flush must not wait for them until its deadline."""
    for joined in (False, True):
        collector, _, launch = _collector(joined)
        collector.opened = 1000
        _feed(collector, _launches(collector, launch, [(1, 900), (2, 1100), (3, 1200)]),
              joined)
        _feed(collector, [_kernel(3, 1300, 1400)], joined)
        assert collector.waiting_before(2000) == 1, joined  # 2, not 1
        assert collector.waiting_before(1150) == 1 and collector.waiting_before(999) == 0


class _Launcher:
    """Calls the C launch log's callback as CUPTI would at a launch call's enter and exit, on
    the calling thread, with CUPTI's timestamp function answering `now`."""

    def __init__(self, collector) -> None:
        from cupti import cupti

        from proton.cupti.subscriber import CALLBACK, callback_fields

        self.now = 0
        self._clock = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))(
            self._tick)
        collector.fields = callback_fields(cupti)
        log, enter, on_api = collector.pipeline.start(
            ctypes.cast(self._clock, ctypes.c_void_p).value)
        assert log is not None and on_api is None
        self._enter = None
        if collector.in_callback:  # the python context: enters go to Python
            self._enter = native.ENTER(enter)
            log.configure(None, self._enter)
        collector.pipeline.enable(True)
        self.log, self.call = log, CALLBACK(log.callback)
        self._site, self._corr, self._ret = collector.fields
        self._data = (ctypes.c_uint8 * cupti.callback_data_dtype.itemsize)()
        self._status = ctypes.c_int32(0)

    def _tick(self, out) -> int:
        out[0] = self.now
        return 0

    def launch(self, domain: int, cbid: int, corr: int, start: int, status: int = 0,
               during=None) -> None:
        """One launch call; `during()` runs between its enter and its exit."""
        data = ctypes.addressof(self._data)
        ctypes.c_uint32.from_address(data + self._corr).value = corr
        ctypes.c_void_p.from_address(data + self._ret).value = ctypes.addressof(self._status)
        for site in (0, 1):  # the call takes 7 ns: its enter's time is the launch's
            if site and during is not None:
                during()
            ctypes.c_uint32.from_address(data + self._site).value = site
            self._status.value = status if site else 0
            self.now = start + 7 * site
            self.call(None, domain, cbid, data)


def test_the_launch_log_keeps_each_launch_with_its_threads_innermost_path(helper_cache):
    """The C callback logs a launch call that succeeded at its exit, with the innermost path
    its thread pushed (none outside scopes); failed calls are not logged; calls that are not
    launches go on to Python's callback; the log reads as the external and API columns."""
    import threading

    from cupti import cupti

    from proton.cupti.subscriber import CALLBACK

    collector, _, launch = _collector(True)
    launcher = _Launcher(collector)
    log = launcher.log
    forwarded = []
    python = CALLBACK(lambda userdata, domain, cbid, data: forwarded.append((domain, cbid)))
    log.configure(ctypes.cast(python, ctypes.c_void_p).value)
    log.enable(True)
    runtime = next(iter(collector._runtime_cbids))
    other = next(c for c in range(1, 400) if c not in collector._driver_cbids)
    log.push(7)
    log.push(9)
    launcher.launch(1, launch, corr=100, start=1000)
    log.pop()
    launcher.launch(2, runtime, corr=101, start=1100)
    launcher.launch(1, launch, corr=102, start=1200, status=1)  # failed: not logged
    launcher.launch(1, other, corr=103, start=1300)  # no launch: Python's
    launcher.call(None, 5, 2, None)  # another domain: Python's
    log.pop()
    launcher.launch(1, launch, corr=104, start=1400)
    worker = threading.Thread(target=lambda: (log.push(11), launcher.launch(1, launch, 105, 1500)))
    worker.start()
    worker.join()
    log.pop()  # more pops than pushes: stays empty
    launcher.launch(1, launch, corr=106, start=1600)
    assert forwarded == [(1, other), (1, other), (5, 2)]
    ext, api, n_ext, n_api = log.take()
    K = cupti.ActivityKind
    me = threading.get_ident() & 0xFFFFFFFF
    assert ext[:, :n_ext].T.tolist() == [[100, collector._custom, 9], [101, collector._custom, 7],
                                         [105, collector._custom, 11]]
    rows = api[:, :n_api].T.tolist()
    assert [r[:4] for r in rows] == [[int(K.DRIVER), 100, 1000, launch],
                                     [int(K.RUNTIME), 101, 1100, runtime],
                                     [int(K.DRIVER), 104, 1400, launch],
                                     [int(K.DRIVER), 105, 1500, launch],
                                     [int(K.DRIVER), 106, 1600, launch]]
    assert [r[4] == me for r in rows] == [True, True, True, False, True]
    assert [r[5] for r in rows] == [0] * 5
    assert log.take()[3] == 0 and log.lost == 0
    log.enable(False)
    launcher.launch(1, launch, corr=107, start=1700)
    assert log.take()[3] == 0


def test_a_thread_with_no_scope_logs_its_launches_under_the_main_threads(helper_cache):
    """A launch on a thread with no path of its own (PyTorch's autograd thread) is logged
    with the main thread's innermost scope as Python last set it before the call began (the
    time the timeline would be read at), so the C join places its kernel; with none set (or
    ROOT) it is logged without a path, for Python to place; a thread's own path comes first;
    a new session forgets it."""
    import threading

    from proton.data.paths import ROOT

    collector, _, launch = _collector(True)
    launcher = _Launcher(collector)
    log = launcher.log

    def on_worker(corr: int, push: int | None = None, during=None) -> None:
        def run():
            if push is not None:
                log.push(push)
            launcher.launch(1, launch, corr, corr * 10, during=during)

        worker = threading.Thread(target=run)
        worker.start()
        worker.join()

    on_worker(1)  # nothing set: no path
    collector.main_path(42)
    on_worker(2)
    on_worker(3, push=8)  # its own scope wins
    launcher.launch(1, launch, 4, 40)  # this thread, no scope pushed: the same rule
    collector.main_path(43)
    on_worker(5, during=lambda: collector.main_path(45))  # where it was at the call's enter
    collector.main_path(ROOT)  # the main thread left its scopes: Python decides
    on_worker(6)
    ext, api, n_ext, n_api = log.take()
    assert n_api == 6
    assert ext[:, :n_ext].T.tolist() == [[2, collector._custom, 42], [3, collector._custom, 8],
                                         [4, collector._custom, 42], [5, collector._custom, 43]]
    collector.main_path(44)
    log.configure(None)  # a new session
    log.enable(True)
    on_worker(7)
    ext, api, n_ext, n_api = log.take()
    assert (n_ext, n_api) == (0, 1)


def test_a_main_thread_scope_pushes_and_moves_the_main_path_in_one_call(helper_cache):
    """push_main and pop_main (a scope's enter and exit on the main thread, one C call each)
    do what push, pop and main_path do: this thread's launches go to its innermost scope, a
    thread with none of its own to the main thread's; leaving the last one (ROOT) leaves
    such launches without a path, for Python to place."""
    import threading

    from proton.data.paths import ROOT

    collector, _, launch = _collector(True)
    launcher = _Launcher(collector)
    log = launcher.log

    def on_worker(corr: int) -> None:
        worker = threading.Thread(target=lambda: launcher.launch(1, launch, corr, corr * 10))
        worker.start()
        worker.join()

    collector.push_main(31)
    launcher.launch(1, launch, 1, 10)
    on_worker(2)
    collector.push_main(32)
    on_worker(3)
    collector.pop_main(31)
    launcher.launch(1, launch, 4, 40)
    on_worker(5)
    collector.pop_main(ROOT)
    launcher.launch(1, launch, 6, 60)
    on_worker(7)
    ext, api, n_ext, n_api = log.take()
    assert n_api == 7
    custom = collector._custom
    assert ext[:, :n_ext].T.tolist() == [[1, custom, 31], [2, custom, 31], [3, custom, 32],
                                         [4, custom, 31], [5, custom, 31]]


def test_the_timeline_is_noted_only_where_no_c_log_reads_the_main_thread(helper_cache):
    """The main thread's scope changes: with the C launch log (which reads the main thread's
    scope at each launch) none goes to the Python timeline, so a scope costs no CUPTI
    timestamp; with Python's pipeline (PROTON_NATIVE=0, no compiler) each one is noted with
    its time, as the records' launches are placed from it."""
    import types

    from proton.cupti.collector import CollectorSettings, CuptiCollector
    from proton.data.paths import ROOT

    for use_native in (True, False):
        noted: list = []
        collector = CuptiCollector(CollectorSettings(
            lambda kernels: None, native=use_native, groups=lambda g, first, rows: None,
            moved=lambda ts, path: noted.append((ts, path))))
        assert collector.pipeline.logs_launches is use_native
        collector._cupti = types.SimpleNamespace(get_timestamp=lambda: 77)  # no driver here
        if not use_native:  # cupti-python's external-id push needs the driver
            collector.push = collector.pop = lambda *args: None
        collector.push_main(5)
        collector.push_main(6)
        collector.pop_main(5)
        collector.pop_main(ROOT)
        collector.main_path(8)
        collector.main_path(ROOT)
        assert noted == ([] if use_native else
                         [(77, 5), (77, 6), (77, 5), (77, ROOT), (77, 8), (77, ROOT)])


@pytest.mark.parametrize("seed,capture,launches", [
    (5, None, 3000), (6, (200_000, 900_000), 3000)])
def test_launches_logged_in_c_give_each_kernel_where_api_records_do(helper_cache, seed, capture,
                                                                    launches):
    """The random run of the join test with its launches made through the C launch log's
    callback (thread 7 is this thread, 8 another; scopes pushed on the log's stack) instead
    of API and external records: every kernel where the Attributor puts it from the
    records."""
    import threading

    from cupti import cupti

    from proton.cupti.collector import CollectorSettings, CuptiCollector

    K = cupti.ActivityKind
    names = {0x1000: "a", 0x2000: "b"}
    me = threading.get_ident() & 0xFFFFFFFF
    results = {}
    for logged in (False, True):
        got = []
        collector = CuptiCollector(CollectorSettings(
            got.extend, unscoped=lambda thread, ts: 900 + (7 if thread in (7, me) else 8),
            groups=(lambda g, first, rows: got.extend(rows())) if logged else None,
            native=logged))
        collector.shaper.names = dict(names)
        if capture:
            collector.attributor.capturing[me if logged else 7] = [list(capture)]
        buffers, expected = _stream(seed, launches, collector, capture)
        launcher = _Launcher(collector) if logged else None
        for records in buffers:
            if logged:  # the launches of this buffer through the callback, the rest as records
                paths = {int(r["correlation_id"][0]): int(r["external_id"][0]) for r in records
                         if r.dtype == cupti.activity_external_correlation_dtype
                         and r["external_kind"][0] == collector._custom}
                calls = sorted((int(r["correlation_id"][0]), r) for r in records
                               if r.dtype == cupti.activity_api_dtype)
                records = [r for r in records if r.dtype == cupti.activity_kernel10_dtype]

                def make(on_thread):
                    for corr, r in calls:
                        if int(r["thread_id"][0]) != on_thread:
                            continue
                        path = paths.get(corr)
                        if path is not None:
                            launcher.log.push(path)
                        launcher.launch(1 if r["kind"][0] == int(K.DRIVER) else 2,
                                        int(r["cbid"][0]), corr, int(r["start"][0]),
                                        int(r["return_value"][0]))
                        if path is not None:
                            launcher.log.pop()

                make(7)
                worker = threading.Thread(target=make, args=(8,))
                worker.start()
                worker.join()
            _feed(collector, records, logged)
        results[logged] = _placed(collector, got)
        assert collector.kernels == len(expected)
    assert results[True] == results[False]
    assert len(results[True]) == len(expected)


def test_a_launch_call_inside_another_is_not_logged(helper_cache):
    """CUPTI may report the driver's launch call made inside the runtime's: the kernel record
    names the outer call, so only it is logged."""
    collector, _, launch = _collector(True)
    launcher = _Launcher(collector)
    runtime = next(iter(collector._runtime_cbids))
    data = ctypes.addressof(launcher._data)
    site = ctypes.c_uint32.from_address(data + launcher._site)
    corr = ctypes.c_uint32.from_address(data + launcher._corr)
    ctypes.c_void_p.from_address(data + launcher._ret).value = \
        ctypes.addressof(launcher._status)
    for s, c, domain, cbid in ((0, 10, 2, runtime), (0, 11, 1, launch), (1, 11, 1, launch),
                               (1, 10, 2, runtime)):
        site.value, corr.value = s, c
        launcher.call(None, domain, cbid, data)
    launcher.launch(1, launch, corr=12, start=5)
    ext, api, n_ext, n_api = launcher.log.take()
    assert api[1, :n_api].tolist() == [10, 12]


def test_the_python_contexts_launch_enter_comes_from_the_c_callback(helper_cache):
    """context="python" with the C helper: CUPTI's call reaches Python only at a launch's
    enter, as (correlation id, time, cbid), and the launch goes where the launching Python
    frame says; a failed call is withdrawn from C (nothing waits for it); a launch on a
    thread whose path is unknown goes to the main thread's scope as the C log holds it (the
    timeline's `unscoped`, 901 here, is not noted with the log and not asked)."""
    import threading

    from proton.cupti.collector import CollectorSettings, CuptiCollector

    def where(frame):  # the frame that made the call: past _Launcher.launch (CUDA's place)
        assert frame.f_code.co_name == "launch"
        return {"user_code": 55, "worker": None}.get(frame.f_back.f_code.co_name, 66)

    collector = CuptiCollector(CollectorSettings(
        lambda kernels: None, unscoped=lambda thread, ts: 901, launch_path=where,
        in_callback=True))
    launch = next(c for c, n in collector._driver_cbids.items() if n == "cuLaunchKernel")
    launcher = _Launcher(collector)
    collector.main_path(900)  # the main thread entered a scope

    def user_code(corr, status=0):
        launcher.launch(1, launch, corr=corr, start=1000 + corr, status=status)

    user_code(1)
    user_code(2, status=1)  # failed
    launcher.launch(1, launch, corr=3, start=1003)  # from this test's own frame

    def worker():
        launcher.launch(1, launch, corr=4, start=1004)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert collector.callback_errors == []
    registered = collector.attributor.launch_path
    assert [registered(c) for c in (1, 3, 4)] == [55, 66, 900]
    assert collector.waiting_before(1002) == 1  # the failed launch is no longer waited for
    assert collector.waiting_before(10**9) == 3
    for corr in range(10, 1510):  # more failed calls than one read of the list takes
        user_code(corr)
        user_code(corr + 5000, status=1)
    assert collector.waiting_before(10**9) == 3 + 1500


def test_a_new_session_starts_with_an_empty_log_and_no_launch_call_left_open(helper_cache):
    """A launch call cut off by the last session's end (its exit never came) does not keep
    its thread's later launches out of the next session's log, and launches logged after the
    last session's final read are not the next session's."""
    collector, _, launch = _collector(True)
    launcher = _Launcher(collector)
    data = ctypes.addressof(launcher._data)
    ctypes.c_uint32.from_address(data + launcher._site).value = 0
    launcher.call(None, 1, launch, data)  # an enter whose exit never comes
    launcher.launch(1, launch, corr=5, start=50)  # counted as a call inside the open one
    assert launcher.log.take()[3] == 0
    launcher.launch(1, launch, corr=6, start=60)  # after the last read
    collector, _, launch = _collector(True)
    launcher = _Launcher(collector)  # the next session configures the log again
    assert launcher.log.take()[3] == 0
    launcher.launch(1, launch, corr=7, start=70)
    ext, api, n_ext, n_api = launcher.log.take()
    assert api[1:3, :n_api].T.tolist() == [[7, 70]]


def test_a_buffers_working_memory_is_kept_for_the_next():
    """Per-buffer arrays allocated anew let glibc keep the freed ones in its heap (26 MB of
    peak RSS on 1M launches): the blocks are kept, grown only for a bigger buffer, with a
    capacity that does not shrink, so a smaller buffer's rows land on the same pages."""
    from proton.cupti.native import Blocks

    kept = Blocks()
    first = kept.get("out", 4, 1000)
    assert first.shape == (4, 1000) and first.flags.c_contiguous
    assert kept.get("out", 4, 10) is first  # smaller: the same block
    grown = kept.get("out", 4, 1500)
    assert grown.shape == (4, 2000)  # doubled: a run of growing buffers reallocates rarely
    assert kept.get("out", 4, 1999) is grown
    assert kept.get("log", 9, 10).shape == (9, 10)  # each key its own
    for _ in range(Blocks.SHRINK_AFTER - 2):  # small buffers between big ones: kept
        assert kept.get("out", 4, 10) is grown
    assert kept.get("out", 4, 1200) is grown
    for _ in range(Blocks.SHRINK_AFTER - 1):  # after a burst, many small buffers in a row...
        assert kept.get("out", 4, 10) is grown
    assert kept.get("out", 4, 10).shape == (4, 20)  # ...let its room go


def test_a_threads_path_stack_is_freed_when_the_thread_ends(helper_cache):
    """Each thread that pushes a path gets a stack in the C helper; a job whose threads come
    and go (data loaders, a thread per request) must not keep one per thread ever started."""
    import threading

    lib = native.helper()
    collector, _, _ = _collector(True)
    log = _Launcher(collector).log
    log.push(1)  # this thread's stays: it is still running
    before = lib.proton_paths_live()

    def scoped():
        for depth in range(40):  # grown past its first capacity
            log.push(depth)
        for _ in range(40):
            log.pop()

    workers = [threading.Thread(target=scoped) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    deadline = time.monotonic() + 5  # join returns before the OS thread has quite ended
    while lib.proton_paths_live() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lib.proton_paths_live() == before
    log.pop()


def _strict_flags() -> tuple[str, ...]:
    return c_loader.FLAGS + ("-Wall", "-Wextra", "-Werror")


@pytest.mark.skipif(c_loader.compiler() is None, reason="no C compiler (cc, gcc, clang or CC)")
def test_the_helper_compiles_with_every_warning_as_an_error(tmp_path):
    """CI's check of native.c: -Wall -Wextra -Werror with the machine's compiler."""
    out = tmp_path / "strict.so"
    native.HELPER.compile_to(str(out), _strict_flags())
    assert out.stat().st_size > 0


@pytest.mark.skipif(c_loader.compiler() is None, reason="no C compiler (cc, gcc, clang or CC)")
def test_the_c_enums_are_the_records_columns(tmp_path):
    """The header native.c is built with gives every column the index records.py gives it:
    a small program compiled with it prints them back."""
    import subprocess

    from proton.cupti import records

    names = records.c_names()
    (tmp_path / "proton_records.h").write_text(records.c_header())
    lines = "".join(f'    printf("{n} %d\\n", (int){n});\n' for n in names)
    (tmp_path / "enums.c").write_text(
        f'#include <stdio.h>\n#include "proton_records.h"\nint main(void) {{\n{lines}'
        "    printf(\"column %d\\n\", (int)sizeof(proton_column));\n    return 0;\n}\n")
    subprocess.run([c_loader.compiler(), "-Wall", "-Werror", "-o", str(tmp_path / "enums"),
                    str(tmp_path / "enums.c")], check=True, timeout=60)
    out = subprocess.run([str(tmp_path / "enums")], capture_output=True, text=True, check=True)
    printed = dict(line.split() for line in out.stdout.splitlines())
    assert {n: int(v) for n, v in printed.items()} == {**names, "column": 8}
    assert np.dtype(records.DTYPE).itemsize == 8
    # what the Python side derives from them
    assert records.OUTPUT_AT[-1] == sum(len(t) for t in records.OUTPUT)
    assert [m.name for m in records.CONFIG] == ["blocks", "threads", "registers", "shared"]


def test_every_exported_function_has_its_signature_from_native_c(helper_cache):
    """The ctypes signatures are read from native.c's PROTON_API definitions: each is set on
    the built library, and matches the C parameter types."""
    sigs = native.signatures()
    lib = native.helper()
    # 27 + the waits (sync configure, take, lost, own), join_oldest and the wait events (on,
    # take, dropped)
    assert len(sigs) == 35
    for name, (restype, argtypes) in sigs.items():
        assert getattr(lib, name).argtypes == argtypes and getattr(lib, name).restype == restype
    assert sigs["proton_join_path"] == (ctypes.c_int64, [ctypes.c_void_p, ctypes.c_int64])
    assert sigs["proton_wait_events_take"] == (ctypes.c_int64, [ctypes.c_void_p, ctypes.c_int64])
    assert sigs["proton_python_api"] == (None, [ctypes.c_void_p] * 6)
    assert sigs["proton_walk_set"] == (None, [ctypes.c_void_p, ctypes.c_int64] * 2)
    assert sigs["proton_on_api"] == (None, [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32,
                                            ctypes.c_void_p])
    assert sigs["proton_columns"][1][:5] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_int32, ctypes.c_int32]


def test_the_cache_key_follows_the_source_header_and_flags(cache, monkeypatch):
    from proton.cupti import records

    default = native.library_path()
    assert native.library_path(c_loader.FLAGS + ("-O3",)) != default
    monkeypatch.setattr(records, "c_header", lambda: "/* another layout */")
    assert native.library_path() != default


def test_the_cache_is_a_private_folder(cache):
    """The helper is a library the process loads: its folder is made 0700, a folder of ours
    others may write is made private first, and a file in it that is not ours to trust (a
    symlink) is built again, not loaded."""
    import stat

    folder = cache / "native"
    lib = native.helper()
    assert lib is not None
    assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0
    folder.chmod(0o777)
    path = native.library_path()
    os.remove(path)
    planted = cache / "planted.so"
    planted.write_bytes(b"not ours")
    os.symlink(planted, path)
    native.HELPER.built.clear()
    assert native.helper() is not None
    assert stat.S_IMODE(folder.stat().st_mode) & 0o022 == 0
    assert not os.path.islink(path) and planted.read_bytes() == b"not ours"


def test_a_cache_folder_of_another_user_is_refused(cache, monkeypatch, capfd):
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # as if the folder were not ours
    os.makedirs(cache / "native", exist_ok=True)
    assert native.helper() is None
    err = capfd.readouterr().err
    assert "is not a folder of this user's" in err and "PROTON_CACHE_DIR" in err


def test_the_wheel_and_the_sdist_carry_every_helpers_c(tmp_path):
    """native.c, pm_native.c and runtime/intra_native.c are package data: an installed proton
    can build its helpers. The sdist is built as `pip` builds one; the wheel's files are what
    setuptools' build_py collects for it (the wheel package, which bdist_wheel needs on this
    setuptools, may be missing)."""
    import subprocess
    import sys
    import tarfile

    from proton.cupti import pm_native
    from proton.runtime import intra_native

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=root, capture_output=True, text=True, check=True).stdout.split()
    tree = tmp_path / "tree"
    for name in files:
        if os.path.isfile(os.path.join(root, name)):
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            with open(os.path.join(root, name), "rb") as f:
                (tree / name).write_bytes(f.read())
    out, lib = tmp_path / "dist", tmp_path / "lib"
    for code in (f"from setuptools import build_meta as b; b.build_sdist({str(out)!r})",
                 "from setuptools import setup; setup()"):
        args = ["build_py", "--build-lib", str(lib)] if "setup()" in code else []
        done = subprocess.run([sys.executable, "-c", code, *args], cwd=tree,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        names = t.getnames()
    for module in (native, pm_native, intra_native):
        where = os.path.join(*module.HELPER.package.split("."), module.HELPER.source_name)
        assert any(n.endswith("/" + where) for n in names), where
        assert (lib / where).read_text() == module.HELPER.source


SANITIZED = ["test_fields_read_in_c_join_as_numpys_do", "test_the_c_join_gives_each_kernel",
             "test_kernels_whose_launch_record_never_came", "test_odd_records_give_the_same",
             "test_launches_waiting_for_their_kernel", "test_a_burst_of_waiting_launches",
             "test_the_launch_log_keeps", "test_a_thread_with_no_scope",
             "test_launches_logged_in_c_give", "test_a_launch_call_inside_another",
             "test_the_python_contexts_launch_enter", "test_a_new_session_starts_with",
             "test_a_threads_path_stack_is_freed", "test_the_helper_walks_a_buffer",
             "test_a_main_thread_scope_pushes",
             # the other helpers' (c_loader builds them with the same flags)
             "test_the_recorded_buffer_replayed", "test_random_scopes_and_events",
             "test_warps_that_do_not_divide", "test_the_c_reader_fills_spans"]
"""The C-vs-Python equivalence tests and the launch log's, here and in SANITIZED_FROM, run again
under the sanitizers..."""
SANITIZED_FROM = ["test_intra_native.py", "test_counters.py"]
SANITIZED_FILES = ["test_python_walk.py", "test_python_frameless.py", "test_waits.py"]
"""... and these files whole: the python context's walk and frameless launches in C, the
waits' sums and events."""


@pytest.mark.skipif(c_loader.compiler() is None, reason="no C compiler (cc, gcc, clang or CC)")
def test_the_c_join_is_clean_under_the_sanitizers(tmp_path):
    """The equivalence tests in a python whose helpers are built with -fsanitize=address,
    undefined: an out-of-bounds access, use after free or undefined behaviour in native.c,
    intra_native.c or pm_native.c fails them. libasan must be loaded first (LD_PRELOAD);
    leaks are not checked (Python's own allocations would drown them)."""
    import subprocess
    import sys

    cc = c_loader.compiler()
    asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip()
    if not os.path.isabs(asan) or not os.path.exists(asan):
        pytest.skip(f"{cc} has no AddressSanitizer runtime (libasan.so)")
    env = {**os.environ, SANITIZE_ENV: "1", "LD_PRELOAD": asan,
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    here = os.path.dirname(os.path.abspath(__file__))
    files = [os.path.join(here, name)
             for name in (os.path.basename(__file__), *SANITIZED_FROM, *SANITIZED_FILES)]
    chosen = " or ".join(SANITIZED + [name[:-3] for name in SANITIZED_FILES])  # module names
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-x", *files, "-k", chosen],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def test_starting_a_session_imports_no_numpy_until_cupti_collects():
    """records.py is imported by the router and the Attributor, which every session loads:
    it must not make `import proton` (and `proton capture`, racing a job's end) pay for
    numpy."""
    import subprocess
    import sys

    code = ("import sys, proton.api, proton.cli, proton.runtime.router, proton.cupti.records; "
            "print(sorted(m for m in ('numpy', 'cupti', 'proton.cupti.native') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_code_that_unpacks_a_table_fails_at_import_when_the_declaration_changes():
    """Hot loops unpack rows positionally (the router, the Attributor) and say so with
    records.unpacks: a column added or moved in records.py stops the import, not the
    numbers."""
    from proton.cupti import records

    records.unpacks(records.Sunk, "path launch correlation_id name device start end stream "
                                  "config")
    with pytest.raises(RuntimeError, match="records.Launch is .* update that code"):
        records.unpacks(records.Launch, "correlation_id graph start thread")
