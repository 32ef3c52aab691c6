"""Intra-kernel scope and event records (proton.language) decoded from a kernel's profile
scratch buffer.

Triton 3.6.0 and 3.9.0 write the same layout (read off the LLIR both compile for sm_90): per
CTA, one block of `profile_scratch_size` bytes, the blocks in linear program-id order (32-bit
little-endian words):

    w0 0xdeadbeef   w1 program id   w2 SM id (%smid)   w3 bytes of the per-warp segments
    w4-5 init time  w6-7 pre-final time  w8-9 post-final time   (u64 %globaltimer ns)
    then one word per warp (all the kernel's warps, metadata num_warps, a warp_specialize
    kernel's partitions included): words that warp wrote, counting past its segment's capacity
    then one circular segment per recorded warp of w3 / (recorded warps) bytes (whole 8-byte
    records): every warp, or with sampling_strategy="selective" the warps sampling_options
    names, in order

A record is two words: tag (bit 31 end, bits 30:23 scope id, bit 22 event, bits 10:0 clock
bits 32..42) and the clock's low 32 bits. Scopes and events share the ids (the kernel's scope
table names both). A warp that wrote more than its segment holds kept the newest records (the
segment is circular): the oldest are lost, counted in Decoded.dropped.

Scopes pair within their warp (a start with the next record of its id when that is an end).
Events (Triton 3.9's pl.allocate_event / start_event / end_event) pair within their CTA, in
clock order: an end takes its own warp's oldest pending start of that event, else the oldest
pending start of any warp (an event started in a producer partition and ended in a consumer),
which makes a pair whose `end_warp` is not its `warp`.

No CUDA, no Triton: the buffers are numpy arrays (tests build them by hand).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PREAMBLE = 0xDEADBEEF
HEADER_WORDS = 10
CLOCK_BITS = 43
"""The clock a record carries: 11 + 32 bits of %clock64."""
EVENT_BIT = 22
"""Set in the tag of an event's records (Triton 3.9)."""


class LayoutError(ValueError):
    """A buffer that is not Triton's layout (bad preamble, sizes that do not add up)."""


