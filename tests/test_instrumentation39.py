"""backend="instrumentation" under Triton 3.9 without a GPU: kernels with events (and a
warp-specialised Gluon kernel) compiled for sm_90 in a session, the record bits and layout read
off the LLIR Triton's compiler emits, and buffers built to those facts replayed into the tree
and the trace as a launch's would be. Skipped under Triton 3.6, which has no event ops (run
these with /work/venv39/bin/python, or any python with triton 3.9.0)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

triton = pytest.importorskip("triton")
from triton._C.libtriton import proton as _tp  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(_tp, "create_proton_allocate_event"),
                                reason="Triton 3.9's event ops (this Triton has none)")

import triton.language as tl  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier  # noqa: E402

import proton.language as pl  # noqa: E402
from proton.data import intra  # noqa: E402
from proton.data.metrics import base_name  # noqa: E402
from proton.data.paths import paths  # noqa: E402
from proton.data.chrome_trace import build_trace  # noqa: E402


@triton.jit
def mixed(x_ptr, n, BLOCK: tl.constexpr):
    pl.enter_scope("kernel")
    first = pl.allocate_event("first")
    second = pl.allocate_event("second")
    pl.start_event(first)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("load"):
        x = tl.load(x_ptr + offs, mask=offs < n)
    pl.start_event(second)
    pl.end_event(first)
    pl.exit_scope("kernel")
    pl.end_event(second)
    tl.store(x_ptr + offs, x + 1, mask=offs < n)


import triton.profiler.language as tpl  # noqa: E402


@triton.jit
def mixed_theirs(x_ptr, n, BLOCK: tl.constexpr):
    """`mixed` written with Triton's own triton.profiler.language."""
    tpl.enter_scope("kernel")
    first = tpl.allocate_event("first")
    second = tpl.allocate_event("second")
    tpl.start_event(first)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with tpl.scope("load"):
        x = tl.load(x_ptr + offs, mask=offs < n)
    tpl.start_event(second)
    tpl.end_event(first)
    tpl.exit_scope("kernel")
    tpl.end_event(second)
    tl.store(x_ptr + offs, x + 1, mask=offs < n)


@triton.jit
def one_event(x_ptr):
    value = tl.load(x_ptr)
    event = pl.allocate_event("async")
    pl.start_event(event)
    value += 1
    pl.end_event(event)
    tl.store(x_ptr, value)


@gluon.jit
def _consumer(barrier, event):
    mbarrier.wait(barrier, phase=0)
    pl.end_event(event)


@gluon.jit
def _producer(barrier, event):
    pl.start_event(event)
    mbarrier.arrive(barrier, count=1)


@gluon.jit
def handed_over():
    barrier = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(barrier, count=1)
    event = pl.allocate_event("warp_specialized")
    gl.warp_specialize([(_consumer, (barrier, event)), (_producer, (barrier, event))], [4],
                       [24])


def _source(fn):
    if fn is handed_over:
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(fn, {}, {})
    if fn is one_event:
        return triton.compiler.ASTSource(fn, {"x_ptr": "*i32"}, {})
    return triton.compiler.ASTSource(fn, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                                     {"BLOCK": 256})


def _compile(fn, num_warps=4):
    from triton.backends.compiler import GPUTarget

    return triton.compile(_source(fn), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "instrumentation_mode":
                                   triton.knobs.compilation.instrumentation_mode})


@pytest.fixture
def session(tmp_path):
    """Kernels compile instrumented (as in a session of ours) while the fixture lives."""
    import proton

    pl.enable_semantic("triton")
    proton.start(str(tmp_path / "compiling"), backend="instrumentation")
    try:
        yield tmp_path
    finally:
        proton.finalize()
        pl.disable_semantic("triton")


def _kernel_info(kernel, tmp_path):
    """What the runtime's load hook keeps of a compiled kernel (its scope table from the
    TTGIR the compiler wrote)."""
    from proton.runtime.instrumentation import KernelInfo, scope_table

    ttgir = tmp_path / f"{kernel.name}.ttgir"
    ttgir.write_text(kernel.asm["ttgir"])
    names, parents = scope_table(str(ttgir))
    md = kernel.metadata
    return KernelInfo(kernel.name, md.profile_scratch_size, md.num_warps, names, parents)


def _tags(llir: str) -> set[int]:
    """The record tags the LLIR stores: constants or-ed into the clock's high bits."""
    consts = {int(c) & 0xFFFFFFFF for c in re.findall(r"or disjoint i32 %\w+, (-?\d+)", llir)}
    return {c for c in consts if c & 0x7FF == 0 and c >> 22}


def _fields(tag: int) -> tuple[int, int, int]:
    """(end, id, event) as data/intra reads a tag."""
    return tag >> 31, (tag >> 23) & 0xFF, (tag >> intra.EVENT_BIT) & 1


