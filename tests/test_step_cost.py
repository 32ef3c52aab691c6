"""bench/step_cost.py off the GPU: its pairing of phases, its table, and the C callback that
counts CUDA calls by API (called here as CUPTI would call it)."""
import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "step_cost.py")


@pytest.fixture(scope="module")
def step_cost():
    spec = importlib.util.spec_from_file_location("step_cost", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _phase(name, step_ms, cpu_ms, main=None, other=0.0, **extra):
    return {"profiler": name, "step_ms": step_ms, "cpu_ms": cpu_ms,
            "threads_ms": {"main": cpu_ms if main is None else main, "autograd": 1.0,
                           "other": other}, **extra}


def test_each_profiled_phase_is_judged_against_the_faster_bare_phase_beside_it(step_cost):
    result = {"phases": [_phase("none", 10.0, 8.0), _phase("floor", 10.6, 8.4),
                         _phase("none", 11.0, 8.8), _phase("shadow", 10.9, 8.6),
                         _phase("none", 9.0, 7.0)]}
    floor, shadow = step_cost.paired(result)
    assert floor["profiler"] == "floor" and floor["x"] == pytest.approx(1.06)
    assert floor["cpu_x"] == pytest.approx(8.4 / 8.0)
    assert shadow["x"] == pytest.approx(10.9 / 9.0)  # the bare phase after was faster
    assert shadow["added_cpu_ms"] == pytest.approx(1.6)


def test_table_gives_medians_over_processes_and_the_calls_our_callbacks_get(step_cost, tmp_path):
    calls = {"calls": {"2/211": 2800, "2/10": 40000, "1/307": 2800},
             "nested": {"1/307": 2800}, "same_corr": {"1/307": 0}}
    lines = []
    for x in (1.02, 1.10, 1.04):
        lines.append({"phases": [
            _phase("none", 10.0, 8.0), _phase("floor", 10.0 * x, 8.0 * x),
            _phase("none", 10.0, 8.0),
            _phase("cb-all", 12.0, 10.0, calls=calls, steps_counted=40),
            _phase("none", 10.0, 8.0),
            _phase("shadow", 10.0 * x * 1.01, 8.0 * x, scope_us=3.0,
                   enabled=["2/211", "1/307"]),
            _phase("none", 10.0, 8.0)]})
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    text = step_cost.table(str(results))
    row = next(line for line in text.splitlines() if line.startswith("| floor |"))
    assert row.startswith("| floor | 3 (3) | 1.040 | 1.040 | 1.036 | - |")  # (8.32 + 1) / 9
    shadow = next(line for line in text.splitlines() if line.startswith("| shadow |"))
    assert "| 1.010, 1.000, 1.000 |" in shadow  # over the floor: step, main CPU, both threads
    assert "Scope enter+exit, us (x4 a step): shadow 3.00" in text
    census = next(line for line in text.splitlines() if line.startswith("CUDA API calls"))
    assert "1140 of 3 kinds" in census  # (40000 + 2800 + 2800) / 40
    names = step_cost.cbid_names()
    # the two launch calls ours enables get 70 calls a step each; 2/10 is not enabled
    shadow = next(line for line in text.splitlines() if line.startswith("shadow:"))
    assert shadow.startswith("shadow: 2 callbacks enabled, called 140 times a step")
    assert names.get("2/211", "2/211") in shadow and names.get("2/10", "2/10") not in shadow


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")
def test_counting_callback_counts_enters_and_driver_calls_inside_runtime_calls(step_cost):
    lib = step_cost._counter_lib()
    site_at, corr_at = 8, 12
    lib.count_setup(site_at, corr_at)
    lib.count_clear()
    data = (ctypes.c_uint32 * 8)()
    address = ctypes.addressof(data)

    def call(domain, cbid, site, corr):
        data[site_at // 4], data[corr_at // 4] = site, corr
        lib.count_call(None, domain, cbid, ctypes.c_void_p(address))

    for corr in (5, 6):  # a runtime launch whose driver launch has the same id, then another
        call(2, 211, 0, corr)
        call(1, 307, 0, corr if corr == 5 else 99)
        call(1, 307, 1, 0)
        call(2, 211, 1, corr)
    call(1, 307, 0, 7)  # a driver call of its own
    call(1, 307, 1, 7)
    calls = lib.count_calls()
    assert calls[2 * step_cost.CBIDS + 211] == 2  # enters only
    assert calls[1 * step_cost.CBIDS + 307] == 3
    assert lib.count_nested()[307] == 2 and lib.count_same()[307] == 1


def test_without_a_gpu_it_says_so_in_one_line():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, BENCH, "--processes", "1"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("Error: step_cost.py measures CUDA launches: it "
                                          "needs an NVIDIA GPU")
    assert len(done.stderr.strip().splitlines()) == 1
