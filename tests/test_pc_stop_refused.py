"""A PC-sampling stop that CUPTI refuses costs that stretch's samples, never the profile or the
job's exit status. Replays what an H200 returned once at a job's end (2026-11-29, the matrix's
eager-pcsampling cell): cuptiPCSamplingStop -> CUPTI error 1, which used to end the job with
status 2. libcupti's entry points are ctypes functions that return the recorded codes: this
machine has no libcupti."""
from __future__ import annotations

import ctypes
import threading

import pytest

from proton.cupti.pc_collector import PCCollector
from proton.cupti.pcsampling import Library, PCSamplingError, Sampler, SamplingData
from proton.data.pc_samples import SampleTable
from proton.options import PCOptions

ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


def _library(codes: dict[str, int], called: list[str]) -> tuple[Library, list]:
    """A Library whose control calls return `codes` (0 for the others) and note their names."""
    lib = Library.__new__(Library)
    keep = []

    def entry(name: str):
        def call(_params) -> int:
            called.append(name)
            return codes.get(name, 0)
        keep.append(ENTRY(call))
        return keep[-1]

    lib._calls = {name: entry(name) for name in (
        "cuptiPCSamplingStart", "cuptiPCSamplingStop", "cuptiPCSamplingDisable",
        "cuptiPCSamplingGetData")}
    return lib, keep


def _collector(lib: Library) -> PCCollector:
    sampler = Sampler.__new__(Sampler)
    sampler.lib, sampler.context = lib, 0x1000
    sampler.enabled = True
    sampler.started = False
    sampler._data = SamplingData(size=ctypes.sizeof(SamplingData))  # GetData finds no PCs
    sampler.total_samples = sampler.dropped_samples = sampler.non_user_samples = 0
    sampler.hardware_buffer_full = 0
    pc = PCCollector.__new__(PCCollector)
    pc.options, pc.sampler, pc.table = PCOptions(), sampler, SampleTable({})
    pc._lock, pc._retained, pc.closed, pc.active = threading.Lock(), False, False, False
    return pc


def test_the_library_raises_the_refused_stop_as_one_line():
    called: list[str] = []
    lib, _keep = _library({"cuptiPCSamplingStop": 1}, called)
    sampler = _collector(lib).sampler
    sampler.start()
    with pytest.raises(PCSamplingError, match="cuptiPCSamplingStop failed with CUPTI error 1"):
        sampler.stop()
    assert called == ["cuptiPCSamplingStart", "cuptiPCSamplingStop"]


def test_a_refused_stop_at_pause_and_at_finish_warns_and_disables(capfd):
    called: list[str] = []
    lib, _keep = _library({"cuptiPCSamplingStop": 1}, called)
    pc = _collector(lib)
    pc.sampler.start()
    pc.active = True
    pc.pause()  # raised PCSamplingError before: the job exited 2
    err = capfd.readouterr().err
    assert "PC sampling lost this stretch's samples: cuptiPCSamplingStop failed with CUPTI " \
        "error 1" in err
    pc.sampler.start()
    pc.finish()
    err = capfd.readouterr().err
    assert "PC sampling lost its last samples" in err
    assert called[-1] == "cuptiPCSamplingDisable" and not pc.sampler.enabled
    assert pc.closed


def test_sampling_goes_on_after_a_refused_stop():
    called: list[str] = []
    codes = {"cuptiPCSamplingStop": 1}
    lib, _keep = _library(codes, called)
    pc = _collector(lib)
    pc.sampler.start()
    pc.active = True
    pc.pause()
    codes.clear()  # the next stretch's stop goes through
    pc.resume()
    assert pc.sampler.started
    pc.pause()
    assert called.count("cuptiPCSamplingStop") == 2 and "cuptiPCSamplingGetData" in called
