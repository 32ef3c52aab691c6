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


@pytest.fixture(scope="module")
def stats(step_cost):
    return step_cost.step_stats


def _proc(rounds, modes, *, drift=0.0, speed=None, steps=5, noise=0.0, seed=0):
    """A worker result of the new layout: `modes` maps a mode to its (step ms, main CPU ms)
    on a steady host; the host slows by `drift` a round (every phase of the round alike),
    and `speed(round)` gives its ns a Python call (CPU scaled with it)."""
    import random

    rng = random.Random(seed)
    phases = []
    for r in range(rounds):
        slow = 1 + drift * r
        per_call = speed(r) if speed else 30.0
        for mode, (step, cpu) in modes.items():
            scale = slow * per_call / 30.0
            phases.append({
                "mode": mode, "round": r,
                "step_ms": [step * scale * (1 + rng.uniform(-noise, noise)) for _ in range(steps)],
                "cpu_ms": [cpu * scale * (1 + rng.uniform(-noise, noise)) for _ in range(steps)],
                "threads_ms": {"main": cpu * scale, "autograd": 1.0, "other": 0.01},
                "speed_ns": [per_call, per_call]})
    return {"device": "cuda", "steps": steps, "rounds": rounds, "phases": phases, "errors": []}


OURS = {"none": (10.0, 6.0), "floor": (10.5, 6.3), "shadow": (10.5 * 1.04, 6.3 * 1.02),
        "hook": (10.5 * 1.10, 6.3 * 1.10), "python": (10.5 * 1.30, 6.3 * 1.30)}


def test_order_puts_every_mode_at_every_place_and_runs_backwards_every_other_round(step_cost):
    modes = ["none", "floor", "shadow", "hook", "python"]
    orders = [step_cost.order(modes, r, offset=3) for r in range(10)]
    assert all(sorted(o) == sorted(modes) for o in orders)
    for place in range(len(modes)):
        assert sorted(o[place] for o in orders) == sorted(modes * 2)
    assert orders[0] == ["hook", "python", "none", "floor", "shadow"]
    assert orders[1] == ["hook", "shadow", "floor", "none", "python"]  # turned by 4, backwards


def test_processes_interleave_ours_and_tritons_and_the_census_runs_once(step_cost):
    plan = step_cost.plan_processes(["floor", "shadow", "cb-all", "triton"], 3, 2)
    assert plan == [("ours", ["floor", "shadow", "cb-all"]), ("triton", ["triton", "floor"]),
                    ("ours", ["floor", "shadow"]), ("triton", ["triton", "floor"]),
                    ("ours", ["floor", "shadow"])]
    assert step_cost.plan_processes(["shadow", "triton"], 1, 1) == [
        ("ours", ["shadow"]), ("triton", ["triton"])]  # no floor asked: Triton's with bare


def test_drift_inside_a_process_hits_every_mode_alike(stats):
    # the host slows 3% a round (1.33x over 12 rounds): every mode's pooled steps still
    # compare at their true ratio, and so does every round's pair
    procs = stats.processes_from([_proc(12, OURS, drift=0.03)])
    assert stats.pooled_ratio(procs[0], "shadow", "floor", "step") == pytest.approx(1.04)
    assert stats.pooled_ratio(procs[0], "floor", "none", "step") == pytest.approx(1.05)
    assert stats.paired_ratios(procs[0], "hook", "floor", "cpu") == pytest.approx([1.10] * 12)
    detail = stats.detail_table(procs)
    hook = next(line for line in detail if line.startswith("| hook |"))
    assert hook.startswith("| hook | 1 (12, 60) | 1.155 |")  # 1.10 x the floor's 1.05 over bare
    # paired over the floor; added main-thread ms: 0.63 x the mean drift, 1.165
    assert "| 1.100 [1.10-1.10], 1.100 [1.10-1.10] | +0.734, +0.000, +0.000 |" in hook


def test_the_host_calls_measure_takes_out_a_host_twice_as_slow(stats):
    fast = _proc(4, OURS, speed=lambda r: 25.0)
    slow = _proc(4, OURS, speed=lambda r: 50.0)  # every CPU figure doubled
    procs = stats.processes_from([fast, slow])
    a, b = (stats._pooled(p.values["norm"]["shadow"], p.rounds()) for p in procs)
    assert a == pytest.approx(b) == pytest.approx(6.3 * 1.02 * 1e3 / 30.0)
    assert stats._pooled(procs[1].values["cpu"]["shadow"], [0]) == pytest.approx(
        2 * stats._pooled(procs[0].values["cpu"]["shadow"], [0]))


