"""Attribution of CUPTI records to call paths, replayed without a GPU."""
from __future__ import annotations

import json
import os
from collections import Counter

from conftest import find, load

from proton.cupti.attribution import ApiRecord, Attributor, ExternalRecord, KernelRecord, each
from proton.data.paths import ROOT

DATA = os.path.join(os.path.dirname(__file__), "data")


def collect():
    got = []
    return got, Attributor(each(lambda path, rec, ts: got.append((path, rec.name, ts))))


def test_kernel_goes_to_the_path_its_launch_pushed():
    got, att = collect()
    att.add_buffer([ExternalRecord(7, 42)], [ApiRecord(7, 100)], [KernelRecord(7, "k", 0, 150, 170)])
    assert got == [(42, "k", 100)]


def test_launch_without_external_record_goes_to_root():
    got, att = collect()
    att.add_buffer([], [ApiRecord(8, 5)], [KernelRecord(8, "k", 0, 6, 9)])
    assert got == [(ROOT, "k", 5)]


def test_kernel_arriving_before_its_launch_record_waits_for_it():
    got, att = collect()
    att.add_buffer([], [], [KernelRecord(3, "early", 0, 10, 20)])
    assert got == [] and att.waiting_kernels == 0
    att.add_buffer([ExternalRecord(3, 9)], [ApiRecord(3, 1)], [])
    assert got == [(9, "early", 1)]


def test_launch_waits_for_its_kernel_and_counts_as_waiting():
    got, att = collect()
    att.add_buffer([ExternalRecord(4, 2)], [ApiRecord(4, 1)], [])
    assert att.waiting_kernels == 1
    att.add_buffer([], [], [KernelRecord(4, "k", 0, 2, 3)])
    assert got == [(2, "k", 1)] and att.waiting_kernels == 0


def test_graph_launch_feeds_all_its_kernels_to_one_path():
    got, att = collect()
    att.add_buffer([ExternalRecord(5, 11)], [ApiRecord(5, 1, graph=True)],
                   [KernelRecord(5, f"g{i}", 0, i, i + 1) for i in range(3)])
    att.add_buffer([], [], [KernelRecord(5, "g3", 0, 4, 5)])
    assert [g[:2] for g in got] == [(11, "g0"), (11, "g1"), (11, "g2"), (11, "g3")]
    assert att.waiting_kernels == 0  # graph launches are not waited for
    att.add_buffer([], [], [KernelRecord(99, "later", 0, 61_000_000_000, 61_000_000_001)])
    assert not att._graphs  # forgotten once kernels a minute younger came


def test_finish_gives_orphan_kernels_to_root_and_empties_the_maps():
    got, att = collect()
    att.add_buffer([ExternalRecord(6, 3)], [], [KernelRecord(6, "o", 0, 50, 60)])
    assert att.finish() == 1
    assert got == [(3, "o", 50)]
    assert not (att.external or att._launches or att._early or att._graphs)


def test_matched_records_leave_nothing_behind():
    got, att = collect()
    for corr in range(1000):
        att.add_buffer([ExternalRecord(corr, 1)], [ApiRecord(corr, corr)],
                       [KernelRecord(corr, "k", 0, corr, corr + 1)])
    assert len(got) == 1000
    assert not (att.external or att._launches or att._early)


def test_replayed_h100_records_rebuild_the_recorded_tree():
    """tests/data/cupti_records.json: tests/data/record_session.py's CUPTI records on an H200."""
    with open(os.path.join(DATA, "cupti_records.json")) as f:
        recorded = json.load(f)
    frames = recorded["frames"]

    def path_names(pid):
        names = []
        while pid > 0:
            names.append(frames[pid][1])
            pid = frames[pid][0]
        return tuple(reversed(names))

    counts, times = Counter(), Counter()

    def sink(path, rec, ts):
        counts[path_names(path) + (rec.name,)] += 1
        times[path_names(path) + (rec.name,)] += rec.end - rec.start

    att = Attributor(each(sink))
    for ext, api, kernels in recorded["buffers"]:
        att.add_buffer([ExternalRecord(*r) for r in ext], [ApiRecord(*r) for r in api],
                       [KernelRecord(*r) for r in kernels])
    assert att.finish() == 0 and att.waiting_kernels == 0
    assert counts[("step", "triton", "scale_kernel")] == 20
    assert counts[("worker", "scale_kernel")] == 10
    assert counts[("scale_kernel",)] == 1
    assert counts[("step", "scale_kernel")] == 3  # launched while deactivated: the session drops them
    torch_kernels = {k: v for k, v in counts.items() if k[:2] == ("step", "torch")}
    assert sum(torch_kernels.values()) == 15  # 5 x (2 GEMM kernels + softmax)
    # The same run's own profile agrees, kernel by kernel (it dropped the deactivated three).
    root, _ = load(os.path.join(DATA, "recorded.hatchet"))
    for key, n in counts.items():
        if key == ("step", "scale_kernel"):
            continue
        node = find(root, *key)
        assert node["metrics"]["count"] == n
        assert node["metrics"]["time (ns)"] == times[key]


