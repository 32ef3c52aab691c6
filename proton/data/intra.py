"""Intra-kernel scope records (proton.language) decoded from a kernel's profile scratch buffer.

Triton 3.6.0's instrumentation writes, per CTA, one block of `profile_scratch_size` bytes, the
blocks in linear program-id order (32-bit little-endian words):

    w0 0xdeadbeef   w1 program id   w2 SM id (%smid)   w3 bytes of the per-warp segments
    w4-5 init time  w6-7 pre-final time  w8-9 post-final time   (u64 %globaltimer ns)
    then one word per warp (all the kernel's warps, metadata num_warps): words that warp
    wrote, counting past its segment's capacity
    then one circular segment per recorded warp of w3 / (recorded warps) bytes (whole 8-byte
    records): every warp, or with sampling_strategy="selective" the warps sampling_options
    names, in order

A record is two words: tag (bit 31 end, bits 30:23 scope id, bits 10:0 clock bits 32..42) and
the clock's low 32 bits. A warp that wrote more than its segment holds kept the newest records
(the segment is circular): the oldest are lost, counted in Decoded.dropped.

No CUDA, no Triton: the buffers are numpy arrays (tests build them by hand).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PREAMBLE = 0xDEADBEEF
HEADER_WORDS = 10
CLOCK_BITS = 43
"""The clock a record carries: 11 + 32 bits of %clock64."""
SUPPORTED_TRITON = ("3.6.0",)
"""The Triton versions whose layout this module reads (checked when a session starts)."""


class LayoutError(ValueError):
    """A buffer that is not Triton 3.6's layout (bad preamble, sizes that do not add up)."""


@dataclass(slots=True)
class Decoded:
    """One launch's scope events, one row per warp's pass through a scope."""

    block: np.ndarray
    """CTA (program id, linear) of each event."""
    sm: np.ndarray
    """SM the CTA ran on."""
    warp: np.ndarray
    scope: np.ndarray
    """Scope id (the compiler's; names from the kernel's scope table)."""
    start: np.ndarray
    """Start clock (cycles, this SM's clock)."""
    end: np.ndarray
    launch: np.ndarray
    """Launch number of each event (decode's `label`)."""
    init_ns: np.ndarray
    """Per event: its CTA's init time (%globaltimer ns), to place it on the trace's clock."""
    block_min_clock: np.ndarray
    """Per event: the smallest start clock of its CTA (the CTA's clock at its first record)."""
    num_blocks: int
    num_warps: int
    dropped: int = 0
    """Records lost because a warp's segment was full (oldest first)."""
    needed_bytes: int = 0
    """The per-CTA segment bytes (buffer_size) that would have held every record."""
    unbalanced: dict[int, int] = field(default_factory=dict)
    """Scope id -> records with no partner (a start never ended, an end never started), left
    out rather than paired wrong."""
    reordered: dict[int, int] = field(default_factory=dict)
    """Scope id -> pairs whose end clock came before their start (the compiler moved a record
    across the other), left out."""
    bad_blocks: int = 0
    """Blocks without the preamble (a CTA that never ran its epilogue)."""

    @property
    def cycles(self) -> np.ndarray:
        return self.end - self.start


def _u64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(np.uint64) | (hi.astype(np.uint64) << np.uint64(32))


def recorded_warps(num_warps: int, sampling_strategy: str = "none",
                   sampling_options: str = "") -> tuple[int, ...]:
    """The warps a kernel records, in segment order: all `num_warps`, or with selective
    sampling the ones `sampling_options` names ("0,2"), sorted, those past num_warps left out
    (as Triton's runtime reads them)."""
    if sampling_strategy == "selective" and sampling_options.strip():
        ids = {int(part) for part in sampling_options.split(",") if part.strip()}
        picked = tuple(sorted(i for i in ids if 0 <= i < num_warps))
        if picked:
            return picked
    return tuple(range(num_warps))


HOST_VERSION = 1
HOST_HEADER_WORDS = 10
DEVICE_CUDA = 1


def host_header(num_blocks: int, num_warps: int, scratch_size: int, warps: tuple[int, ...],
                payload_bytes: int) -> bytes:
    """The header Triton's InstrumentationHook.host_buffer puts before a launch's raw buffer
    (u32 little-endian): version, header offset (4), header size, payload offset, payload
    size, device type (1: CUDA), CTAs, warps, profile_scratch_size, recorded warps and their
    ids; the payload follows at the payload offset."""
    size = 4 * (HOST_HEADER_WORDS + len(warps))
    words = [HOST_VERSION, 4, size, size, payload_bytes, DEVICE_CUDA, num_blocks, num_warps,
             scratch_size, len(warps), *warps]
    return np.array(words, "<u4").tobytes()


