/* Kernel scope buffers decoded in C for data/intra's layout (see intra_native.py; built at
   first use by cupti/c_loader.py, which derives each PROTON_API function's ctypes
   signature from its definition here). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What Python calls (the library is built with -fvisibility=hidden: nothing else is seen). */
#define PROTON_API __attribute__((visibility("default")))

#define PREAMBLE 0xDEADBEEFu
#define HEADER 10
#define CLOCK_BITS 43
#define EVENT_BIT 22

/* Bound on the events of `nlaunch` launches (offsets in bytes into `buf`, `nblocks` CTAs of
   `scratch` bytes each; `warps` counters per CTA, a segment for each of the `nuids` warps in
   `uids`): the pairs the kept records of each CTA could make (events pair across its warps).
   -1: a block whose segments do not fit. */
PROTON_API int64_t proton_intra_bound(const uint8_t *buf, const int64_t *offsets,
                                      const int64_t *nblocks, int64_t nlaunch, int64_t scratch,
                                      int32_t warps, const int32_t *uids, int32_t nuids) {
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
PROTON_API void proton_intra_decode(const uint8_t *buf, const int64_t *offsets,
                                    const int64_t *nblocks, int64_t nlaunch, int64_t scratch,
                                    int32_t warps, const int32_t *uids, int32_t nuids,
                                    int64_t **out, int64_t cap, int64_t *ctas, int64_t *stats,
                                    int64_t *unbalanced, int64_t *reordered) {
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