def test_unscoped_launch_from_a_helper_thread_takes_the_main_threads_scope():
    from proton.runtime.timeline import MainTimeline

    timeline = MainTimeline()
    timeline.entries[:] = [(10, 5), (20, 6), (30, 0)]
    # CUPTI gives the low 32 bits of the thread id; the main thread itself gets here in a
    # scope it opened before CUPTI started (nothing pushed): the timeline has it too
    assert timeline.unscoped(timeline.main_thread & 0xFFFFFFFF, 25) == 6
    assert timeline.unscoped(timeline.main_thread & 0xFFFFFFFF, 35) == ROOT
    assert timeline.unscoped(1234, 5) == ROOT
    assert timeline.unscoped(1234, 15) == 5
    assert timeline.unscoped(1234, 25) == 6
    assert timeline.unscoped(1234, 35) == ROOT
    old = timeline.entries
    timeline.forget_before(12)
    assert timeline.entries == [(10, 5), (20, 6), (30, 0)]  # (10, 5) is current at 12
    timeline.forget_before(25, keep=1)
    assert timeline.entries == [(30, 0)] and len(old) == 3  # replaced, never cut in place
    timeline.entries[:] = [(10, 5), (20, 6), (30, 0)]
    got, att = [], Attributor(each(lambda p, r, ts: got.append(p)), timeline.unscoped)
    att.add_buffer([], [ApiRecord(1, 22, False, 1234)], [KernelRecord(1, "k", 0, 23, 24)])
    assert got == [6]


def test_records_are_read_from_the_bindings_own_struct_layout():
    """The collector reads a raw CUPTI buffer with cupti-python's numpy dtypes for the record
    layouts: lay records out as CUPTI does and read their fields back."""
    import ctypes

    import numpy as np
    from cupti import cupti

    from proton.cupti.pipeline import field_reader

    api = np.zeros(2, dtype=cupti.activity_api_dtype)
    api["kind"], api["cbid"], api["start"] = int(cupti.ActivityKind.DRIVER), 7, 123456789012
    api["thread_id"], api["correlation_id"] = 55, [98, 99]
    # records at offsets 24 and 24 + size of a buffer, as CUPTI lays them out
    buffer = np.frombuffer(b"\0" * 24 + api.tobytes(), dtype=np.uint8)
    at = np.array([24, 24 + api.dtype.itemsize])
    corr, start, cbid, thread = field_reader(
        cupti.activity_api_dtype, ["correlation_id", "start", "cbid", "thread_id"])(buffer, at)
    assert corr.tolist() == [98, 99] and start.tolist() == [123456789012] * 2
    assert cbid.tolist() == [7, 7] and thread.tolist() == [55, 55]
    (kind,) = field_reader(cupti.activity_api_dtype, ["kind"])(buffer, at[:1])
    assert kind.tolist() == [int(cupti.ActivityKind.DRIVER)]
    # a record at an offset that is not 8-byte aligned is still read right (byte by byte)
    odd = np.frombuffer(b"\0" * 3 + api.tobytes()[: api.dtype.itemsize], dtype=np.uint8)
    corr, start = field_reader(cupti.activity_api_dtype, ["correlation_id", "start"])(
        odd, np.array([3]))
    assert corr.tolist() == [98] and start.tolist() == [123456789012]

    name = ctypes.create_string_buffer(b"matmul_kernel")
    kern = np.zeros(1, dtype=cupti.activity_kernel10_dtype)
    kern["correlation_id"], kern["name"], kern["device_id"] = 5, ctypes.addressof(name), 1
    kern["start"], kern["end"], kern["stream_id"] = 10, 30, 7
    fields = field_reader(cupti.activity_kernel10_dtype,
                          ["correlation_id", "name", "device_id", "start", "end", "stream_id"])(
        np.frombuffer(kern.tobytes(), dtype=np.uint8), np.array([0]))
    corr, name_ptr, device, start, end, stream = (f.tolist()[0] for f in fields)
    assert (corr, ctypes.string_at(name_ptr), device, start, end, stream) == \
        (5, b"matmul_kernel", 1, 10, 30, 7)