def test_median_over_processes_with_a_bootstrap_interval_and_verdicts(stats):
    procs = stats.processes_from([_proc(12, OURS, drift=0.02 * i, noise=0.03, seed=i)
                                  for i in range(6)])
    rows = {r.mode: r for r in stats.rows(procs, reps=300)}
    assert set(rows) == {"floor", "shadow", "hook", "python"}
    est, (lo, hi), verdict = rows["python"].cells["step"]
    assert est == pytest.approx(1.30, abs=0.01) and lo < 1.30 < hi and hi - lo < 0.05
    assert verdict == "missed"  # target 1.15, all of the interval over it
    assert rows["hook"].cells["cpu"][2] == "missed"  # 1.10 against 1.05
    assert rows["shadow"].cells["norm"][2] == "met"  # 1.02 against 1.03, noise 3% a step
    assert rows["floor"].ref == "none" and rows["floor"].cells["step"][2] == "-"  # no target


def test_an_interval_across_the_target_is_not_resolved(stats):
    assert stats.verdict((1.01, 1.029), 1.03) == "met"
    assert stats.verdict((1.031, 1.09), 1.03) == "missed"
    assert stats.verdict((1.00, 1.06), 1.03) == "not resolved"
    assert stats.verdict(None, 1.03) == "-" and stats.verdict((1.0, 1.1), None) == "-"
    noisy = stats.processes_from([_proc(3, OURS, noise=0.4, seed=i) for i in range(3)])
    shadow = next(r for r in stats.rows(noisy, reps=300) if r.mode == "shadow")
    assert shadow.cells["step"][2] == "not resolved"  # 40% noise, 3 rounds: 4% is not seen


def test_triton_without_the_floor_in_its_processes_is_judged_through_bare(stats):
    ours = _proc(4, {"none": (10.0, 6.0), "floor": (11.0, 6.0)})
    theirs = _proc(4, {"none": (20.0, 6.0), "triton": (26.4, 6.0)})  # a slower process
    procs = stats.processes_from([ours, theirs])
    assert stats.estimate(procs, "triton", "floor", "step") == pytest.approx(1.32 / 1.10)
    row = next(r for r in stats.rows(procs, reps=100) if r.mode == "triton")
    assert row.through_bare and row.cells["step"][1] == pytest.approx((1.2, 1.2))
    text = stats.table(procs, reps=100)
    assert "| triton (floor, through bare) | - | 1.200 [1.200-1.200] |" in text


def test_a_failed_profiler_and_a_dead_worker_leave_the_other_modes_standing(step_cost, stats):
    lines = [json.dumps({"phase": ph}) for ph in _proc(2, OURS)["phases"][:7]]
    lines.insert(2, json.dumps({"error": {"mode": "hook", "round": 0,
                                          "error": "RuntimeError: CUPTI error 39"}}))
    lines.insert(0, "proton: a warning on stdout")
    result = step_cost.collect("\n".join(lines), -11, "torch noise\nSegmentation fault\n")
    assert len(result["phases"]) == 7
    assert result["errors"][0]["mode"] == "hook"
    assert result["errors"][1] == {"mode": "process", "error": "exited with status -11 after "
                                   "7 phases: Segmentation fault"}
    procs = stats.processes_from([result, _proc(2, OURS)])
    assert stats.estimate(procs, "shadow", "floor", "step") == pytest.approx(1.04)
    text = stats.table(procs, reps=50)
    assert "process 1: hook failed in round 0: RuntimeError: CUPTI error 39" in text
    assert "process 1: process failed: exited with status -11 after 7 phases" in text
    assert "| shadow (floor) | 1.03 | 1.040 [1.040-1.040] |" in text


