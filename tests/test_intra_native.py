"""Kernel scope buffers decoded in C (runtime/intra_native.py): the same events, losses and
counts as data/intra.decode in numpy, on the buffer recorded on an H100 replayed as many
launches and on hand-built buffers with every edge (nesting, wrap-around, overflow, unbalanced,
reordered, bad blocks); numpy when there is no compiler."""
from __future__ import annotations

import os

import numpy as np
import pytest

from proton.data import intra
from proton.runtime import intra_native

RECORDED = os.path.join(os.path.dirname(__file__), "data", "intra", "buffer.npz")
SEG, SCRATCH = 1024, 2048


@pytest.fixture
def compiled(tmp_path, monkeypatch):
    monkeypatch.setenv("PROTON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PROTON_NATIVE", raising=False)
    intra_native.HELPER.built.clear()
    assert intra_native.helper() is not None, "no C compiler here"
    yield tmp_path
    intra_native.HELPER.built.clear()


def table(d: intra.Decoded) -> list[tuple]:
    """The events as sorted rows (C emits them in time order per warp, numpy per scope)."""
    cols = (d.launch, d.block, d.sm, d.warp, d.scope, d.start, d.end, d.init_ns,
            d.block_min_clock, d.end_warp, d.event)
    return sorted(zip(*(c.tolist() for c in cols)))


def both(host, offsets, sizes, scratch, warps, monkeypatch, recorded=None):
    fast = intra_native.decode_launches(host, offsets, sizes, scratch, warps, recorded)
    monkeypatch.setenv("PROTON_NATIVE", "0")
    slow = intra_native.decode_launches(host, offsets, sizes, scratch, warps, recorded)
    monkeypatch.delenv("PROTON_NATIVE")
    return fast, slow


def same(fast: intra.Decoded, slow: intra.Decoded) -> None:
    assert table(fast) == table(slow)
    assert fast.ctas.tolist() == slow.ctas.tolist()
    assert (fast.dropped, fast.needed_bytes, fast.unbalanced, fast.reordered, fast.bad_blocks,
            fast.num_blocks) == (slow.dropped, slow.needed_bytes, slow.unbalanced,
                                 slow.reordered, slow.bad_blocks, slow.num_blocks)


def test_the_recorded_buffer_replayed_as_500_launches_decodes_as_numpy_does(
        compiled, monkeypatch):
    with np.load(RECORDED) as f:
        buf, scratch, warps = f["buffer"], int(f["scratch"]), int(f["num_warps"])
    n = 500
    host = np.tile(buf, n)
    offsets, sizes = np.arange(n) * buf.size, np.full(n, buf.size)
    fast, slow = both(host, offsets, sizes, scratch, warps, monkeypatch)
    same(fast, slow)
    assert fast.scope.size == n * 8 * 4 * 4  # 8 CTAs x 4 warps x 4 scopes, every launch
    assert sorted(set(fast.launch.tolist())) == list(range(n))
    # and launch by launch, as the first decoder read the fixture
    one = intra.decode(buf, scratch, warps)
    first = fast.launch == 0
    assert sorted(zip(fast.block[first].tolist(), fast.warp[first].tolist(),
                      fast.scope[first].tolist(), fast.cycles[first].tolist())) == \
        sorted(zip(one.block.tolist(), one.warp.tolist(), one.scope.tolist(),
                   one.cycles.tolist()))


def block(pid, sm, warps, init_ns=0, **final):
    """A CTA's block for intra.encode; `final`: final_ns, post_ns."""
    return {"pid": pid, "sm": sm, "init_ns": init_ns, "warps": warps, **final}


PER_WARP = SEG // 2 // 8
EDGES = [
    # nested scopes over two CTAs
    [block(0, 3, {0: [(0, 0, 100), (0, 1, 110), (1, 1, 150), (1, 0, 200)],
                  1: [(0, 0, 105), (1, 0, 300)]}, init_ns=77),
     block(1, 7, {0: [(0, 0, 10), (1, 0, 25)]})],
    # unbalanced: a start restarted, an end never started, a start never ended
    [block(0, 0, {0: [(0, 2, 1), (0, 2, 5), (1, 2, 9), (1, 3, 4), (0, 4, 12)]})],
    # an end before its start
    [block(0, 0, {0: [(0, 1, 500), (1, 1, 400)]})],
    # the 43-bit clock wrapping
    [block(0, 0, {1: [(0, 0, (1 << 43) - 10), (1, 0, 30)]})],
    # a full segment: the oldest records lost, an end whose start was overwritten
    [block(0, 0, {0: [(k % 2, 0, 10 * k) for k in range(PER_WARP + 7)]})],
    # the same scope again and again, and many scope ids
    [block(0, 1, {0: [(e, s, 10 * k + e) for k in range(5) for s in (0, 9, 200)
                      for e in (0, 1)]})],
    # events (Triton 3.9): one inside a scope in its warp, one ended in the other warp, one
    # started twice before its ends, an end with no start, a start never ended
    [block(0, 2, {0: [(0, 0, 100), (0, 1, 105, 1), (1, 1, 150, 1), (0, 2, 160, 1),
                      (0, 5, 170, 1), (0, 5, 171, 1), (1, 5, 180, 1), (1, 5, 190, 1),
                      (1, 0, 200)],
                  1: [(1, 2, 175, 1), (1, 3, 120, 1), (0, 4, 300, 1)]},
           init_ns=9, final_ns=400, post_ns=450)],
    # events in a full segment: the ones whose partner was overwritten are dropped, not
    # unbalanced; the other warp's end still finds its start
    [block(0, 0, {0: [(k % 2, 7, 10 * k, 1) for k in range(PER_WARP + 3)],
                  1: [(1, 7, 100000, 1)]})],
]