def test_the_compiler_writes_the_event_bit_and_ids_the_decoder_reads(session):
    kernel = _compile(mixed)
    names, _ = _scope_names(kernel, session)
    ids = {name: sid for sid, name in names.items()}
    assert set(ids) == {"kernel", "load", "first", "second"}
    expected = {(0, ids["first"], 1), (1, ids["first"], 1), (0, ids["second"], 1),
                (1, ids["second"], 1), (0, ids["load"], 0), (1, ids["load"], 0),
                (1, ids["kernel"], 0)}  # the kernel's start is the tag 0 (no constant or-ed)
    assert ids["kernel"] == 0
    assert {_fields(t) for t in _tags(kernel.asm["llir"])} == expected
    assert "proton.allocate_event" in kernel.asm["ttir"]


def test_proton_language_emits_what_tritons_own_module_does(session):
    """The same kernel written with proton.language and with triton.profiler.language,
    compiled in our session: the same proton ops, buffer and record tags."""
    tpl.enable_semantic("triton")
    try:
        ours, theirs = _compile(mixed), _compile(mixed_theirs)
    finally:
        tpl.disable_semantic("triton")

    def ops(kernel):
        return [re.sub(r" loc\(.*", "", line.strip()) for line in kernel.asm["ttir"].splitlines()
                if "proton." in line]

    assert ops(ours) == ops(theirs) and len(ops(ours)) == 10
    assert _tags(ours.asm["llir"]) == _tags(theirs.asm["llir"])
    assert ours.metadata.profile_scratch_size == theirs.metadata.profile_scratch_size


def _scope_names(kernel, tmp_path):
    info = _kernel_info(kernel, tmp_path)
    return info.scope_names, info.scope_parents


def _replay(kernel, tmp_path, blocks, data: str):
    """`blocks` (intra.encode's) decoded as one launch of `kernel` would be read from the
    arena: the tree's scope metrics, or the trace's events."""
    from proton import mode
    from proton.runtime.instrumentation import Instrumentation

    info = _kernel_info(kernel, tmp_path)
    seg = int(re.search(r"store i32 (\d+), ptr addrspace\(1\) %\w+, align 4", _finalizer(
        kernel.asm["llir"]))[1])  # the segments' bytes, as the kernel writes them at byte 12
    buf = np.frombuffer(intra.encode(blocks, info.scratch, info.num_warps, seg), np.uint8)
    inst = Instrumentation(mode.Default(), {0: 1_000_000})
    inst.keep_spans = data == "trace"
    node = paths.intern(0, kernel.name, "kernel0")
    inst._read_kernel(info, buf, [(1, 0, buf.size, node, 0, 0, 0)])
    if data == "trace":
        return build_trace([], [], None, inst.trace_spans([]))["traceEvents"]
    return {paths.frames[scope].name: {base_name(k): v for k, v in stats.metrics(0).items()}
            for (_, scope), stats in inst.stats.items()}


def _finalizer(llir: str) -> str:
    """The LLIR from the store of the segments' size (at byte 12 of the CTA's block) on."""
    at = llir.index("i64 12")
    return llir[at:]


def test_an_event_in_one_warp_is_a_node_and_a_span_as_tritons_test_event_reads_them(session):
    """Triton's test_event, replayed: the event's node has cycles; the trace holds one span
    for it, with a length and no flow; every span carries the CTA's times."""
    kernel = _compile(one_event, num_warps=1)
    names, _ = _scope_names(kernel, session)
    assert names == {0: "async"} and kernel.metadata.num_warps == 1
    blocks = [{"pid": 0, "sm": 3, "init_ns": 5000, "final_ns": 9000, "post_ns": 9400,
               "warps": {0: [(0, 0, 1000, 1), (1, 0, 1250, 1)]}}]
    tree = _replay(kernel, session, blocks, "tree")
    assert tree["async"]["cycles"] == 250 and tree["async"]["warp_events"] == 1
    events = _replay(kernel, session, blocks, "trace")
    assert [(e["name"], e["ph"], e["dur"], e["cat"]) for e in events] == [
        ("async", "X", 0.25, "async")]
    assert "bind_id" not in events[0]
    # Triton 3.9 keeps the CTA's times for scopes: an event's args are its call path (and
    # ours, its cycles)
    assert events[0]["args"] == {"call_stack": ["ROOT", "one_event"], "cycles": 250}


