"""backend="instrumentation" without a GPU: the buffer decoder on buffers built by hand (and on
one recorded on an H100, when present), the modes, the compiler hook (Triton compiles for
sm_90 here), and the tree and trace made from decoded launches."""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pytest

from proton.data import intra
from proton.data.metrics import base_name
from proton.data.paths import paths
from proton.data.chrome_trace import WarpSpan, build_trace
from proton.errors import SessionError
from proton.options import parse_options

triton = pytest.importorskip("triton")
SEG = 1024  # bytes of per-warp segments per CTA
SCRATCH = 2048


def block(pid, sm, warps, init_ns=0):
    return {"pid": pid, "sm": sm, "init_ns": init_ns, "warps": warps}


def test_nested_scopes_pair_per_warp_and_cta():
    buf = intra.encode([block(0, 3, {0: [(0, 0, 100), (0, 1, 110), (1, 1, 150), (1, 0, 200)],
                                     1: [(0, 0, 105), (1, 0, 300)]}),
                        block(1, 7, {0: [(0, 0, 10), (1, 0, 25)]})], SCRATCH, 2, SEG)
    d = intra.decode(buf, SCRATCH, 2)
    got = sorted(zip(d.block.tolist(), d.sm.tolist(), d.warp.tolist(), d.scope.tolist(),
                     d.cycles.tolist()))
    assert got == [(0, 3, 0, 0, 100), (0, 3, 0, 1, 40), (0, 3, 1, 0, 195), (1, 7, 0, 0, 15)]
    assert d.dropped == 0 and not d.unbalanced and not d.reordered and d.bad_blocks == 0


def test_unbalanced_records_are_left_out_and_counted():
    buf = intra.encode([block(0, 0, {0: [(0, 2, 1), (0, 2, 5), (1, 2, 9), (1, 3, 4)]})],
                       SCRATCH, 2, SEG)
    d = intra.decode(buf, SCRATCH, 2)
    assert d.cycles.tolist() == [4]  # the second start with the end: the first has no end
    assert d.unbalanced == {2: 1, 3: 1}


def test_an_end_before_its_start_is_reported_not_paired():
    buf = intra.encode([block(0, 0, {0: [(0, 1, 500), (1, 1, 400)]})], SCRATCH, 2, SEG)
    d = intra.decode(buf, SCRATCH, 2)
    assert d.scope.size == 0 and d.reordered == {1: 1}


def test_the_43_bit_clock_wrapping_inside_a_scope():
    top = (1 << 43) - 10
    buf = intra.encode([block(0, 0, {0: [(0, 0, top), (1, 0, 30)]})], SCRATCH, 2, SEG)
    assert intra.decode(buf, SCRATCH, 2).cycles.tolist() == [40]


def test_a_full_segment_keeps_the_newest_records_and_says_what_would_fit():
    per_warp = SEG // 2 // 8  # records a warp's segment holds
    recs = [(k % 2, 0, 10 * k) for k in range(per_warp + 6)]  # 3 more pairs than fit
    d = intra.decode(intra.encode([block(0, 0, {0: recs})], SCRATCH, 2, SEG), SCRATCH, 2)
    assert d.dropped == 6
    assert d.scope.size == per_warp // 2 and not d.unbalanced
    assert d.start.min() == 60  # the three oldest pairs are the ones lost
    assert d.needed_bytes == len(recs) * 8 * 2  # per warp, times the warps


def test_blocks_without_the_preamble_are_skipped_and_counted():
    buf = bytearray(intra.encode([block(0, 0, {0: [(0, 0, 1), (1, 0, 2)]}),
                                  block(1, 0, {0: [(0, 0, 1), (1, 0, 2)]})], SCRATCH, 2, SEG))
    buf[SCRATCH:SCRATCH + 4] = b"\0\0\0\0"
    d = intra.decode(bytes(buf), SCRATCH, 2)
    assert d.bad_blocks == 1 and d.block.tolist() == [0]


