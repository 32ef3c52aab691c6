"""Triton's newer Proton API: phases (proton.data), periodic flushing to part files, hatchet
msgpack, TRITON_PROTON_DISABLE, deactivate(flushing=True), baseTimeNanoseconds."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from conftest import load

import proton
import proton.data
from proton.format_msgpack import unpackb
from proton.viewer.cli import viewer


def scopes(sid, count: int, every: int) -> None:
    for i in range(count):
        if i and i % every == 0:
            proton.data.advance_phase(session=sid)
        with proton.scope(f"test_{i}", metrics={"n": 1}):
            pass


@pytest.mark.parametrize("fmt", ["hatchet", "hatchet_msgpack"])
def test_periodic_flushing_writes_one_part_per_phase(tmp_path, fmt):
    sid = proton.start(str(tmp_path / "pf"), mode=f"periodic_flushing:format={fmt}")
    scopes(sid, 500, 50)
    proton.finalize(output_format=fmt)
    files = sorted(os.listdir(tmp_path))
    assert files == sorted(f"pf.part_{p}.{fmt}" for p in range(10))
    total = 0
    for name in files:
        raw = (tmp_path / name).read_bytes()
        doc = unpackb(raw) if fmt == "hatchet_msgpack" else json.loads(raw)
        children = doc[0]["children"]
        assert len(children) == 50 and all(c["metrics"]["n"] == 1 for c in children)
        assert children[0]["frame"]["name"].startswith("test_")
        total += len(children)
    assert total == 500
    result = CliRunner().invoke(viewer, ["-m", "n", str(tmp_path / f"pf.part_3.{fmt}")])
    assert result.exit_code == 0 and "test_150" in result.output


def test_the_phase_api_reads_a_live_session(tmp_path):
    sid = proton.start(str(tmp_path / "ph"))
    scopes(sid, 30, 10)  # phases 0, 1 and 2 (current)
    assert [c["frame"]["name"] for c in proton.data.get(sid, 1)[0]["children"]] == \
        [f"test_{i}" for i in range(10, 20)]
    assert unpackb(proton.data.get_msgpack(sid, 2)) == proton.data.get(sid, 2)
    assert proton.data.is_phase_complete(sid, 0) and proton.data.is_phase_flushed(sid, 1)
    assert not proton.data.is_phase_complete(sid, 2)  # still being recorded
    proton.data.clear(sid, 0)
    assert proton.data.get(sid, 0)[0]["children"] == []
    proton.data.clear(sid, 1, clear_up_to_phase=True)
    assert proton.data.get(sid, 1)[0]["children"] == []
    assert len(proton.data.get(sid, 2)[0]["children"]) == 10
    assert proton.data.advance_phase(sid) == 3
    proton.finalize()
    # the file holds the current phase (as in Triton: earlier ones were read through the API)
    assert load(tmp_path / "ph.hatchet")[0]["children"] == []


def test_the_phase_api_without_a_session():
    assert proton.data.advance_phase(None) is None and proton.data.get(None) is None
    assert proton.data.get_msgpack(None) is None and proton.data.is_phase_complete(None) is False
    proton.data.clear(None)


def test_hatchet_msgpack_output_format(tmp_path):
    sid = proton.start(str(tmp_path / "m"))
    with proton.scope("a", {"n": 2}):
        pass
    proton.deactivate(sid, flushing=True)
    proton.finalize(output_format="hatchet_msgpack")
    assert os.listdir(tmp_path) == ["m.hatchet_msgpack"]
    doc = unpackb((tmp_path / "m.hatchet_msgpack").read_bytes())
    assert doc[0]["children"][0]["metrics"]["n"] == 2
    with pytest.raises(proton.SessionError, match="hatchet_msgpack"):
        proton.start(str(tmp_path / "x"), mode="periodic_flushing:format=chrome_trace")


def test_trace_has_base_time(tmp_path):
    sid = proton.start(str(tmp_path / "t"), data="trace")
    with proton.cpu_timed_scope("a"):
        pass
    proton.finalize(sid)
    doc = load(tmp_path / "t.chrome_trace")
    assert doc["baseTimeNanoseconds"] == doc["otherData"]["t0_ns"] > 0


SCRIPT = """
import proton
sid = proton.start("off")
with proton.scope("a", {"n": 1}):
    pass
