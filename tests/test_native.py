"""The C helper for CUPTI buffers: built at first use and cached, the same offsets as the Python
walk, and the Python walk when there is no compiler."""
from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from proton.cupti import native

NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.POINTER(ctypes.c_void_p))


def fake_next(sizes: list[int]):
    """cuptiActivityGetNextRecord over records of `sizes` bytes laid end to end: 0 and the next
    record, or CUPTI's MAX_LIMIT_REACHED (14) after the last."""
    starts = np.cumsum([0, *sizes[:-1]]).tolist() if sizes else []

    def step(buffer, valid, record):
        at = 0 if not record[0] else record[0] - buffer
        i = 0 if not record[0] else starts.index(at) + 1
        if i >= len(starts) or starts[i] >= valid:
            return 14
        record[0] = buffer + starts[i]
        return 0

    return NEXT(step)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PROTON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PROTON_NATIVE", raising=False)
    native._built.clear()
    yield tmp_path
    native._built.clear()


@pytest.mark.parametrize("sizes", [[], [24], [24, 40, 16, 232, 24] * 200])
def test_the_helper_walks_a_buffer_as_python_does(cache, sizes):
    buffer = (ctypes.c_uint64 * (sum(sizes) // 8 + 1))()
    address, valid = ctypes.addressof(buffer), sum(sizes)
    walk = native.Walker(fake_next(sizes))
    assert walk.native
    got = walk(address, valid)
    os.environ["PROTON_NATIVE"] = "0"
    try:
        python = native.Walker(fake_next(sizes))
        assert not python.native
        assert list(got) == python(address, valid) == np.cumsum([0, *sizes[:-1]]).tolist()[
            :len(sizes)]
    finally:
        del os.environ["PROTON_NATIVE"]


def test_the_helper_is_built_once_and_cached(cache):
    assert native.helper() is not None
    path = native.library_path()
    assert path.startswith(str(cache)) and os.path.exists(path)
    built = os.stat(path).st_mtime_ns
    native._built.clear()  # as a new process would
    assert native.helper() is not None and os.stat(path).st_mtime_ns == built


def test_a_damaged_cache_entry_is_built_again(cache):
    path = native.library_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"not a library")
    assert native.helper() is not None
    assert native.Walker(fake_next([8, 8]))(ctypes.addressof((ctypes.c_uint64 * 2)()), 16) \
        .tolist() == [0, 8]


def test_without_a_compiler_python_walks_and_says_so_once(cache, monkeypatch, capfd):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", str(cache))  # no cc, gcc or clang
    walk = native.Walker(fake_next([16, 16]))
    assert not walk.native
    assert walk(ctypes.addressof((ctypes.c_uint64 * 4)()), 32) == [0, 16]
    native.Walker(fake_next([16]))
    err = capfd.readouterr().err
    assert err.count("reading CUPTI buffers in Python") == 1 and "install a C compiler" in err


def test_fields_read_in_c_join_as_numpys_do(cache, monkeypatch):
    """PROTON_NATIVE_READ=1: a buffer with every record kind the collector reads (a failed
    launch, a graph launch's kernels, a runtime launch, a kind it skips) gives the Attributor
    the same columns as the numpy reads."""
    from cupti import cupti

    from proton.cupti.collector import CuptiCollector

    K = cupti.ActivityKind
    collector = CuptiCollector(lambda kernels: None)
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
        other["kind"] = int(K.MEMCPY)  # a kind it does not read
        records += [ext, api, kern, other]
    data = b"".join(r.tobytes() for r in records)
    sizes = [r.dtype.itemsize for r in records]
    raw = (ctypes.c_uint64 * (len(data) // 8 + 1))()
    ctypes.memmove(raw, data, len(data))
    address, valid = ctypes.addressof(raw), len(data)
    step = fake_next(sizes)
    got = {}
    for path in ("numpy", "c"):
        seen = []
        monkeypatch.setattr(collector.attributor, "add_columns", lambda *a: seen.append(a))
        if path == "numpy":
            offsets = native.Walker(step)(address, valid)
            collector.read_records(memoryview((ctypes.c_char * valid).from_address(address)),
                                   offsets)
        else:
            monkeypatch.setenv("PROTON_NATIVE_READ", "1")
            holder = type("Raw", (), {"next_record": step, "on_buffer": None})()
            assert collector.use_native_reads(holder) and holder.on_buffer is not None
            holder.on_buffer(address, valid)
        assert collector.callback_errors == []
        got[path] = seen
    assert got["c"] == got["numpy"] and len(got["c"]) == 1
    external, api, kernels = got["c"][0]
    assert len(external[0]) == 40 and len(api[0]) == 40 - 3  # 11, 22, 33 failed
    assert sum(api[2]) == len([c for c in range(1, 41) if c % 7 == 0 and c % 5 and c % 11])
    assert kernels[7][6] == 5007 and len(kernels) == 8  # graph node ids came along