def test_another_layout_fails_with_one_line():
    buf = intra.encode([block(0, 0, {0: []})], SCRATCH, 2, SEG)
    with pytest.raises(intra.LayoutError, match="do not fit a 1024-byte block"):
        intra.decode(buf, SCRATCH // 2, 2)  # its segments are longer than the block


RECORDED = os.path.join(os.path.dirname(__file__), "data", "intra", "buffer.npz")


@pytest.mark.skipif(not os.path.exists(RECORDED), reason="recorded on the GPU machine")
def test_a_buffer_recorded_on_an_h100():
    """tests/intra_workload.py's kernel: 8 CTAs x 4 warps, each through kernel > load,
    compute, store once."""
    with np.load(RECORDED) as f:
        d = intra.decode(f["buffer"], int(f["scratch"]), int(f["num_warps"]))
        names = {int(k): v for k, v in json.loads(str(f["names"])).items()}
    assert d.dropped == 0 and not d.unbalanced and not d.reordered and d.bad_blocks == 0
    assert sorted(set(d.block.tolist())) == list(range(8))
    per = {names[s]: int((d.scope == s).sum()) for s in set(d.scope.tolist())}
    assert per == {"kernel": 32, "load": 32, "compute": 32, "store": 32}
    assert (d.cycles > 0).all()
    compute = d.cycles[d.scope == next(s for s, n in names.items() if n == "compute")]
    kernel = d.cycles[d.scope == next(s for s, n in names.items() if n == "kernel")]
    assert np.median(compute) < np.median(kernel)


def test_selective_sampling_records_the_warps_it_names_in_order():
    assert intra.recorded_warps(4) == (0, 1, 2, 3)
    assert intra.recorded_warps(4, "selective", "2, 0,2") == (0, 2)
    assert intra.recorded_warps(4, "selective", "1,9") == (1,)  # no warp 9 in 4
    assert intra.recorded_warps(4, "none", "0,2") == (0, 1, 2, 3)  # not sampling: every warp


def test_the_host_buffer_header_is_tritons():
    """Triton's InstrumentationHook.host_buffer: ten u32 words, the recorded warps, then the
    launch's buffer (the payload offset at bytes 12:16, their number at 36:40)."""
    head = np.frombuffer(intra.host_header(3, 4, 2048, (0, 2), 6144), "<u4").tolist()
    assert head == [1, 4, 48, 48, 6144, 1, 3, 4, 2048, 2, 0, 2]


# -- modes and options ------------------------------------------------------------------------
def test_modes_parse_as_triton_spells_them():
    from proton import mode

    m = parse_options("x", backend="instrumentation", mode="default:buffer_size=4096").instrument
    assert (m.name, m.buffer_size, m.granularity) == ("default", 4096, "warp")
    assert parse_options("x", backend="instrumentation").instrument == mode.Default()
    assert parse_options("x", backend="instrumentation", mode=mode.MMA()).instrument.name == "mma"
    import triton.profiler.mode as tmode

    theirs = parse_options("x", backend="instrumentation",
                           mode=tmode.Default(buffer_size=8192)).instrument
    assert theirs == mode.Default(buffer_size=8192)
    assert str(mode.Default(buffer_size=64)).startswith("default:metric_type=cycle:")


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "instrumentation", "mode": "fast"}, "use 'default' or 'mma'"),
    ({"backend": "instrumentation", "mode": "default:buffer_size=big"}, "give a number"),
    ({"backend": "instrumentation", "mode": "default:granularity=cta"}, "granularity='cta'"),
    ({"mode": "default"}, "not supported"),
])
def test_bad_modes_say_what_is_accepted(kwargs, message):
    with pytest.raises(SessionError, match=message):
        parse_options("x", **kwargs)


def test_sampling_options_must_name_warps():
    from proton import mode

    assert mode.Default(sampling_strategy="selective", sampling_options="0,2").sampling_options \
        == "0,2"
    with pytest.raises(SessionError, match="warp numbers separated by commas"):
        mode.Default(sampling_strategy="selective", sampling_options="0;2")


def test_an_instrumentation_mode_object_needs_the_backend():
    from proton import mode

    with pytest.raises(SessionError, match="backend='instrumentation'"):
        parse_options("x", mode=mode.Default())


def test_triton_pc_sampling_object_keeps_its_cycles():
    from proton import mode

    assert parse_options("x", mode=mode.PCSampling(interval=1024)).pc.interval == 10


def test_another_triton_version_fails_at_start(monkeypatch):
    import proton

    monkeypatch.setattr(triton, "__version__", "3.7.0")
    with pytest.raises(SessionError, match="reads Triton 3.6.0 and 3.9.0's buffers; this is "
                                           "Triton 3.7.0: install triton==3.9.0"):
        proton.start(os.path.join(tempfile.gettempdir(), "never"), backend="instrumentation")


# -- the compiler hook ------------------------------------------------------------------------
def _kernel():
    import triton.language as tl

    import proton.language as pl

    @triton.jit
    def scoped(x_ptr, n, BLOCK: tl.constexpr):
        pl.enter_scope("kernel")
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        with pl.scope("load"):
            x = tl.load(x_ptr + offs, mask=offs < n)
        pl.exit_scope("kernel")
        tl.store(x_ptr + offs, x + 1, mask=offs < n)

    return scoped


def _compile(fn):
    from triton.backends.compiler import GPUTarget

    src = triton.compiler.ASTSource(fn, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                                    {"BLOCK": 256})
    mode = triton.knobs.compilation.instrumentation_mode
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"instrumentation_mode": mode})


@pytest.fixture
def triton_semantic():
    import proton.language as pl

    pl.enable_semantic("triton")
    yield
    pl.disable_semantic("triton")


