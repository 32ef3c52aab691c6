"""data="trace" as the installed Triton's Proton lays it out, on the CPU: scopes, their metrics,
kernels, flows from a launch to its kernel and CUDA graph replays' scope ranges, fed through the
profiler as CUPTI would (a collector on a clock the test sets, kernel records given to the
router); Triton 3.6's layout (the kernels alone) and Triton 3.9's (tests/test_gpu.py runs both
on a GPU)."""
from __future__ import annotations

import json
import threading

import pytest

from conftest import CollectorStandIn, load

import proton
from proton import triton_version
from proton.api import write_profiles
from proton.context.frames import launch_parent, unwind
from proton.cupti.attribution import KernelRecord
from proton.data.chrome_trace import ScopeSpan, build_trace, metric_text
from proton.data.paths import ROOT, paths
from proton.runtime.profiler import profiler


@pytest.fixture(autouse=True)
def no_live_sessions():
    yield
    unwind(0)
    write_profiles()
    profiler.collector = None


def kernel(clock: CollectorStandIn, corr: int, start: int, end: int, stream: int = 3,
           path: int | None = None, graph_node: int = 0) -> None:
    """A kernel `foo` launched now from the innermost scope (or `path`), run [start, end]."""
    where = launch_parent() if path is None else path
    profiler.router.on_kernel(where, KernelRecord(corr, "foo", 0, start, end, stream,
                                                  graph_node=graph_node), clock.now)


def record(tmp_path, monkeypatch, newer: bool) -> dict:
    """A trace of: scopes with metrics (3 > 2 > 1) and without (4), each launching foo; a
    worker thread's scope launching foo on stream 5; a CUDA graph captured in a > b > c
    (one kernel in each) replayed inside test0; a wait of the main thread."""
    monkeypatch.setattr(triton_version, "after_3_6", lambda: newer)
    clock = profiler.collector = CollectorStandIn()
    clock.now = 1_000
    proton.start(str(tmp_path / "t"), data="trace")
    clock.now = 2_000
    with proton.scope("scope_3", metrics={"m3": 3.0}):
        clock.now = 2_100
        with proton.scope("scope_2", metrics={"m2": 2}):
            clock.now = 2_200
            with proton.scope("scope_1", metrics={"m1": 1.0}):
                clock.now = 2_300
                kernel(clock, 1, 10_000, 10_500)
                clock.now = 2_400
            clock.now = 2_500
            with proton.scope("scope_4"):
                clock.now = 2_600
                kernel(clock, 2, 11_000, 11_500)
                clock.now = 2_700
            clock.now = 2_800
        clock.now = 2_900

    def worker() -> None:
        clock.now = 3_000
        with proton.scope("worker"):
            clock.now = 3_100
            kernel(clock, 3, 12_000, 12_500, stream=5)
            clock.now = 3_200

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    clock.now = 4_000
    with proton.scope("a"):
        with proton.scope("b"):
            with proton.scope("c"):
                captured = {"c": launch_parent()}
            captured["b"] = launch_parent()
        captured["a"] = launch_parent()
        clock.now = 4_500
    clock.now = 5_000
    with proton.scope("test0"):
        clock.now = 5_100  # the replay's launch: three kernels, one correlation id
        test0 = launch_parent()
        for name, start in (("c", 20_000), ("b", 20_200), ("a", 20_400)):
            kernel(clock, 99, start, start + 100, stream=7,
                   path=profiler.router.graft(test0, captured[name]))  # no graph node: the
            # attributor's sink hands graph kernels on without it, as the H200 run showed
        clock.now = 5_200
        clock.waits.append((test0, 5_200, 20_600, threading.get_ident()))
        clock.now = 20_700
    clock.now = 30_000
    proton.finalize()
    return load(tmp_path / "t.chrome_trace")


def us(ns: int) -> float:
    """A time of the test's clock as the trace writes it: us after the first event (1 us)."""
    return (ns - 2_000) / 1e3


