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