def test_only_kernels_compiled_in_the_session_are_instrumented(tmp_path, triton_semantic):
    import proton

    from proton.runtime.instrumentation import scope_table

    fn = _kernel()
    before = _compile(fn)
    proton.start(str(tmp_path / "run"), backend="instrumentation", mode="default:buffer_size=2048")
    try:
        inside = _compile(fn)
    finally:
        proton.finalize()
    after = _compile(fn)
    assert before.metadata.profile_scratch_size == 0 == after.metadata.profile_scratch_size
    assert "proton" not in after.asm["ttgir"] and after.asm["cubin"] == before.asm["cubin"]
    # the scopes' records, the buffer (2048 bytes of segments after a 128-byte header)
    assert inside.metadata.profile_scratch_size == 2048 + 128
    ttgir = tmp_path / "k.ttgir"
    ttgir.write_text(inside.asm["ttgir"])
    assert scope_table(str(ttgir)) == ({0: "kernel", 1: "load"}, {1: 0})
    assert not _passes_installed()
    assert triton.knobs.compilation.instrumentation_mode == ""


def _passes_installed() -> bool:
    """Whether Triton would run instrumentation passes now (3.6: the backend's attribute;
    3.9: a callback registered at a point)."""
    from triton.backends import backends

    if hasattr(backends["nvidia"].compiler, "instrumentation"):
        return backends["nvidia"].compiler.instrumentation is not None
    from triton import _instrumentation

    return ("ttgpuir-to-llvmir", "nvidia") in _instrumentation._callbacks


def test_triton_kernels_need_the_semantic_enabled(tmp_path):
    import proton

    fn = _kernel()
    proton.start(str(tmp_path / "run"), backend="instrumentation")
    try:
        with pytest.raises(Exception, match=r"enable_semantic\('triton'\)"):
            _compile(fn)
    finally:
        proton.finalize()


def test_proton_language_has_every_name_tritons_has():
    """What the installed Triton's triton.profiler.language defines (3.9: the events too),
    proton.language defines, so `import proton.language as pl` is a drop-in."""
    import triton.profiler.language as theirs

    import proton.language as ours

    defined = {n for n, v in vars(theirs).items() if not n.startswith("_")
               and getattr(v, "__module__", None) == theirs.__name__}
    assert {"enter_scope", "exit_scope", "scope", "enable_semantic"} <= defined
    assert defined <= set(dir(ours)), defined - set(dir(ours))


def _event_kernel():
    import triton.language as tl

    import proton.language as pl

    @triton.jit
    def evented(x_ptr, n, BLOCK: tl.constexpr):
        done = pl.allocate_event("done")
        pl.start_event(done)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
        pl.end_event(done)

    return evented


@pytest.mark.skipif(hasattr(triton._C.libtriton.proton, "create_proton_allocate_event"),
                    reason="this Triton has the event ops (tests/test_instrumentation39.py)")
def test_events_on_a_triton_without_them_say_which_triton_has_them(tmp_path, triton_semantic):
    import proton

    fn = _event_kernel()
    assert _compile(fn).metadata.profile_scratch_size == 0  # off: the kernel compiles as is
    proton.start(str(tmp_path / "run"), backend="instrumentation")
    try:
        with pytest.raises(Exception, match=r"events need Triton 3\.9's compiler \(this is "
                                            r"Triton 3\.6\.0\)"):
            _compile(fn)
    finally:
        proton.finalize()


