"""memory=True's bookkeeping (issue 50 item 4) on a CPU: the per-scope arithmetic of
runtime/memory.py over an allocator that counts like torch's (current, peak since the last
reset, running totals), since torch.cuda is absent here; the real allocator is
tests/test_gpu_memory.py's. Through proton.start(memory=True), scopes and the written file."""
from __future__ import annotations

import json

import pytest

import proton
from proton.runtime.profiler import profiler
from proton.runtime.memory import Owners, PeakStack, Reading, Trace

MiB = 1 << 20


def memory_part():
    """The memory part, whose tracker reads a stand-in allocator here."""
    return profiler.parts.named("memory")


class CountingAllocator:
    """Counts as torch's caching allocator's allocated_bytes.all does."""

    def __init__(self) -> None:
        self.current = self.peak = self.total_alloc = self.total_freed = 0

    def alloc(self, n: int) -> None:
        self.current += n
        self.total_alloc += n
        self.peak = max(self.peak, self.current)

    def free(self, n: int) -> None:
        self.current -= n
        self.total_freed += n

    def read(self) -> Reading:
        return Reading(self.current, self.peak, self.total_alloc, self.total_freed)

    def reset_peak(self) -> None:
        self.peak = self.current


def test_an_inner_scopes_peak_is_not_lost_to_the_outer_one_nor_the_reverse():
    a = CountingAllocator()
    stack = PeakStack(a)
    a.alloc(10)
    stack.enter(1, "outer")
    a.alloc(300)  # the outer scope's own peak, 310, before the child
    a.free(300)
    stack.enter(2, "inner")
    a.alloc(100)  # 110
    a.free(100)
    inner = stack.exit("inner")
    a.alloc(50)
    outer = stack.exit("outer")
    assert inner is not None and outer is not None
    assert inner[0] == 2 and (inner[1].alloc, inner[1].freed, inner[1].peak, inner[1].live) == \
        (100, 100, 110, 10)
    assert outer[0] == 1 and (outer[1].alloc, outer[1].freed, outer[1].peak, outer[1].live) == \
        (450, 400, 310, 60)


def test_a_childs_peak_above_the_parents_own_is_the_parents_too():
    a = CountingAllocator()
    stack = PeakStack(a)
    stack.enter(1, "outer")
    stack.enter(2, "inner")
    a.alloc(500)
    a.free(500)
    stack.exit("inner")
    stack.enter(3, "second")  # a reset here must not hide the first child's 500
    stack.exit("second")
    got = stack.exit("outer")
    assert got is not None and got[1].peak == 500


def test_a_frame_entered_before_measuring_began_is_ignored():
    stack = PeakStack(CountingAllocator())
    assert stack.exit("never entered") is None


@pytest.fixture
def allocator():
    """A memory=True session whose tracker reads a counting allocator (no CUDA here)."""
    a = CountingAllocator()
    yield a
    if memory_part().tracker is not None:
        proton.finalize()


def test_a_session_writes_each_scopes_alloc_freed_peak_and_live(tmp_path, allocator, capsys):
    proton.start(str(tmp_path / "m"), memory=True)
    memory_part().tracker.stack = PeakStack(allocator)
    allocator.alloc(100 * MiB)  # the model, before the loop
    with proton.scope("train"):
        for _ in range(10):
            with proton.scope("step"):
                with proton.scope("keep"):
                    allocator.alloc(4 * MiB)  # kept: a leak
                with proton.scope("temp"):
                    allocator.alloc(512 * MiB)
                    allocator.free(512 * MiB)
    proton.finalize()
    assert memory_part().tracker is None  # reading stops with the last memory session
    with open(tmp_path / "m.hatchet") as f:
        root, _ = json.load(f)
    assert "mem_peak_bytes" not in root["metrics"]  # own values: never summed up the tree
    train = root["children"][0]
    step = train["children"][0]
    kids = {c["frame"]["name"]: c["metrics"] for c in step["children"]}
    assert kids["keep"]["mem_alloc_bytes"] == 40 * MiB and kids["keep"]["mem_freed_bytes"] == 0
    assert kids["keep"]["mem_count"] == 10 and kids["keep"]["mem_grew_count"] == 9
    assert kids["keep"]["mem_live_first_bytes"] == 104 * MiB
    assert kids["keep"]["mem_live_bytes"] == 140 * MiB
    assert kids["temp"]["mem_peak_bytes"] == (140 + 512) * MiB  # the last entry's, highest
    assert step["metrics"]["mem_peak_bytes"] == (140 + 512) * MiB
    assert step["metrics"]["mem_alloc_bytes"] == 10 * (4 + 512) * MiB
    assert train["metrics"]["mem_count"] == 1
    err = capsys.readouterr().err
    assert f"memory: the peak, {652 * MiB:,} bytes allocated (0.64 GiB), was reached in " \
           "train / step / temp" in err


