"""Kernel scope buffers (data/intra.py's layout) decoded in C: many launches of one kernel in
one call that releases the GIL, built at first use with the machine's C compiler (as
cupti/native.py builds its helper, same cache); data/intra.decode does it in numpy when there
is no compiler or PROTON_NATIVE=0.

Why: numpy's decode makes ~20 passes and fancy-indexed gathers over the records (~0.2 us a
record, ~50 us a launch of 8 CTAs x 4 warps x 4 scopes on the build machine); this walks each
warp's records once, pairing them per scope with a pending start per scope id (~5 ns a record).
Event records (Triton 3.9) are set aside as the walk meets them and paired once their CTA's
warps are read (sorted by clock; data/intra pairs them in Python, one record at a time).
"""
from __future__ import annotations

import ctypes
import subprocess
import threading

import numpy as np

from ..cupti import native
from ..data import intra
from ..report import warn

SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PREAMBLE 0xDEADBEEFu
#define HEADER 10
#define CLOCK_BITS 43
#define EVENT_BIT 22

/* Bound on the events of `nlaunch` launches (offsets in bytes into `buf`, `nblocks` CTAs of
   `scratch` bytes each; `warps` counters per CTA, a segment for each of the `nuids` warps in
   `uids`): the pairs the kept records of each CTA could make (events pair across its warps).
   -1: a block whose segments do not fit. */
int64_t proton_intra_bound(const uint8_t *buf, const int64_t *offsets, const int64_t *nblocks,
                           int64_t nlaunch, int64_t scratch, int32_t warps,
                           const int32_t *uids, int32_t nuids) {
    int64_t total = 0, words = scratch / 4;
    for (int64_t l = 0; l < nlaunch; l++)
        for (int64_t b = 0; b < nblocks[l]; b++) {
            const uint32_t *w = (const uint32_t *)(buf + offsets[l] + b * scratch);
            if (w[0] != PREAMBLE) continue;
            int64_t seg = (int64_t)w[3] / 8 / nuids * 2, cap = seg / 2, records = 0;
            if (HEADER + warps + seg * nuids > words) return -1;
            for (int32_t k = 0; k < nuids; k++) {
                int64_t kept = (int64_t)(w[HEADER + uids[k]] / 2);
                records += kept < cap ? kept : cap;
            }
            total += records / 2;
        }
    return total;
}

/* An event's record, kept until its CTA's warps are read (then paired in clock order). */
typedef struct { uint64_t clock; int32_t k, id, end, seq; } endpoint;

static int by_clock(const void *a, const void *b) {
    const endpoint *x = a, *y = b;
    if (x->clock != y->clock) return x->clock < y->clock ? -1 : 1;
    if (x->end != y->end) return x->end - y->end;
    return x->seq - y->seq;
}

/* Decode as data/intra.decode does (see its comments): out[0..10] are the columns launch,
   block (program id), sm, warp, scope, start, end, init_ns, block_min_clock, end_warp, event
   (1: an event's pair), each `cap` long; ctas: 4 words a CTA read (launch, program id,
   pre-final and post-final ns); stats: [events, dropped, needed_bytes, bad_blocks, layout
   error (0 ok, 1 sizes differ, 2 do not fit, 3 out of memory), CTAs read]; unbalanced and
   reordered: 256 counts by scope id. */