# -- decoded launches into the tree and the trace ---------------------------------------------
def test_launches_read_together_sum_per_scope_and_normalise_per_launch():
    from proton.runtime.instrumentation import Instrumentation, KernelInfo
    from proton import mode

    inst = Instrumentation(mode.Default(), {0: 1_000_000})  # 1 GHz: a cycle is a ns
    inst.keep_spans = True
    info = KernelInfo("k", SCRATCH, 2, {0: "outer", 1: "inner"}, {1: 0})
    one = intra.encode([block(0, 1, {0: [(0, 0, 0), (0, 1, 10), (1, 1, 30), (1, 0, 100)],
                                     1: [(0, 0, 0), (1, 0, 50)]}, init_ns=5000)],
                       SCRATCH, 2, SEG)
    two = intra.encode([block(0, 2, {0: [(0, 0, 7), (1, 0, 17)]}),
                        block(1, 3, {1: [(0, 0, 0), (1, 0, 30)]})], SCRATCH, 2, SEG)
    host = np.frombuffer(one + two, np.uint8)
    kernel = paths.intern(0, "k", "kernel0")
    inst._read_kernel(info, host, [(1, 0, SCRATCH, kernel, 0, 0, 0),
                                   (1, SCRATCH, 2 * SCRATCH, kernel, 0, 1, 1)])
    outer = paths.intern(kernel, "outer")
    inner = paths.intern(outer, "inner")
    o, i = ({base_name(k): v for k, v in inst.stats[kernel, scope].metrics(0).items()}
            for scope in (outer, inner))
    assert o["cycles"] == 100 + 50 + 10 + 30 and o["warp_events"] == 4
    # launch 1: 1 CTA x 2 warps; launch 2: 2 CTAs x 2 warps
    assert o["normalized_cycles"] == pytest.approx(150 / 2 + 40 / 4)
    assert (o["warp_cycles_min"], o["warp_cycles_median"], o["warp_cycles_max"]) == (10, 40, 100)
    assert i["cycles"] == 20 and i["device_id"] == "0"
    # spans: from the CTA's init time, a cycle per ns at 1 GHz; without kernel records
    # the clocks are left as they are
    spans = inst.trace_spans([])
    first = sorted((s.origin_ns, s.start_ns, s.dur_ns, s.cycles) for s in spans
                   if s.sm == 1 and s.warp == 0)
    assert first == [(5000, 0.0, 100.0, 100), (5000, 10.0, 20.0, 20)]
    assert {(s.launch, s.kernel_name, s.init_ns) for s in spans if s.sm == 1} == {(0, "k", 5000)}
    # each launch starts with its own CUPTI record (the n-th launch of a node, the n-th record)
    from proton.cupti.attribution import KernelRecord

    recs = [(kernel, KernelRecord(1, "k", 0, 9_000_000, 9_000_500)),
            (kernel, KernelRecord(2, "k", 0, 7_000_000, 7_000_500))]
    inst.clock_khz = {0: 2_000_000}  # 2 GHz: two cycles a ns
    spans = inst.trace_spans(recs)
    by_sm = {sm: sorted(s.origin_ns + s.start_ns for s in spans if s.sm == sm) for sm in (1, 2, 3)}
    assert by_sm[1][0] == 7_000_000  # launch 0 <- the earlier record
    assert by_sm[2] == [9_000_000] == by_sm[3]  # both CTAs of launch 1 (same init time)


def test_a_launchs_buffer_goes_to_the_host_only_while_host_copies_are_on():
    """InstrumentationHook.enable_host_buffer: the launch exit hook is installed only while it
    is on, and puts the launch's slice of the arena, behind Triton's header, in host_buffer."""
    import torch
    from proton.hooks.instrumentation import InstrumentationHook
    from proton.runtime import instrumentation
    from proton import mode

    exits = triton.knobs.runtime.launch_exit_hook
    inst = instrumentation.Instrumentation(mode.Default(), {})
    info = instrumentation.KernelInfo("k", SCRATCH, 4, {0: "s"}, {}, (0, 2))
    inst.kernels[12345] = info
    raw = intra.encode([block(0, 1, {2: [(0, 0, 5), (1, 0, 9)]}),
                        block(1, 2, {0: [(0, 0, 5), (1, 0, 7)]})], SCRATCH, 4, SEG, (0, 2))
    inst.arena = torch.zeros(3 * SCRATCH, dtype=torch.uint8)  # stands for the device arena
    inst.arena[SCRATCH:] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    instrumentation._installed = inst
    try:
        InstrumentationHook.enable_host_buffer = True
        assert inst.exits and inst.on_exit in exits.calls
        inst.last = (12345, SCRATCH, 2 * SCRATCH)  # what on_enter noted for the launch
        inst.on_exit(None)
        out = InstrumentationHook.host_buffer
        assert out.dtype == torch.uint8 and out.device.type == "cpu"
        words = np.frombuffer(out[:48].numpy().tobytes(), "<u4").tolist()
        assert words == [1, 4, 48, 48, 2 * SCRATCH, 1, 2, 4, SCRATCH, 2, 0, 2]
        assert out[48:].numpy().tobytes() == raw
        decoded = intra.decode(out[48:].numpy(), SCRATCH, 4, warps=(0, 2))
        assert sorted(decoded.warp.tolist()) == [0, 2]
        InstrumentationHook.enable_host_buffer = False
        assert not inst.exits and inst.on_exit not in exits.calls
        InstrumentationHook("").deactivate()  # as Triton's: lets the buffer go
        assert InstrumentationHook.host_buffer is None
    finally:
        inst.watch_exits(False)
        instrumentation._installed = None
        instrumentation.set_host_copy(False)
        del inst.kernels[12345]


class _Launch:
    """What Triton's launch hooks get: a LazyDict whose `data` names the CUfunction."""

    def __init__(self, function: int) -> None:
        self.data = {"function": function}


