"""Waits and GPU idle time on a torch workload built to show them (issue 50, items 2, 3 and
5): one `.item()` per step after a GPU sleep of known length, and a scope whose host sleeps
between two launches; in a trace, the wait on the main thread over the sleep it waited for.
Run with `pytest -m gpu`."""
from __future__ import annotations

import threading
import time

import pytest

from conftest import find, load

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import proton  # noqa: E402
from proton.format import GPU_IDLE, SCOPE_WALL, SYNC_COUNT, SYNC_TIME  # noqa: E402

STEPS = 4


def _sleep_cycles(ms: float) -> tuple[int, float]:
    """(cycles for torch.cuda._sleep to keep the GPU busy about `ms`, its measured ms)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(cycles: int) -> float:
        torch.cuda.synchronize()
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    timed(1_000_000)  # warm
    cycles = int(10_000_000 * ms / timed(10_000_000))
    return cycles, min(timed(cycles) for _ in range(3))


def test_item_after_a_gpu_sleep_waits_as_long_as_the_sleep(profile_path):
    """A step launches a GPU sleep and reads a number back (`.item()`, `print`, `.cpu()`):
    the CPU waits for the sleep, and sync_time per step is the sleep kernel's GPU time (within
    5%; on an H200 the sleep ran 7% shorter under the session than when calibrated, so the
    planted length is the kernel's own measured time)."""
    name, read = profile_path
    cycles, planted = _sleep_cycles(20.0)
    x = torch.ones(1, device="cuda")
    (x + 1).item()  # loaded and warm: each step's wait is the sleep's
    repr(x + 1)
    blocked = {"step": 0.0, "printed": 0.0, "copied": 0.0}

    def read_back(scope: str, how) -> None:
        """The host's own clock around the read-back: the wait the user sees."""
        t0 = time.perf_counter_ns()
        how()
        blocked[scope] += time.perf_counter_ns() - t0

    proton.start(name)
    for _ in range(STEPS):
        with proton.scope("step"):
            torch.cuda._sleep(cycles)
            read_back("step", lambda: (x + 1).item())
    with proton.scope("printed"):
        torch.cuda._sleep(cycles)
        read_back("printed", lambda: print(x + 1))
    with proton.scope("copied"):  # pageable: the wait is in cudaMemcpyAsync
        torch.cuda._sleep(cycles)
        read_back("copied", lambda: (x + 1).cpu())
    proton.finalize()
    root, _ = read()

    step = find(root, "step")
    assert STEPS <= step["metrics"][SYNC_COUNT] <= 2 * STEPS  # a pageable copy may wait too
    slept = max(k["metrics"]["time (ns)"] / k["metrics"]["count"] for k in step["children"])
    # most of the sleep is waited for; exactly what the host's clock saw in the read-back
    assert step["metrics"][SYNC_TIME] / STEPS > 0.5 * slept, (step, planted)
    for name in ("step", "printed", "copied"):
        node = find(root, name)
        assert node["metrics"][SYNC_COUNT] >= 1
        # print() also formats on the host (~1 ms on the H200) outside any wait: its truth is
        # the sleep, the others' the host's clock around the read-back
        truth = slept if name == "printed" else blocked[name]
        assert node["metrics"][SYNC_TIME] == pytest.approx(truth, rel=0.05), (
            name, node["metrics"], blocked, slept)
    assert root["metrics"][SYNC_TIME] == 0  # the root's 0: inclusive, summed by viewers


def test_a_host_sleep_between_launches_is_the_scopes_gpu_idle_time(profile_path):
    """The host sleeps between two launches inside a scope: the GPU idles that long (within
    5%); a scope whose GPU sleeps all along idles for almost none of its time."""
    name, read = profile_path
    cycles, _ = _sleep_cycles(20.0)
    x = torch.ones(1 << 20, device="cuda")
    torch.cuda.synchronize()
    proton.start(name)
    slept = 0.0
    for _ in range(STEPS):
        with proton.scope("gap"):
            x.add_(1)
            t0 = time.perf_counter()
            time.sleep(0.03)
            slept += time.perf_counter() - t0
            x.add_(1)
            torch.cuda.synchronize()
    with proton.scope("busy"):
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
    proton.finalize()
    root, _ = read()
    gap = find(root, "gap")["metrics"]
    assert gap[GPU_IDLE] / 1e9 == pytest.approx(slept, rel=0.05), (gap, slept)
    assert gap[SCOPE_WALL] >= gap[GPU_IDLE]
    busy = find(root, "busy")["metrics"]
    assert busy[GPU_IDLE] < 0.05 * busy[SCOPE_WALL], busy
    assert GPU_IDLE not in root["metrics"]  # a node's own value: never summed up the tree


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_trace_shows_the_wait_on_the_main_thread_over_the_kernel_it_waited_for(
        tmp_path, monkeypatch, native):
    """A trace session: a GPU sleep of ~20 ms, then `.item()` inside a scope. The trace has
    one long "wait" on the host's main thread, as long as the host's clock says `.item()`
    took (within 5%: it waits from its call, some ms into the sleep, to the sleep's end), and
    it spans the sleep kernel's end (both on CUPTI's clock), with the C helper and without."""
    monkeypatch.setenv("PROTON_NATIVE", native)
    cycles, _ = _sleep_cycles(20.0)
    x = torch.ones(1, device="cuda")
    (x + 1).item()  # loaded and warm: the wait is the sleep's
    name = str(tmp_path / "waits")
    proton.start(name, data="trace")
    try:
        with proton.scope("step"):
            torch.cuda._sleep(cycles)
            y = x + 1
            t0 = time.perf_counter()
            y.item()
            held_us = (time.perf_counter() - t0) * 1e6
    finally:
        proton.finalize()
    events = load(name + ".chrome_trace")["traceEvents"]
    sleep = max((e for e in events if e["cat"] == "kernel"), key=lambda e: e["dur"])
    waits = [e for e in events if e["cat"] == "wait"]
    assert {(e["name"], e["pid"]) for e in waits} == {("wait", "host")}, waits
    # .item() copies (cudaMemcpyAsync to the stack: pageable, it may hold the wait) and then
    # synchronizes the stream (then a few us): one wait holds the sleep
    long = [e for e in waits if e["dur"] > 0.5 * held_us]
    assert len(long) == 1, (waits, sleep)
    wait = long[0]
    assert wait["tid"] == threading.get_ident()
    assert wait["args"]["call_stack"][-1] == "step"
    assert wait["dur"] == pytest.approx(held_us, rel=0.05), (wait, held_us, sleep)
    assert wait["ts"] <= sleep["ts"] + sleep["dur"] <= wait["ts"] + wait["dur"], (wait, sleep)