def test_a_trace_shows_scopes_metrics_kernels_and_each_launchs_flow_to_its_kernel(
        tmp_path, monkeypatch):
    """Triton 3.9's test_trace and test_trace_flexible_metrics_scope_ranges, on a clock the
    test sets: a scope given metrics is a "metric" event named after them, the others "scope"
    events; each on its thread's lane, each kernel on its stream's; a flow from the entry of
    the scope that launched each kernel to the kernel."""
    doc = record(tmp_path, monkeypatch, newer=True)
    events = doc["traceEvents"]
    assert doc["baseTimeNanoseconds"] == doc["otherData"]["t0_ns"] == 2_000
    lanes = {e["args"]["name"]: e["tid"] for e in events if e["name"] == "thread_name"}
    assert lanes == {"CPU Thread 0": 0, "CPU Thread 1": 1, "Graph: Stream 7": 100_007,
                     "GPU Stream 3": 200_003, "GPU Stream 5": 200_005,
                     "GPU Stream 7": 200_007}
    assert {e["pid"] for e in events} == {0}
    assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == ["Trace"]
    metrics = {e["name"]: (e["args"]["call_stack"], e["args"]["metrics"], e["ts"], e["tid"])
               for e in events if e.get("cat") == "metric"}
    assert metrics == {
        "scope_3: <m3, 3.000000>": (["ROOT", "scope_3"], {"m3": "3.000000"}, us(2_000), 0),
        "scope_2: <m2, 2>": (["ROOT", "scope_3", "scope_2"], {"m2": "2"}, us(2_100), 0),
        "scope_1: <m1, 1.000000>": (["ROOT", "scope_3", "scope_2", "scope_1"],
                                    {"m1": "1.000000"}, us(2_200), 0)}
    scopes = {e["name"]: e for e in events if e.get("cat") == "scope" and e["tid"] < 100_000}
    assert set(scopes) == {"scope_4", "worker", "a", "b", "c", "test0"}
    assert (scopes["scope_4"]["ts"], scopes["scope_4"]["dur"]) == (us(2_500), 0.2)
    assert scopes["worker"]["tid"] == 1 and scopes["test0"]["tid"] == 0
    assert len({e["args"]["scope_id"] for e in events if e.get("cat") in ("scope", "metric")
                and e["tid"] < 100_000}) == 9
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert [(e["ts"], e["tid"]) for e in kernels] == [
        (us(10_000), 200_003), (us(11_000), 200_003), (us(12_000), 200_005),
        (us(20_000), 200_007), (us(20_200), 200_007), (us(20_400), 200_007)]
    flows = [e for e in events if e.get("cat") == "flow"]
    assert {e["name"] for e in flows} == {"launch->kernel"} and {e["bp"] for e in flows} == {"e"}
    starts = {e["id"]: (e["ts"], e["tid"]) for e in flows if e["ph"] == "s"}
    ends = {e["id"]: (e["ts"], e["tid"]) for e in flows if e["ph"] == "f"}
    assert sorted((starts[i], ends[i]) for i in starts) == [  # one per replay of the graph
        ((us(2_200), 0), (us(10_000), 200_003)),   # scope_1's entry -> its kernel
        ((us(2_500), 0), (us(11_000), 200_003)),   # scope_4's
        ((us(3_000), 1), (us(12_000), 200_005)),   # the worker thread's scope
        ((us(5_000), 0), (us(20_000), 200_007))]   # test0, where the graph was launched
    [wait] = [e for e in events if e.get("cat") == "wait"]
    assert (wait["tid"], wait["ts"], wait["args"]["call_stack"]) == (0, us(5_200),
                                                                     ["ROOT", "test0"])


