"""The leak rule on the loop of issue 57 item 3, replayed on a CPU: torch's caching allocator
as Proton reads it (counters, the labelled history, the snapshot's blocks: fake_allocator.py)
under a job of the loop's shape. `readback` allocates cuBLAS's workspace at its first entry and
keeps nothing after; `copy` allocates 32 MiB a step that its parent `step` frees after `leak`
ran; `step` holds a child that keeps; `leak` keeps 4 MiB a step. Only `leak` is named, with
4 MiB per entry, ranked and headlined by memory; a job's own use of torch's allocator history
is left as it was. The GPU version is tests/test_gpu_memory.py."""
from __future__ import annotations

import json
import os

import pytest

import proton
from proton.runtime.profiler import profiler
from proton.runtime import memory
from proton.runtime.memory import PeakStack, TorchAllocator
from proton.viewer.diagnose import diagnose, render
from proton.viewer.reader import load

from conftest import find
from fake_allocator import GiB, MiB, FakeCuda
from test_html import needs_browser

DATA = os.path.join(os.path.dirname(__file__), "data")
STEPS = 10


def memory_part():
    """The memory part, whose tracker reads a stand-in allocator here."""
    return profiler.parts.named("memory")


def loop(cuda: FakeCuda, steps: int = STEPS, at_step=None) -> list[int]:
    """The loop as bench/probes/real_shapes.py writes it, its allocations replayed: weights
    and cuBLAS's handle made before the session; `at_step(i)` runs at the start of step i."""
    kept: list[int] = []
    workspace = loss = None
    for i in range(steps):
        if at_step is not None:
            at_step(i)
        with proton.scope("step"):
            with proton.scope("copy"):
                y = cuda.malloc(32 * MiB)  # host.to(dev)
            with proton.scope("readback"):
                if workspace is None:
                    workspace = cuda.malloc(32 * MiB)  # cuBLAS's, at its first matmul
                out = cuda.malloc(16 * MiB)  # a @ a
                new = cuda.malloc(512)  # .sum(), read by .item()
                cuda.free(out)
                if loss is not None:
                    cuda.free(loss)  # loss = ...: the last step's is freed now
                loss = new
            with proton.scope("idle"):
                pass  # in-place kernels
            with proton.scope("leak"):
                kept.append(cuda.malloc(4 * MiB))
            cuda.free(y)  # del y: the step frees what copy allocated
    return kept


def start(tmp_path, cuda: FakeCuda, name: str = "loop") -> int:
    cuda.malloc(16 * MiB)  # a, before the session
    sid = proton.start(str(tmp_path / name), memory=True)
    memory_part().tracker.stack = PeakStack(TorchAllocator(cuda.torch))
    return sid


@pytest.fixture
def cuda():
    fake = FakeCuda()
    yield fake
    if memory_part().tracker is not None:
        proton.finalize()


def scopes(path) -> dict[str, dict]:
    with open(path) as f:
        root = json.load(f)[0]
    step = find(root, "step")
    return {"step": step["metrics"],
            **{c["frame"]["name"]: c["metrics"] for c in step["children"]}}


def with_kernels(path) -> str:
    """The file with the kernels a GPU would have added (no CUPTI here): the matmul and the
    sum under readback, the elementwise kernels under idle; the root's zeros for them."""
    with open(path) as f:
        root, devices = json.load(f)

    def kernel(name: str, ns: int) -> dict:
        return {"frame": {"name": name, "type": "function"}, "children": [],
                "metrics": {"time (ns)": ns, "count": STEPS, "device_id": "0",
                            "device_type": "CUDA"}}

    step = find(root, "step")
    find(step, "readback")["children"] += [kernel("sgemm", 3_400_000), kernel("reduce", 77_000)]
    find(step, "idle")["children"] += [kernel("mul", 28_000), kernel("add", 20_000)]
    root["metrics"].update({"time (ns)": 0, "count": 0})
    devices = {"CUDA": {"0": {"arch": "90", "num_sms": 132, "clock_rate": 1980000,
                              "memory_clock_rate": 2619000, "bus_width": 5120}}}
    with open(path, "w") as f:
        json.dump([root, devices], f)
    return str(path)


def leaks(path) -> dict:
    return {f.kernel: f for f in diagnose(load(with_kernels(path))).findings
            if f.rule == "memory leak"}


def test_only_the_scope_that_keeps_its_own_allocations_is_a_leak_4_mib_per_entry(tmp_path,
                                                                                 cuda):
    loop_start = start(tmp_path, cuda)
    assert loop_start is not None
    kept = loop(cuda)
    proton.finalize()
    got = leaks(tmp_path / "loop.hatchet")
    assert list(got) == ["scope leak"]  # not copy, readback, nor step, which holds leak
    assert "4.00 MiB per entry" in got["scope leak"].evidence
    m = scopes(tmp_path / "loop.hatchet")
    assert m["leak"]["mem_kept_bytes"] == (STEPS - 1) * 4 * MiB == len(kept[1:]) * 4 * MiB
    assert (m["leak"]["mem_judged_count"], m["leak"]["mem_kept_count"]) == (STEPS - 1,
                                                                             STEPS - 1)
    assert m["copy"]["mem_kept_bytes"] == 0  # its tensors are freed, by step
    assert m["readback"]["mem_kept_bytes"] == 512  # the workspace came at its first entry;
    assert m["readback"]["mem_kept_count"] == 1  # the last loss is alive at the end
    assert m["step"]["mem_kept_bytes"] == 0  # what leak keeps is leak's
    assert m["leak"]["mem_device_bytes"] == 140 * GiB
    assert cuda.metadata == "" and not cuda.recording  # label and history as they were


