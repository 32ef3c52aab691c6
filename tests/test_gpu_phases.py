"""Phases with kernels: each part file of periodic flushing holds its own phase's kernels, a
finished phase is complete once its kernels came, and a live session's data reads in the viewer
as its file would (Triton 3.9's test_get_data, test_clear_data*, test_data_is_phase_complete).
Run with `pytest -m gpu`."""
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


def leaves(gf, pattern: str):
    """The leaf frames of a GraphFrame whose names match `pattern`, by hatchet's query language
    as Triton's tests select them."""
    return gf.filter(f"MATCH ('*', c) WHERE c.'name' =~ '{pattern}' AND c IS LEAF").dataframe


def test_a_live_sessions_data_reads_in_the_viewer_with_each_kernels_launches(tmp_path):
    import triton
    import triton.language as tl

    import proton.viewer as viewer
    from proton.format_msgpack import unpackb

    @triton.jit
    def copy_kernel(x, y, size: tl.constexpr):
        offs = tl.arange(0, size)
        tl.store(y + offs, tl.load(x + offs))

    x = torch.ones((2, 2), device="cuda")
    torch.cuda.synchronize()
    sid = proton.start(str(tmp_path / "live"), context="shadow")
    with proton.scope("test"):
        copy_kernel[(1, )](x, x, 4)
        copy_kernel[(1, )](x, x, 4)
        torch.ones((2, 2), device="cuda")  # one fill kernel
    proton.deactivate(sid, flushing=True)
    data = proton.data.get(sid)
    gf, *_ = viewer.get_raw_metrics(data)
    assert leaves(gf, ".*copy_kernel.*")["count"].tolist() == [2]
    assert leaves(gf, ".*elementwise.*")["count"].tolist() == [1]
    assert unpackb(proton.data.get_msgpack(sid)) == data

    cleared_then_one_scope_holds_it_alone(sid, x)


def cleared_then_one_scope_holds_it_alone(sid: int, x) -> None:
    """Clear the paused session's phase, record `test1` (one kernel) and finalize: the phase
    then holds `test1` and its kernel alone."""
    proton.data.clear(sid)  # while paused: the phase then holds only what comes after
    proton.activate(sid)
    with proton.scope("test1"):
        x * x
    proton.deactivate(sid, flushing=True)
    after = proton.data.get(sid)
    proton.finalize()
    assert [c["frame"]["name"] for c in after[0]["children"]] == ["test1"]
    assert ["elementwise" in k["frame"]["name"] for k in kernels(after[0])] == [True]


def test_clearing_up_to_a_phase_empties_it_and_every_earlier_one(tmp_path):
    x = torch.ones((2, 2), device="cuda")
    sid = proton.start(str(tmp_path / "upto"), context="shadow")
    with proton.scope("phase0"):
        x + x
    phase1 = proton.data.advance_phase(sid)
    with proton.scope("phase1"):
        x + x
    proton.deactivate(sid, flushing=True)
    proton.data.clear(sid, phase=phase1, clear_up_to_phase=True)
    assert proton.data.get(sid, phase=phase1)[0]["children"] == []
    assert proton.data.get(sid, phase=0)[0]["children"] == []
    proton.finalize()


def test_a_phase_with_kernels_is_complete_once_ended_and_flushed(tmp_path):
    x = torch.ones((2, 2), device="cuda")

    def work():
        with proton.scope("test0"):
            for _ in range(20):
                x + x

    sid = proton.start(str(tmp_path / "done"), context="shadow")
    work()
    assert not proton.data.is_phase_complete(sid, 0)
    proton.deactivate(sid)
    assert not proton.data.is_phase_complete(sid, 0)  # still the current phase
    proton.activate(sid)
    phase = proton.data.advance_phase(sid)
    work()
    proton.deactivate(sid, flushing=True)
    assert proton.data.is_phase_complete(sid, 0)
    assert sum(k["metrics"]["count"] for k in kernels(proton.data.get(sid, 0)[0])) == 20
    assert not proton.data.is_phase_complete(sid, phase)
    proton.data.advance_phase(sid)
    assert proton.data.is_phase_complete(sid, phase)
    assert sum(k["metrics"]["count"] for k in kernels(proton.data.get(sid, phase)[0])) == 20
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


def test_a_cleared_scope_stays_cleared_when_its_kernels_are_judged_later(tmp_path):
    """The user's first CUDA work runs inside the scope they then clear (Triton 3.9's
    test_clear_data): the scope's GPU idle, judged once its kernels are in, must not bring it
    back after the clear."""
    sid = proton.start(str(tmp_path / "cleared"), context="shadow")
    with proton.scope("test0"):
        x = torch.ones((2, 2), device="cuda")
        x + x
    proton.deactivate(sid, flushing=True)
    cleared_then_one_scope_holds_it_alone(sid, x)