def test_a_graph_replay_shows_the_scopes_its_kernels_were_captured_in(tmp_path, monkeypatch):
    """Triton 3.9's test_trace_cudagraph_graph_scope_ranges: on the graph's lane, each scope
    the replayed kernels were captured in, from the first of its kernels' start to the last
    one's end; the kernels under test0 / <captured_at> / a / b / c."""
    events = record(tmp_path, monkeypatch, newer=True)["traceEvents"]
    graph = {e["name"]: (e["ts"], round(e["dur"], 6)) for e in events
             if e.get("cat") == "scope" and e["tid"] == 100_007}
    assert graph == {"<captured_at>": (us(20_000), 0.5), "a": (us(20_000), 0.5),
                     "b": (us(20_000), 0.3), "c": (us(20_000), 0.1)}
    assert not [e for e in events if e.get("cat") == "metric" and e["tid"] == 100_007]
    stacks = {tuple(e["args"]["call_stack"]) for e in events if e.get("cat") == "kernel"
              and e["args"]["call_stack"][:2] == ["ROOT", "test0"]}
    assert stacks == {("ROOT", "test0", "<captured_at>", "a", "b", "c", "foo"),
                      ("ROOT", "test0", "<captured_at>", "a", "b", "foo"),
                      ("ROOT", "test0", "<captured_at>", "a", "foo")}


def test_under_triton_3_6_a_trace_holds_the_kernels_alone(tmp_path, monkeypatch):
    """Triton 3.6's test_trace (three kernels, the last its foo): no scope, flow or metadata
    events, and no clock read for them."""
    events = record(tmp_path, monkeypatch, newer=False)["traceEvents"]
    assert {e["cat"] for e in events} == {"kernel", "wait"}
    assert len([e for e in events if e["cat"] == "kernel"]) == 6
    assert {e["pid"] for e in events if e["cat"] == "kernel"} == {"GPU 0"}


@pytest.mark.parametrize("newer", [False, True], ids=["triton3.6", "triton3.9"])
def test_without_a_gpu_a_trace_holds_the_scopes_and_a_scope_with_metrics_names_them(
        tmp_path, monkeypatch, newer):
    """Triton 3.9's test_trace_flexible_metrics_no_kernel_anchor: a trace of scopes alone holds
    their events alone (no lane names); a scope given metrics is one "metric" event."""
    monkeypatch.setattr(triton_version, "after_3_6", lambda: newer)
    proton.start(str(tmp_path / "t"), data="trace")
    with proton.scope("metric_only", metrics={"foo": 1.0}):
        pass
    proton.finalize()
    [event] = load(tmp_path / "t.chrome_trace")["traceEvents"]
    assert event["args"]["call_stack"] == ["ROOT", "metric_only"] and event["ph"] == "X"
    if newer:
        assert (event["cat"], event["name"], event["args"]["metrics"]) == (
            "metric", "metric_only: <foo, 1.000000>", {"foo": "1.000000"})
        assert isinstance(event["args"]["scope_id"], int)
    else:
        assert (event["cat"], event["name"], event["pid"]) == ("scope", "metric_only", "host")


def test_a_cpu_timed_scope_shows_its_cpu_time_on_its_event(tmp_path, monkeypatch):
    """As Triton 3.9's cpu_timed_scope gives its trace event: a metric "cpu_time (ns)(exc)",
    at least the time the host slept in it."""
    import time

    monkeypatch.setattr(triton_version, "after_3_6", lambda: True)
    proton.start(str(tmp_path / "t"), data="trace")
    with proton.cpu_timed_scope("load"):
        began = time.perf_counter_ns()
        time.sleep(0.01)
        slept = time.perf_counter_ns() - began
    proton.finalize()
    [event] = load(tmp_path / "t.chrome_trace")["traceEvents"]
    value = int(event["args"]["metrics"]["cpu_time (ns)(exc)"])
    assert event["name"] == f"load: <cpu_time (ns)(exc), {value}>" and value >= slept
    assert event["dur"] * 1e3 >= slept


