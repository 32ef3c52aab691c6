"""Copies and sets (issue 50, item 1): CUPTI's MEMCPY, MEMCPY2 and MEMSET records joined to the
call that issued them by correlation id, through the C join and Python's alike, and put on
nodes named by format.COPY_NAMES with their time, count and bytes. Replayed records: no GPU."""
from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

from conftest import fake_next
from proton import format as fmt

cupti = pytest.importorskip("cupti.cupti")  # cupti-python: Linux only

from proton.cupti import native, records  # noqa: E402
from proton.data.metrics import DEVICE_CUDA  # noqa: E402
from proton.cupti.collector import CollectorSettings, CuptiCollector  # noqa: E402
from proton.cupti.settings import PartAsks  # noqa: E402
from proton.cupti.subscriber import cupti_enum  # noqa: E402

K = cupti.ActivityKind
MK = cupti.ActivityMemoryKind
CK = cupti.ActivityMemcpyKind


def _record(dtype, **fields) -> np.ndarray:
    r = np.zeros(1, dtype=dtype)
    for name, value in fields.items():
        r[name] = value
    return r


class _Raw:
    def __init__(self, next_record) -> None:
        self.next_record = next_record
        self.on_buffer = None


def _feed(collector, recs: list) -> None:
    """One buffer of `recs` through the collector's pipeline (as tests/test_native.py)."""
    data = b"".join(r.tobytes() for r in recs)
    raw = (ctypes.c_uint64 * (len(data) // 8 + 1))()
    ctypes.memmove(raw, data, len(data))
    step = fake_next([r.dtype.itemsize for r in recs])
    pipeline = collector.pipeline
    if pipeline.native and pipeline.columns is not None:
        pipeline.columns = native.Columns(native.helper(), step, pipeline.column_groups())
    else:
        pipeline.attach(_Raw(step))
    pipeline.read(ctypes.addressof(raw), len(data))


def _cbid(enum_name: str, attr: str, call: str) -> int:
    return int(cupti_enum(cupti, enum_name, attr)[call])


DRIVER = ("driver_api_trace_cbid", "DriverApiTraceCbid")
RUNTIME = ("runtime_api_trace_cbid", "RuntimeApiTraceCbid")

# (correlation id, API kind, call, record kind, fields, the node's name, bytes)
COPIES = [
    (1, K.RUNTIME, "cudaMemcpyAsync_v3020", K.MEMCPY,
     dict(copy_kind=int(CK.HTOD), src_kind=int(MK.PAGEABLE), dst_kind=int(MK.DEVICE)),
     fmt.MEMCPY_HTOD_PAGEABLE, 4096),
    (2, K.DRIVER, "cuMemcpyHtoDAsync_v2", K.MEMCPY,
     dict(copy_kind=int(CK.HTOD), src_kind=int(MK.PINNED), dst_kind=int(MK.DEVICE)),
     fmt.MEMCPY_HTOD_PINNED, 1000),
    (3, K.RUNTIME, "cudaMemcpy_v3020", K.MEMCPY,
     dict(copy_kind=int(CK.DTOH), src_kind=int(MK.DEVICE), dst_kind=int(MK.PAGEABLE)),
     fmt.MEMCPY_DTOH_PAGEABLE, 1 << 30),  # larger than any launch configuration packs
    (4, K.RUNTIME, "cudaMemcpyAsync_v3020", K.MEMCPY,
     dict(copy_kind=int(CK.DTOH), src_kind=int(MK.DEVICE), dst_kind=int(MK.PINNED)),
     fmt.MEMCPY_DTOH_PINNED, 8),
    (5, K.RUNTIME, "cudaMemcpyAsync_v3020", K.MEMCPY,
     dict(copy_kind=int(CK.DTOD), src_kind=int(MK.DEVICE), dst_kind=int(MK.DEVICE)),
     fmt.MEMCPY_DTOD, 64),
    (6, K.RUNTIME, "cudaMemcpyPeerAsync_v4000", K.MEMCPY2,
     dict(copy_kind=int(CK.PTOP), src_kind=int(MK.DEVICE), dst_kind=int(MK.DEVICE),
          src_device_id=0, dst_device_id=1),
     fmt.MEMCPY_PTOP, 77),
    (7, K.RUNTIME, "cudaMemcpy_v3020", K.MEMCPY,
     dict(copy_kind=int(CK.HTOH), src_kind=int(MK.PAGEABLE), dst_kind=int(MK.PINNED)),
     fmt.MEMCPY_HTOH, 5),
    (8, K.RUNTIME, "cudaMemcpyToArray_v3020", K.MEMCPY,
     dict(copy_kind=int(CK.HTOA), src_kind=int(MK.PAGEABLE), dst_kind=int(MK.ARRAY)),
     fmt.MEMCPY_OTHER, 16),
    (9, K.RUNTIME, "cudaMemsetAsync_v3020", K.MEMSET, dict(memory_kind=int(MK.DEVICE)),
     fmt.MEMSET, 2048),
    (10, K.DRIVER, "cuMemsetD32Async", K.MEMSET, dict(), fmt.MEMSET, 400),
]
DTYPES = {K.MEMCPY: cupti.activity_memcpy6_dtype, K.MEMCPY2: cupti.activity_memcpy_pto_p4_dtype,
          K.MEMSET: cupti.activity_memset4_dtype}
PATH = 17


def _buffers(collector, early: bool, path: int = PATH) -> tuple[list[list], list[tuple]]:
    """Two buffers: every copy call (scope PATH) with its record, a kernel launch beside
    them; with `early` the records come in the buffer before their calls'. And the rows a
    correct join gives: (path, call start, correlation id, name, device, start, end, stream,
    config: minus the bytes for a copy)."""
    first, second, expected = [], [], []
    for corr, api_kind, call, kind, fields, name, size in COPIES:
        enum = RUNTIME if api_kind == K.RUNTIME else DRIVER
        calls = [_record(cupti.activity_external_correlation_dtype,
                         kind=int(K.EXTERNAL_CORRELATION), correlation_id=corr,
                         external_kind=collector._custom, external_id=path),
                 _record(cupti.activity_api_dtype, kind=int(api_kind),
                         cbid=_cbid(*enum, call), correlation_id=corr, start=corr * 100,
                         thread_id=3)]
        start = corr * 100 + 50
        rec = _record(DTYPES[kind], kind=int(kind), correlation_id=corr, bytes=size,
                      start=start, end=start + corr, device_id=corr % 2, stream_id=7,
                      **fields)
        first += calls if not early else [rec]
        second += [rec] if not early else calls
        expected.append((path, corr * 100, corr, name, corr % 2, start, start + corr, 7, -size))
    launch = _cbid(*DRIVER, "cuLaunchKernel")
    first += [_record(cupti.activity_external_correlation_dtype,
                      kind=int(K.EXTERNAL_CORRELATION), correlation_id=50,
                      external_kind=collector._custom, external_id=path),
              _record(cupti.activity_api_dtype, kind=int(K.DRIVER), cbid=launch,
                      correlation_id=50, start=5000, thread_id=3)]
    second.append(_record(cupti.activity_kernel10_dtype, kind=int(K.CONCURRENT_KERNEL),
                          correlation_id=50, name=0x1000, start=5050, end=5090, stream_id=7,
                          grid_x=4, grid_y=1, grid_z=1, block_x=128, block_y=1, block_z=1,
                          registers_per_thread=32))
    expected.append((path, 5000, 50, "k", 0, 5050, 5090, 7, (4, 128, 32, 0)))
    return [first, second], expected


@pytest.mark.parametrize("early", [False, True])
def test_copy_and_set_records_join_their_call_in_c_and_in_python(helper_cache, early):
    """Every kind of copy and a set, through the C join and through Python's reads and
    Attributor: each under the scope that issued it, named by its kind (pageable or pinned by
    its host side), its bytes in the row (as minus the configuration), the same either way;
    a record before its call's record waits for it; nothing is left waiting or lost. The GPU
    is busy (for gpu_idle) during each copy and set as during the kernel."""
    results = {}
    for joined in (False, True):
        got: list = []
        sums: dict = {}
        busy: list = []

        def groups(g, first, rows):
            for path, name, device, config, ns, count in g:
                key = (path, name, device, config)
                sums[key] = [a + b for a, b in zip(sums.get(key, [0, 0]), (ns, count))]
            got.extend(rows())

        collector = CuptiCollector(CollectorSettings(
            got.extend, groups=groups if joined else None, native=joined,
            parts=PartAsks(busy=lambda starts, ends, *_: busy.extend(
                zip(starts.tolist(), ends.tolist())))))
        collector.shaper.names = {0x1000: "k"}
        assert collector.pipeline.native is joined
        buffers, expected = _buffers(collector, early)
        for recs in buffers:
            _feed(collector, recs)
        assert collector.callback_errors == []
        assert collector.waiting_before(10**12) == 0
        assert collector.finish() == 0
        configs = collector.launch_configs.get
        results[joined] = sorted(k[:8] + (k[8] if k[8] <= 0 else configs(k[8]),) for k in got)
        assert results[joined] == sorted(expected)
        assert sorted(busy) == sorted((row[5], row[6]) for row in expected), joined
        if joined:  # the C join summed them per node too
            assert sums[(PATH, fmt.MEMSET, 1, -2048)] == [9, 1]
            assert sums[(PATH, fmt.MEMCPY_DTOH_PAGEABLE, 1, -(1 << 30))] == [3, 1]
    assert results[True] == results[False]


def test_the_copy_kinds_are_cuptis():
    """records.CopyKind and MemoryKind are CUPTI's values (native.c switches on them), and
    CopyName numbers format.COPY_NAMES."""
    for member in records.CopyKind:
        assert int(CK[member.name.upper()]) == member
    assert int(MK.PAGEABLE) == records.MemoryKind.pageable
    assert [fmt.COPY_NAMES[n] for n in records.CopyName] == [
        "memcpy HtoD (pageable)", "memcpy HtoD (pinned)", "memcpy DtoH (pageable)",
        "memcpy DtoH (pinned)", "memcpy DtoD", "memcpy PtoP", "memcpy HtoH", "memcpy other",
        "memset"]
    assert all(fmt.COPY_FRAME.match(n) for n in fmt.COPY_NAMES)
    assert not fmt.COPY_FRAME.match("memcpy_kernel") and not fmt.COPY_FRAME.match("memsetter")


def test_a_runtime_copys_nested_driver_copy_reaches_python_once(helper_cache):
    """context="python" with the C launch log: a runtime copy (cudaMemcpyAsync) that makes a
    driver copy inside it calls back in both domains; Python places the outer call only."""
    import sys
    import threading

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from test_native import _Launcher

    entered: list = []
    collector = CuptiCollector(CollectorSettings(lambda kernels: None, launch_path=lambda frame: 5,
                                                 in_callback=True, native=True))
    collector.attributor.register_launch = lambda corr, path, start, graph: entered.append(
        (corr, path))
    launcher = _Launcher(collector)
    runtime = _cbid(*RUNTIME, "cudaMemcpyAsync_v3020")
    driver = _cbid(*DRIVER, "cuMemcpyHtoDAsync_v2")
    launch = _cbid(*DRIVER, "cuLaunchKernel")
    data = ctypes.addressof(launcher._data)
    site = ctypes.c_uint32.from_address(data + launcher._site)
    corr = ctypes.c_uint32.from_address(data + launcher._corr)
    ctypes.c_void_p.from_address(data + launcher._ret).value = \
        ctypes.addressof(launcher._status)

    def calls():
        for s, domain, cbid in ((0, 2, runtime), (0, 1, driver), (1, 1, driver),
                                (1, 2, runtime)):
            site.value, corr.value = s, 10
            launcher.call(None, domain, cbid, data)
        launcher.launch(1, launch, corr=11, start=5)

    thread = threading.Thread(target=calls)  # a thread running Python: enters go to Python
    thread.start()
    thread.join()
    assert [c for c, _ in entered] == [10, 11]


def _profile(tmp_path, joined: bool, repeat: int = 3) -> tuple[str, dict, object]:
    """The copies of COPIES, `repeat` times each, in a scope, through a pipeline, the router
    and a session, written as the profile file: its path, the session's nodes by name, and
    the trace of the same records."""
    from proton.data import chrome_trace, document
    from proton.data.paths import ROOT, SCOPE, paths
    from proton.runtime.router import KernelRouter
    from proton.runtime.session import Session

    tree = Session(1, "t", "/dev/null", "shadow", "tree", None)
    trace = Session(2, "t", "/dev/null", "shadow", "trace", None)
    for s in (tree, trace):
        s.intervals.append([0, -1])
    router = KernelRouter({1: tree})
    tracer = KernelRouter({2: trace})

    def kernels(rows):
        router.on_kernels(rows)
        tracer.on_kernels(rows)

    def groups(g, first, rows):
        router.on_groups(g, first, rows)
        tracer.on_kernels(rows())

    collector = CuptiCollector(CollectorSettings(kernels, groups=groups if joined else None,
                                                 native=joined))
    collector.shaper.names = {0x1000: "k"}
    scope = paths.intern(ROOT, "copy_scope", SCOPE)
    for _ in range(repeat):
        buffers, _ = _buffers(collector, False, scope)
        for recs in buffers:
            _feed(collector, recs)
    assert collector.callback_errors == [] and collector.finish() == 0
    named: dict = {}  # by name, a kind's nodes on both devices summed
    for node, metrics in tree.nodes.items():
        assert paths.frames[node].parent == scope, paths.frames[node].name
        mine = named.setdefault(paths.frames[node].name, (node, {}))[1]
        for key, value in metrics.items():
            mine[key] = mine.get(key, 0) + value if key in (fmt.TIME, fmt.COUNT, fmt.BYTES) \
                else value
    h100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000,
            "memory_clock_rate": 2619000, "bus_width": 5120}
    doc = document.build(tree.nodes, {"0": h100, "1": h100})
    path = tmp_path / f"copies{int(joined)}.hatchet"
    path.write_text(json.dumps(doc))
    return str(path), {n: m for n, (_, m) in named.items()}, chrome_trace.build_trace(trace.events, lanes=False)


@pytest.mark.parametrize("joined", [False, True])
def test_copy_nodes_carry_time_count_and_bytes(helper_cache, tmp_path, joined):
    """Each copy kind and the sets are one node under the scope that issued them, with
    `time (ns)`, `count`, `bytes` and their device, and no launch configuration; the trace
    shows each on its stream, with its bytes."""
    _, nodes, trace = _profile(tmp_path, joined)
    for _, _, _, _, _, name, size in COPIES:
        if name == fmt.MEMSET:
            continue
        m = nodes[name]
        assert m[fmt.BYTES] == 3 * size and m[fmt.COUNT] == 3, name
        assert m[fmt.DEVICE_TYPE] == DEVICE_CUDA and fmt.GRID_BLOCKS not in m
    sets = nodes[fmt.MEMSET]
    assert sets[fmt.BYTES] == 3 * (2048 + 400) and sets[fmt.COUNT] == 6
    assert sets[fmt.TIME] == 3 * (9 + 10)
    assert fmt.BYTES not in nodes["k"] and nodes["k"][fmt.COUNT] == 3
    events = [e for e in trace["traceEvents"] if e["name"] == fmt.MEMCPY_HTOD_PAGEABLE]
    assert len(events) == 3 and {e["tid"] for e in events} == {7}
    assert {e["cat"] for e in events} == {"memcpy"} and events[0]["args"]["bytes"] == 4096
    assert {e["cat"] for e in trace["traceEvents"] if e["name"] == fmt.MEMSET} == {"memset"}


def test_the_viewer_shows_copies_and_judges_none_as_a_kernel(helper_cache, tmp_path):
    """proton-viewer -m bytes and gbyte/s show the copy nodes; --diagnose, the roofline and
    util judge kernels only; the HTML report lists them; Triton's viewer opens the file."""
    import subprocess
    import sys

    from click.testing import CliRunner

    from proton.viewer.cli import viewer
    from proton.viewer.derive import kernel_mask, kernel_roofs
    from proton.viewer.diagnose import diagnose
    from proton.viewer.reader import load

    path, _, _ = _profile(tmp_path, True)
    out = CliRunner().invoke(viewer, ["-m", "bytes", path])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if fmt.MEMCPY_HTOD_PAGEABLE in x)
    assert "12288" in line.replace(",", "").replace(".000", "")
    out = CliRunner().invoke(viewer, ["-m", "gbyte/s", path])
    assert out.exit_code == 0 and fmt.MEMSET in out.output, out.output
    prof = load(path)
    names = {n: n.frame["name"] for n in prof.gf.graph.traverse()}
    assert {names[n] for n, yes in kernel_mask(prof).items() if yes} == {"k"}
    assert {names[n] for n, yes in kernel_mask(prof, copies=True).items() if yes} == {
        "k", *(c[5] for c in COPIES)}
    assert {names[n] for n in kernel_roofs(prof)} == {"k"}
    # no kernel rule judges a copy; the one finding on copies is the pageable copy's own rule
    on_copies = [f for f in diagnose(load(path)).findings if fmt.COPY_FRAME.match(f.kernel)]
    assert {f.rule for f in on_copies} <= {"pageable copy in a loop"}
    html = tmp_path / "r.html"
    out = CliRunner().invoke(viewer, ["--html", str(html), path])
    assert out.exit_code == 0, out.output
    assert fmt.MEMCPY_DTOH_PINNED in html.read_text()
    pytest.importorskip("triton.profiler.viewer")
    run = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m", "time/us",
                          path], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert fmt.MEMCPY_HTOD_PAGEABLE in run.stdout