def test_a_kernel_without_scopes_gets_tritons_header_alone_as_its_host_buffer():
    """Triton 3.9's test_no_scope_zero_scratch: an instrumented kernel with no scopes has no
    profile buffer (Triton's launcher asks the allocator nothing), yet with host copies on its
    launch leaves the header: 0 CTAs, 0 bytes, the kernel's 4 warps."""
    from proton.hooks.instrumentation import InstrumentationHook
    from proton.runtime import instrumentation
    from proton import mode

    inst = instrumentation.Instrumentation(mode.Default(), {})
    inst.kernels[4242] = instrumentation.KernelInfo("plain", 0, 4, {}, {}, (0, 1, 2, 3))
    instrumentation._installed = inst
    try:
        InstrumentationHook.enable_host_buffer = True
        inst.on_enter(_Launch(4242))
        assert InstrumentationHook.host_buffer is None  # not before the launch's exit
        inst.on_exit(None)
        out = InstrumentationHook.host_buffer
        words = np.frombuffer(out.numpy().tobytes(), "<u4").tolist()
        assert words == [1, 4, 56, 56, 0, 1, 0, 4, 0, 4, 0, 1, 2, 3] and not inst.pending
        inst.on_enter(_Launch(99))  # a kernel compiled before the session: none
        inst.on_exit(None)
        assert InstrumentationHook.host_buffer is None
    finally:
        InstrumentationHook.enable_host_buffer = False
        inst.watch_exits(False)
        instrumentation._installed = None
        instrumentation.set_host_copy(False)
        del inst.kernels[4242]


def test_the_hook_is_tritons_name_for_the_backend():
    import proton.hooks
    from proton.hooks.hook import Hook
    from proton.hooks.instrumentation import InstrumentationHook

    assert proton.hooks.InstrumentationHook is InstrumentationHook
    hook = InstrumentationHook("default:buffer_size=4096")
    assert isinstance(hook, Hook) and hook.priority == 0 and hook.mode.buffer_size == 4096
    assert InstrumentationHook(None).mode.name == "default"
    assert InstrumentationHook.enable_host_buffer is False
    assert InstrumentationHook.profile_buffer_alignment == 128


def test_kernels_are_known_to_every_later_session():
    """Triton keeps an instrumented kernel in memory: a later session with the same mode
    launches it without loading it again, so what it is outlives the session that loaded it."""
    from proton.runtime.instrumentation import Instrumentation
    from proton import mode

    one, two = Instrumentation(mode.Default(), {}), Instrumentation(mode.Default(), {})
    assert one.kernels is two.kernels


def test_a_launch_not_read_yet_keeps_what_its_kernel_was_after_an_unload():
    """Triton 3.9 unloads a kernel whose last reference went, and its CUfunction handle may
    name another kernel later: the handle is forgotten, the launch keeps its KernelInfo."""
    from proton import mode
    from proton.runtime.instrumentation import Instrumentation, KernelInfo

    inst = Instrumentation(mode.Default(), {})
    info = KernelInfo("gone", SCRATCH, 2, {0: "s"}, {})
    inst.kernels[777] = info
    inst.pending.append((info, 0, SCRATCH, 1, 0, 0, 0))
    try:
        inst.on_unload(None, 777, "gone", {}, "hash")
        assert 777 not in inst.kernels and inst.pending[0][0] is info
    finally:
        inst.kernels.pop(777, None)


def test_an_instrumentation_session_counts_only_its_instrumented_kernels():
    from proton.cupti.attribution import KernelRecord
    from proton.runtime.session import Session

    launched = {}
    s = Session(0, "i", "i.hatchet", "shadow", "tree", None, only_kernels=launched)
    s.resume(0)
    scoped, other = paths.intern(0, "scoped", "kernel0"), paths.intern(0, "fill", "kernel0")
    launched[scoped] = 1  # its instrumented launch, noted at launch
    s.add_kernel(scoped, KernelRecord(1, "scoped", 0, 0, 100))
    s.add_kernel(other, KernelRecord(2, "fill", 0, 0, 50))
    s.add_kernel_totals({scoped: [10, 1, 0, 0, None, 0], other: [5, 1, 0, 0, None, 0]})
    assert set(s.nodes) == {scoped} and s.nodes[scoped]["count"] == 2


def test_the_clock_rate_comes_from_either_form_of_the_device_table():
    from proton.runtime.instrumentation import clock_table

    entry = {"arch": "90", "num_sms": 132, "clock_rate": 1980000}
    assert clock_table({"0": entry}) == {0: 1980000} == clock_table({"CUDA": {"0": entry}})


def span(scope, kernel, sm, cta, warp, start, end, cycles, launch=0, device=0, end_warp=-1,
         event=False):
    """A scope (an event: `event`) from `start` to `end` (ns) in a CTA that starts at 1000 ns,
    begins writing its records out at 1900 and is done at 1960."""
    return WarpSpan(scope, kernel, "k", device, sm, cta, warp, 1000, start - 1000.0,
                    end - start + 0.0, cycles, launch, 1000, 1_000_000, end_warp, 1900, 1960,
                    event)