def test_a_graph_replays_metric_kernel_is_a_trace_event_and_counts_on_no_tree():
    """Triton 3.9's test_trace_cudagraph_graph_scope_ranges: the metric kernel a replay ran
    (a GPU tensor given to scope c inside the capture) is a kernel event "<metric>" under
    test0 / <captured_at> / c / __proton_launch_metadata, inside c's range on the graph's
    lane; a tree shows its frame empty, as before."""
    from proton.runtime.graph_metrics import GraphMetrics, Spec, metric_frame
    from proton.runtime.router import KernelRouter
    from proton.runtime.session import Session

    trace = Session(0, "t", "/dev/null", "shadow", "trace", None)
    tree = Session(1, "h", "/dev/null", "shadow", "tree", None)
    for s in (trace, tree):
        s.resume(0)
    router = KernelRouter({0: trace, 1: tree})
    metrics = GraphMetrics({0: trace, 1: tree}, router.graft)
    c = paths.intern(ROOT, "c_metric")
    metrics.specs[7] = Spec(c, metric_frame(c), {}, "m1", 1)
    metrics._live.add(7)
    test0 = paths.intern(ROOT, "test0_metric")
    foo = KernelRecord(5, "foo", 0, 1_000, 1_100, 3, graph_node=1)
    router.on_kernel(router.graft(test0, c), foo, 500)
    metrics.executed(7, test0, 500, KernelRecord(5, "fill", 0, 1_200, 1_250, 3, graph_node=2))
    frame = router.graft(test0, metric_frame(c))
    assert tree.nodes[frame] == {} and [e[0] for e in trace.events][-1] == frame
    events = build_trace(trace.events, lanes=True)["traceEvents"]
    [kernel] = [e for e in events if e.get("cat") == "kernel" and e["name"] == "<metric>"]
    assert kernel["args"]["call_stack"] == ["ROOT", "test0_metric", "<captured_at>", "c_metric",
                                            "__proton_launch_metadata", "<metric>"]
    graph = {e["name"]: (e["ts"], e["dur"]) for e in events
             if e.get("cat") == "scope" and e["tid"] == 100_003}
    assert graph == {"<captured_at>": (0.0, 0.25), "c_metric": (0.0, 0.25)}


def test_metric_values_are_written_as_tritons_proton_writes_them():
    """C++'s std::to_string for numbers, a stream's printing for a vector's items."""
    assert [metric_text(v) for v in (1.0, 2, -3, 0.5, 1e20, True, [1.0, 0.5, 1e20, 3], "x")] \
        == ["1.000000", "2", "-3", "0.500000", "100000000000000000000.000000", "1",
            "[1,0.5,1e+20,3]", "x"]


def test_the_viewer_merges_ranks_lanes_traces_and_keeps_each_ranks_flows_its_own(tmp_path):
    """proton-viewer --output trace over two ranks' traces in Triton 3.9's layout: each one's
    process named for its rank, its lanes' names kept, its events shifted onto the job's
    clock, and its flows apart from the other's (both files number theirs from 1)."""
    from proton.viewer.traces import merge_traces

    scope = paths.intern(ROOT, "step")
    node = paths.intern(scope, "k", "kernel0")
    files = []
    for rank, t0 in ((0, 1_000), (1, 3_000)):
        doc = build_trace([(node, KernelRecord(1, "k", 0, t0 + 4_000, t0 + 5_000, 7), t0 + 500)],
                          [ScopeSpan(scope, t0, t0 + 1_000, 42, None, 1)], {"rank": rank},
                          lanes=True)
        files.append(tmp_path / f"t.rank{rank}.chrome_trace")
        files[-1].write_text(json.dumps(doc))
    text, errors, _ = merge_traces([str(f) for f in files])
    merged = json.loads(text)["traceEvents"]
    assert errors == []
    names = {e["pid"]: e["args"]["name"] for e in merged if e.get("name") == "process_name"}
    assert sorted(names.values()) == ["rank 0 Trace", "rank 1 Trace"]
    lanes = {e["args"]["name"] for e in merged if e.get("name") == "thread_name"}
    assert lanes == {"CPU Thread 0", "GPU Stream 7"}
    flows = {(e["id"], e["ph"]): (names[e["pid"]], e["ts"]) for e in merged
             if e.get("cat") == "flow"}
    assert len(flows) == 4  # two arrows, each id's start and finish in one rank
    assert sorted(flows.values()) == [("rank 0 Trace", 0.0), ("rank 0 Trace", 4.0),
                                      ("rank 1 Trace", 2.0), ("rank 1 Trace", 6.0)]
    for (flow, ph), (rank, _) in flows.items():
        assert flows[flow, "f" if ph == "s" else "s"][0] == rank