def test_entries_closed_while_the_session_is_paused_are_not_counted(tmp_path, allocator):
    sid = proton.start(str(tmp_path / "p"), memory=True)
    memory_part().tracker.stack = PeakStack(allocator)
    proton.deactivate(sid)
    with proton.scope("warmup"):
        allocator.alloc(MiB)
    proton.activate(sid)
    with proton.scope("step"):
        allocator.alloc(MiB)
    proton.finalize()
    with open(tmp_path / "p.hatchet") as f:
        names = {c["frame"]["name"]: c["metrics"] for c in json.load(f)[0]["children"]}
    assert "mem_count" not in names.get("warmup", {})
    assert names["step"]["mem_alloc_bytes"] == MiB


def test_each_phase_holds_its_own_entries_and_the_peak_is_the_sessions(tmp_path, allocator,
                                                                       capsys):
    """Phases (proton.data.advance_phase, periodic flushing) split memory as they split time:
    a phase's file or get() holds the entries that closed in it, not the whole session's;
    the job's peak named at finalize is still the highest of every phase."""
    sid = proton.start(str(tmp_path / "ph"), memory=True)
    memory_part().tracker.stack = PeakStack(allocator)
    with proton.scope("step"):
        allocator.alloc(64 * MiB)
        allocator.free(64 * MiB)
    proton.data.advance_phase(sid)
    for _ in range(3):
        with proton.scope("step"):
            allocator.alloc(MiB)
    first, second = (proton.data.get(sid, phase)[0]["children"][0]["metrics"]
                     for phase in (0, 1))
    assert (first["mem_alloc_bytes"], first["mem_peak_bytes"], first["mem_count"]) == (
        64 * MiB, 64 * MiB, 1)
    assert (second["mem_alloc_bytes"], second["mem_peak_bytes"], second["mem_count"]) == (
        3 * MiB, 3 * MiB, 3)
    assert (second["mem_live_first_bytes"], second["mem_live_bytes"],
            second["mem_grew_count"]) == (MiB, 3 * MiB, 2)
    proton.finalize()
    assert f"the peak, {64 * MiB:,} bytes allocated" in capsys.readouterr().err


def test_memory_takes_a_bool_and_a_tree(tmp_path):
    with pytest.raises(proton.SessionError, match="memory='yes'"):
        proton.start(str(tmp_path / "x"), memory="yes")
    with pytest.raises(proton.SessionError, match="use data='tree'"):
        proton.start(str(tmp_path / "x"), data="trace", memory=True)


# -- the history read: Owners, on events as torch records them --------------------------------

def alloc(addr: int, size: int, label: str = "", t: int = 0) -> dict:
    return {"action": "alloc", "addr": addr, "size": size, "time_us": t,
            "user_metadata": label}


def test_an_address_handed_out_again_belongs_to_its_latest_allocation():
    owners = Owners()
    owners.take(Trace([alloc(0x100, 512, "proton:7.1", 1)], {0x100}))
    assert owners.owner == {0x100: (7, 1, 512)}
    # freed (frees are not read) and handed out again to another thread's allocation
    owners.take(Trace([alloc(0x100, 512, "", 2)], {0x100}))
    assert owners.owner == {}
    owners.take(Trace([alloc(0x200, 1024, "proton:7.2", 3)], set()))
    assert owners.owner == {}  # no longer allocated at the read


def test_a_reread_history_starts_after_the_last_event_taken_and_notices_a_gap():
    owners = Owners()
    first = [alloc(1, 512, "proton:1.1", 1), alloc(2, 512, "proton:1.2", 2)]
    assert owners.take(Trace(first, {1, 2})) == (True, 2)
    assert owners.take(Trace(first + [alloc(3, 512, "proton:1.3", 3)], {1, 2, 3})) == (True, 1)
    assert owners.owner[3] == (1, 3, 512)
    # the ring wrapped past the last one taken: some events were lost
    assert owners.take(Trace([alloc(5, 512, "proton:1.5", 9)], {1, 2, 3, 5})) == (False, 1)
