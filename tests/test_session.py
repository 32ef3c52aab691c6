"""Sessions, scopes and the file they write, on the CPU path (no GPU needed)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import find, load, run_threads, stand_in_collector

import proton
from proton.api import write_profiles
from proton.context.frames import unwind
from proton.context.stack import depth
from proton.cupti.attribution import KernelRecord
from proton.data import document
from proton.data.paths import paths
from proton.runtime.profiler import profiler


@pytest.fixture(autouse=True)
def no_live_sessions():
    yield
    unwind(0)  # a failing test must not leak open scopes or its session into the next
    write_profiles()


def test_scopes_nest_and_record_cpu_time_without_gpu(profile_path):
    name, read = profile_path
    proton.start(name)
    with proton.scope("outer"):
        with proton.scope("inner"):
            time.sleep(0.02)
    proton.finalize()
    root, devices = read()
    inner = find(root, "outer", "inner")
    assert 0.02e9 <= inner["metrics"]["cpu_time (ns)"] < 1e9
    assert find(root, "outer")["metrics"]["cpu_time (ns)"] >= inner["metrics"]["cpu_time (ns)"]
    assert devices == {}
    assert "cpu_time (ns)" not in root["metrics"]  # exclusive: no zero on the root


def test_user_metrics_sum_and_exclusive_suffix_is_stripped(profile_path):
    name, read = profile_path
    proton.start(name)
    for _ in range(3):
        with proton.scope("fwd", {"tokens": 10, "peak (exc)": 1.5}):
            pass
    proton.finalize()
    root, _ = read()
    fwd = find(root, "fwd")["metrics"]
    assert fwd["tokens"] == 30 and fwd["peak"] == 4.5
    assert root["metrics"] == {"tokens": 0}


def test_properties_keep_the_last_value_and_vectors_add_elementwise(profile_path):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    name, read = profile_path
    proton.start(name)
    for i in range(3):
        with proton.scope("fwd", {"tile (pty)": 64 * (i + 1), "lens": [1, 2, 3],
                                  "t": torch.tensor([0.5, 1.5]), "n": torch.tensor(2),
                                  "a": np.array([1, 1])}):
            with proton.scope("inner", {"lens": [10, 10, 10]}):
                pass
    proton.finalize()
    root, _ = read()
    fwd = find(root, "fwd")["metrics"]
    assert fwd["tile"] == 192 and fwd["lens"] == [3, 6, 9] and fwd["t"] == [1.5, 4.5]
    assert fwd["n"] == 6 and fwd["a"] == [3, 3]
    assert find(root, "fwd", "inner")["metrics"]["lens"] == [30, 30, 30]
    # vectors and properties are a node's own: only the number "n" is summed up the tree
    assert root["metrics"] == {"n": 0}


def test_a_vector_of_another_length_replaces_the_old_one(profile_path):
    name, read = profile_path
    proton.start(name)
    for lens in ([1, 2], [1, 2], [5, 5, 5]):
        with proton.scope("s", {"lens": lens}):
            pass
    proton.finalize()
    assert find(read()[0], "s")["metrics"]["lens"] == [5, 5, 5]


def test_decorator_enter_exit_and_late_metrics(profile_path):
    name, read = profile_path

    @proton.scope("decorated")
    def work():
        return 5

    proton.start(name)
    assert work() == 5
    proton.enter_scope("manual", metrics={"a": 1})
    proton.exit_scope("manual", metrics={"late": 2})
    proton.finalize()
    root, _ = read()
    assert find(root, "manual")["metrics"]["late"] == 2
    assert find(root, "decorated")["metrics"]["cpu_time (ns)"] > 0


def test_exit_scope_name_mismatch_is_an_error(profile_path):
    proton.start(profile_path[0])
    proton.enter_scope("a")
    with pytest.raises(proton.ScopeError, match="innermost open scope is 'a'"):
        proton.exit_scope("b")
    proton.exit_scope("a")
    with pytest.raises(proton.ScopeError, match="no open scope"):
        proton.exit_scope("a")


@pytest.mark.parametrize("metrics,match", [
    ({"time (ns)": 1}, "reserved"), ({"device_id": 1}, "reserved"), ({"cpu_time": 1}, "reserved"),
    ({"sync_time (ns)": 1}, "reserved"), ({"mem_peak_bytes (exc)": 1}, "reserved"),
    ({"tokens": "many"}, "must be real numbers"), ({"ok": True}, "must be real numbers"),
    ({"v": [1, "a"]}, "must be real numbers"), ({"v": []}, "at least one number"),
    ({"z": 1j}, "must be real numbers"), ({"cpu_time (pty)": 1}, "reserved"),
])
def test_bad_user_metrics_are_refused(metrics, match):
    with pytest.raises(proton.ScopeError, match=match):
        proton.scope("s", metrics)


def test_a_scope_metric_named_count_is_kept_as_triton_39_keeps_it(profile_path):
    name, read = profile_path
    proton.start(name)
    for i in range(3):
        with proton.scope(f"test_{i}", metrics={"count": 1}):
            pass
    proton.finalize()
    root, _ = read()
    assert [c["metrics"]["count"] for c in root["children"]] == [1, 1, 1]


def test_deactivated_scopes_are_not_recorded(profile_path):
    name, read = profile_path
    sid = proton.start(name)
    with proton.scope("kept", {"n": 1}):
        pass
    proton.deactivate(sid)
    with proton.scope("dropped", {"n": 1}):
        pass
    proton.activate(sid)
    with proton.scope("kept", {"n": 1}):
        pass
    proton.finalize()
    root, _ = read()
    assert [c["frame"]["name"] for c in root["children"]] == ["kept"]
    assert find(root, "kept")["metrics"]["n"] == 2


def cpu_time_scopes():
    """The scopes that record cpu_time here: both kinds without a GPU, cpu_timed_scope only
    while a collector runs (plain scopes then carry their kernels' time)."""
    return [proton.cpu_timed_scope] + ([] if profiler.gpu else [proton.scope])


def cpu_ms(node: dict) -> float:
    return node["metrics"]["cpu_time (ns)"] / 1e6


@pytest.mark.parametrize("kind", ["scope", "cpu_timed_scope"])
def test_a_scope_open_when_the_session_starts_and_ends_counts_only_its_part_inside(
        profile_path, kind):
    if getattr(proton, kind) not in cpu_time_scopes():
        pytest.skip("with a GPU, plain scopes record no cpu_time")
    name, read = profile_path
    with getattr(proton, kind)("outer"):
        time.sleep(0.1)  # before the session: not its time
        began = time.perf_counter()
        proton.start(name)
        for _ in range(5):
            with getattr(proton, kind)("inner"):
                time.sleep(0.02)
        proton.finalize()  # the outer scope is still open
        window_ms = (time.perf_counter() - began) * 1e3
        time.sleep(0.1)  # after it: not its time either
    root, _ = read()
    outer, inner = cpu_ms(find(root, "outer")), cpu_ms(find(root, "outer", "inner"))
    assert 100 <= inner <= outer <= window_ms + 1, (inner, outer, window_ms)
    assert outer >= 0.8 * window_ms  # the window, less start()'s and finalize()'s own time


@pytest.mark.parametrize("kind", ["scope", "cpu_timed_scope"])
def test_a_scope_spanning_deactivate_and_activate_counts_only_its_active_parts(
        profile_path, kind):
    if getattr(proton, kind) not in cpu_time_scopes():
        pytest.skip("with a GPU, plain scopes record no cpu_time")
    name, read = profile_path
    sid = proton.start(name)
    with getattr(proton, kind)("outer"):
        time.sleep(0.05)
        proton.deactivate(sid)
        time.sleep(0.3)
        proton.activate(sid)
        time.sleep(0.05)
    proton.finalize()
    root, _ = read()
    assert 100 <= cpu_ms(find(root, "outer")) < 250


def test_a_trace_span_open_when_the_session_starts_begins_with_it(tmp_path):
    if profiler.gpu:
        pytest.skip("a GPU session's trace holds kernels (tests/test_gpu.py)")
    with proton.scope("outer"):
        time.sleep(0.2)
        began = time.time_ns()
        proton.start(str(tmp_path / "tr"), data="trace")
        with proton.scope("inner"):
            time.sleep(0.02)
    proton.finalize()
    doc = load(tmp_path / "tr.chrome_trace")
    spans = {e["name"]: e for e in doc["traceEvents"] if e.get("cat") == "scope"}
    assert set(spans) == {"outer", "inner"}
    assert doc["otherData"]["t0_ns"] >= began  # the first span begins with the session
    assert spans["outer"]["ts"] == 0 and spans["outer"]["dur"] < 150e3  # not the 200 ms before


def test_same_name_resumes_and_sessions_write_their_own_files(tmp_path):
    one = proton.start(str(tmp_path / "one"))
    with proton.scope("a", {"n": 1}):
        pass
    two = proton.start(str(tmp_path / "two"))
    assert one != two
    assert proton.start(str(tmp_path / "one")) == one
    with proton.scope("b", {"n": 1}):
        pass
    proton.finalize(one)
    with proton.scope("c", {"n": 1}):
        pass
    proton.finalize()
    names = lambda f: [c["frame"]["name"] for c in load(tmp_path / f)[0]["children"]]  # noqa: E731
    assert names("one.hatchet") == ["a", "b"]
    assert names("two.hatchet") == ["b", "c"]


def test_unknown_options_and_sessions_give_one_line_errors():
    with pytest.raises(proton.SessionError, match="context='stack' is not supported"):
        proton.start("never_written", context="stack")
    with pytest.raises(proton.SessionError, match="Session has not been initialized: 999999"):
        proton.finalize(999_999)  # an id no run of the suite reaches


def test_threads_keep_their_own_scope_stacks(profile_path):
    name, read = profile_path
    proton.start(name)
    barrier = threading.Barrier(4)

    def work(i):
        with proton.scope(f"t{i}", {"n": i}):
            barrier.wait()  # all four hold their outer scope at once
            with proton.scope("inner", {"n": 1}):
                barrier.wait()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    run_threads(threads)
    proton.finalize()
    root, _ = read()
    for i in range(4):
        assert find(root, f"t{i}", "inner")["metrics"]["n"] == 1


def test_kernels_count_only_for_sessions_active_at_launch(profile_path):
    name, read = profile_path
    sid = proton.start(name)
    path = paths.intern(0, "gpu_scope")
    before = profiler.now()
    proton.deactivate(sid)
    during = profiler.now()
    proton.activate(sid)
    profiler.router.on_kernel(path, KernelRecord(1, "k", 0, 0, 100), before)
    profiler.router.on_kernel(path, KernelRecord(2, "k", 0, 0, 50), during)
    profiler.router.on_kernel(path, KernelRecord(3, "k", 1, 0, 10), profiler.now())
    proton.finalize()
    root, _ = read()
    k0, k1 = find(root, "gpu_scope")["children"]
    assert k0["metrics"] == {"time (ns)": 100, "count": 1, "device_id": "0", "device_type": "CUDA"}
    assert k1["metrics"]["device_id"] == "1" and k1["metrics"]["count"] == 1
    assert root["metrics"] == {"time (ns)": 0, "count": 0}


@pytest.mark.parametrize("pause", [False, True])
def test_a_buffers_kernels_sum_per_path_for_every_active_session(profile_path, pause):
    """router.on_kernels (one CUPTI buffer at a time) gives the same tree as kernel by kernel:
    summed when every session was active since before the first launch, else checked one by one."""
    name, read = profile_path
    other = name + "_b"
    proton.start(name)
    path = paths.intern(0, "batch")
    first = profiler.now()
    if pause:  # the first launch falls in a pause: it must not count
        proton.deactivate()
        first = profiler.now()
        proton.activate()
    proton.start(other)
    later = profiler.now()
    profiler.router.on_kernels([(path, first, 1, "k", 0, 0, 100, 0),
                                (path, later, 2, "k", 0, 0, 30, 0),
                                (path, later, 3, "k", 1, 0, 10, 0)])
    proton.finalize()
    for prof, counted in ((read()[0], 1 if pause else 2), (load(other + ".hatchet")[0], 1)):
        k0, k1 = find(prof, "batch")["children"]
        assert k0["metrics"]["count"] == counted
        assert k0["metrics"]["time (ns)"] == (30 if counted == 1 else 130)
        assert k1["metrics"] == {"time (ns)": 10, "count": 1, "device_id": "1",
                                 "device_type": "CUDA"}


def test_device_table_lists_only_devices_with_kernels():
    k = paths.intern(0, "k", "kernel1")
    devices = {"0": {"arch": "90"}, "1": {"arch": "80"}}
    root, table = document.build({k: {"time (ns)": 1, "count": 1, "device_id": 1,
                                    "device_type": 1}}, devices)
    assert table == {"CUDA": {"1": {"arch": "80"}}}
    assert root["children"][0]["frame"] == {"name": "k", "type": "function"}


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_profile_is_written_at_exit_without_finalize(tmp_path):
    run = _run("import proton\nproton.start('atexit')\nwith proton.scope('s', {'n': 1}): pass\n"
               "raise SystemExit(0)\n", tmp_path)
    assert run.returncode == 0, run.stderr
    assert find(load(tmp_path / "atexit.hatchet")[0], "s")["metrics"]["n"] == 1


def test_no_gpu_is_said_once(tmp_path):
    run = _run("import proton\nfor i in range(3):\n  proton.start(f'p{i}')\nproton.finalize()\n",
               tmp_path)
    assert run.stderr.count("no NVIDIA GPU found") == 1


def test_import_is_cheap_and_side_effect_free(tmp_path):
    run = _run("import sys, proton\nprint(sorted(m for m in ('cupti', 'hatchet', 'torch', "
               "'pandas', 'rich') if m in sys.modules))", tmp_path)
    assert run.stdout.strip() == "[]", run.stderr
    assert list(tmp_path.iterdir()) == []


def test_trace_session_writes_every_kernel_as_a_chrome_trace_event(tmp_path, monkeypatch):
    """In Triton 3.6's layout (tests/test_trace_lanes.py: Triton 3.9's)."""
    monkeypatch.setattr("proton.triton_version.after_3_6", lambda: False)
    sid = proton.start(str(tmp_path / "tr"), data="trace")
    path = paths.intern(0, "outer")
    profiler.router.on_kernel(path, KernelRecord(1, "k", 0, 5_000, 7_000, 13), profiler.now())
    profiler.router.on_kernel(path, KernelRecord(2, "k", 0, 1_000, 2_000, 13), profiler.now())
    proton.finalize(sid)
    doc = load(tmp_path / "tr.chrome_trace")
    assert doc["displayTimeUnit"] == "us"
    first, second = doc["traceEvents"]  # the kernels alone: the pid names the process
    assert doc["otherData"]["t0_ns"] == 1_000 and doc["otherData"]["pid"] == os.getpid()
    assert first == {"name": "k", "cat": "kernel", "ph": "X", "pid": "GPU 0", "tid": 13,
                     "ts": 0.0, "dur": 1.0, "args": {"call_stack": ["ROOT", "outer", "k"]}}
    assert second["ts"] == 4.0 and second["dur"] == 2.0


def test_output_format_must_fit_the_data_kind_and_a_bad_one_loses_nothing(tmp_path):
    sid = proton.start(str(tmp_path / "t"))
    with proton.scope("kept", {"n": 1}):
        pass
    with pytest.raises(proton.SessionError, match="use 'hatchet'"):
        proton.finalize(sid, output_format="chrome_trace")
    proton.finalize(sid)
    assert find(load(tmp_path / "t.hatchet")[0], "kept")["metrics"]["n"] == 1


def test_exception_inside_scopes_propagates_and_closes_them(profile_path):
    name, read = profile_path
    proton.start(name)
    with pytest.raises(ValueError, match="user error"):
        with proton.scope("outer"):
            proton.enter_scope("inner")  # never exited by the user
            raise ValueError("user error")
    assert depth() == 0

    @proton.scope("decorated")
    def fails():
        with proton.scope("deeper"):
            raise KeyError("k")

    with pytest.raises(KeyError):
        fails()
    assert depth() == 0
    with proton.scope("after", {"n": 1}):
        pass
    proton.finalize()
    root, _ = read()
    assert sorted(c["frame"]["name"] for c in root["children"]) == ["after", "decorated", "outer"]


def test_exit_state_needs_a_state_set_and_leaves_the_scopes_entered_inside_open():
    proton.enter_scope("s")
    with pytest.raises(proton.ScopeError, match="no state is set on this thread .*scope 's'"):
        proton.exit_state()
    proton.enter_state("warm")
    proton.enter_scope("inner")  # goes below the state
    proton.exit_state()
    proton.exit_scope("inner")
    proton.exit_scope("s")
    assert depth() == 0


def test_unwritable_path_raises_naming_the_temporary_file_that_holds_the_profile(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    proton.start(str(blocker / "prof"))  # its folder is a file: cannot be written
    with proton.scope("kept", {"n": 1}):
        pass
    with pytest.raises(proton.ProtonError, match="could not write .*prof.hatchet") as err:
        proton.finalize()
    written = err.value.args[0].split("; wrote ")[1].split(" instead")[0]
    assert written.endswith("prof.hatchet") and not written.startswith(str(blocker))
    assert find(load(written)[0], "kept")["metrics"]["n"] == 1
    assert "\n" not in str(err.value) and not profiler.sessions  # one line; the session closed


def test_profile_decorator_accumulates_calls_into_one_session(tmp_path):
    @proton.profile(name=str(tmp_path / "dec"))
    def step(i):
        with proton.scope("step", {"n": i}):
            pass

    step(1)
    step(2)
    assert not (tmp_path / "dec.hatchet").exists()  # written by finalize, as in Triton
    proton.finalize()
    assert find(load(tmp_path / "dec.hatchet")[0], "step")["metrics"]["n"] == 3


def test_op_node_with_launch_metadata_takes_its_kernels_metrics(profile_path):
    from proton.data.paths import OP

    name, read = profile_path
    proton.start(name)
    op = paths.intern(0, "matmul_128", OP)
    profiler.add_metrics(op, {"flops16": 10})
    profiler.router.on_kernel(op, KernelRecord(1, "matmul_kernel", 0, 0, 40), profiler.now())
    proton.finalize()
    root, _ = read()
    node = find(root, "matmul_128")
    assert node["metrics"] == {"flops16": 10, "time (ns)": 40, "count": 1, "device_id": "0",
                               "device_type": "CUDA"}
    assert node["children"] == []


def test_a_launch_that_raised_never_leaves_its_op_id_under_a_closed_scope(profile_path):
    """CUPTI's external-id stack, as a scope and a Triton launch that raised (its exit hook
    never ran) leave it: the op's id goes before the scope's, so the stack ends empty. The
    recorder stands in for the collector's push/pop only; tests/test_gpu_hook.py checks the
    same on the GPU."""
    from proton.runtime import ops

    name, _ = profile_path
    proton.start(name)
    with stand_in_collector() as ids:
        with proton.scope("S"):
            op = ops.enter_op("op")  # the hook's launch enter; the launch then raised
            assert ids.ids[-1] == op and paths.names(op) == ["S", "op"]
        assert ids.ids == []
        with proton.scope("T"):
            op = ops.enter_op("op")
            with proton.scope("inner"):  # a scope opened after the failed launch
                assert op not in ids.ids
        assert ids.ids == []
    proton.finalize()


def test_the_main_threads_scope_changes_reach_the_collectors_main_path(profile_path):
    """Where launches of threads with no scope open go (autograd's backward): each scope the
    main thread enters or leaves is told to the collector (ROOT once none is open); a scope
    on another thread is not. The recorder stands in for the collector; tests/test_gpu.py's
    autograd test checks the kernels on the GPU."""
    def worker():
        with proton.scope("w"):
            pass

    name, _ = profile_path
    proton.start(name)
    with stand_in_collector() as ids:
        with proton.scope("step"):
            with proton.scope("backward"):
                run_threads([threading.Thread(target=worker)])
        assert [paths.names(p) if p else "ROOT" for p in ids.main] == [
            ["step"], ["step", "backward"], ["step"], "ROOT"]
    proton.finalize()


def test_a_hooks_op_on_a_thread_with_no_scope_goes_under_the_main_threads_scope(profile_path):
    """hook="triton" on PyTorch's autograd thread (no scope of its own): the op's node goes
    under the scope the main thread is in, where the thread's launches go, not under the root.
    The recorder stands in for the collector; tests/test_gpu_hook.py runs it on the GPU."""
    from proton.runtime import ops

    got = []

    def backward():
        got.append(ops.enter_op("add_kernel"))
        ops.exit_op()

    name, _ = profile_path
    proton.start(name)
    with stand_in_collector():
        with proton.scope("step"):
            with proton.scope("backward"):
                run_threads([threading.Thread(target=backward)])
        run_threads([threading.Thread(target=backward)])  # the main thread at the root
    proton.finalize()
    assert [paths.names(p) for p in got] == [["step", "backward", "add_kernel"], ["add_kernel"]]


def test_gpu_copies_count_replays_and_fold_past_the_limit():
    """data.metrics.DeviceValue on CPU tensors standing in for GPU copies: a replay re-adds
    the same copy (counted, not kept twice); past FOLD distinct copies they are summed into one;
    a vector of another length replaces the old one."""
    torch = pytest.importorskip("torch")
    from proton.data.metrics import DeviceValue, combine

    def copy(v):
        return DeviceValue(((torch.tensor(v), 1),))

    captured = copy([1.0, 2.0])
    total = copy([10.0, 20.0])
    for _ in range(3):
        total = combine(total, captured, fold=False)
    assert total.value() == [13.0, 26.0] and len(total.parts) == 2
    many = copy(0.0)
    for _ in range(DeviceValue.FOLD + 10):
        many = combine(many, copy(1.0))
    assert many.value() == DeviceValue.FOLD + 10 and len(many.parts) < 20
    assert combine(copy([1.0, 2.0]), copy([5.0])).value() == [5.0]