@pytest.mark.parametrize("blocks", EDGES)
def test_every_edge_decodes_as_numpy_does(compiled, monkeypatch, blocks):
    buf = np.frombuffer(intra.encode(blocks, SCRATCH, 2, SEG), np.uint8)
    two = np.concatenate([buf, np.zeros(256, np.uint8), buf])  # launches apart in the arena
    offsets = np.array([0, buf.size + 256])
    sizes = np.array([buf.size, buf.size])
    fast, slow = both(two, offsets, sizes, SCRATCH, 2, monkeypatch)
    same(fast, slow)


def test_events_pair_within_their_warp_else_across_the_cta_in_clock_order(compiled,
                                                                          monkeypatch):
    """A producer partition's warps 4..7 start an event, the consumer's warps 0..3 end it
    (Triton 3.9's warp-specialised events): each end takes the oldest pending start, a pair
    per end whose end_warp is the consumer's; an event started and ended in one warp (a loop
    of three) pairs there, even when another warp's start is older."""
    starts = {w: [(0, 0, 100 + w, 1)] for w in range(4, 8)}
    ends = {w: [(1, 0, 200 + 10 * w, 1)] for w in range(4)}
    loop = {0: ends[0] + [(e, 1, 300 + 10 * k + e, 1) for k in range(3) for e in (0, 1)],
            4: starts[4] + [(0, 1, 299, 1)]}
    blocks = [block(0, 1, {**starts, **ends, **loop}, init_ns=1000, final_ns=2000,
                    post_ns=2100)]
    scratch = 8 * SEG + 128  # as Triton sizes it: the segments after a 128-byte header
    host = np.frombuffer(intra.encode(blocks, scratch, 8, 8 * SEG), np.uint8)
    fast, slow = both(host, np.array([0]), np.array([host.size]), scratch, 8, monkeypatch)
    same(fast, slow)
    rows = sorted(zip(fast.scope.tolist(), fast.warp.tolist(), fast.end_warp.tolist(),
                      fast.start.tolist(), fast.end.tolist()))
    assert rows[:4] == [(0, 4, 0, 104, 200), (0, 5, 1, 105, 210), (0, 6, 2, 106, 220),
                        (0, 7, 3, 107, 230)]
    assert rows[4:] == [(1, 0, 0, 300, 301), (1, 0, 0, 310, 311), (1, 0, 0, 320, 321)]
    assert fast.unbalanced == {1: 1}  # warp 4's start of event 1 never ended
    assert fast.event.tolist() == [True] * 7  # events all (Triton 3.9's trace sets them apart)
    assert fast.ctas.tolist() == [[0, 0, 2000, 2100]]  # launch, program id, pre-, post-final


