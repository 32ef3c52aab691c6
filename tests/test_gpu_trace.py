"""data="trace" on a GPU in Triton 3.9's layout (the layout asked for whatever Triton is
installed): scope entries on CUPTI's clock around the kernels they launched, flows from each
launch's scope to its kernel, metric events, a CUDA graph replay's captured scopes on its lane.
tests/test_trace_lanes.py checks the same on the CPU, on a clock it sets."""
from __future__ import annotations

import time

import pytest

from conftest import load

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import proton  # noqa: E402
from proton import triton_version  # noqa: E402
from kernels import add_kernel  # noqa: E402

N = 1 << 20


@pytest.fixture
def lanes(monkeypatch):
    """Triton 3.9's layout (and scopes timed on CUPTI's clock), under either Triton."""
    monkeypatch.setattr(triton_version, "after_3_6", lambda: True)


@pytest.fixture(scope="module")
def x():
    assert torch.cuda.is_available()
    x = torch.randn(N, device="cuda")
    add(x, torch.empty_like(x))  # compiled outside the profiles
    torch.cuda.synchronize()
    return x


def add(x, out):
    add_kernel[(triton.cdiv(N, 1024),)](x, x, out, N, BLOCK=1024)


def test_each_kernel_lies_inside_the_scope_entry_that_launched_it_with_a_flow_from_it(
        tmp_path, x, lanes):
    """Triton 3.9's test_trace and test_trace_flexible_metrics_scope_ranges on the real path:
    the three kernels `inner` launched (and waited for) start after its entry and end before
    it does; a "launch->kernel" flow goes from the entry to each; `outer`, given a metric, is
    a "metric" event at least as long as the host slept in it; the wait is on the same lane."""
    out = torch.empty_like(x)
    proton.start(str(tmp_path / "tr"), data="trace")
    with proton.scope("outer", metrics={"tokens": 4096}):
        with proton.scope("inner"):
            for _ in range(3):
                add(x, out)
            torch.cuda.synchronize()
        began = time.perf_counter()
        time.sleep(0.01)
        slept_us = (time.perf_counter() - began) * 1e6
    proton.finalize()
    events = load(tmp_path / "tr.chrome_trace")["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert [k["args"]["call_stack"] for k in kernels] == [["ROOT", "outer", "inner",
                                                           "add_kernel"]] * 3
    [inner] = [e for e in events if e.get("cat") == "scope"]
    [outer] = [e for e in events if e.get("cat") == "metric"]
    assert (outer["name"], outer["args"]["metrics"]) == ("outer: <tokens, 4096>",
                                                         {"tokens": "4096"})
    assert outer["dur"] >= slept_us and outer["ts"] <= inner["ts"]
    for k in kernels:
        assert inner["ts"] <= k["ts"] and k["ts"] + k["dur"] <= inner["ts"] + inner["dur"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    gpu = kernels[0]["tid"]
    assert lanes == {0: "CPU Thread 0", gpu: f"GPU Stream {gpu - 200_000}"}
    flows = [e for e in events if e.get("cat") == "flow"]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert set(starts) == set(ends) and len(starts) == 3
    assert {(e["ts"], e["tid"]) for e in starts.values()} == {(inner["ts"], inner["tid"])}
    assert sorted((e["ts"], e["tid"]) for e in ends.values()) == [(k["ts"], k["tid"])
                                                                  for k in kernels]
    waits = [e for e in events if e.get("cat") == "wait"]
    # the sync, inside `inner`, returned after the last kernel ended (three small kernels may
    # all be done before it begins: the H200 run's wait began 38 us after the last ended)
    assert any(w["tid"] == 0 and inner["ts"] <= w["ts"] <= inner["ts"] + inner["dur"]
               and w["ts"] + w["dur"] >= kernels[-1]["ts"] + kernels[-1]["dur"]
               for w in waits), (kernels[-1]["ts"] + kernels[-1]["dur"],
                                 [(w["tid"], w["ts"], w["dur"]) for w in waits])


def test_each_graph_replay_shows_the_scopes_its_kernels_were_captured_in(tmp_path, x, lanes):
    """Triton 3.9's test_trace_cudagraph_graph_scope_ranges on the real path: on the graph's
    lane, per replay, `a` from its first kernel's start to its last one's end, `b` (one of
    them) inside it; one flow per replay, from the scope it was launched in."""
    out = torch.empty_like(x)

    def fn():
        with proton.scope("a"):
            with proton.scope("b"):
                add(x, out)
            add(x, out)

    proton.start(str(tmp_path / "g"), data="trace", context="shadow")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm, on the capture's kind of stream
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    with proton.scope("replay"):
        graph.replay()
        graph.replay()
        torch.cuda.synchronize()
    proton.finalize()
    events = load(tmp_path / "g.chrome_trace")["traceEvents"]
    [(graph_tid, _)] = [(e["tid"], e) for e in events if e["name"] == "thread_name"
                        and e["args"]["name"].startswith("Graph: Stream ")]
    replayed = sorted((e for e in events if e.get("cat") == "kernel"
                       and e["args"]["call_stack"][:2] == ["ROOT", "replay"]),
                      key=lambda e: e["ts"])
    assert [e["args"]["call_stack"] for e in replayed] == [
        ["ROOT", "replay", "<captured_at>", "a", "b", "add_kernel"],
        ["ROOT", "replay", "<captured_at>", "a", "add_kernel"]] * 2
    ranges: dict[str, list] = {}  # scope -> (start, length) of each replay's
    for e in events:
        if e.get("cat") == "scope" and e["tid"] == graph_tid:
            ranges.setdefault(e["name"], []).append((e["ts"], e["dur"]))
    assert sorted(ranges) == ["<captured_at>", "a", "b"]
    for i in (0, 1):
        first, last = replayed[2 * i], replayed[2 * i + 1]
        for name in ("<captured_at>", "a"):
            ts, dur = sorted(ranges[name])[i]
            assert ts == first["ts"] and ts + dur == pytest.approx(last["ts"] + last["dur"])
        assert sorted(ranges["b"])[i] == (first["ts"], first["dur"])  # its one kernel
    [scope] = [e for e in events if e.get("cat") == "scope"
               and e["args"]["call_stack"] == ["ROOT", "replay"]]
    flows = [e for e in events if e.get("cat") == "flow"]
    into = {e["id"]: e for e in flows if e["ph"] == "f"
            and e["ts"] in (replayed[0]["ts"], replayed[2]["ts"])}
    assert len(into) == 2
    assert all(e["ts"] == scope["ts"] and e["tid"] == scope["tid"]
               for e in flows if e["ph"] == "s" and e["id"] in into)
    assert not [e for e in flows if e["ph"] == "f" and e["ts"] in
                (replayed[1]["ts"], replayed[3]["ts"])]  # one flow a replay