@dataclass(slots=True)
class Decoded:
    """One launch's scope events, one row per warp's pass through a scope (or an event's
    start and end)."""

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
    end_warp: np.ndarray
    """The warp that wrote the end: `warp` but for an event ended in another warp."""
    event: np.ndarray
    """True for an event's pair (Triton 3.9's trace lays events out apart from scopes)."""
    ctas: np.ndarray
    """One row per CTA read (its preamble there): launch number, program id, pre-final time
    (%globaltimer ns, when it began writing its records out) and post-final time (done)."""
    num_blocks: int
    num_warps: int
    dropped: int = 0
    """Records lost because a warp's segment was full (oldest first)."""
    needed_bytes: int = 0
    """The per-CTA segment bytes (buffer_size) that would have held every record."""
    unbalanced: dict[int, int] = field(default_factory=dict)
    """Scope id -> records with no partner (a start never ended, an end never started; an
    event's in its CTA), left out rather than paired wrong."""
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
        LayoutError: the buffer does not hold Triton's layout.
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
                          f"{scratch_size}-byte block: not Triton's layout")
    counts = words[:, HEADER_WORDS + uids].astype(np.int64)  # (blocks, recorded warps)
    segs = words[:, first:first + seg_words * nseg].reshape(-1, nseg, seg_words)

    # chronological order in each circular segment: start at the oldest kept record
    cap = seg_words // 2
    written = counts // 2
    kept = np.minimum(written, cap)
    over = written > cap
    dropped = int((written - kept).sum())
    needed = int(counts.max(initial=0)) * 4 * nseg
    start_at = np.where(over, written % max(cap, 1), 0)
    # only as many slots as the fullest warp kept: most warps write a few records
    k = np.arange(int(kept.max(initial=0)))
    b_i, w_i, k_i = np.nonzero(k < kept[..., None])
    slot = (start_at[b_i, w_i] + k_i) % max(cap, 1)
    r = segs.reshape(segs.shape[0], nseg, cap, 2)[b_i, w_i, slot]
    tag, low = r[:, 0].astype(np.uint64), r[:, 1].astype(np.uint64)
    is_end = ((tag >> np.uint64(31)) & np.uint64(1)).astype(np.int64)
    scope = ((tag >> np.uint64(23)) & np.uint64(0xFF)).astype(np.int64)
    event = ((tag >> np.uint64(EVENT_BIT)) & np.uint64(1)).astype(bool)
    clock = ((tag & np.uint64(0x7FF)) << np.uint64(32)) | low

    unbalanced: dict[int, int] = {}
    reordered: dict[int, int] = {}
    if event.any():  # Triton 3.9's events: set apart from the scopes, paired per CTA
        sc = ~event
        pb, pw, ps, start, end = _pair_scopes(b_i[sc], w_i[sc], scope[sc], is_end[sc],
                                              clock[sc], nseg, over, unbalanced, reordered)
        eb, ew, es, estart, eend, eend_w = _pair_events(
            b_i[event], w_i[event], scope[event], is_end[event], clock[event], over,
            unbalanced)
        blk, warp_i, end_i = np.concatenate([pb, eb]), np.concatenate([pw, ew]), \
            np.concatenate([pw, eend_w])
        is_event = np.concatenate([np.zeros(pb.size, bool), np.ones(eb.size, bool)])
        ps, start, end = np.concatenate([ps, es]), np.concatenate([start, estart]), \
            np.concatenate([end, eend])
    else:
        blk, warp_i, ps, start, end = _pair_scopes(b_i, w_i, scope, is_end, clock, nseg, over,
                                                   unbalanced, reordered)
        end_i = warp_i
        is_event = np.zeros(blk.size, bool)
    per_block_min = np.full(words.shape[0], np.iinfo(np.uint64).max, np.uint64)
    np.minimum.at(per_block_min, blk, start)
    pids = words[:, 1].astype(np.int64)
    final, post = (_u64(words[:, i], words[:, i + 1]).astype(np.int64) for i in (6, 8))
    return Decoded(block=pids[blk], sm=words[:, 2].astype(np.int64)[blk], warp=uids[warp_i],
                   scope=ps, launch=label[blk], start=start.astype(np.int64),
                   end=end.astype(np.int64),
                   init_ns=_u64(words[:, 4], words[:, 5])[blk].astype(np.int64),
                   block_min_clock=per_block_min[blk].astype(np.int64), end_warp=uids[end_i],
                   event=is_event,
                   ctas=np.stack([label.astype(np.int64), pids, final, post], axis=1),
                   num_blocks=num_blocks, num_warps=num_warps,
                   dropped=dropped, needed_bytes=needed, unbalanced=unbalanced,
                   reordered=reordered, bad_blocks=bad_blocks)


def _count(into: dict[int, int], ids: np.ndarray) -> None:
    if ids.size:
        got, n = np.unique(ids, return_counts=True)
        for i, c in zip(got.tolist(), n.tolist()):
            into[i] = into.get(i, 0) + c


def _pair_scopes(b_i, w_i, scope, is_end, clock, nseg: int, over: np.ndarray,
                 unbalanced: dict, reordered: dict) -> tuple:
    """Scope records paired per (block, warp, scope) in time order: start then end, else
    unbalanced. Returns (block, warp index, scope, start, end) of the pairs."""
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
    _count(unbalanced, s_s[~(pair | partner) & ~over[b_s, w_s]])
    p = np.nonzero(pair)[0]
    start, end = c_s[p], c_s[p + 1]
    back = end < start
    wrapped = back & ((start - end) > np.uint64(1 << (CLOCK_BITS - 1)))
    end = np.where(wrapped, end + np.uint64(1 << CLOCK_BITS), end)  # the 43-bit clock wrapped
    bad = back & ~wrapped
    _count(reordered, s_s[p][bad])
    p, start, end = p[~bad], start[~bad], end[~bad]
    return b_s[p], w_s[p], s_s[p], start, end