def test_the_trace_holds_the_scopes_as_tritons_proton_lays_them_out():
    """Triton 3.6's layout: launch by launch, SM, CTA, warp, start; a process per kernel, SM
    and CTA, a thread per warp and line (a nested scope on the next line); no metadata
    events, no colours."""
    kernel = paths.intern(paths.intern(0, "step"), "k", "kernel0")
    outer = paths.intern(kernel, "outer")
    inner = paths.intern(outer, "inner")
    doc = build_trace([], [], None, [span(inner, kernel, 5, 2, 1, 1100, 1300, 200),
                                     span(outer, kernel, 5, 2, 1, 1000, 1500, 500),
                                     span(outer, kernel, 5, 2, 1, 1600, 1700, 100),
                                     span(outer, kernel, 9, 0, 1, 1100, 1900, 800),
                                     span(outer, kernel, 0, 0, 0, 1050, 1100, 50, launch=1),
                                     span(outer, kernel, 5, 2, 0, 1200, 1300, 100)],
                      lanes=False)
    ev = doc["traceEvents"]
    assert [(e["pid"], e["tid"], e["name"], e["ts"], e["dur"]) for e in ev] == [
        ("k Core5 CTA2", "warp 0 (line 0)", "outer", 0.2, 0.1),
        ("k Core5 CTA2", "warp 1 (line 0)", "outer", 0.0, 0.5),
        ("k Core5 CTA2", "warp 1 (line 1)", "inner", 0.1, 0.2),
        ("k Core5 CTA2", "warp 1 (line 0)", "outer", 0.6, 0.1),
        ("k Core9 CTA0", "warp 1 (line 0)", "outer", 0.1, 0.8),
        ("k Core0 CTA0", "warp 0 (line 0)", "outer", 0.05, 0.05)]  # the second launch
    assert {e["ph"] for e in ev} == {"X"} and {e["cat"] for e in ev} == {"k"}
    assert ev[0]["args"] == {"call_stack": ["ROOT", "step", "k"], "cycles": 100,
                             "Frequency (MHz)": 1000.0, "Init Time (ns)": 1000,
                             "Post Final Time (ns)": 1960, "Finalization Time (ns)": 60}
    assert doc["displayTimeUnit"] == "ns"
    assert not any("bind_id" in e or "cname" in e for e in ev)


def test_an_event_ended_in_another_warp_is_a_flow_between_the_two_warps():
    """Triton 3.9's trace of a warp-specialised event: no span, but an event of no length on
    line 0 of the starting warp (flow_out) and one on line 0 of the ending warp (flow_in),
    written one after the other, sharing a bind_id, both "cat": "flow"; an event started and
    ended in one warp stays a span ("cat": "async"), after the CTA's scopes."""
    kernel = paths.intern(0, "k", "kernel0")
    ready = paths.intern(kernel, "ready")
    work = paths.intern(kernel, "work")
    doc = build_trace([], [], None, [
        span(ready, kernel, 1, 0, 4, 1100, 1300, 200, end_warp=0, event=True),
        span(ready, kernel, 1, 0, 5, 1110, 1320, 210, end_warp=1, event=True),
        span(work, kernel, 1, 0, 0, 1200, 1400, 200, event=True),
        span(work, kernel, 1, 0, 4, 1050, 1150, 100)], lanes=True)
    ev = doc["traceEvents"]
    assert [(e["name"], e["cat"], e["tid"], e["ts"], e["dur"], e.get("bind_id"),
             e.get("flow_out"), e.get("flow_in")) for e in ev] == [
        ("work", "k", "warp 4 (line 0)", 0.05, 0.1, None, None, None),  # a scope
        ("work", "async", "warp 0 (line 0)", 0.2, 0.2, None, None, None),
        ("ready", "flow", "warp 4 (line 0)", 0.1, 0.0, 1, True, None),
        ("ready", "flow", "warp 0 (line 0)", 0.3, 0.0, 1, None, True),  # line 0 though busy
        ("ready", "flow", "warp 5 (line 0)", 0.11, 0.0, 2, True, None),
        ("ready", "flow", "warp 1 (line 0)", 0.32, 0.0, 2, None, True)]