def test_a_warp_specialized_events_layout_and_its_flows(session):
    """Triton's test_gluon_warp_specialized_event, replayed: the kernel's 4 + 4 warps each
    have a counter and a segment (metadata num_warps 8, segments after the 18-word header);
    the producer partition's 4 starts and the consumer's 4 ends make 4 flows, each from a
    producer warp to a consumer warp, forwards in time, with no length."""
    kernel = _compile(handed_over)
    md = kernel.metadata
    assert md.num_warps == 8 and md.profile_scratch_size == 8192 + 128
    llir = kernel.asm["llir"]
    # the copy-out writes each warp's records after the header and 8 counters (word 18 on)
    assert re.search(r"or disjoint i32 %\w+, 18\b", llir)
    assert {_fields(t) for t in _tags(llir)} == {(0, 0, 1), (1, 0, 1)}
    blocks = [{"pid": 0, "sm": 7, "init_ns": 100, "final_ns": 900, "post_ns": 950,
               "warps": {**{w: [(0, 0, 1000 + w, 1)] for w in range(4, 8)},
                         **{w: [(1, 0, 1400 + 10 * w, 1)] for w in range(4)}}}]
    events = _replay(kernel, session, blocks, "trace")
    assert {e["name"] for e in events} == {"warp_specialized"}
    links: dict = {}
    for e in events:
        assert e["ph"] == "X" and e["dur"] == 0 and "bind_id" in e
        links.setdefault(e["bind_id"], []).append(e)
    assert len(links) == 4
    for ends in links.values():
        out = next(e for e in ends if e.get("flow_out"))
        into = next(e for e in ends if e.get("flow_in"))
        assert out["tid"] != into["tid"] and out["ts"] <= into["ts"]
        assert int(out["tid"].split()[1]) >= 4 > int(into["tid"].split()[1])
    tree = _replay(kernel, session, blocks, "tree")
    # each pair's cycles: end - start (1400 + 10 w) - (1000 + 4 + w) for w = 0..3
    assert tree["warp_specialized"]["cycles"] == sum(396 + 9 * w for w in range(4))


def test_an_event_kernel_compiles_outside_a_session_too():
    """Off, an event is an i32 constant and its records nothing: the warp-specialised kernel
    compiles as it would without them (Triton 3.9's own module fails to, handing None to the
    partitions)."""
    kernel = _compile(handed_over)
    assert kernel.metadata.profile_scratch_size == 0
    assert "proton" not in kernel.asm["ttgir"]


def test_events_in_a_triton_kernel_need_the_semantic_enabled(session):
    pl.disable_semantic("triton")  # the session's fixture enabled it
    with pytest.raises(Exception, match=r"event in a TritonSemantic kernel: call "
                                        r"proton.language.enable_semantic\('triton'\)"):
        _compile(one_event)
    pl.enable_semantic("triton")


def test_the_passes_are_registered_with_triton_only_while_the_session_lives(tmp_path):
    """Triton 3.9 takes them through triton._instrumentation.register_instrumentation; a
    second registrant (Triton's own Proton) finds the points taken, and ours says so."""
    import proton
    from triton import _instrumentation

    from proton.errors import SessionError

    points = ("load-dialects", "ttgpuir-to-llvmir", "llvmir-to-llvm")
    proton.start(str(tmp_path / "run"), backend="instrumentation")
    try:
        assert all((p, "nvidia") in _instrumentation._callbacks for p in points)
        with pytest.raises(RuntimeError, match="already registered"):
            _instrumentation.register_instrumentation(point="ttgpuir-to-llvmir",
                                                      backend="nvidia", callback=print)
    finally:
        proton.finalize()
    assert not any((p, "nvidia") in _instrumentation._callbacks for p in points)
    _instrumentation.register_instrumentation(point="llvmir-to-llvm", backend="nvidia",
                                              callback=print)
    try:
        with pytest.raises(SessionError, match="'llvmir-to-llvm' is taken"):
            proton.start(str(tmp_path / "refused"), backend="instrumentation")
        assert not any((p, "nvidia") in _instrumentation._callbacks for p in points[:2])
    finally:
        _instrumentation.unregister_instrumentation(point="llvmir-to-llvm", backend="nvidia")


def test_the_trace_file_of_replayed_events_opens_as_json(tmp_path, session):
    """The flows' keys are plain JSON (Perfetto's flow events v2: bind_id, flow_in/out)."""
    kernel = _compile(handed_over)
    blocks = [{"pid": 0, "sm": 0, "warps": {4: [(0, 0, 10, 1)], 0: [(1, 0, 20, 1)]}}]
    events = _replay(kernel, session, blocks, "trace")
    back = json.loads(json.dumps(events))
    assert [(e.get("flow_out"), e.get("flow_in")) for e in back] == [(True, None), (None, True)]


@triton.jit
def stepped(x_ptr, STEPS: tl.constexpr):
    """The events of tests/intra_events_workload.py's `stepped`: one over each of the loop's
    steps, one around them all."""
    whole = pl.allocate_event("whole")
    step = pl.allocate_event("step")
    pl.start_event(whole)
    for i in tl.static_range(STEPS):
        pl.start_event(step)
        tl.store(x_ptr + i, i)
        pl.end_event(step)
    pl.end_event(whole)


