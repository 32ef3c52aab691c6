"""Phases with kernels: each part file of periodic flushing holds its own phase's kernels, and
a finished phase is complete once its kernels came. Run with `pytest -m gpu`."""
from __future__ import annotations

import os

import pytest

from conftest import kernels, load

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import proton  # noqa: E402
import proton.data  # noqa: E402


def test_periodic_flushing_puts_each_phases_kernels_in_its_part(tmp_path):
    x = torch.zeros(100, device="cuda")
    torch.cuda.synchronize()
    sid = proton.start(str(tmp_path / "pf"), mode="periodic_flushing:format=hatchet")
    for i in range(1000):
        if i and i % 100 == 0:
            proton.data.advance_phase(session=sid)
            assert proton.data.is_phase_complete(sid, i // 100 - 1)  # flushed and written
        with proton.scope(f"test_{i}"):
            x.add_(1)
    proton.finalize()
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 10
    for name in files:
        root = load(tmp_path / name)[0]
        assert len(root["children"]) == 100
        assert sum(k["metrics"]["count"] for k in kernels(root)) == 100
        assert all(k["metrics"]["time (ns)"] > 0 for k in kernels(root))


def test_get_reads_a_finished_phase_with_all_its_kernels(tmp_path):
    x = torch.zeros(100, device="cuda")
    sid = proton.start(str(tmp_path / "g"))
    with proton.scope("first"):
        for _ in range(50):
            x.add_(1)
    proton.data.advance_phase(sid)
    torch.cuda.synchronize()
    doc = proton.data.get(sid, 0)
    assert sum(k["metrics"]["count"] for k in kernels(doc[0])) == 50
    assert proton.data.is_phase_complete(sid, 0)
    proton.finalize()


def test_do_bench_measures_kernel_time():
    from proton.bench import do_bench

    a = torch.randn(2048, 2048, device="cuda")
    ms = do_bench(lambda: a @ a, rep=50)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a @ a
    end.record()
    torch.cuda.synchronize()
    events = start.elapsed_time(end) / 20
    assert 0.5 * events < ms <= 1.1 * events  # kernels only: never more than the events
    low, mid = do_bench(lambda: a @ a, rep=20, quantiles=[0.2, 0.5])
    assert low <= mid