def test_only_successful_launch_calls_wait_for_a_kernel():
    """A raw buffer as CUPTI fills it: API records of a non-launch call and of a failed launch
    must not be held as launches (they would keep every flush waiting for kernels)."""
    import ctypes

    import numpy as np
    from cupti import cupti

    from proton.cupti.collector import CollectorSettings, CuptiCollector

    got = []
    collector = CuptiCollector(CollectorSettings(
        each(lambda path, rec, ts: got.append((path, rec.name))), native=False))
    launch = next(c for c, n in collector._driver_cbids.items() if n == "cuLaunchKernel")
    other = max(collector._all_driver) - 1  # not a launch call
    api = np.zeros(3, dtype=cupti.activity_api_dtype)
    api["kind"] = int(cupti.ActivityKind.DRIVER)
    api["correlation_id"], api["cbid"], api["return_value"] = [1, 2, 3], [launch, other, launch], \
        [0, 0, 1]
    ext = np.zeros(1, dtype=cupti.activity_external_correlation_dtype)
    ext["kind"], ext["correlation_id"] = int(cupti.ActivityKind.EXTERNAL_CORRELATION), 1
    ext["external_kind"], ext["external_id"] = int(cupti.ExternalCorrelationKind.CUSTOM2), 7
    name = ctypes.create_string_buffer(b"k")
    kern = np.zeros(1, dtype=cupti.activity_kernel10_dtype)
    kern["kind"], kern["correlation_id"] = int(cupti.ActivityKind.CONCURRENT_KERNEL), 1
    kern["name"], kern["start"], kern["end"] = ctypes.addressof(name), 5, 9
    parts = [ext.tobytes(), api.tobytes(), kern.tobytes()]
    offsets = [0] + [len(parts[0]) + i * api.dtype.itemsize for i in range(3)] + \
        [len(parts[0]) + len(parts[1])]
    collector.pipeline.read_records(np.frombuffer(b"".join(parts), dtype=np.uint8), offsets)
    assert collector.callback_errors == []
    assert got == [(7, "k")]
    assert collector.attributor.launches == 1 and collector.attributor.waiting_kernels == 0


def test_our_libcupti_is_the_one_of_cupti_pythons_major_version(tmp_path):
    import pytest

    from proton.cupti.buffers import loaded_libcupti

    maps = tmp_path / "maps"
    triton = "7f00-7f01 r-xp 0 0 0 /x/triton/backends/nvidia/lib/cupti/libcupti.so.12\n"
    ours = "7f02-7f03 r-xp 0 0 0 /x/nvidia/cu13/lib/libcupti.so.13 (deleted)\n"
    maps.write_text(triton + ours + ours)
    assert loaded_libcupti(str(maps)) == "/x/nvidia/cu13/lib/libcupti.so.13"
    maps.write_text(triton)
    assert loaded_libcupti(str(maps)).endswith("libcupti.so.12")  # the only one: use it
    maps.write_text(triton + ours.replace("/x/", "/y/") + ours)
    with pytest.raises(OSError, match="several libcupti"):
        loaded_libcupti(str(maps))
    maps.write_text("")
    assert loaded_libcupti(str(maps)) is None