void proton_intra_decode(const uint8_t *buf, const int64_t *offsets, const int64_t *nblocks,
                         int64_t nlaunch, int64_t scratch, int32_t warps,
                         const int32_t *uids, int32_t nuids, int64_t **out,
                         int64_t cap, int64_t *ctas, int64_t *stats, int64_t *unbalanced,
                         int64_t *reordered) {
    int64_t n = 0, dropped = 0, needed = 0, bad = 0, words = scratch / 4, nctas = 0;
    int64_t seg_bytes = -1;
    uint64_t pending[256];
    uint8_t has[256] = {0}, seen[256] = {0}, touched[256];
    /* a CTA holds at most scratch / 8 records: room for its event records, and for each
       one the next pending start of its id (-1 ends a list) */
    int64_t room = scratch / 8 + 1;
    endpoint *ev = malloc(room * sizeof(endpoint));
    int32_t *next = malloc(room * sizeof(int32_t));
    uint8_t *over = malloc(nuids ? nuids : 1);
    int32_t head[256];
    stats[4] = 0;
    if (!ev || !next || !over) { stats[4] = 3; goto done; }
    for (int64_t l = 0; l < nlaunch; l++)
        for (int64_t b = 0; b < nblocks[l]; b++) {
            const uint32_t *w = (const uint32_t *)(buf + offsets[l] + b * scratch);
            if (w[0] != PREAMBLE) { bad++; continue; }
            if (seg_bytes < 0) seg_bytes = w[3];
            if ((int64_t)w[3] != seg_bytes) { stats[4] = 1; goto done; }
            int64_t seg = (int64_t)w[3] / 8 / nuids * 2, slots = seg / 2;
            if (HEADER + warps + seg * nuids > words) { stats[4] = 2; goto done; }
            uint64_t init = (uint64_t)w[4] | ((uint64_t)w[5] << 32);
            int64_t *cta = ctas + 4 * nctas++;
            cta[0] = l; cta[1] = w[1];
            cta[2] = (int64_t)((uint64_t)w[6] | ((uint64_t)w[7] << 32));
            cta[3] = (int64_t)((uint64_t)w[8] | ((uint64_t)w[9] << 32));
            int64_t first_event = n, nev = 0;
            uint64_t lo = UINT64_MAX;
            for (int32_t k = 0; k < nuids; k++) {
                int64_t count = w[HEADER + uids[k]], written = count / 2;
                int64_t kept = written < slots ? written : slots;
                over[k] = written > slots;
                if (count * 4 * nuids > needed) needed = count * 4 * nuids;
                dropped += written - kept;
                int64_t at = over[k] ? written % (slots ? slots : 1) : 0;
                const uint32_t *s = w + HEADER + warps + (int64_t)k * seg;
                int ntouched = 0;
                for (int64_t i = 0, slot = at; i < kept; i++, slot = slot + 1 < slots ? slot + 1 : 0) {
                    const uint32_t *r = s + 2 * slot;
                    uint32_t tag = r[0];
                    int end = tag >> 31, id = (tag >> 23) & 0xFF;
                    uint64_t clock = ((uint64_t)(tag & 0x7FF) << 32) | r[1];
                    if ((tag >> EVENT_BIT) & 1) {
                        if (nev < room) {
                            ev[nev].clock = clock; ev[nev].k = k; ev[nev].id = id;
                            ev[nev].end = end; ev[nev].seq = (int32_t)nev; nev++;
                        }
                        continue;
                    }
                    if (!end) {
                        if (has[id] && !over[k]) unbalanced[id]++;
                        if (!seen[id]) { seen[id] = 1; touched[ntouched++] = (uint8_t)id; }
                        pending[id] = clock; has[id] = 1;
                        continue;
                    }
                    if (!has[id]) { if (!over[k]) unbalanced[id]++; continue; }
                    has[id] = 0;
                    uint64_t start = pending[id], stop = clock;
                    if (stop < start) {
                        if (start - stop > (1ull << (CLOCK_BITS - 1))) stop += 1ull << CLOCK_BITS;
                        else { reordered[id]++; continue; }
                    }
                    if (n >= cap) continue; /* never: the bound holds every pair */
                    out[0][n] = l; out[1][n] = w[1]; out[2][n] = w[2]; out[3][n] = uids[k];
                    out[4][n] = id; out[5][n] = (int64_t)start; out[6][n] = (int64_t)stop;
                    out[9][n] = uids[k]; out[10][n] = 0;
                    if (start < lo) lo = start;
                    n++;
                }
                for (int t = 0; t < ntouched; t++) { /* starts never ended */
                    if (has[touched[t]] && !over[k]) unbalanced[touched[t]]++;
                    has[touched[t]] = seen[touched[t]] = 0;
                }
            }
            if (nev) { /* events: in clock order, an end takes its warp's oldest pending start
                          of the id, else the oldest of any warp */
                qsort(ev, nev, sizeof(endpoint), by_clock);
                for (int t = 0; t < 256; t++) head[t] = -1;
                for (int64_t e = 0; e < nev; e++) {
                    int id = ev[e].id;
                    if (!ev[e].end) { /* append to the id's list of pending starts */
                        next[e] = -1;
                        if (head[id] < 0) head[id] = (int32_t)e;
                        else { int32_t t = head[id]; while (next[t] >= 0) t = next[t]; next[t] = (int32_t)e; }
                        continue;
                    }
                    int32_t pick = -1, prev = -1, pick_prev = -1;
                    for (int32_t t = head[id]; t >= 0; prev = t, t = next[t])
                        if (ev[t].k == ev[e].k) { pick = t; pick_prev = prev; break; }
                    if (pick < 0 && head[id] >= 0) { pick = head[id]; pick_prev = -1; }
                    if (pick < 0) { if (!over[ev[e].k]) unbalanced[id]++; continue; }
                    if (pick_prev < 0) head[id] = next[pick]; else next[pick_prev] = next[pick];
                    if (n >= cap) continue;
                    out[0][n] = l; out[1][n] = w[1]; out[2][n] = w[2]; out[3][n] = uids[ev[pick].k];
                    out[4][n] = id; out[5][n] = (int64_t)ev[pick].clock;
                    out[6][n] = (int64_t)ev[e].clock; out[9][n] = uids[ev[e].k];
                    out[10][n] = 1;
                    if (ev[pick].clock < lo) lo = ev[pick].clock;
                    n++;
                }
                for (int t = 0; t < 256; t++) /* starts never ended */
                    for (int32_t s = head[t]; s >= 0; s = next[s])
                        if (!over[ev[s].k]) unbalanced[t]++;
            }
            for (int64_t e = first_event; e < n; e++) {
                out[7][e] = (int64_t)init; out[8][e] = (int64_t)lo;
            }
        }
done:
    free(ev); free(next); free(over);
    stats[0] = n; stats[1] = dropped; stats[2] = needed; stats[3] = bad; stats[5] = nctas;
}
"""
COLUMNS = ("launch", "block", "sm", "warp", "scope", "start", "end", "init_ns",
           "block_min_clock", "end_warp", "event")

_lock = threading.Lock()
_lib: dict[str, ctypes.CDLL | None] = {}


def library_path() -> str:
    return native.cached_path("intra", (SOURCE,), native.OTHER_FLAGS)


def helper() -> ctypes.CDLL | None:
    """The compiled decoder; None (said once) without a compiler or with PROTON_NATIVE=0."""
    if not native.enabled():
        return None
    path = library_path()
    with _lock:
        if path in _lib:
            return _lib[path]
        lib = None
        try:
            # as cupti/native's helper: a private folder, no file another user could place
            lib = native.load_cached(path, lambda p: native.compile_source(p, SOURCE))
            ptr, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
            lib.proton_intra_bound.argtypes = (ptr, ptr, ptr, i64, i64, i32, ptr, i32)
            lib.proton_intra_bound.restype = ctypes.c_int64
            lib.proton_intra_decode.argtypes = (ptr, ptr, ptr, i64, i64, i32, ptr, i32, ptr, i64,
                                                ptr, ptr, ptr, ptr)
            lib.proton_intra_decode.restype = None
        except (OSError, subprocess.SubprocessError, native.BuildError) as exc:
            warn(f"instrumentation: decoding kernel scope buffers in numpy, which costs more "
                 f"per launch: the C helper could not be built ({exc}); install a C compiler "
                 f"(cc) or set {native.NATIVE_ENV}=0 to silence this")
        _lib[path] = lib
        return lib


def decode_launches(host: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, scratch: int,
                    num_warps: int, warps: tuple[int, ...] | None = None) -> intra.Decoded:
    """Every launch of one kernel in `host` (launch i: `sizes[i]` bytes at `offsets[i]`) at
    once, Decoded.launch numbering them; in C when built, else data/intra.decode. `warps`:
    the recorded warps (intra.recorded_warps; every warp when None).

    Raises:
        intra.LayoutError: the buffers do not hold Triton's layout.
    """
    offsets = np.ascontiguousarray(offsets, np.int64)
    counts = np.ascontiguousarray(np.asarray(sizes, np.int64) // scratch)
    if scratch <= 0 or scratch % 4:
        raise intra.LayoutError(f"profile_scratch_size {scratch} is not a positive multiple "
                                "of 4")
    if offsets.size and int((offsets + counts * scratch).max()) > host.size:
        raise intra.LayoutError(f"launches reach past the {host.size}-byte buffer")
    uids = np.ascontiguousarray(range(num_warps) if warps is None else warps, np.int32)
    if not uids.size or int(uids.min()) < 0 or int(uids.max()) >= num_warps:
        raise intra.LayoutError(f"recorded warps {uids.tolist()[:8]} are not warps of "
                                f"{num_warps}")
    lib = helper()
    if lib is None:
        return _numpy(host, offsets, counts, scratch, num_warps, tuple(uids.tolist()))
    host = np.ascontiguousarray(host).view(np.uint8)
    base, off, nb = host.ctypes.data, offsets.ctypes.data, counts.ctypes.data
    bound = lib.proton_intra_bound(base, off, nb, offsets.size, scratch, num_warps,
                                   uids.ctypes.data, uids.size)
    if bound < 0:
        raise intra.LayoutError(f"the per-warp segments of {uids.size} warps do not fit a "
                                f"{scratch}-byte block: not Triton's layout")
    cols = np.empty((len(COLUMNS), max(bound, 1)), np.int64)
    ptrs = (ctypes.c_void_p * len(COLUMNS))(*[cols[i].ctypes.data for i in range(len(COLUMNS))])
    stats = np.zeros(6, np.int64)
    unbalanced, reordered = np.zeros(256, np.int64), np.zeros(256, np.int64)
    ctas = np.empty((max(int(counts.sum()), 1), 4), np.int64)
    lib.proton_intra_decode(base, off, nb, offsets.size, scratch, num_warps, uids.ctypes.data,
                            uids.size, ptrs, cols.shape[1], ctas.ctypes.data, stats.ctypes.data,
                            unbalanced.ctypes.data, reordered.ctypes.data)
    if stats[4] == 3:
        raise MemoryError("instrumentation: no memory for a CTA's event records")
    if stats[4]:
        raise intra.LayoutError("segment sizes differ between CTAs")
    n = int(stats[0])
    c = dict(zip(COLUMNS, cols[:, :n]))
    return intra.Decoded(block=c["block"], sm=c["sm"], warp=c["warp"], scope=c["scope"],
                         start=c["start"], end=c["end"], launch=c["launch"],
                         init_ns=c["init_ns"], block_min_clock=c["block_min_clock"],
                         end_warp=c["end_warp"], event=c["event"].astype(bool),
                         ctas=ctas[:int(stats[5])],
                         num_blocks=int(counts.sum()), num_warps=num_warps,
                         dropped=int(stats[1]), needed_bytes=int(stats[2]),
                         unbalanced=_nonzero(unbalanced), reordered=_nonzero(reordered),
                         bad_blocks=int(stats[3]))


def _nonzero(counts: np.ndarray) -> dict[int, int]:
    ids = np.nonzero(counts)[0]
    return dict(zip(ids.tolist(), counts[ids].tolist()))


def _numpy(host: np.ndarray, offsets: np.ndarray, counts: np.ndarray, scratch: int,
           num_warps: int, warps: tuple[int, ...]) -> intra.Decoded:
    label = np.repeat(np.arange(offsets.size), counts)
    sizes = counts * scratch
    if offsets.size and np.all(offsets[1:] == offsets[:-1] + sizes[:-1]):  # side by side
        blocks = host[offsets[0]:offsets[-1] + sizes[-1]]
    else:
        blocks = np.concatenate([host[o:o + n] for o, n in zip(offsets, sizes)] or
                                [np.zeros(0, np.uint8)])
    return intra.decode(blocks, scratch, num_warps, label=label, warps=warps)