def test_triton_39_colours_each_scope_and_keeps_the_cta_times_on_scopes_alone():
    """Triton 3.9's layout: every span and flow end has a "cname", the launch's scopes and
    events taking the trace viewer's colours in turn as they start (by warp, then start: a
    scope before the ones nested in it, as Triton 3.9's trace on the H200 colours them), afresh
    for each launch; a scope keeps its "cat" (the kernel's name) and the CTA's times in args,
    an event has its call path and its cycles alone; a scope nested in another takes the next
    line, an event overlapping a scope too (one line set per warp)."""
    kernel = paths.intern(0, "k", "kernel0")
    outer, inner, ev = (paths.intern(kernel, n) for n in ("outer", "inner", "ev"))
    doc = build_trace([], [], None, [
        span(outer, kernel, 5, 2, 0, 1000, 1500, 500),
        span(inner, kernel, 5, 2, 0, 1100, 1200, 100),
        span(ev, kernel, 5, 2, 0, 1150, 1400, 250, event=True),
        span(outer, kernel, 5, 2, 1, 1000, 1500, 500),
        span(ev, kernel, 5, 2, 1, 1300, 1400, 100, event=True),
        span(ev, kernel, 5, 2, 0, 1000, 1100, 100, launch=1, event=True)], lanes=True)
    got = [(e["name"], e["cat"], e["cname"], e["tid"]) for e in doc["traceEvents"]]
    assert got == [("outer", "k", "cq_build_passed", "warp 0 (line 0)"),
                   ("inner", "k", "cq_build_failed", "warp 0 (line 1)"),
                   ("outer", "k", "cq_build_passed", "warp 1 (line 0)"),
                   ("ev", "async", "thread_state_iowait", "warp 0 (line 2)"),
                   ("ev", "async", "thread_state_iowait", "warp 1 (line 1)"),
                   ("ev", "async", "cq_build_passed", "warp 0 (line 0)")]  # launch 1
    scope, event = doc["traceEvents"][0], doc["traceEvents"][3]
    assert scope["args"] == {"call_stack": ["ROOT", "k"], "cycles": 500,
                             "Frequency (MHz)": 1000.0, "Init Time (ns)": 1000,
                             "Post Final Time (ns)": 1960, "Finalization Time (ns)": 60}
    assert event["args"] == {"call_stack": ["ROOT", "k"], "cycles": 250}


def test_the_viewer_colours_cycle_past_eleven_scopes():
    kernel = paths.intern(0, "k", "kernel0")
    scopes = [paths.intern(kernel, f"s{i}") for i in range(12)]
    doc = build_trace([], [], None, [span(s, kernel, 0, 0, 0, 1000 + 10 * i, 1005 + 10 * i, 5)
                                     for i, s in enumerate(scopes)], lanes=True)
    colours = [e["cname"] for e in doc["traceEvents"]]
    assert len(set(colours)) == 11 and colours[11] == colours[0] == "cq_build_passed"


def test_a_scope_of_one_cycle_keeps_its_length_on_an_epoch_clock():
    """CUPTI's clock is ns since the epoch (~2**60): a float of it moves in 256 ns steps, so
    the CTA's start is kept in whole ns and the scope's start and length after it apart."""
    kernel = paths.intern(0, "k", "kernel0")
    scope = paths.intern(kernel, "s")
    epoch = 1_764_000_000_000_000_123
    doc = build_trace([], [], None, [
        WarpSpan(scope, kernel, "k", 0, 0, 0, 0, epoch, 0.0, 0.5, 1, 0, 7, 2_000_000),
        WarpSpan(scope, kernel, "k", 0, 0, 0, 1, epoch + 3, 1.5, 0.5, 1, 0, 7, 2_000_000)],
                      lanes=False)
    assert [(e["ts"], e["dur"]) for e in doc["traceEvents"]] == [(0.0, 0.0005), (0.0045, 0.0005)]
    assert doc["baseTimeNanoseconds"] == epoch


def test_a_trace_of_several_gpus_names_the_gpu_in_each_process():
    kernel = paths.intern(0, "k", "kernel0")
    scope = paths.intern(kernel, "load")
    doc = build_trace([], [], {"rank": 1}, [span(scope, kernel, 5, 2, 1, 1000, 1500, 700),
                                            span(scope, kernel, 5, 2, 1, 1000, 1400, 600,
                                                 launch=1, device=1)], lanes=False)
    assert [e["pid"] for e in doc["traceEvents"]] == ["rank 1 k Core5 CTA2 GPU 0",
                                                      "rank 1 k Core5 CTA2 GPU 1"]


# -- the viewers on a profile recorded on an H100 ---------------------------------------------
PROFILE = os.path.join(os.path.dirname(__file__), "data", "intra", "recorded.hatchet")


def test_the_viewer_summarises_scopes_across_warps():
    from click.testing import CliRunner

    from proton.viewer.cli import viewer

    out = CliRunner().invoke(viewer, ["--warps", PROFILE])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split() == ["scope", "warp", "events", "min", "median", "max", "per",
                                "warp", "imbalance"]
    rows = {line.split("  ")[0].strip(): line.split() for line in lines[2:6]}
    assert set(rows) == {"scoped > kernel", "scoped > kernel > compute",
                         "scoped > kernel > load", "scoped > kernel > store"}
    compute = rows["scoped > kernel > compute"]
    assert compute[-6:] == ["32", "12,096", "12,153", "12,185", "12,149", "1.00x"]