def _pair_events(b_i, w_i, scope, is_end, clock, over: np.ndarray,
                 unbalanced: dict) -> tuple:
    """Event records paired within their CTA in clock order (the module's docstring; the C
    decoder's twin). Returns (block, start's warp index, id, start, end, end's warp index)."""
    empty = np.zeros(0, np.int64)
    if not b_i.size:
        return empty, empty, empty, empty.astype(np.uint64), empty.astype(np.uint64), empty
    # by block, then clock, starts before ends at one clock, then as collected (warp by warp)
    order = np.lexsort((np.arange(b_i.size), is_end, clock, b_i))
    out: list[tuple] = []
    pending: dict[tuple[int, int], list] = {}  # (block, id) -> [(warp, clock), ...], oldest first
    for b, w, sid, e, c in zip(b_i[order].tolist(), w_i[order].tolist(), scope[order].tolist(),
                               is_end[order].tolist(), clock[order].tolist()):
        queue = pending.setdefault((b, sid), [])
        if not e:
            queue.append((w, c))
            continue
        mine = next((s for s in queue if s[0] == w), queue[0] if queue else None)
        if mine is None:
            if not over[b, w]:
                unbalanced[sid] = unbalanced.get(sid, 0) + 1
            continue
        queue.remove(mine)
        out.append((b, mine[0], sid, mine[1], c, w))
    for (b, sid), queue in pending.items():
        left = sum(1 for s in queue if not over[b, s[0]])
        if left:
            unbalanced[sid] = unbalanced.get(sid, 0) + left
    cols = np.array(out, np.uint64).reshape(-1, 6)
    i64 = cols.astype(np.int64)
    return i64[:, 0], i64[:, 1], i64[:, 2], cols[:, 3], cols[:, 4], i64[:, 5]


def encode(blocks: list[dict], scratch_size: int, num_warps: int, seg_bytes: int,
           warps: tuple[int, ...] | None = None) -> bytes:
    """A buffer in Triton's layout, for tests: each block a dict with pid, sm, init_ns (and
    final_ns, post_ns: its pre- and post-final times, init_ns when absent) and `warps`:
    {warp: [(is_end, scope, clock[, event]), ...]} in the order written (a warp that writes
    more than its segment holds wraps around, as the GPU's does; event 1 sets the event bit).
    `warps` (the function's): the recorded warps, a segment each (every warp when None)."""
    out = np.zeros((len(blocks), scratch_size // 4), "<u4")
    uids = list(range(num_warps)) if warps is None else list(warps)
    seg_words = seg_bytes // 8 // len(uids) * 2
    first = HEADER_WORDS + num_warps
    for i, blk in enumerate(blocks):
        w = out[i]
        w[0], w[1], w[2], w[3] = PREAMBLE, blk["pid"], blk["sm"], seg_bytes
        init = blk.get("init_ns", 0)
        for at, ns in ((4, init), (6, blk.get("final_ns", init)), (8, blk.get("post_ns", init))):
            w[at], w[at + 1] = ns & 0xFFFFFFFF, ns >> 32
        for warp, recs in blk["warps"].items():
            w[HEADER_WORDS + warp] = 2 * len(recs)
            base = first + uids.index(warp) * seg_words
            for n, (is_end, scope, clock, *event) in enumerate(recs):
                slot = (2 * n) % seg_words
                flag = (event[0] if event else 0) << EVENT_BIT
                w[base + slot] = (is_end << 31) | (scope << 23) | flag | ((clock >> 32) & 0x7FF)
                w[base + slot + 1] = clock & 0xFFFFFFFF
    return out.tobytes()