def _layout(events: list[dict]) -> list[tuple]:
    """What Triton 3.9's trace of the events workload shows of each event (read off its file
    recorded on an H200): name, cat, cname, process, thread, flow end, args' keys."""
    return [(e["name"], e["cat"], e.get("cname"), e["pid"], e["tid"],
             "out" if e.get("flow_out") else "in" if e.get("flow_in") else None,
             sorted(e["args"])) for e in events]


def test_the_events_workloads_trace_is_laid_out_as_triton_39s(session):
    """The events workload (tests/intra_events_workload.py) replayed under the installed
    Triton (3.9), as its trace on an H200 under Triton 3.9's Proton lays it out: each warp's
    events "cat": "async", `whole` coloured "cq_build_passed" and `step` "cq_build_failed"
    (the order Triton's writer meets them in), `whole` on line 0 and the steps on line 1;
    the handed-over event's ends "cat": "flow", "cq_build_passed" (its kernel's first), on
    line 0 of the worker warp (out) then of the default one (in)."""
    kernel = _compile_stepped()
    names, _ = _scope_names(kernel, session)
    ids = {name: sid for sid, name in names.items()}
    whole, step = ids["whole"], ids["step"]
    warps = {w: [(0, whole, 100 + w, 1), (0, step, 120 + w, 1), (1, step, 180 + w, 1),
                 (0, step, 200 + w, 1), (1, step, 260 + w, 1), (0, step, 280 + w, 1),
                 (1, step, 340 + w, 1), (1, whole, 400 + w, 1)] for w in range(2)}
    events = _replay(kernel, session, [{"pid": 2, "sm": 124, "warps": warps}], "trace")
    stack = ["call_stack", "cycles"]
    assert _layout(events) == [
        (name, "async", colour, "stepped Core124 CTA2", f"warp {w} (line {line})", None, stack)
        for w in range(2) for name, colour, line in
        [("whole", "cq_build_passed", 0)] + [("step", "cq_build_failed", 1)] * 3]
    handed = _compile(handed_over)
    blocks = [{"pid": 0, "sm": 124, "warps": {**{w: [(0, 0, 1000 + w, 1)] for w in (4, 5)},
                                              0: [(1, 0, 1400, 1)], 1: [(1, 0, 1410, 1)]}}]
    flows = _replay(handed, session, blocks, "trace")
    assert _layout(flows) == [
        ("warp_specialized", "flow", "cq_build_passed", "handed_over Core124 CTA0",
         f"warp {w} (line 0)", end, stack) for w, end in ((4, "out"), (0, "in"), (5, "out"),
                                                           (1, "in"))]
    assert [e["bind_id"] for e in flows] == [1, 1, 2, 2]


def _compile_stepped():
    from triton.backends.compiler import GPUTarget

    source = triton.compiler.ASTSource(stepped, {"x_ptr": "*i32", "STEPS": "constexpr"},
                                       {"STEPS": 3})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": 2, "instrumentation_mode":
                                   triton.knobs.compilation.instrumentation_mode})


def test_scopes_beside_events_keep_the_kernels_cat_and_take_colours_first(session):
    """A kernel of scopes and events (`mixed`) replayed under Triton 3.9: the scopes' spans
    "cat" the kernel's name with the CTA's times in args, the events "cat" "async", all
    coloured in turn as they start (kernel, first, load, second); the plain scope trace
    changes by its colours alone."""
    kernel = _compile(mixed)
    names, _ = _scope_names(kernel, session)
    ids = {name: sid for sid, name in names.items()}
    records = [(0, ids["kernel"], 100, 0), (0, ids["first"], 105, 1), (0, ids["load"], 110, 0),
               (1, ids["load"], 150, 0), (0, ids["second"], 160, 1), (1, ids["first"], 170, 1),
               (1, ids["kernel"], 180, 0), (1, ids["second"], 190, 1)]
    events = _replay(kernel, session, [{"pid": 0, "sm": 1, "warps": {0: records}}], "trace")
    got = [(e["name"], e["cat"], e["cname"], e["tid"]) for e in events]
    # one line set for the warp, by start: kernel, first, load (after first: line 2), second
    assert got == [("kernel", "mixed", "cq_build_passed", "warp 0 (line 0)"),
                   ("load", "mixed", "thread_state_iowait", "warp 0 (line 2)"),
                   ("first", "async", "cq_build_failed", "warp 0 (line 1)"),
                   ("second", "async", "thread_state_running", "warp 0 (line 2)")]
    assert "Init Time (ns)" in events[0]["args"] and "Init Time (ns)" not in events[2]["args"]