def test_a_leak_is_headlined_and_ranked_by_the_memory_it_holds_not_gpu_time(tmp_path, cuda):
    start(tmp_path, cuda)
    loop(cuda)
    proton.finalize()
    text = render(diagnose(load(with_kernels(tmp_path / "loop.hatchet"))))
    line = next(line for line in text.splitlines() if "scope leak:" in line)
    assert "keeps 4.00 MiB of memory per entry, 36.00 MiB over its 10 entries" in line
    assert "% of the GPU's 140.00 GiB" in line and "more entries" in line
    assert "GPU time" not in line and "worth knowing" not in line


def test_groups_of_time_and_memory_rank_by_their_share_of_each(tmp_path):
    """A leak that will hold most of the device ranks above a small time saving; a small one
    below it."""
    def tree(kept: int) -> str:
        mem = {"mem_count": 11, "mem_judged_count": 10, "mem_kept_count": 10,
               "mem_kept_bytes": kept, "mem_device_bytes": 100 * GiB, "mem_peak_bytes": GiB}
        leak = {"frame": {"name": "keep", "type": "function"}, "metrics": mem, "children": []}
        small = {"frame": {"name": "small", "type": "function"}, "children": [],
                 "metrics": {"time (ns)": 1_000_000, "count": 1000, "device_id": "0",
                             "device_type": "CUDA", "grid_blocks": 1}}
        big = {"frame": {"name": "gemm", "type": "function"}, "children": [],
               "metrics": {"time (ns)": 99_000_000, "count": 10, "device_id": "0",
                           "device_type": "CUDA"}}
        root = {"frame": {"name": "ROOT", "type": "function"}, "children": [leak, small, big],
                "metrics": {"time (ns)": 0, "count": 0}}
        path = tmp_path / f"rank{kept}.hatchet"
        path.write_text(json.dumps([root, {"CUDA": {"0": {
            "arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
            "bus_width": 5120}}}]))
        return str(path)

    def order(kept: int) -> list[str]:
        return [g.kernel for g in diagnose(load(tree(kept))).groups if not g.info]

    assert order(80 * GiB)[0] == "scope keep"  # 80% of the device: before a 1% saving
    assert order(20 * MiB)[-1] == "scope keep"


def test_reads_in_bounded_batches_find_the_same_and_keep_the_ring_small(tmp_path, cuda,
                                                                         monkeypatch):
    monkeypatch.setattr(memory, "DRAIN", 3)
    monkeypatch.setattr(memory, "MAX_ENTRIES", 12)
    longest = []
    start(tmp_path, cuda)
    loop(cuda, at_step=lambda i: longest.append(len(cuda.trace)))
    proton.finalize()
    assert max(longest) <= 12 and cuda.max_entries == 12
    m = scopes(tmp_path / "loop.hatchet")
    assert (m["leak"]["mem_kept_bytes"], m["leak"]["mem_judged_count"]) == (9 * 4 * MiB, 9)
    assert list(leaks(tmp_path / "loop.hatchet")) == ["scope leak"]


def test_a_torch_that_cannot_skip_events_records_them_all_and_finds_the_same(tmp_path,
                                                                              monkeypatch):
    cuda = FakeCuda(can_skip=False)
    monkeypatch.setattr(memory, "DRAIN", 3)
    start(tmp_path, cuda)
    loop(cuda)
    proton.finalize()
    assert list(leaks(tmp_path / "loop.hatchet")) == ["scope leak"]


def test_a_jobs_own_history_is_read_and_left_as_it_was(tmp_path, cuda):
    cuda.record_memory_history("all", context="alloc", max_entries=100_000)
    cuda.set_metadata("mine")
    cuda.malloc(MiB)  # an event of the job's before the session
    start(tmp_path, cuda)
    loop(cuda)
    proton.finalize()
    assert cuda.recording and cuda.max_entries == 100_000 and cuda.context == "alloc"
    assert cuda.trace[0]["user_metadata"] == "mine"  # never cleared
    assert not cuda.skip and any(e["action"] == "free_requested" for e in cuda.trace)
    assert cuda.metadata == "mine"
    assert list(leaks(tmp_path / "loop.hatchet")) == ["scope leak"]
    assert scopes(tmp_path / "loop.hatchet")["leak"]["mem_kept_bytes"] == 9 * 4 * MiB