def test_each_kernel_nodes_launch_configuration_is_recorded():
    """Kernel records with their grid, block, registers and shared memory, as CUPTI lays them
    out, read into the session and written as the node's own metrics: the configuration with
    the most GPU time, and how many there were when launches differed."""
    import ctypes

    import numpy as np
    from cupti import cupti

    from proton.cupti.collector import CollectorSettings, CuptiCollector
    from proton.data import document
    from proton.data.paths import SCOPE, paths
    from proton.runtime.router import KernelRouter
    from proton.runtime.session import Session

    session = Session(1, "t", "/dev/null", "shadow", "tree", None)
    session.intervals.append([0, -1])
    router = KernelRouter({1: session})
    collector = CuptiCollector(CollectorSettings(router.on_kernels, native=False))
    launch = next(c for c, n in collector._driver_cbids.items() if n == "cuLaunchKernel")
    scope = paths.intern(ROOT, "launch_config_scope", SCOPE)
    name = ctypes.create_string_buffer(b"conv")
    n = 3
    ext = np.zeros(n, dtype=cupti.activity_external_correlation_dtype)
    ext["kind"], ext["correlation_id"] = int(cupti.ActivityKind.EXTERNAL_CORRELATION), [1, 2, 3]
    ext["external_kind"], ext["external_id"] = int(cupti.ExternalCorrelationKind.CUSTOM2), scope
    api = np.zeros(n, dtype=cupti.activity_api_dtype)
    api["kind"], api["cbid"], api["correlation_id"] = int(cupti.ActivityKind.DRIVER), launch, \
        [1, 2, 3]
    api["start"] = [10, 20, 30]
    kern = np.zeros(n, dtype=cupti.activity_kernel10_dtype)
    kern["kind"], kern["correlation_id"] = int(cupti.ActivityKind.CONCURRENT_KERNEL), [1, 2, 3]
    kern["name"], kern["start"], kern["end"] = ctypes.addressof(name), [11, 21, 31], \
        [12, 22, 131]
    # launches 1 and 2: a 16x8 grid of 256 threads; launch 3 (100 ns, the most): 528 x 1 x 1
    kern["grid_x"], kern["grid_y"], kern["grid_z"] = [16, 16, 528], [8, 8, 1], 1
    kern["block_x"], kern["block_y"], kern["block_z"] = [128, 128, 256], [2, 2, 1], 1
    kern["registers_per_thread"] = [64, 64, 40]
    kern["static_shared_memory"], kern["dynamic_shared_memory"] = [1024, 1024, 0], \
        [0, 0, 49152]
    parts = [ext.tobytes(), api.tobytes(), kern.tobytes()]
    offsets, at = [], 0
    for part, dtype in zip(parts, (ext.dtype, api.dtype, kern.dtype)):
        offsets += [at + i * dtype.itemsize for i in range(n)]
        at += len(part)
    collector.pipeline.read_records(np.frombuffer(b"".join(parts), dtype=np.uint8), offsets)
    assert collector.callback_errors == []
    node = router.kernel_path(scope, "conv", 0)
    assert session.nodes[node]["count"] == 3
    configs = collector.launch_configs
    shapes = {configs.get(c): ns for c, ns in session.launch[node].items()}
    assert shapes == {(128, 256, 64, 1024): 2, (528, 256, 40, 49152): 100}
    best = max(session.launch[node], key=session.launch[node].get)
    own = dict(zip(("grid_blocks", "block_threads", "registers_per_thread",
                    "shared_memory_bytes"), configs.get(best)), launch_configs=2)
    doc = document.build(session.nodes, {}, own={node: own})
    written = next(c for c in doc[0]["children"] if c["frame"]["name"] == "launch_config_scope")
    metrics = written["children"][0]["metrics"]
    assert (metrics["grid_blocks"], metrics["block_threads"], metrics["registers_per_thread"],
            metrics["shared_memory_bytes"], metrics["launch_configs"]) == (528, 256, 40, 49152, 2)
    assert "grid_blocks" not in doc[0]["metrics"]  # the node's own, not summed up the tree


def test_graph_kernels_go_under_where_their_node_was_captured():
    from proton.data.paths import paths
    from proton.format import CAPTURED_AT
    from proton.runtime.router import KernelRouter

    router = KernelRouter({})
    replay = paths.intern(ROOT, "graph_replay")
    captured = paths.intern(paths.intern(ROOT, "model"), "captured_region")
    got = []
    att = Attributor(each(lambda path, rec, ts: got.append((paths.names(path), rec.name))),
                     graft=router.graft)
    att.captured[77] = captured
    att.add_buffer([ExternalRecord(5, replay)], [ApiRecord(5, 1, graph=True)],
                   [KernelRecord(5, "seen", 0, 2, 3, graph_node=77),
                    KernelRecord(5, "unseen", 0, 3, 4, graph_node=99)])
    # a kernel before its graph launch's record: placed the same way when the record comes
    att.add_buffer([], [], [KernelRecord(6, "early", 0, 5, 6, graph_node=77)])
    att.add_buffer([ExternalRecord(6, replay)], [ApiRecord(6, 4, graph=True)], [])
    under = ["graph_replay", CAPTURED_AT, "model", "captured_region"]
    assert got == [(under, "seen"), (["graph_replay"], "unseen"), (under, "early")]
    grafted = router.graft(replay, captured)
    assert router.graft(replay, captured) == grafted and paths.names(grafted) == under


def test_launches_inside_a_stream_capture_are_not_waited_for():
    got, att = collect()
    att.capturing[7] = [[100, 200], [500, -1]]  # thread 7: one capture done, one still open
    att.add_buffer([ExternalRecord(1, 3), ExternalRecord(2, 3), ExternalRecord(3, 3)],
                   [ApiRecord(1, 150, thread_id=7), ApiRecord(2, 300, thread_id=7),
                    ApiRecord(3, 600, thread_id=7), ApiRecord(4, 150, thread_id=8)], [])
    assert att.waiting_kernels == 2 and att.captured_launches == 2  # 2 (between) and 4 (thread 8)
    assert not att.external  # their external records are dropped too
    assert att.in_capture(7, 700) and not att.in_capture(7, 250) and not att.in_capture(8, 150)