def test_warps_on_a_profile_without_kernel_scopes_says_how_to_get_them():
    from click.testing import CliRunner

    from proton.viewer.cli import viewer

    other = os.path.join(os.path.dirname(__file__), "data", "recorded.hatchet")
    out = CliRunner().invoke(viewer, ["--warps", other])
    assert out.exit_code == 2 and "backend='instrumentation'" in out.output


def test_both_viewers_read_the_kernel_scopes():
    import subprocess
    import sys

    from click.testing import CliRunner

    from proton.viewer.cli import viewer

    ours = CliRunner().invoke(viewer, ["-m", "normalized_cycles", PROFILE])
    assert ours.exit_code == 0 and "12,149.062" in ours.output and "compute" in ours.output
    theirs = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m",
                             "normalized_cycles", PROFILE], capture_output=True, text=True,
                            timeout=300)
    assert theirs.returncode == 0, theirs.stderr
    assert "12149.062 compute" in theirs.stdout and "26.000 load" in theirs.stdout


def test_spans_are_placed_by_cycles_in_the_trace_and_the_warps_tab():
    """Two CTAs on two SMs (clocks of their own), their starts on %globaltimer's 32 ns grid: a
    38-cycle scope is 38 / 1.98 ns wide at 1.98 GHz, a scope nested in another keeps its own
    edges, and the Warps tab's timeline places every span where the trace does."""
    from proton.cupti.attribution import KernelRecord
    from proton.runtime.instrumentation import Instrumentation, KernelInfo
    from proton import mode

    epoch = 1_764_000_000_000_000_000  # %globaltimer: a multiple of 32 ns
    inst = Instrumentation(mode.Default(), {0: 1_980_000})
    inst.keep_spans = True
    info = KernelInfo("k", SCRATCH, 2, {0: "outer", 1: "math", 2: "tiny"}, {1: 0, 2: 0})

    def warp(base):
        return [(0, 0, base), (0, 1, base + 40), (1, 1, base + 10540), (0, 2, base + 10560),
                (1, 2, base + 10598), (1, 0, base + 10645)]

    raw = intra.encode([block(0, 3, {0: warp(1000), 1: warp(1007)}, init_ns=epoch),
                        block(1, 5, {0: warp(5_000_000)}, init_ns=epoch + 32)], SCRATCH, 2, SEG)
    kernel = paths.intern(0, "k", "kernel0")
    inst._read_kernel(info, np.frombuffer(raw, np.uint8), [(1, 0, len(raw), kernel, 0, 0, 0)])
    record = KernelRecord(1, "k", 0, epoch + 3_500_000, epoch + 3_520_000)
    doc = build_trace([], [], None, inst.trace_spans([(kernel, record)]))
    ev = {(e["pid"], e["tid"].split(" (")[0], e["name"]): e for e in doc["traceEvents"]}
    ns = 1 / 1.98  # a cycle at 1.98 GHz
    cta0 = {n: ev["k Core3 CTA0", "warp 0", n] for n in ("outer", "math", "tiny")}
    assert cta0["tiny"]["dur"] * 1e3 == pytest.approx(38 * ns)
    assert cta0["outer"]["dur"] * 1e3 == pytest.approx(10645 * ns)
    assert (cta0["math"]["ts"] - cta0["outer"]["ts"]) * 1e3 == pytest.approx(40 * ns)
    outer_end = cta0["outer"]["ts"] + cta0["outer"]["dur"]
    assert (outer_end - cta0["math"]["ts"] - cta0["math"]["dur"]) * 1e3 == pytest.approx(105 * ns)
    assert cta0["math"]["tid"] != cta0["outer"]["tid"]  # nested: the next line in Perfetto
    # the second warp starts 7 cycles later on the same SM's clock; the other CTA 32 ns later
    later = ev["k Core3 CTA0", "warp 1", "outer"]["ts"] - cta0["outer"]["ts"]
    assert later * 1e3 == pytest.approx(7 * ns)
    assert (ev["k Core5 CTA1", "warp 0", "outer"]["ts"] - cta0["outer"]["ts"]) * 1e3 == \
        pytest.approx(32)
    # the Warps tab: the same starts from the launch's first CTA, the same lengths
    t = json.loads(inst.timelines()[kernel])
    origin = min(e["ts"] for e in doc["traceEvents"])
    for i, sid in enumerate(t["scope"]):
        e = ev[f"k Core{t['sm'][i]} CTA{t['cta'][i]}", f"warp {t['warp'][i]}",
               t["scopes"][sid].split(" > ")[-1]]
        assert t["start_ns"][i] == pytest.approx((e["ts"] - origin) * 1e3, abs=0.06)
        assert t["cycles"][i] * 1e6 / t["clock_khz"] == pytest.approx(e["dur"] * 1e3)