def test_random_scopes_and_events_decode_as_numpy_does(compiled, monkeypatch):
    """Records drawn at random (scopes and events of a few ids, some warps past their
    segment): C and numpy give the same pairs, losses and counts."""
    rng = np.random.default_rng(58)
    blocks = []
    for pid in range(40):
        warps = {}
        for w in range(4):
            n = int(rng.integers(0, PER_WARP * 3 // 2))
            clocks = np.cumsum(rng.integers(0, 4, n)) + 1000  # ties too
            warps[w] = [(int(rng.integers(0, 2)), int(rng.integers(0, 3)), int(c),
                         int(rng.integers(0, 2))) for c in clocks]
        blocks.append(block(pid, pid % 5, warps, init_ns=pid, final_ns=2 * pid, post_ns=3 * pid))
    host = np.frombuffer(intra.encode(blocks, SCRATCH, 4, SEG), np.uint8)
    fast, slow = both(host, np.array([0]), np.array([host.size]), SCRATCH, 4, monkeypatch)
    same(fast, slow)
    assert fast.scope.size > 1000 and (fast.end_warp != fast.warp).any() and fast.dropped \
        and fast.event.any() and not fast.event.all()


def test_sampled_warps_decode_from_their_own_segments_in_c_too(compiled, monkeypatch):
    """sampling_strategy="selective" with "1,3" of 4 warps: a counter per warp, a segment
    (half the buffer) for each of warps 1 and 3."""
    blocks = [block(0, 2, {1: [(0, 0, 10), (1, 0, 40)], 3: [(0, 0, 12), (0, 1, 20),
                                                              (1, 1, 30), (1, 0, 90)]})]
    host = np.frombuffer(intra.encode(blocks, SCRATCH, 4, SEG, warps=(1, 3)), np.uint8)
    fast, slow = both(host, np.array([0]), np.array([SCRATCH]), SCRATCH, 4, monkeypatch,
                      (1, 3))
    same(fast, slow)
    assert sorted(zip(fast.warp.tolist(), fast.cycles.tolist())) == [(1, 30), (3, 10), (3, 78)]
    assert fast.needed_bytes == 8 * 4 * 2  # the fullest warp's words, times two segments


def test_warps_that_do_not_divide_the_buffer_get_whole_records_in_c_too(compiled, monkeypatch):
    """A warp-specialised kernel's 12 warps share a buffer 12 does not divide: each segment
    is its share in whole 8-byte records."""
    per = SEG // 8 // 12  # 10 records a warp
    blocks = [block(0, 0, {w: [(k % 2, 0, 5 * k + w) for k in range(per + 2 * (w == 11))]
                           for w in range(12)})]
    host = np.frombuffer(intra.encode(blocks, SCRATCH, 12, SEG), np.uint8)
    fast, slow = both(host, np.array([0]), np.array([SCRATCH]), SCRATCH, 12, monkeypatch)
    same(fast, slow)
    assert fast.scope.size == 12 * per // 2 and fast.dropped == 2
    assert sorted(set(fast.warp.tolist())) == list(range(12))


def test_a_block_without_its_preamble_is_skipped_in_c_too(compiled, monkeypatch):
    buf = bytearray(intra.encode([block(0, 0, {0: [(0, 0, 1), (1, 0, 2)]}),
                                  block(1, 0, {0: [(0, 0, 1), (1, 0, 3)]})], SCRATCH, 2, SEG))
    buf[:4] = b"\0\0\0\0"
    host = np.frombuffer(bytes(buf), np.uint8)
    fast, slow = both(host, np.array([0]), np.array([host.size]), SCRATCH, 2, monkeypatch)
    same(fast, slow)
    assert fast.bad_blocks == 1 and fast.block.tolist() == [1] and fast.cycles.tolist() == [2]


def test_another_layout_fails_with_one_line_in_c(compiled):
    host = np.frombuffer(intra.encode([block(0, 0, {0: []})], SCRATCH, 2, SEG), np.uint8)
    with pytest.raises(intra.LayoutError, match="do not fit a 1024-byte block"):
        intra_native.decode_launches(host, np.array([0]), np.array([SCRATCH // 2]),
                                     SCRATCH // 2, 2)
    with pytest.raises(intra.LayoutError, match="not warps of 2"):
        intra_native.decode_launches(host, np.array([0]), np.array([SCRATCH]), SCRATCH, 2,
                                     (0, 2))
    with pytest.raises(intra.LayoutError, match="past the"):
        intra_native.decode_launches(host, np.array([SCRATCH]), np.array([SCRATCH]), SCRATCH, 2)


def test_without_a_compiler_numpy_decodes_and_says_so_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PROTON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PROTON_NATIVE", raising=False)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("PATH", str(tmp_path))
    intra_native.HELPER.built.clear()
    try:
        host = np.frombuffer(intra.encode(EDGES[0], SCRATCH, 2, SEG), np.uint8)
        d = intra_native.decode_launches(host, np.array([0]), np.array([host.size]), SCRATCH, 2)
        intra_native.decode_launches(host, np.array([0]), np.array([host.size]), SCRATCH, 2)
    finally:
        intra_native.HELPER.built.clear()
    assert sorted(d.cycles.tolist()) == [15, 40, 100, 195]
    err = capsys.readouterr().err
    assert err.count("decoding kernel scope buffers in numpy") == 1 and "C compiler" in err


def test_a_planted_library_in_the_cache_is_built_again_not_loaded(tmp_path, monkeypatch):
    """The decoder is a library the process loads, kept in cupti/native's private cache: a
    symlink placed at its name (by another user, where the folder was once shared) is replaced
    by a fresh build, and the folder is made private first."""
    import stat

    monkeypatch.setenv("PROTON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PROTON_NATIVE", raising=False)
    folder = tmp_path / "native"
    folder.mkdir()
    folder.chmod(0o777)
    planted = tmp_path / "planted.so"
    planted.write_bytes(b"not ours")
    os.symlink(planted, intra_native.library_path())
    intra_native.HELPER.built.clear()
    try:
        assert intra_native.helper() is not None
    finally:
        intra_native.HELPER.built.clear()
    assert not os.path.islink(intra_native.library_path())
    assert planted.read_bytes() == b"not ours"
    assert stat.S_IMODE(folder.stat().st_mode) & 0o022 == 0
