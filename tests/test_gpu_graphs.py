"""CUDA graphs and tensor metrics as Triton 3.9's Proton has them, on the GPU: graphs captured
before and during the session, replays, metrics given inside a capture counted at each replay
with the values that replay computed (checked against torch), periodic flushing of replays.
Run with `pytest -m gpu tests/test_gpu_graphs.py`."""
from __future__ import annotations

import glob
import json
import os

import pytest

from conftest import find, kernels, total

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import proton  # noqa: E402
from proton.format import CAPTURED_AT, LAUNCH_METADATA, METRIC_FRAME  # noqa: E402


def _scaled_metadata(grid, metadata, args):
    x = args["x"]
    return {"name": "scaled", "flops": x.sum() * 2, "bytes": 4 * x.numel()}


@triton.jit(launch_metadata=_scaled_metadata)
def scaled_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=mask) * 2.0, mask=mask)


def _warm(fn) -> None:
    """Run `fn` twice on a side stream (compiled, allocator warm) before a capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def test_a_graph_captured_before_the_session_is_said_once_and_counted_under_each_replay(
        profile_path, capfd):
    name, read = profile_path
    x = torch.ones(1024, device="cuda")

    def step():
        return (x * 2).sin() + 1  # three kernels

    _warm(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    proton.start(name)
    for scope in ("replay0", "replay1"):
        with proton.scope(scope):
            graph.replay()
    proton.finalize()
    err = capfd.readouterr().err
    assert err.count("Cannot find graph for graphExecId:") == 1  # one graph, two replays
    assert "start profiling before the graph is created" in err
    root, _ = read()
    for scope in ("replay0", "replay1"):
        node = find(root, scope)
        assert total(node, "count") == 3 and all(k["metrics"]["time (ns)"] > 0
                                                 for k in kernels(node))


def test_kernels_captured_while_the_session_was_deactivated_are_left_out(profile_path):
    name, read = profile_path
    x = torch.ones(1024, device="cuda")
    sid = proton.start(name)

    def step():
        with proton.scope("kept_a"):
            a = x * 2
        proton.deactivate(sid)
        with proton.scope("skipped"):
            b = x + 3
        proton.activate(sid)
        with proton.scope("kept_c"):
            return a + b

    _warm(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    with proton.scope("replay"):
        for _ in range(3):
            graph.replay()
    torch.cuda.synchronize()
    proton.finalize()
    assert out[0].item() == 6.0  # the deactivated op did run in every replay
    root, _ = read()
    captured = find(root, "replay", CAPTURED_AT)
    names = [c["frame"]["name"] for c in captured["children"]]
    assert "kept_a" in names and "kept_c" in names and "skipped" not in names
    assert total(captured, "count") == 6  # kept_a's and kept_c's kernels, three replays each


def test_metrics_given_inside_a_capture_count_each_replays_own_values(profile_path,
                                                                       monkeypatch):
    """A scope's numbers and GPU tensor, and a Triton launch's launch_metadata (a tensor
    computed from its argument, and a number), each counted at every replay with the values
    that replay computed: x changes between replays, and torch sums what it held."""
    name, read = profile_path
    x = torch.ones(8, device="cuda")
    y = torch.empty_like(x)

    def step():
        with proton.scope("scope_a", {"tokens": 8, "x_sum": x.sum(), "x_vec": x[:3] * 1}):
            scaled_kernel[(1,)](x, y, x.numel(), BLOCK=8)

    _warm(step)
    proton.start(name, hook="triton")
    _warm(step)  # eager, inside the session: nothing under the replays from these
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    syncs = []
    real_sync = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(a) or real_sync(*a))
    fills = [1.0, 2.5, -3.0, 4.0]
    with proton.scope("replays"):
        for value in fills:
            x.fill_(value)
            graph.replay()
    assert syncs == []  # no sync per replay: values are read in batches at flushes
    monkeypatch.undo()
    proton.finalize()
    root, _ = read()
    captured = find(root, "replays", CAPTURED_AT)
    scope_a = find(captured, "scope_a")
    sums = [value * 8 for value in fills]  # what x.sum() computed at each replay
    assert scope_a["metrics"]["tokens"] == 8 * len(fills)
    assert scope_a["metrics"]["x_sum"] == pytest.approx(sum(sums))
    assert scope_a["metrics"]["x_vec"] == pytest.approx([sum(fills)] * 3)
    op = find(scope_a, "scaled")
    assert op["metrics"]["flops"] == pytest.approx(2 * sum(sums))
    assert op["metrics"]["bytes"] == 32 * len(fills) and op["metrics"]["count"] == len(fills)
    assert find(scope_a, LAUNCH_METADATA, METRIC_FRAME)["metrics"] == {}  # uncounted kernels
    assert find(captured, "scope_a", LAUNCH_METADATA, "scaled_kernel", METRIC_FRAME)
    eager = find(root, "scope_a")  # the session's two eager steps
    assert eager["metrics"]["tokens"] == 16 and eager["metrics"]["x_sum"] == 16.0


def test_a_replay_while_deactivated_counts_nothing_and_later_replays_keep_their_values(
        profile_path):
    name, read = profile_path
    x = torch.ones(4, device="cuda")

    def step():
        with proton.scope("owner", {"s": x.sum()}):
            x.mul_(1)

    _warm(step)
    sid = proton.start(name)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    proton.deactivate(sid)
    x.fill_(100.0)
    graph.replay()  # its metric kernel writes a record all the same
    proton.activate(sid)
    x.fill_(1.0)
    with proton.scope("profiled"):
        graph.replay()
    proton.finalize()
    root, _ = read()
    assert find(root, "profiled", CAPTURED_AT, "owner")["metrics"]["s"] == 4.0
    assert CAPTURED_AT not in [c["frame"]["name"] for c in root["children"]]  # the inactive one


def test_eager_gpu_tensor_metrics_add_no_node_of_their_own(profile_path):
    name, read = profile_path
    x = torch.ones(10, 10, device="cuda")
    mean, std = x.mean(), x.std()
    flops = mean * 4
    torch.cuda.synchronize()
    proton.start(name)
    with proton.scope("test", {"x_mean": mean, "x_std": std, "flops": flops}):
        torch.zeros_like(x)
    proton.finalize()
    root, _ = read()
    (test,) = root["children"]  # the metric copies are counted nowhere
    assert test["metrics"]["x_mean"] == 1.0 and test["metrics"]["x_std"] == 0.0
    assert test["metrics"]["flops"] == 4.0 and isinstance(test["metrics"]["flops"], float)
    assert [k["metrics"]["count"] for k in kernels(test)] == [1]


@pytest.mark.parametrize("fmt", ["hatchet", "hatchet_msgpack"])
def test_periodic_flushing_writes_each_phases_replays_in_its_part(tmp_path, fmt):
    import msgpack

    x = torch.ones(4, device="cuda")
    y = torch.empty_like(x)

    def step():
        with proton.scope("scope_a", {"bytes": 16}):
            scaled_kernel[(1,)](x, y, x.numel(), BLOCK=4)

    _warm(step)
    sid = proton.start(str(tmp_path / "pf"), mode=f"periodic_flushing:format={fmt}",
                       hook="triton")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    per_phase, phases = 20, 5
    with proton.scope("test0"):
        for phase in range(phases):
            if phase:
                proton.data.advance_phase(session=sid)
            x.fill_(float(phase + 1))
            for _ in range(per_phase):
                graph.replay()
    proton.finalize(output_format=fmt)
    files = sorted(glob.glob(str(tmp_path / f"*.{fmt}")))
    assert [os.path.basename(f) for f in files] == [f"pf.part_{p}.{fmt}" for p in range(phases)]
    for phase, path in enumerate(files):
        with open(path, "rb") as f:
            doc = msgpack.unpackb(f.read(), raw=False, strict_map_key=False) \
                if fmt == "hatchet_msgpack" else json.loads(f.read())
        captured = find(doc[0], "test0", CAPTURED_AT)
        assert find(captured, "scope_a")["metrics"]["bytes"] == per_phase * 16
        op = find(captured, "scope_a", "scaled")
        assert op["metrics"]["count"] == per_phase
        assert op["metrics"]["flops"] == pytest.approx(per_phase * 2 * 4 * (phase + 1))