def decode(buf: np.ndarray | bytes, scratch_size: int, num_warps: int,
           num_blocks: int | None = None, label: np.ndarray | None = None,
           warps: tuple[int, ...] | None = None) -> Decoded:
    """Decode CTA blocks of `scratch_size` bytes (`num_blocks`; all that fit in `buf` when
    None): one launch's, or several launches' of one kernel side by side, `label` giving each
    block's launch number (Decoded.launch). `warps`: the warps with a segment
    (recorded_warps; every warp when None).

    Raises:
        LayoutError: the buffer does not hold Triton 3.6's layout.
    """
    raw = np.frombuffer(buf, dtype=np.uint8) if isinstance(buf, (bytes, bytearray, memoryview)) \
        else np.ascontiguousarray(buf).view(np.uint8).reshape(-1)
    if scratch_size <= 0 or scratch_size % 4:
        raise LayoutError(f"profile_scratch_size {scratch_size} is not a positive multiple of 4")
    if num_blocks is None:
        num_blocks = raw.size // scratch_size
    if raw.size < num_blocks * scratch_size:
        raise LayoutError(f"buffer of {raw.size} bytes is smaller than {num_blocks} CTAs x "
                          f"{scratch_size} bytes")
    words = raw[:num_blocks * scratch_size].view("<u4").reshape(num_blocks, scratch_size // 4)
    good = words[:, 0] == PREAMBLE
    bad_blocks = int(num_blocks - good.sum())
    label = np.zeros(num_blocks, np.int64) if label is None else np.asarray(label)
    if bad_blocks:  # else no copy of the whole buffer
        words, label = words[good], label[good]
    uids = np.arange(num_warps) if warps is None else np.asarray(warps, np.int64)
    nseg = uids.size
    seg_bytes = words[:, 3]
    if words.size and np.any(seg_bytes != seg_bytes[0]):
        raise LayoutError(f"segment sizes {sorted(set(seg_bytes.tolist()))[:4]} differ between "
                          "CTAs")
    # each warp's segment: its share of the buffer in whole 8-byte records (as Triton's
    # runtime cuts it: a kernel whose warps do not divide the buffer leaves a tail unused)
    seg_words = int(seg_bytes[0]) // 8 // nseg * 2 if words.size else 0
    first = HEADER_WORDS + num_warps
    if words.size and first + seg_words * nseg > words.shape[1]:
        raise LayoutError(f"{nseg} segments of {seg_words * 4} bytes do not fit a "
                          f"{scratch_size}-byte block: not Triton 3.6's layout")
    counts = words[:, HEADER_WORDS + uids].astype(np.int64)  # (blocks, recorded warps)
    segs = words[:, first:first + seg_words * nseg].reshape(-1, nseg, seg_words)
    init = _u64(words[:, 4], words[:, 5])

    # chronological order in each circular segment: start at the oldest kept record
    cap = seg_words // 2
    written = counts // 2
    kept = np.minimum(written, cap)
    dropped = int((written - kept).sum())
    needed = int(counts.max(initial=0)) * 4 * nseg
    start_at = np.where(written > cap, written % max(cap, 1), 0)
    # only as many slots as the fullest warp kept: most warps write a few records
    k = np.arange(int(kept.max(initial=0)))
    b_i, w_i, k_i = np.nonzero(k < kept[..., None])
    slot = (start_at[b_i, w_i] + k_i) % max(cap, 1)
    r = segs.reshape(segs.shape[0], nseg, cap, 2)[b_i, w_i, slot]
    tag, low = r[:, 0].astype(np.uint64), r[:, 1].astype(np.uint64)
    is_end = (tag >> np.uint64(31)) & np.uint64(1)
    scope = ((tag >> np.uint64(23)) & np.uint64(0xFF)).astype(np.int64)
    clock = ((tag & np.uint64(0x7FF)) << np.uint64(32)) | low

    # pair records per (block, warp, scope) in time order: start then end, else unbalanced
    # records come in (block, warp, slot) order; a stable sort on (block, warp, scope) keeps
    # each group's records in time order
    order = np.argsort((b_i * nseg + w_i) * 256 + scope, kind="stable")
    b_s, w_s, s_s, e_s, c_s = b_i[order], w_i[order], scope[order], is_end[order], clock[order]
    same_next = np.zeros(b_s.size, bool)
    if b_s.size > 1:
        same_next[:-1] = (b_s[:-1] == b_s[1:]) & (w_s[:-1] == w_s[1:]) & (s_s[:-1] == s_s[1:])
    # a start pairs with the next record of its group when that one is an end; starts and
    # ends alternate in balanced code, so candidates never overlap
    pair = np.zeros(b_s.size, bool)
    if b_s.size > 1:
        pair[:-1] = same_next[:-1] & (e_s[:-1] == 0) & (e_s[1:] == 1)
    partner = np.zeros(b_s.size, bool)
    partner[1:] = pair[:-1]
    # in a warp whose segment overflowed, a record whose partner was overwritten is dropped
    # (counted there), not unbalanced
    lone = ~(pair | partner) & ~(written > cap)[b_s, w_s]
    unbalanced: dict[int, int] = {}
    if lone.any():
        ids, n = np.unique(s_s[lone], return_counts=True)
        unbalanced = dict(zip(ids.tolist(), n.tolist()))
    p = np.nonzero(pair)[0]
    start, end = c_s[p], c_s[p + 1]
    back = end < start
    wrapped = back & ((start - end) > np.uint64(1 << (CLOCK_BITS - 1)))
    end = np.where(wrapped, end + np.uint64(1 << CLOCK_BITS), end)  # the 43-bit clock wrapped
    bad = back & ~wrapped
    reordered: dict[int, int] = {}
    if bad.any():
        ids, n = np.unique(s_s[p][bad], return_counts=True)
        reordered = dict(zip(ids.tolist(), n.tolist()))
    p, start, end = p[~bad], start[~bad], end[~bad]
    blk = b_s[p]
    per_block_min = np.full(words.shape[0], np.iinfo(np.uint64).max, np.uint64)
    np.minimum.at(per_block_min, blk, start)
    pids = words[:, 1].astype(np.int64)
    return Decoded(block=pids[blk], sm=words[:, 2].astype(np.int64)[blk], warp=uids[w_s[p]],
                   scope=s_s[p], launch=label[blk], start=start.astype(np.int64), end=end.astype(np.int64),
                   init_ns=init[blk].astype(np.int64),
                   block_min_clock=per_block_min[blk].astype(np.int64),
                   num_blocks=num_blocks, num_warps=num_warps, dropped=dropped,
                   needed_bytes=needed, unbalanced=unbalanced, reordered=reordered,
                   bad_blocks=bad_blocks)


def encode(blocks: list[dict], scratch_size: int, num_warps: int, seg_bytes: int,
           warps: tuple[int, ...] | None = None) -> bytes:
    """A buffer in Triton 3.6's layout, for tests: each block a dict with pid, sm, init_ns and
    `warps`: {warp: [(is_end, scope, clock), ...]} in the order written (a warp that writes
    more than its segment holds wraps around, as the GPU's does). `warps` (the function's):
    the recorded warps, a segment each (every warp when None)."""
    out = np.zeros((len(blocks), scratch_size // 4), "<u4")
    uids = list(range(num_warps)) if warps is None else list(warps)
    seg_words = seg_bytes // 8 // len(uids) * 2
    first = HEADER_WORDS + num_warps
    for i, blk in enumerate(blocks):
        w = out[i]
        w[0], w[1], w[2], w[3] = PREAMBLE, blk["pid"], blk["sm"], seg_bytes
        init = blk.get("init_ns", 0)
        w[4], w[5] = init & 0xFFFFFFFF, init >> 32
        w[6:10] = [init & 0xFFFFFFFF, init >> 32, init & 0xFFFFFFFF, init >> 32]
        for warp, recs in blk["warps"].items():
            w[HEADER_WORDS + warp] = 2 * len(recs)
            base = first + uids.index(warp) * seg_words
            for n, (is_end, scope, clock) in enumerate(recs):
                slot = (2 * n) % seg_words
                w[base + slot] = (is_end << 31) | (scope << 23) | ((clock >> 32) & 0x7FF)
                w[base + slot + 1] = clock & 0xFFFFFFFF
    return out.tobytes()
