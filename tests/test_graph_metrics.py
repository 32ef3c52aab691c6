"""CUDA graphs and metrics as Triton 3.9's Proton has them, on the CPU: what a replay's records
and the metric ring's words make of a profile (tests/test_gpu_graphs.py runs the real path)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import find, stand_in_collector

import proton
from proton.cupti.attribution import UNRECORDED, ApiRecord, Attributor, ExternalRecord, \
    KernelRecord, each
from proton.data.metrics import DeviceTensor, transform_tensor_metrics
from proton.data.paths import OP, ROOT, paths
from proton.format import CAPTURED_AT, LAUNCH_METADATA, METRIC_FRAME
from proton.runtime import graph_metrics
from proton.runtime.graph_metrics import GraphMetrics, Ring, Spec, metric_frame
from proton.runtime.profiler import profiler
from proton.runtime.router import KernelRouter
from proton.runtime.session import Session


def _replay_records(att: Attributor, corr: int, launch_path: int, nodes: list[int],
                    start: int = 1) -> None:
    """One graph launch at `launch_path` whose kernels ran graph nodes `nodes`."""
    att.add_buffer([ExternalRecord(corr, launch_path)], [ApiRecord(corr, start, graph=True)],
                   [KernelRecord(corr, f"k{node}", 0, start + i, start + i + 1, graph_node=node)
                    for i, node in enumerate(nodes)])


def test_a_graph_made_before_profiling_is_said_once_and_its_kernels_go_under_each_replay(capsys):
    got = []
    att = Attributor(each(lambda path, rec, ts: got.append((paths.names(path), rec.name))),
                     graft=KernelRouter({}).graft)
    replay0, replay1 = paths.intern(ROOT, "replay0"), paths.intern(ROOT, "replay1")
    _replay_records(att, 5, replay0, [77, 78, 79])
    _replay_records(att, 6, replay1, [77, 78, 79], start=10)
    err = capsys.readouterr().err
    assert err.count("Cannot find graph for graphExecId:") == 1  # two replays, one graph
    assert "start profiling before the graph is created" in err and len(err.splitlines()) == 1
    assert got == [(["replay0"], "k77"), (["replay0"], "k78"), (["replay0"], "k79"),
                   (["replay1"], "k77"), (["replay1"], "k78"), (["replay1"], "k79")]
    _replay_records(att, 7, replay0, [90], start=20)  # another graph: said again
    assert capsys.readouterr().err.count("Cannot find graph for graphExecId:") == 1


def test_kernels_captured_while_no_session_recorded_belong_to_no_session(capsys):
    got, told = [], []
    att = Attributor(each(lambda path, rec, ts: got.append((paths.names(path), rec.name))),
                     graft=KernelRouter({}).graft)
    iteration = paths.intern(ROOT, "iter_0")
    scope_c = paths.intern(iteration, "scope_c")
    att.captured.update({1: paths.intern(iteration, "scope_a"), 2: UNRECORDED, 3: scope_c,
                         4: metric_frame(scope_c)})
    att.metric_nodes[4] = 42
    att.on_metric = lambda tag, launch, start, record: told.append(
        (tag, paths.names(launch), start, record.graph_node))
    _replay_records(att, 5, paths.intern(ROOT, "test0"), [1, 2, 3, 4])
    assert got == [(["test0", CAPTURED_AT, "iter_0", "scope_a"], "k1"),
                   (["test0", CAPTURED_AT, "iter_0", "scope_c"], "k3")]
    assert told == [(42, ["test0"], 1, 4)]  # a metric kernel names its replay (launched at 1)
    assert capsys.readouterr().err == ""  # every node was seen: nothing to say


def test_graph_captures_note_inactive_nodes_and_metric_kernels_and_their_clones():
    pytest.importorskip("cupti")
    from cupti import cupti

    from proton.cupti.graphs import GraphCaptures

    state = {"active": True, "tag": None, "path": 11}
    captures = GraphCaptures(cupti, {}, {}, lambda frame: state["path"],
                             active=lambda: state["active"], metric_tag=lambda: state["tag"])
    captures.created_node(100, None)
    state.update(active=False)
    captures.created_node(101, None)  # deactivated while capturing
    state.update(active=True, tag=7, path=12)
    captures.created_node(102, None)  # the metric kernel's node
    state.update(tag=None, path=13)  # instantiate, called elsewhere
    for original, clone in ((100, 200), (101, 201), (102, 202)):  # instantiation
        captures.created_node(clone, None)
        captures.cloned_node(clone, original)
    assert captures.captured == {100: 11, 101: UNRECORDED, 102: 12, 200: 11, 201: UNRECORDED,
                                 202: 12}
    assert captures.metric_nodes == {102: 7, 202: 7}


def _spec(target: int, numbers: dict, name: str | None = None, count: int = 0) -> Spec:
    return Spec(target, metric_frame(target), numbers, name, count)


def _session(sid: int = 0) -> Session:
    s = Session(sid, "s", "/dev/null", "shadow", "tree", None)
    s.resume(0)
    return s


def _words(*records: tuple[int, list[float]]) -> np.ndarray:
    out: list[int] = []
    for tag, values in records:
        out.append(tag)
        out += np.array(values, dtype=np.float64).view(np.int64).tolist()
    return np.array(out, dtype=np.int64)


def test_each_replay_adds_its_own_values_in_the_phase_it_was_launched_in():
    s = _session()
    router = KernelRouter({0: s})
    metrics = GraphMetrics({0: s}, router.graft)
    scope = paths.intern(ROOT, "scope_b")
    metrics.specs.update({1: _spec(scope, {"bytes": 16}), 2: _spec(scope, {}, "sum", 1),
                          3: _spec(scope, {}, "vec", 3)})
    metrics._live.update({1, 2, 3})
    replay = paths.intern(ROOT, "test0")
    for start in (10, 20):
        metrics.executed(1, replay, start)
        metrics.executed(2, replay, start)
    s.advance(25)  # phase 1 from here: the third replay's values go there
    metrics.executed(2, replay, 30)
    metrics.executed(3, replay, 30)
    # the ring's words, read after the flush: in the order the kernels ran
    metrics._add_all(metrics.take_words(_words((2, [4.0]), (2, [5.0]))))
    metrics._add_all(metrics.take_words(_words((3, [0.0, 1.0, 2.0]), (2, [6.0]))))
    node = paths.names(router.graft(replay, scope))
    assert node == ["test0", CAPTURED_AT, "scope_b"]
    earlier = s.earlier[0].nodes[router.graft(replay, scope)]
    assert earlier == {"bytes": 32, "sum": 9.0}
    assert s.nodes[router.graft(replay, scope)] == {"sum": 6.0, "vec": [0.0, 1.0, 2.0]}
    assert s.nodes[router.graft(replay, metric_frame(scope))] == {}  # Triton's frame, empty


def test_a_replay_while_the_session_was_inactive_uses_up_its_values_but_adds_none():
    s = _session()
    router = KernelRouter({0: s})
    metrics = GraphMetrics({0: s}, router.graft)
    owner = paths.intern(ROOT, "metric_owner", OP)
    metrics.specs[1] = _spec(owner, {}, "sum_metric", 1)
    metrics._live.add(1)
    s.pause(5)
    metrics.executed(1, ROOT, 6)  # the inactive replay: its kernel still wrote a record
    s.resume(7)
    replay = paths.intern(ROOT, "profiled_replay")
    metrics.executed(1, replay, 8)
    metrics._add_all(metrics.take_words(_words((1, [100.0]), (1, [4.0]))))
    assert s.nodes[router.graft(replay, owner)] == {"sum_metric": 4.0}
    assert router.graft(ROOT, owner) not in s.nodes


def test_records_of_graphs_an_earlier_collector_knew_are_dropped_and_values_wait_for_replays():
    s = _session()
    router = KernelRouter({0: s})
    metrics = GraphMetrics({0: s}, router.graft)
    node = paths.intern(ROOT, "n")
    metrics.specs.update({1: _spec(node, {}, "old", 1), 2: _spec(node, {}, "new", 1)})
    metrics._live.add(1)
    metrics.reset()  # the collector stopped: tag 1's graph is no longer known
    metrics._live.add(2)
    ready = metrics.take_words(_words((1, [1.0]), (2, [2.0])))
    assert ready == []  # tag 2's value waits for its replay's kernel record
    metrics.executed(1, ROOT, 3)
    metrics.executed(2, ROOT, 3)
    assert s.nodes[router.graft(ROOT, node)] == {"new": 2.0}


def test_metrics_given_inside_a_capture_go_into_the_graph_under_their_metric_frame(
        profile_path, monkeypatch):
    """The profiler's side of a capture, with the GPU stood in for: nothing is added at the
    capture; one metric kernel per GPU tensor, launched under the node's metric frame; each
    replay adds the numbers, and the tensor's values when read."""
    pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    from proton.runtime import metric_kernel

    name, read = profile_path
    launched = []

    def launch(words, counter, tag, src, floats):
        st = graph_metrics.per_thread.stacks
        launched.append((tag, st.op_path, list(ids.ids), None if src is None else src.numel()))

    monkeypatch.setattr(graph_metrics, "capturing", lambda: True)
    monkeypatch.setattr("proton.runtime.profiler.capturing", lambda: True)
    monkeypatch.setattr(GraphMetrics, "_ring", lambda self, device, torch: Ring(None, None))
    monkeypatch.setattr(metric_kernel, "launch", launch)
    monkeypatch.setattr("torch.cuda.current_device", lambda: 0)
    with stand_in_collector() as ids:
        proton.start(name, hook="triton")
        with proton.scope("scope_a", {"bytes": 16}):
            pass
        step = paths.intern(ROOT, "step")
        profiler.add_metrics(step, {"x": DeviceTensor(torch.zeros(2), True), "n": 1.0})
        assert ids.ids == []  # every push popped
        replay = paths.intern(ROOT, "test0")
        for tag, *_ in launched:
            for start in (1, 2):
                profiler.graph_metrics.executed(tag, replay, start)
        tensor_tag = launched[1][0]
        profiler.graph_metrics._add_all(profiler.graph_metrics.take_words(
            _words((tensor_tag, [1.0, 2.0]), (tensor_tag, [3.0, 4.0]))))
    proton.finalize()
    scope_a, step_path = paths.intern(ROOT, "scope_a"), step
    for (tag, op_path, pushed, count), node, want in zip(
            launched, (scope_a, step_path), (None, 2)):
        frame = paths.intern(paths.intern(node, LAUNCH_METADATA, "state"), METRIC_FRAME, OP)
        assert op_path == frame and pushed[-1] == frame and count == want
    root, _ = read()
    assert find(root, "test0", CAPTURED_AT, "scope_a")["metrics"]["bytes"] == 32
    assert find(root, "test0", CAPTURED_AT, "step")["metrics"] == {"x": [4.0, 6.0], "n": 2.0}
    assert [c["frame"]["name"] for c in root["children"]] == ["test0"]  # nothing at the capture


def test_transform_tensor_metrics_gives_the_roofline_metrics_one_type():
    torch = pytest.importorskip("torch")
    numbers, tensors = transform_tensor_metrics({
        "flops": 1, "flops16": 2, "flops32": [5, 6], "bytes": 3.0, "custom": 4,
        "flops64": torch.tensor([7, 8], dtype=torch.int64), "b2": torch.tensor(2.5)})
    assert tensors == {}
    assert numbers == {"flops": 1.0, "flops16": 2.0, "flops32": [5.0, 6.0], "bytes": 3,
                       "custom": 4, "flops64": [7.0, 8.0], "b2": 2.5}
    assert [type(numbers[k]) for k in ("flops", "bytes", "custom")] == [float, int, int]
    assert transform_tensor_metrics({"bytes": torch.tensor([9.0, 10.0])})[0] == {"bytes": [9, 10]}