proton.deactivate(sid)
proton.activate(sid)
proton.finalize()
print("session", sid)
"""


def test_triton_proton_disable_makes_every_call_do_nothing(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    env = {**os.environ, "TRITON_PROTON_DISABLE": "1"}
    done = subprocess.run([sys.executable, "s.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "session None" and not list(tmp_path.glob("*.hatchet"))
    done = subprocess.run([sys.executable, "-m", "proton", "s.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "running the script without profiling" in done.stderr
    assert not list(tmp_path.glob("*.hatchet"))


def test_tritons_pc_sampling_mode_name_and_cycles():
    from proton.options import parse_mode

    assert parse_mode("pc_sampling").interval == 10
    assert parse_mode("pc_sampling:interval=1000").interval == 10  # 1024 cycles
    assert parse_mode("pc_sampling:interval=1").interval == 5  # CUPTI's least
    with pytest.raises(proton.SessionError, match="interval=CYCLES"):
        parse_mode("pc_sampling:interval=x")


def test_metadata_state_is_the_state_both_viewers_hide(tmp_path):
    """A state, as Triton 3.6's launch hook sets it: the last frame of every path while set, so
    a scope entered inside goes above it and its metrics land on the state under it."""
    sid = proton.start(str(tmp_path / "ms"))
    with proton.scope("outer", {"n": 1}):
        with proton.metadata_state():
            with proton.scope("inside", {"n": 5}):
                pass
    proton.finalize(sid)
    root = load(tmp_path / "ms.hatchet")[0]
    outer = root["children"][0]
    inside, = outer["children"]
    assert inside["frame"]["name"] == "inside"
    state, = inside["children"]
    assert state["frame"]["name"] == "__proton_launch_metadata" and state["metrics"]["n"] == 5
    result = CliRunner().invoke(viewer, ["-m", "n", str(tmp_path / "ms.hatchet")])
    assert result.exit_code == 0 and "__proton_launch_metadata" not in result.output
    assert "outer" in result.output


@pytest.mark.parametrize("given", [("matmul_kernel",), {"kernel_name": "matmul_kernel"}],
                         ids=["positional", "keyword"])  # Triton 3.9's parameter name
def test_metadata_state_of_a_kernel_groups_under_its_name(tmp_path, given):
    sid = proton.start(str(tmp_path / "mk"))
    args, kwargs = (given, {}) if isinstance(given, tuple) else ((), given)
    with proton.scope("outer", {"n": 1}):
        with proton.metadata_state(*args, **kwargs):
            with proton.scope("inside", {"n": 5}):
                pass
        with proton.scope("after", {"n": 2}):
            pass
    proton.finalize(sid)
    root = load(tmp_path / "mk.hatchet")[0]
    outer = root["children"][0]
    inside = next(c for c in outer["children"] if c["frame"]["name"] == "inside")
    meta, = inside["children"]
    assert meta["frame"]["name"] == "__proton_launch_metadata"
    kernel, = meta["children"]
    assert kernel["frame"]["name"] == "matmul_kernel" and kernel["metrics"]["n"] == 5
    result = CliRunner().invoke(viewer, ["-m", "n", str(tmp_path / "mk.hatchet")])
    assert result.exit_code == 0 and "matmul_kernel" not in result.output
    assert "after" in result.output


def test_a_launch_hook_object_stands_for_its_spec():
    from proton.hooks import LaunchHook
    from proton.options import parse_options

    hook = LaunchHook()
    assert LaunchHook() is hook  # one per process, as Triton's
    hook.configure(include="matmul.*", exclude=".*_bwd")
    opts = parse_options("x", hook=hook)
    assert opts.hook_spec == "triton:include=matmul.*:exclude=.*_bwd"
    assert opts.hook.include.pattern == "matmul.*" and opts.hook.exclude.pattern == ".*_bwd"
    hook.configure()
    assert parse_options("x", hook=LaunchHook()).hook_spec == "triton"
    with pytest.raises(proton.SessionError, match="LaunchHook"):
        parse_options("x", hook=object())


def test_tritons_per_kernel_launch_metadata_frames_are_hidden(tmp_path):
    def node(name, children=(), **metrics):
        return {"frame": {"name": name, "type": "function"}, "metrics": metrics,
                "children": list(children)}

    root = node("ROOT", [node("step", [node("__proton_launch_metadata:matmul",
                                            [node("sum_kernel", **{"time (ns)": 5})]),
                                       node("matmul", **{"time (ns)": 100})])],
                **{"time (ns)": 0})
    (tmp_path / "t.hatchet").write_text(json.dumps([root, {}]))
    result = CliRunner().invoke(viewer, [str(tmp_path / "t.hatchet")])
    assert result.exit_code == 0 and "matmul" in result.output
    assert "launch_metadata" not in result.output and "sum_kernel" not in result.output


def test_do_bench_statistics_and_its_errors():
    from proton.bench import do_bench, scope_times, summarize

    def scope(name, ns, kids=()):
        return {"frame": {"name": name}, "metrics": {"time (ns)": ns} if ns else {},
                "children": list(kids)}

    doc = [{"frame": {"name": "ROOT"}, "metrics": {}, "children": [
        scope("p.00000001", None, [scope("k", 2e6), scope("k2", 1e6)]),
        scope("p.00000000", None, [scope("k", 1e6)]), scope("other", None, [scope("k", 9e9)])]}]
    times = scope_times(doc, "p.")
    assert times == [1.0, 3.0]  # in call order, all kernels under each call
    assert summarize(times, None, "mean") == 2.0 and summarize(times, None, "all") == times
    assert summarize([1, 2, 3, 4], [0.5], "mean") == 2.5
    assert summarize([1, 2, 3, 4], [0.0, 1.0], "mean") == [1, 4]
    with pytest.raises(proton.ProtonError, match="no kernel"):
        summarize([], None, "mean")
    with pytest.raises(proton.ProtonError, match="return_mode"):
        do_bench(lambda: None, return_mode="p99")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(proton.ProtonError, match="no CUDA GPU"):
            do_bench(lambda: None)


def test_kernels_of_a_buffer_checked_before_a_phase_began_go_to_the_earlier_phase(tmp_path):
    """The router checks a buffer's first launch against the current phase without the
    session's lock; advance_phase may come in between: the totals then go to that phase."""
    from proton.runtime.session import Session

    s = Session(1, "x", str(tmp_path / "x.hatchet"), "shadow", "tree", None)
    s.phase_starts = [0]
    s.add_kernel_totals({7: [100, 1, 0, 0, None, 0]}, first=50)
    s.advance(now=200)  # phase 1 from 200 on
    s.add_kernel_totals({7: [30, 1, 0, 0, None, 0]}, first=150)  # launched in phase 0
    s.add_kernel_totals({7: [5, 1, 0, 0, None, 0]}, first=250)
    assert s.data_of(0).nodes[7]["time (ns)"] == 130 and s.data_of(1).nodes[7]["time (ns)"] == 5