def test_table_gives_scope_costs_host_speed_and_the_calls_our_callbacks_get(stats):
    calls = {"calls": {"2/211": 2800, "2/10": 40000, "1/307": 2800},
             "nested": {"1/307": 2800}, "same_corr": {"1/307": 0}}
    first = _proc(2, OURS, speed=lambda r: 30.0 + r)
    for ph in first["phases"]:
        if ph["mode"] == "shadow" and ph["round"] == 0:
            ph.update(scope_us=3.0, enabled=["2/211", "1/307"])
    first["phases"].append({**first["phases"][1], "mode": "cb-all", "round": 2, "calls": calls,
                            "steps_counted": 40})
    procs = stats.processes_from([first, _proc(2, OURS)])
    text = stats.table(procs, reps=50)
    assert "Scope enter+exit, us (x4 a step): shadow 3.00" in text
    assert "Host speed, ns a Python call: median 30.0, range 30.0-31.0 over 42 readings" in text
    census = next(line for line in text.splitlines() if line.startswith("CUDA API calls"))
    assert "1140 of 3 kinds" in census  # (40000 + 2800 + 2800) / 40
    names = stats.cbid_names()
    shadow = next(line for line in text.splitlines() if line.startswith("shadow:"))
    assert shadow.startswith("shadow: 2 callbacks enabled, called 140 times a step")
    assert names.get("2/211", "2/211") in shadow and names.get("2/10", "2/10") not in shadow
    assert not any(line.startswith("| cb-all (") for line in text.splitlines())  # not judged
    assert any(line.startswith("| cb-all | 1 (1, 5) | 1.033 |") for line in text.splitlines())


def test_the_older_layout_reads_as_one_value_a_phase(stats, tmp_path):
    def old(name, step, cpu, **extra):
        return {"profiler": name, "step_ms": step, "cpu_ms": cpu,
                "threads_ms": {"main": cpu, "autograd": 1.0, "other": 0.0}, **extra}

    lines = []
    for x in (1.02, 1.10, 1.04):
        lines.append({"phases": [old("none", 10.0, 8.0), old("floor", 10.0 * x, 8.0, round=0),
                                 old("none", 10.0, 8.0), old("shadow", 10.6 * x, 8.4, round=0),
                                 old("none", 10.0, 8.0)]})
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    procs = stats.load(str(results))
    assert [p.values["step"]["none"][0] for p in procs][0] == [[10.0], [10.0], [10.0]]
    assert stats.estimate(procs, "shadow", "floor", "step") == pytest.approx(1.06)
    assert stats.estimate(procs, "floor", "none", "step") == pytest.approx(1.04)
    assert stats.estimate(procs, "shadow", "floor", "norm") is None  # no host speed then
    text = stats.table(procs, reps=50)
    assert "| shadow (floor) | 1.03 | 1.060 [1.060-1.060] | 1.050 [1.050-1.050] | - | missed, " \
        "missed, - |" in text


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


def test_a_missing_results_file_is_one_line_with_exit_status_2(tmp_path):
    done = subprocess.run([sys.executable, BENCH, "--table", str(tmp_path / "none.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: no results file ") and done.stderr.count("\n") == 1


def test_no_process_starts_after_the_deadline_and_the_run_says_so(tmp_path):
    results = tmp_path / "r.jsonl"
    done = subprocess.run([sys.executable, BENCH, "--device", "cpu", "--deadline", "0",
                           "--processes", "1", "--triton-processes", "1", "--results",
                           str(results)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not results.exists()
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "process 1/2 (ours) not started: 0 s left before --deadline, one took 0 s"
    assert lines[1].startswith("process 2/2 (triton) not started")
    assert lines[2].startswith("Error: no results file ")


def test_dry_run_on_cpu_measures_bare_phases_and_reports_a_profiler_that_cannot_start():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the floor would start")
    done = subprocess.run([sys.executable, BENCH, "--worker", "floor", "--device", "cpu",
                           "--steps", "2", "--warmup", "0", "--rounds", "2", "--small"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result = lines[-1]
    assert [(p["mode"], p["round"]) for p in result["phases"]] == [("none", 0), ("none", 1)]
    assert all(len(p["step_ms"]) == 2 and len(p["speed_ns"]) == 2 for p in result["phases"])
    assert [e["mode"] for e in result["errors"]] == ["floor"]  # failed once, then left out
    assert "CUDA driver" in result["errors"][0]["error"]
    assert lines[:-1] == [{"phase": result["phases"][0]}, {"error": result["errors"][0]},
                          {"phase": result["phases"][1]}]  # printed as each phase ended