def test_a_history_the_job_turns_on_during_the_session_stays_on(tmp_path, cuda, monkeypatch):
    monkeypatch.setattr(memory, "DRAIN", 3)
    start(tmp_path, cuda)
    loop(cuda, at_step=lambda i: i == 4 and cuda.record_memory_history("all"))
    proton.finalize()
    assert cuda.recording and cuda.context == "all" and not cuda.skip
    assert list(leaks(tmp_path / "loop.hatchet")) == ["scope leak"]


def test_a_history_the_job_turns_off_ends_the_judgment_there(tmp_path, cuda, capfd):
    start(tmp_path, cuda)
    loop(cuda, at_step=lambda i: i == 6 and cuda.record_memory_history(None))
    proton.finalize()
    err = capfd.readouterr().err
    assert "leaks judged only until the allocator's history stopped" in err
    m = scopes(tmp_path / "loop.hatchet")["leak"]
    assert m["mem_judged_count"] == m["mem_kept_count"] <= 5  # none after step 6 judged
    assert m["mem_kept_bytes"] == 4 * MiB * m["mem_kept_count"]


def test_a_torch_without_labels_judges_no_leak_and_says_why(tmp_path, capfd):
    cuda = FakeCuda(labels=False)
    start(tmp_path, cuda)
    loop(cuda)
    proton.finalize()
    assert "leaks not judged (torch 2.11.0+fake cannot label allocations" in \
        capfd.readouterr().err
    assert not cuda.recording
    got = diagnose(load(with_kernels(tmp_path / "loop.hatchet")))
    assert not [f for f in got.findings if f.rule == "memory leak"]
    assert any(n.startswith("memory leak: not judged") for n in got.notes)


def test_each_phase_judges_its_own_entries(tmp_path, cuda):
    sid = start(tmp_path, cuda)
    kept = []

    def step(keep: bool) -> None:
        with proton.scope("step"):
            with proton.scope("leak"):
                t = cuda.malloc(2 * MiB)
                if keep:
                    kept.append(t)
                else:
                    cuda.free(t)

    for _ in range(4):
        step(keep=True)
    proton.data.advance_phase(sid)
    for _ in range(5):
        step(keep=False)
    first, second = (find(proton.data.get(sid, phase)[0], "step", "leak")["metrics"]
                     for phase in (0, 1))
    assert (first["mem_kept_bytes"], first["mem_judged_count"]) == (3 * 2 * MiB, 3)
    assert "mem_judged_count" not in second  # judged when the phase ends
    proton.finalize()


def test_counters_alone_judge_no_leak_on_the_real_loop():
    """The loop recorded on an H200 before the allocator's history (issue 57): `copy`'s live
    memory at exit grew because `leak` keeps, and it was named; counters cannot tell."""
    got = diagnose(load(os.path.join(DATA, "real", "loop_counters_h200.hatchet")))
    assert not [f for f in got.findings if f.rule == "memory leak"]
    assert any(n.startswith("memory leak: not judged") for n in got.notes)


def test_a_jobs_own_history_too_short_for_the_run_says_so_and_names_no_leak(tmp_path, cuda,
                                                                             capfd):
    cuda.record_memory_history("all", context=None, max_entries=20)
    start(tmp_path, cuda)
    loop(cuda)
    proton.finalize()
    assert "torch's allocator history dropped events 1 time(s)" in capfd.readouterr().err
    assert not leaks(tmp_path / "loop.hatchet")
    assert cuda.recording and cuda.max_entries == 20


def report(tmp_path, cuda) -> str:
    from test_html import write

    start(tmp_path, cuda)
    loop(cuda)
    proton.finalize()
    return write(tmp_path, with_kernels(tmp_path / "loop.hatchet"))


def test_the_reports_findings_carry_the_leaks_memory_headline(tmp_path, cuda):
    from test_html import data

    groups = data(report(tmp_path, cuda))["findings"]["groups"]
    assert groups[0]["kernel"] == "scope leak"
    assert groups[0]["headline"].startswith("keeps 4.00 MiB of memory per entry")


@needs_browser
def test_the_reports_finding_card_of_a_leak_says_memory(tmp_path, cuda):
    from test_html import browse

    dom = browse(report(tmp_path, cuda), "view=findings")
    card = dom[dom.index('id="findbody"'):]
    card = card[card.index("scope leak"):]
    assert "keeps 4.00 MiB of memory per entry" in card[: card.index("</li>")]


def test_a_session_started_later_judges_the_entries_from_its_start(tmp_path, cuda):
    start(tmp_path, cuda, name="a")
    kept = []

    def steps(n: int) -> None:
        for _ in range(n):
            with proton.scope("step"):
                with proton.scope("leak"):
                    kept.append(cuda.malloc(2 * MiB))

    steps(3)
    b = proton.start(str(tmp_path / "b"), memory=True)
    steps(4)
    proton.finalize(b)
    proton.finalize()
    a_leak, b_leak = (scopes(tmp_path / f"{n}.hatchet")["leak"] for n in "ab")
    assert (a_leak["mem_judged_count"], a_leak["mem_kept_bytes"]) == (6, 6 * 2 * MiB)
    assert (b_leak["mem_judged_count"], b_leak["mem_kept_bytes"]) == (4, 4 * 2 * MiB)