def test_proton_data_is_reachable_as_an_attribute_in_a_fresh_interpreter():
    """Triton's scripts write proton.data.advance_phase(...) after a bare `import proton`."""
    done = subprocess.run([sys.executable, "-c", "import proton; "
                           "print(proton.data.advance_phase(None), proton.bench.RETURN_MODES[0])"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "min"]


def test_a_scope_entry_judged_after_a_phase_ended_goes_to_the_phase_it_began_in(tmp_path):
    """Idle time is judged when every record of an entry has come, often after advance_phase
    (periodic flushing): each entry's gpu_idle and scope_wall go to the phase it began in, as
    a kernel goes to its launch's, not to the phase current when it was judged."""
    import numpy as np

    from proton.format import EXCLUSIVE, GPU_IDLE, SCOPE_WALL
    from proton.runtime.idle import Judged
    from proton.runtime.profiler import Profiler
    from proton.runtime.session import Session

    s = Session(1, "x", str(tmp_path / "x.hatchet"), "shadow", "tree", None)
    s.intervals = [[0, -1]]
    s.advance(now=200)  # phase 1 from 200 on
    p = Profiler()
    p.sessions = {1: s}
    p.parts.named("idle").add(Judged(np.array([7, 7, 7]), np.array([50, 150, 250]), np.array([100, 40, 10]),
                      np.array([60, 20, 5])))
    idle, wall = GPU_IDLE + EXCLUSIVE, SCOPE_WALL + EXCLUSIVE
    assert s.data_of(0).nodes[7] == {idle: 80, wall: 140}
    assert s.data_of(1).nodes[7] == {idle: 5, wall: 10}


# -- Triton 3.9's proton.data read through its viewer (test_profile's test_get_data,
# -- test_clear_data, test_data_is_phase_complete, on scopes without kernels) ------------------

def test_get_raw_metrics_reads_a_live_sessions_data_as_its_file_and_leaves_the_data_as_it_was(
        tmp_path):
    import copy

    import proton.viewer as viewer

    sid = proton.start(str(tmp_path / "live"), context="shadow")
    with proton.scope("step"):
        for flops in (3.0, 4.0):
            with proton.scope("forward", {"flops": flops}):
                pass
        with proton.scope("optimizer", {"bytes": 7}):
            pass
    proton.deactivate(sid, flushing=True)
    data = proton.data.get(sid)
    given = copy.deepcopy(data)
    gf, inclusive, _, _ = viewer.get_raw_metrics(data)
    assert data == given == unpackb(proton.data.get_msgpack(sid))
    forward = gf.filter("MATCH ('*', c) WHERE c.'name' =~ '.*forward.*' AND c IS LEAF").dataframe
    assert forward["flops"].tolist() == [7.0]
    assert {"flops", "bytes"} <= set(inclusive)
    proton.finalize()
    from_file, *_ = viewer.get_raw_metrics(str(tmp_path / "live.hatchet"))
    columns = ["name", "flops", "bytes"]
    assert gf.dataframe[columns].equals(from_file.dataframe[columns])


@pytest.mark.parametrize("given, words", [
    (42, "takes a .hatchet path, an open file or the list proton.data.get() returns, not int"),
    ({"traceEvents": []}, "the list proton.data.get() returns, not dict"),
    ([{"frame": "x"}], "the profile data given is JSON but not a .hatchet profile"),
    ([{"frame": {"name": "ROOT"}, "metrics": {}, "children": [], "bad": {1, 2}}],
     "the profile data given is not a profile as proton.data.get() returns it"),
])
def test_get_raw_metrics_of_something_else_says_what_it_takes_in_one_line(given, words):
    import proton.viewer as viewer
    from proton.viewer.errors import ViewerError

    with pytest.raises(ViewerError) as caught:
        viewer.get_raw_metrics(given)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_phase_cleared_while_paused_holds_only_what_is_recorded_after(tmp_path):
    sid = proton.start(str(tmp_path / "c"), context="shadow")
    with proton.scope("test0"):
        pass
    proton.deactivate(sid, flushing=True)
    proton.data.clear(sid)
    assert proton.data.get(sid)[0]["children"] == []
    proton.activate(sid)
    with proton.scope("test1"):
        pass
    proton.deactivate(sid, flushing=True)
    data = proton.data.get(sid)
    proton.finalize()
    assert [c["frame"]["name"] for c in data[0]["children"]] == ["test1"]


def test_a_phase_is_complete_once_ended_and_flushed_and_stays_complete(tmp_path):
    sid = proton.start(str(tmp_path / "pc"), context="shadow")
    with proton.scope("test0"):
        pass
    assert not proton.data.is_phase_complete(sid, 0)
    proton.deactivate(sid)
    assert not proton.data.is_phase_complete(sid, 0)  # paused, but still the current phase
    proton.activate(sid)
    phase = proton.data.advance_phase(sid)
    with proton.scope("test0"):
        pass
    proton.deactivate(sid, flushing=True)
    assert proton.data.is_phase_complete(sid, 0)
    assert not proton.data.is_phase_complete(sid, phase)
    proton.data.advance_phase(sid)
    assert proton.data.is_phase_complete(sid, phase - 1) and proton.data.is_phase_complete(sid, 1)
    proton.finalize()


def test_what_began_before_a_clear_and_comes_in_after_stays_cleared(tmp_path):
    """A scope's idle is judged when its kernels have come in, often after the user cleared the
    phase (Triton 3.9's test_clear_data on a GPU): an entry that began before the clear, or a
    kernel launched before it, does not bring its scope back; one after the clear counts."""
    import numpy as np

    from proton.format import EXCLUSIVE, GPU_IDLE, SCOPE_WALL
    from proton.runtime.idle import Judged
    from proton.runtime.profiler import Profiler
    from proton.runtime.session import Session

    s = Session(1, "x", str(tmp_path / "x.hatchet"), "shadow", "tree", None)
    s.intervals = [[0, -1]]
    s.clear(0, now=100)
    p = Profiler()
    p.sessions = {1: s}
    p.parts.named("idle").add(Judged(np.array([7, 8]), np.array([50, 150]), np.array([40, 10]),
                      np.array([20, 5])))
    s.add_kernel_totals({9: [30, 1, 0, 0, None, 0]}, first=60)
    s.add_kernel_totals({8: [30, 1, 0, 0, None, 0]}, first=160)
    nodes = s.data_of(0).nodes
    assert sorted(nodes) == [8]
    assert nodes[8][GPU_IDLE + EXCLUSIVE] == 5 and nodes[8][SCOPE_WALL + EXCLUSIVE] == 10
    assert nodes[8]["count"] == 1
