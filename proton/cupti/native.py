"""A small C helper, compiled at first use with the machine's C compiler and cached (as Triton
builds its launchers), for the per-record work on CUPTI's thread; Python does it when there is
no compiler.

Walking a completed activity buffer costs a ctypes call per record from Python (three records a
launch) while holding the GIL, so the thread that launches waits. The helper walks the whole
buffer with CUPTI's own cuptiActivityGetNextRecord in one call that releases the GIL, and hands
back the records' offsets. It binds nothing at build time (CUPTI's function comes as a pointer
at run time), so one build serves every libcupti; the cache is keyed by the source's hash.

It also reads the records' fields as it walks (`Columns`: one call per buffer instead of a
numpy gather per field) and, for the shadow context, joins them (`Join`: the Attributor's
common case, kernels summed per call path), so that Python sees a buffer's sums, not its
records.

PROTON_NATIVE=0 keeps everything in Python; PROTON_NATIVE=walk only walks in C (fields read
with numpy, joined in Python: the step before, for A/B runs); PROTON_CACHE_DIR moves the cache
(default $XDG_CACHE_HOME/proton or ~/.cache/proton).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading

import numpy as np

from ..report import debug, warn

SOURCE = r"""
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*proton_next_fn)(uint8_t *buffer, size_t valid, void **record);

/* The offsets of a completed CUPTI activity buffer's records, walked with CUPTI's
   cuptiActivityGetNextRecord (`next`), at most `cap`; returns how many. */
int64_t proton_walk(proton_next_fn next, uint8_t *buffer, size_t valid, int64_t *offsets,
                    int64_t cap) {
    void *record = NULL;
    int64_t n = 0;
    while (n < cap && next(buffer, valid, &record) == 0)
        offsets[n++] = (int64_t)((uint8_t *)record - buffer);
    return n;
}

/* Walk as proton_walk does and copy the fields of the records of chosen kinds into columns of
   int64: a record whose kind (the uint32 it starts with) has group[kind] = g >= 0 adds a row to
   group g, its field f (the little-endian integer of sizes[i] bytes at offsets[i], i =
   first[g] + f, sign-extended when signs[i]) going to out[g][f * cap[g] + row]. A group has at
   most cap[g] rows (the caller sizes it for the buffer); rows[g] says how many it got. Returns
   the records walked. */
int64_t proton_columns(proton_next_fn next, uint8_t *buffer, size_t valid,
                       int32_t ngroups, int32_t nkinds, const int32_t *group,
                       const int32_t *nfields, const int32_t *first, const int32_t *offsets,
                       const int32_t *sizes, const int32_t *signs, int64_t **out,
                       const int64_t *cap, int64_t *rows) {
    void *record = NULL;
    int64_t n = 0;
    for (int32_t g = 0; g < ngroups; g++)
        rows[g] = 0;
    while (next(buffer, valid, &record) == 0) {
        const uint8_t *r = (const uint8_t *)record;
        uint32_t kind;
        n++;
        memcpy(&kind, r, sizeof kind);
        if (kind >= (uint32_t)nkinds || group[kind] < 0)
            continue;
        int32_t g = group[kind];
        if (rows[g] >= cap[g])
            continue;
        int64_t row = rows[g]++;
        for (int32_t f = 0; f < nfields[g]; f++) {
            int32_t i = first[g] + f, size = sizes[i];
            uint64_t v = 0;
            memcpy(&v, r + offsets[i], (size_t)size);
            if (signs[i] && size < 8 && ((v >> (8 * size - 1)) & 1))
                v |= ~(uint64_t)0 << (8 * size);
            out[g][f * cap[g] + row] = (int64_t)v;
        }
    }
    return n;
}

/* ---- the join: CUPTI records matched by correlation id, kernels summed per call path ------
   The shadow context's common case runs here, outside the GIL: a launch's external
   correlation record gives its path, its API record its start time, its kernel record its
   time; a buffer's kernels come back summed per (path, name, device, launch configuration).
   What needs Python goes back to it, with everything of the same launch: launches with no
   path (no scope open on their thread nor the main thread's: the main thread's timeline
   decides, as without the launch log), graph launches and their kernels
   (placed by where they were captured), and launches while a stream capture is known. */

#define EMPTY INT64_MIN

/* Maps keyed by correlation id: linear probing from the id itself (its low bits). The ids
   count up, so the entries waiting at any time sit at their own slots like a ring, in cache,
   and an absent id finds an empty slot at once; a mixing hash scattered them (~4 cache
   misses a launch). Deletion shifts the entries after back (no tombstones: an id absent
   stays one probe), looking no further than the farthest any entry sits from its slot. */
typedef struct {
    int64_t *slots; /* cap slots of `width` words: the key, then its values */
    int64_t cap, live, peak; /* peak: the most entries since the last map_trim */
    int64_t low; /* map_trims in a row that found it under an eighth full */
    uint64_t far; /* no entry sits more than this many slots past its own */
    int32_t width;
} proton_map;

static uint64_t proton_hash(uint64_t k) { /* for the groups' composite keys */
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL;
    return k ^ (k >> 33);
}

static int map_init(proton_map *m, int32_t width, int64_t cap) {
    m->slots = (int64_t *)malloc((size_t)(cap * width) * sizeof(int64_t));
    if (!m->slots) return -1;
    for (int64_t i = 0; i < cap; i++) m->slots[i * width] = EMPTY;
    m->cap = cap; m->live = m->peak = m->low = 0; m->far = 0; m->width = width;
    return 0;
}

/* The slot of `key`, or NULL. */
static int64_t *map_find(const proton_map *m, int64_t key) {
    uint64_t mask = (uint64_t)m->cap - 1;
    for (uint64_t i = (uint64_t)key & mask;; i = (i + 1) & mask) {
        int64_t *s = m->slots + i * m->width;
        if (s[0] == key) return s;
        if (s[0] == EMPTY) return NULL;
    }
}

/* Move every entry into a table of `cap` slots (a power of two above twice the entries). */
static int map_resize(proton_map *m, int64_t cap) {
    proton_map bigger;
    if (map_init(&bigger, m->width, cap) != 0) return -1;
    uint64_t mask = (uint64_t)bigger.cap - 1;
    for (int64_t i = 0; i < m->cap; i++) {
        int64_t *s = m->slots + i * m->width;
        if (s[0] == EMPTY) continue;
        uint64_t home = (uint64_t)s[0] & mask, j = home;
        while (bigger.slots[j * m->width] != EMPTY) j = (j + 1) & mask;
        if (((j - home) & mask) > bigger.far) bigger.far = (j - home) & mask;
        memcpy(bigger.slots + j * m->width, s, (size_t)m->width * sizeof(int64_t));
    }
    bigger.live = m->live;
    bigger.peak = m->peak;
    free(m->slots);
    *m = bigger;
    return 0;
}

#define MAP_MIN 1024 /* a table is never shrunk below this many slots */

/* The slot of `key`, added (values unset) when missing; NULL when out of memory. */
static int64_t *map_put(proton_map *m, int64_t key) {
    int64_t *found = map_find(m, key);
    if (found) return found;
    if ((m->live + 1) * 2 > m->cap && map_resize(m, m->cap * 2) != 0) return NULL;
    uint64_t mask = (uint64_t)m->cap - 1, home = (uint64_t)key & mask;
    for (uint64_t i = home;; i = (i + 1) & mask) {
        int64_t *s = m->slots + i * m->width;
        if (s[0] == EMPTY) {
            if (((i - home) & mask) > m->far) m->far = (i - home) & mask;
            if (++m->live > m->peak) m->peak = m->live;
            s[0] = key;
            return s;
        }
    }
}

/* Remove the entry at `slot`: each later entry of its run whose own slot is not between
   the hole and it moves back into the hole (none further than `far` past the hole can). */
static void map_drop(proton_map *m, int64_t *slot) {
    uint64_t mask = (uint64_t)m->cap - 1, hole = (uint64_t)(slot - m->slots) / m->width;
    for (uint64_t j = (hole + 1) & mask; ((j - hole) & mask) <= m->far; j = (j + 1) & mask) {
        int64_t *s = m->slots + j * m->width;
        if (s[0] == EMPTY) break;
        uint64_t home = (uint64_t)s[0] & mask;
        int stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        memcpy(m->slots + hole * m->width, s, (size_t)m->width * sizeof(int64_t));
        hole = j;
    }
    m->slots[hole * m->width] = EMPTY;
    m->live--;
}

/* Between buffers: a table whose entries never filled an eighth of it over TRIM_AFTER calls
   in a row shrinks (after a burst of waiting launches, the memory comes back). A buffer's
   usual rise and fall, and full buffers between partly filled ones, keep its size: shrunk and
   grown again, the freed tables stayed resident in glibc's heap (10 MB over 60 buffers,
   bench/buffer_costs.py --buffers). */
#define TRIM_AFTER 64
static void map_trim(proton_map *m) {
    if (m->cap > MAP_MIN && m->peak * 8 < m->cap) {
        if (++m->low >= TRIM_AFTER) {
            int64_t cap = MAP_MIN;
            while (cap < m->peak * 4) cap *= 2;
            map_resize(m, cap); /* kept as it is when there is no memory */
            m->low = 0;
        }
    } else {
        m->low = 0;
    }
    m->peak = m->live;
}

enum { K_CORR, K_NAME, K_DEVICE, K_START, K_END, K_STREAM, K_BLOCKS, K_THREADS, K_REGS,
       K_SHARED, K_GRAPH_NODE, K_FIELDS };
enum { G_PATH, G_NAME, G_DEVICE, G_BLOCKS, G_THREADS, G_REGS, G_SHARED, G_NS, G_COUNT,
       G_FIELDS };
enum { R_PATH, R_LAUNCH, R_CORR, R_NAME, R_DEVICE, R_START, R_END, R_STREAM, R_BLOCKS,
       R_THREADS, R_REGS, R_SHARED, R_FIELDS };
enum { OUT_GROUPS, OUT_ROWS, OUT_EXT, OUT_API, OUT_KERNELS, OUT_FIRST, OUT_LAUNCHES,
       OUT_COUNTS };
enum { LAUNCH_IN_PYTHON = 1, KERNELS_IN_PYTHON = 2 };

typedef struct {
    proton_map ext;      /* correlation id -> path */
    proton_map launches; /* correlation id -> path, start: waiting for its kernel */
    proton_map deferred; /* correlation id -> LAUNCH_IN_PYTHON: its kernel goes there too;
                            KERNELS_IN_PYTHON: so does its launch (several came early) */
    proton_map early;    /* correlation id -> a kernel (K_FIELDS) whose launch has not come */
    int64_t newest;      /* the latest start of a launch put in `launches` */
    /* a buffer's working memory, kept for the next: allocated anew per buffer, glibc kept
       the freed blocks in its heap (its mmap threshold rises after a free), some 26 MB of
       peak RSS on 1M launches (H100, 2026-11-23) */
    int64_t *scratch, scratch_cap, *group_slots, group_cap;
} proton_join;

/* `*p` holding at least `need` words (grown, never shrunk; contents kept); NULL when out of
   memory. */
static int64_t *reserve(int64_t **p, int64_t *cap, int64_t need) {
    if (need > *cap) {
        int64_t want = need > 2 * *cap ? need : 2 * *cap;
        int64_t *grown = (int64_t *)realloc(*p, (size_t)want * sizeof(int64_t));
        if (!grown) return NULL;
        *p = grown; *cap = want;
    }
    return *p;
}

proton_join *proton_join_new(void) {
    proton_join *j = (proton_join *)calloc(1, sizeof *j);
    if (!j) return NULL;
    if (map_init(&j->ext, 2, 1024) || map_init(&j->launches, 3, 1024) ||
        map_init(&j->deferred, 2, 64) || map_init(&j->early, 1 + K_FIELDS, 64)) {
        free(j->ext.slots); free(j->launches.slots); free(j->deferred.slots);
        free(j->early.slots); free(j);
        return NULL;
    }
    return j;
}

void proton_join_free(proton_join *j) {
    if (!j) return;
    free(j->scratch); free(j->group_slots);
    free(j->ext.slots); free(j->launches.slots); free(j->deferred.slots);
    free(j->early.slots); free(j);
}

/* The slots of the join's tables (how much memory they hold). */
int64_t proton_join_slots(const proton_join *j) {
    return j->ext.cap + j->launches.cap + j->deferred.cap + j->early.cap;
}

/* The path of the external record of launch `corr` not yet matched, or -1. */
int64_t proton_join_path(const proton_join *j, int64_t corr) {
    const int64_t *e = map_find(&j->ext, corr);
    return e ? e[1] : -1;
}

/* Kernels held back (their launch record has not come): the caller sizes outputs with it. */
int64_t proton_join_early(const proton_join *j) { return j->early.live; }

/* Launches made at or before `ts` still waiting for their kernel (a scan of the table only
   when some may be later: flush asks every 10 ms). */
int64_t proton_join_waiting(const proton_join *j, int64_t ts) {
    if (j->newest <= ts) return j->launches.live;
    int64_t n = 0;
    for (int64_t i = 0; i < j->launches.cap; i++) {
        const int64_t *s = j->launches.slots + i * 3;
        if (s[0] != EMPTY && s[2] <= ts) n++;
    }
    return n;
}

typedef struct {
    int64_t *slots; /* group index + 1, 0 when free */
    int64_t cap;
} proton_groups;

static void copy_kernel(int64_t *to, int64_t stride, int64_t row, const int64_t *k) {
    for (int f = 0; f < K_FIELDS; f++) to[f * stride + row] = k[f];
}

/* One matched kernel: a row, and its sum in its group. */
static void matched(proton_groups *g, int64_t *groups, int64_t *rows, int64_t stride,
                    int64_t *counts, int64_t path, int64_t launch, const int64_t *k) {
    int64_t r = counts[OUT_ROWS]++;
    int64_t row[R_FIELDS] = {path, launch, k[K_CORR], k[K_NAME], k[K_DEVICE], k[K_START],
                             k[K_END], k[K_STREAM], k[K_BLOCKS], k[K_THREADS], k[K_REGS],
                             k[K_SHARED]};
    for (int f = 0; f < R_FIELDS; f++) rows[f * stride + r] = row[f];
    if (launch < counts[OUT_FIRST]) counts[OUT_FIRST] = launch;
    int64_t key[7] = {path, k[K_NAME], k[K_DEVICE], k[K_BLOCKS], k[K_THREADS], k[K_REGS],
                      k[K_SHARED]};
    uint64_t h = 0;
    for (int f = 0; f < 7; f++) h = proton_hash(h ^ (uint64_t)key[f]);
    uint64_t mask = (uint64_t)g->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        int64_t at = g->slots[i] - 1;
        if (at < 0) {
            at = counts[OUT_GROUPS]++;
            g->slots[i] = at + 1;
            for (int f = 0; f < 7; f++) groups[f * stride + at] = key[f];
            groups[G_NS * stride + at] = 0;
            groups[G_COUNT * stride + at] = 0;
        } else {
            int same = 1;
            for (int f = 0; f < 7 && same; f++) same = groups[f * stride + at] == key[f];
            if (!same) continue;
        }
        groups[G_NS * stride + at] += k[K_END] - k[K_START];
        groups[G_COUNT * stride + at] += 1;
        return;
    }
}

/* One buffer's records, as columns: external (n_ext: correlation id, path), launch API
   records that succeeded (n_api: correlation id, start, graph, thread), kernels (n_k rows of
   K_FIELDS columns, stride n_k). Out (each column `stride` long, stride >= n_k + early):
   groups (G_FIELDS), rows (R_FIELDS) of the kernels matched here; for Python, ext (2 columns,
   stride) and api (4 columns) of the launches it must place and kernels (K_FIELDS) of them.
   counts: OUT_COUNTS numbers (groups, rows, ext, api, kernels, the first launch start,
   launch records). Launches started within [capture_from, capture_to] go to Python, which
   knows each thread's stream capture windows (a launch recorded into a graph runs nothing
   and leaves its id in `deferred`: a few words per captured launch). Returns 0, or -1 when
   out of memory (the buffer's records are then lost). */
static int proton_join_add(proton_join *j, int64_t n_ext, const int64_t *ext, int64_t n_api,
                    const int64_t *api, int64_t n_k, const int64_t *kernels,
                    int64_t capture_from, int64_t capture_to, int64_t stride, int64_t *groups,
                    int64_t *rows, int64_t *ext_out, int64_t *api_out, int64_t *kernels_out,
                    int64_t *counts) {
    proton_groups g;
    for (int f = 0; f < OUT_COUNTS; f++) counts[f] = 0;
    counts[OUT_FIRST] = INT64_MAX;
    counts[OUT_LAUNCHES] = n_api;
    map_trim(&j->ext); map_trim(&j->launches); map_trim(&j->deferred); map_trim(&j->early);
    g.cap = 16; /* at most a group per kernel of this buffer or held back */
    while (g.cap < 2 * (n_k + j->early.live + 1)) g.cap *= 2;
    g.slots = reserve(&j->group_slots, &j->group_cap, g.cap);
    if (!g.slots) return -1;
    memset(g.slots, 0, (size_t)g.cap * sizeof(int64_t));
    for (int64_t i = 0; i < n_ext; i++) {
        int64_t *s = map_put(&j->ext, ext[i]);
        if (!s) goto oom;
        s[1] = ext[n_ext + i];
    }
    for (int64_t i = 0; i < n_api; i++) {
        int64_t corr = api[i], start = api[n_api + i], graph = api[2 * n_api + i];
        int64_t *e = map_find(&j->ext, corr), path = e ? e[1] : EMPTY;
        if (e) map_drop(&j->ext, e);
        int64_t *early = map_find(&j->early, corr), *d = map_find(&j->deferred, corr);
        int at_python = d && d[1] == KERNELS_IN_PYTHON;
        if (at_python) map_drop(&j->deferred, d);
        if (graph || path == EMPTY || at_python || (capture_from <= start && start <= capture_to)) {
            /* Python places it */
            int64_t a = counts[OUT_API]++;
            for (int f = 0; f < 4; f++) api_out[f * stride + a] = api[f * n_api + i];
            if (path != EMPTY) {
                int64_t x = counts[OUT_EXT]++;
                ext_out[x] = corr;
                ext_out[stride + x] = path;
            }
            if (early) {
                copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, early + 1);
                map_drop(&j->early, early);
            } else if (!graph && !at_python) {
                if (!(d = map_put(&j->deferred, corr))) goto oom;
                d[1] = LAUNCH_IN_PYTHON;
            }
        } else if (early) {
            matched(&g, groups, rows, stride, counts, path, start, early + 1);
            map_drop(&j->early, early);
        } else {
            int64_t *s = map_put(&j->launches, corr);
            if (!s) goto oom;
            s[1] = path;
            s[2] = start;
            if (start > j->newest) j->newest = start;
        }
    }
    for (int64_t i = 0; i < n_k; i++) {
        int64_t k[K_FIELDS];
        for (int f = 0; f < K_FIELDS; f++) k[f] = kernels[f * n_k + i];
        int64_t *s;
        if (k[K_GRAPH_NODE]) { /* a graph's kernel: Python has its launch */
            copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, k);
        } else if ((s = map_find(&j->launches, k[K_CORR])) != NULL) {
            matched(&g, groups, rows, stride, counts, s[1], s[2], k);
            map_drop(&j->launches, s);
        } else if ((s = map_find(&j->deferred, k[K_CORR])) != NULL) {
            copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, k);
            if (s[1] == LAUNCH_IN_PYTHON) map_drop(&j->deferred, s);
        } else if ((s = map_find(&j->early, k[K_CORR])) != NULL) {
            /* a second kernel before its launch: both, and then the launch, go to Python,
               which keeps any number */
            copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, s + 1);
            map_drop(&j->early, s);
            copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, k);
            if (!(s = map_put(&j->deferred, k[K_CORR]))) goto oom;
            s[1] = KERNELS_IN_PYTHON;
        } else {
            if (!(s = map_put(&j->early, k[K_CORR]))) goto oom;
            memcpy(s + 1, k, sizeof k);
        }
    }
    return 0;
oom:
    return -1;
}

/* proton_join_add on the columns proton_columns read (group 0: external records' correlation
   id, kind, id; 1: API records' kind, correlation id, start, cbid, thread, return value; 2:
   kernel records' correlation id, name, device, start, end, stream, grid x y z, block x y z,
   registers, static and dynamic shared memory, graph node; `cap` the stride of each, `rows`
   their lengths), keeping external ids of kind `custom` and API records of launch calls that
   succeeded: flags[k][cbid] is 1 for a launch, 2 for a graph launch, for API kind
   kinds[k] (k = 0, 1). The rest as proton_join_add. */
int proton_join_records(proton_join *j, int64_t **in, const int64_t *cap, const int64_t *rows,
                        int64_t custom, const int64_t *kinds, const uint8_t *flags0,
                        int64_t nflags0, const uint8_t *flags1, int64_t nflags1,
                        int64_t capture_from, int64_t capture_to, int64_t stride,
                        int64_t *groups, int64_t *out_rows,
                        int64_t *ext_out, int64_t *api_out, int64_t *kernels_out,
                        int64_t *counts) {
    const uint8_t *flags[2] = {flags0, flags1};
    const int64_t nflags[2] = {nflags0, nflags1};
    int64_t n_ext = 0, n_api = 0, n_k = rows[2];
    int64_t *ext = reserve(&j->scratch, &j->scratch_cap,
                           2 * rows[0] + 4 * rows[1] + K_FIELDS * n_k + 1);
    if (!ext) return -1;
    for (int64_t i = 0; i < rows[0]; i++) {
        if (in[0][cap[0] + i] != custom) continue;
        ext[n_ext++] = in[0][i];
    }
    for (int64_t i = 0, x = 0; i < rows[0]; i++)
        if (in[0][cap[0] + i] == custom) ext[n_ext + x++] = in[0][2 * cap[0] + i];
    int64_t *api = ext + 2 * n_ext, m = rows[1];
    for (int64_t i = 0; i < m; i++) { /* columns `m` long first, then packed */
        const int64_t *a = in[1];
        int64_t kind = a[i], cbid = a[3 * cap[1] + i];
        int k = kind == kinds[0] ? 0 : kind == kinds[1] ? 1 : -1;
        if (k < 0 || cbid < 0 || cbid >= nflags[k] || !flags[k][cbid] || a[5 * cap[1] + i])
            continue;
        api[n_api] = a[cap[1] + i];
        api[m + n_api] = a[2 * cap[1] + i];
        api[2 * m + n_api] = flags[k][cbid] == 2;
        api[3 * m + n_api++] = a[4 * cap[1] + i];
    }
    for (int f = 1; f < 4; f++)
        memmove(api + f * n_api, api + f * m, (size_t)n_api * sizeof(int64_t));
    int64_t *kern = api + 4 * n_api;
    const int64_t *k = in[2], c = cap[2];
    for (int64_t i = 0; i < n_k; i++) {
        kern[K_CORR * n_k + i] = k[i];
        kern[K_NAME * n_k + i] = k[c + i];
        kern[K_DEVICE * n_k + i] = k[2 * c + i];
        kern[K_START * n_k + i] = k[3 * c + i];
        kern[K_END * n_k + i] = k[4 * c + i];
        kern[K_STREAM * n_k + i] = k[5 * c + i];
        kern[K_BLOCKS * n_k + i] = k[6 * c + i] * k[7 * c + i] * k[8 * c + i];
        kern[K_THREADS * n_k + i] = k[9 * c + i] * k[10 * c + i] * k[11 * c + i];
        kern[K_REGS * n_k + i] = k[12 * c + i];
        kern[K_SHARED * n_k + i] = k[13 * c + i] + k[14 * c + i];
        kern[K_GRAPH_NODE * n_k + i] = k[15 * c + i];
    }
    return proton_join_add(j, n_ext, ext, n_api, api, n_k, kern, capture_from, capture_to,
                           stride, groups, out_rows, ext_out, api_out, kernels_out, counts);
}

/* The end: kernels whose launch record never came, as kernels (K_FIELDS columns, stride)
   with their path (external record, else -1) in `paths`; everything is forgotten. Returns
   how many. */
int64_t proton_join_finish(proton_join *j, int64_t stride, int64_t *kernels_out,
                           int64_t *paths) {
    int64_t n = 0;
    for (int64_t i = 0; i < j->early.cap && n < stride; i++) {
        int64_t *s = j->early.slots + i * j->early.width;
        if (s[0] == EMPTY) continue;
        int64_t *e = map_find(&j->ext, s[0]);
        paths[n] = e ? e[1] : -1;
        copy_kernel(kernels_out, stride, n++, s + 1);
    }
    proton_map *maps[4] = {&j->ext, &j->launches, &j->deferred, &j->early};
    for (int m = 0; m < 4; m++) {
        for (int64_t i = 0; i < maps[m]->cap; i++) maps[m]->slots[i * maps[m]->width] = EMPTY;
        maps[m]->live = 0;
    }
    return n;
}

/* ---- the launch log: the launch callback, in C -------------------------------------------
   CUPTI calls proton_on_api at the enter and exit of every launch call on the launching
   thread. Instead of asking CUPTI for an API record and an external-correlation record per
   launch (and a push of the scope's id onto CUPTI's own stack), scopes push their path onto a
   thread-local stack here (proton_push/proton_pop) and the exit of a launch that succeeded
   appends (correlation id, path, its enter's time, domain, cbid, thread) to a log under a
   mutex. The buffer thread takes the log whole (a swap) and reads it out as the columns those
   two records would have given, so the join above is unchanged. Callbacks of other domains or
   calls go on to `forward` (Python's: NVTX, graph capture, PC sampling's module loads).
   For the python context, whose launch path is read from Python frames, `enter` (Python's)
   gets each launch call's enter as (correlation id, time, cbid), read here from CUPTI's
   data, and the exit stays in C: a failed call's id is kept for proton_failed_take. */

typedef int (*proton_timestamp_fn)(uint64_t *timestamp);
typedef void (*proton_callback_fn)(void *userdata, int domain, uint32_t cbid, const void *data);
typedef void (*proton_enter_fn)(uint32_t corr, uint64_t start, uint32_t cbid);

enum { L_CORR, L_PATH, L_TIME, L_DOMAIN, L_CBID, L_THREAD, L_FIELDS };
#define DOMAINS 3 /* CUPTI_CB_DOMAIN_DRIVER_API = 1, _RUNTIME_API = 2 */

/* One configuration, never changed once published: a callback loads the pointer once, so a
   new session's configure cannot change it halfway (CUPTI may still be inside a callback as
   it unsubscribes); old ones stay allocated for that reason (a few hundred bytes a session). */
typedef struct {
    proton_timestamp_fn now;
    proton_callback_fn forward;
    proton_enter_fn enter; /* the python context's; NULL: launches are logged */
    int32_t site_at, corr_at, ret_at;
    const uint8_t *flags[DOMAINS]; /* flags[domain][cbid] != 0: a launch call it handles */
    int64_t nflags[DOMAINS];
    int64_t generation; /* counts the configures */
} proton_config;

static proton_config *config;
static int log_on;
static int64_t generation;

typedef struct { int64_t *data, n, cap; } proton_log;
static proton_log log_now, log_taken; /* appended to; taken by the buffer thread */
static proton_log failed; /* the python context's failed launch calls (one word each) */
static int64_t log_lost;
static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
/* The main thread's innermost scope (EMPTY: none known): where a launch on a thread with no
   path of its own goes, such as PyTorch's autograd thread in a backward pass. Python sets it
   whenever the main thread's scope changes; read at the launch, it is the main thread's
   timeline at that moment, without Python. */
static int64_t main_path = EMPTY;

static __thread int64_t *tls_paths;
static __thread int64_t tls_depth, tls_cap;
static __thread int32_t tls_calls; /* launch calls entered and not yet left... */
static __thread uint64_t tls_start; /* ... the outermost one's enter time ... */
static __thread int64_t tls_main; /* ... the main thread's innermost scope then ... */
static __thread int64_t tls_generation; /* ... counted since this configure (a call cut off
    by an unsubscribe never exits: its count must not outlive its session) */

/* Set up the callback: CUPTI's timestamp function, Python's callback for everything else
   (NULL: none), Python's launch enter (NULL: launches are logged), the offsets in
   CUpti_CallbackData of the callback site, correlation id and return value pointer, and the
   launch calls of the driver (domain 1) and runtime (2). Logging is off until enabled; what
   an earlier session left in the log is dropped. */
int proton_log_configure(proton_timestamp_fn now, proton_callback_fn forward,
                         proton_enter_fn enter, int32_t site_at,
                         int32_t corr_at, int32_t ret_at, const uint8_t *flags1, int64_t n1,
                         const uint8_t *flags2, int64_t n2) {
    const uint8_t *given[DOMAINS] = {NULL, flags1, flags2};
    const int64_t sizes[DOMAINS] = {0, n1, n2};
    proton_config *c = (proton_config *)calloc(1, sizeof *c);
    if (!c) return -1;
    for (int d = 1; d < DOMAINS; d++) {
        uint8_t *copy = (uint8_t *)malloc((size_t)sizes[d] + 1);
        if (!copy) return -1;
        memcpy(copy, given[d], (size_t)sizes[d]);
        c->flags[d] = copy;
        c->nflags[d] = sizes[d];
    }
    c->now = now; c->forward = forward; c->enter = enter;
    c->site_at = site_at; c->corr_at = corr_at; c->ret_at = ret_at;
    __atomic_store_n(&log_on, 0, __ATOMIC_RELEASE);
    pthread_mutex_lock(&log_mutex);
    log_now.n = log_taken.n = failed.n = 0;
    log_lost = 0;
    __atomic_store_n(&main_path, EMPTY, __ATOMIC_RELAXED);
    c->generation = ++generation;
    __atomic_store_n(&config, c, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&log_mutex);
    return 0;
}

void proton_log_enable(int on) { __atomic_store_n(&log_on, on, __ATOMIC_RELEASE); }

/* Launches on threads with no path pushed go to `path` from now on (EMPTY: to Python). */
void proton_main_path(int64_t path) { __atomic_store_n(&main_path, path, __ATOMIC_RELAXED); }

/* A thread's path stack is freed when the thread ends (a key's destructor: __thread
   variables have none). */
static pthread_key_t paths_key;
static pthread_once_t paths_once = PTHREAD_ONCE_INIT;
static int64_t paths_live; /* threads holding a path stack */

static void paths_free(void *paths) {
    free(paths);
    tls_paths = NULL; tls_depth = tls_cap = 0; /* a launch made later in the thread's exit */
    __atomic_sub_fetch(&paths_live, 1, __ATOMIC_RELAXED);
}

static int paths_keyed; /* the key was made: a stack is freed at its thread's end */

static void paths_key_make(void) { paths_keyed = pthread_key_create(&paths_key, paths_free) == 0; }

/* Room for one more path on the calling thread's stack; 0 when out of memory. */
static int paths_grow(void) {
    int64_t cap = tls_cap ? 2 * tls_cap : 16;
    int64_t *grown = (int64_t *)realloc(tls_paths, (size_t)cap * sizeof(int64_t));
    if (!grown) return 0;
    pthread_once(&paths_once, paths_key_make);
    if (!tls_paths && paths_keyed) __atomic_add_fetch(&paths_live, 1, __ATOMIC_RELAXED);
    tls_paths = grown; tls_cap = cap;
    if (paths_keyed) pthread_setspecific(paths_key, grown);
    return 1;
}

/* The calling thread's launches go to `path` until the matching pop. */
void proton_push(int64_t path) {
    if (tls_depth >= tls_cap && (tls_depth > tls_cap || !paths_grow())) {
        tls_depth++; /* deeper than memory allowed: launches go to the last path kept */
        return;
    }
    tls_paths[tls_depth++] = path;
}

/* Threads holding a path stack now. */
int64_t proton_paths_live(void) { return __atomic_load_n(&paths_live, __ATOMIC_RELAXED); }

void proton_pop(void) {
    if (tls_depth > 0) tls_depth--;
}

/* `width` words onto `log`, under the mutex. */
static void log_append(proton_log *log, const int64_t *entry, int64_t width) {
    pthread_mutex_lock(&log_mutex);
    if (log->n == log->cap) {
        int64_t cap = log->cap ? 2 * log->cap : 4096;
        int64_t *grown = (int64_t *)realloc(log->data, (size_t)(cap * width) * sizeof(int64_t));
        if (!grown) { log_lost++; pthread_mutex_unlock(&log_mutex); return; }
        log->data = grown; log->cap = cap;
    }
    memcpy(log->data + log->n++ * width, entry, (size_t)width * sizeof(int64_t));
    pthread_mutex_unlock(&log_mutex);
}

void proton_on_api(void *userdata, int domain, uint32_t cbid, const void *data) {
    const proton_config *c = __atomic_load_n(&config, __ATOMIC_ACQUIRE);
    if (!c) return;
    if (!(domain > 0 && domain < DOMAINS && cbid < c->nflags[domain] && c->flags[domain][cbid])) {
        if (c->forward) c->forward(userdata, domain, cbid, data);
        return;
    }
    const uint8_t *d = (const uint8_t *)data;
    uint32_t site, corr;
    const int32_t *ret;
    memcpy(&site, d + c->site_at, sizeof site);
    memcpy(&corr, d + c->corr_at, sizeof corr);
    int on = __atomic_load_n(&log_on, __ATOMIC_ACQUIRE);
    if (c->enter) { /* the python context: Python places the launch at its enter */
        if (!on) return;
        if (site == 0) {
            uint64_t ts = 0;
            c->now(&ts);
            c->enter(corr, ts, cbid);
        } else {
            memcpy(&ret, d + c->ret_at, sizeof ret);
            if (ret && *ret != 0) { /* no kernel will come: withdrawn */
                int64_t id = corr;
                log_append(&failed, &id, 1);
            }
        }
        return;
    }
    if (tls_generation != c->generation) {
        tls_generation = c->generation;
        tls_calls = 0;
    }
    /* a launch call made inside another (the driver's under the runtime's, if CUPTI reports
       it) is not the one the kernel record names: only the outermost counts */
    if (site == 0) { /* the enter: its time; the exit says whether it launched */
        if (tls_calls++ == 0) {
            tls_start = 0;
            tls_main = __atomic_load_n(&main_path, __ATOMIC_RELAXED);
            if (on) c->now(&tls_start);
        }
        return;
    }
    if (tls_calls > 0 && --tls_calls > 0) return;
    if (!on) return;
    memcpy(&ret, d + c->ret_at, sizeof ret);
    if (ret && *ret != 0) return; /* failed: no kernel will come */
    uint64_t start = tls_start;
    int64_t main = tls_main; /* where the main thread was at the enter, as its timeline says */
    if (start == 0) { /* entered before this session: its exit time */
        c->now(&start);
        main = __atomic_load_n(&main_path, __ATOMIC_RELAXED);
    }
    int64_t depth = tls_depth < tls_cap ? tls_depth : tls_cap;
    int64_t path = depth ? tls_paths[depth - 1] : main;
    int64_t entry[L_FIELDS] = {corr, path, (int64_t)start,
                               domain, cbid, (int64_t)(uint32_t)pthread_self()};
    log_append(&log_now, entry, L_FIELDS);
}

/* Take what the log holds (the buffer thread; one taker at a time); returns how many. A
   second call before proton_log_read takes nothing more. */
int64_t proton_log_take(void) {
    if (log_taken.n == 0) {
        pthread_mutex_lock(&log_mutex);
        proton_log swap = log_now;
        log_now = log_taken;
        log_taken = swap;
        pthread_mutex_unlock(&log_mutex);
    }
    return log_taken.n;
}

/* The taken entries as the join's columns (proton_join_records' groups 0 and 1, `stride`
   >= the count taken): external (correlation id, `custom`, path) for launches inside a scope,
   API (record kind kinds[domain], correlation id, start, cbid, thread, return value 0) for
   all. Returns the external rows; the API rows are the count taken. */
int64_t proton_log_read(int64_t custom, const int64_t *kinds, int64_t stride, int64_t *ext,
                        int64_t *api) {
    int64_t n_ext = 0, n = log_taken.n;
    for (int64_t i = 0; i < n; i++) {
        const int64_t *e = log_taken.data + i * L_FIELDS;
        if (e[L_PATH] != EMPTY) {
            ext[n_ext] = e[L_CORR]; ext[stride + n_ext] = custom;
            ext[2 * stride + n_ext++] = e[L_PATH];
        }
        int64_t row[6] = {kinds[e[L_DOMAIN]], e[L_CORR], e[L_TIME], e[L_CBID], e[L_THREAD], 0};
        for (int f = 0; f < 6; f++) api[f * stride + i] = row[f];
    }
    log_taken.n = 0;
    return n_ext;
}

/* The python context's failed launch calls since the last call, at most `cap` into `out`;
   returns how many. */
int64_t proton_failed_take(int64_t *out, int64_t cap) {
    pthread_mutex_lock(&log_mutex);
    int64_t n = failed.n < cap ? failed.n : cap;
    if (n > 0) {
        memcpy(out, failed.data, (size_t)n * sizeof(int64_t));
        memmove(failed.data, failed.data + n, (size_t)(failed.n - n) * sizeof(int64_t));
        failed.n -= n;
    }
    pthread_mutex_unlock(&log_mutex);
    return n;
}

/* Entries lost because the log could not grow. */
int64_t proton_log_lost(void) { return log_lost; }
"""
NATIVE_ENV = "PROTON_NATIVE"
CACHE_ENV = "PROTON_CACHE_DIR"
RECORD_ALIGN = 8
"""CUPTI's records are 8-byte aligned and at least that long: a buffer of `valid` bytes holds
at most valid // 8 of them."""
EMPTY = -(1 << 63)
"""The C side's "no path" (INT64_MIN)."""

_lock = threading.Lock()
_built: dict[str, ctypes.CDLL | None] = {}


def cache_dir() -> str:
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "proton")
    return os.path.join(base, "native")


def library_path() -> str:
    key = hashlib.sha256(f"{SOURCE}{platform.machine()}".encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"walk-{key}.so")


def walk_only() -> bool:
    """PROTON_NATIVE=walk: the helper walks buffers; numpy reads them and Python joins."""
    return os.environ.get(NATIVE_ENV) == "walk"


def helper() -> ctypes.CDLL | None:
    """The compiled helper, built once per source version and machine; None (said once) when
    it cannot be built or PROTON_NATIVE=0."""
    if os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    path = library_path()
    with _lock:
        if path in _built:
            return _built[path]
        lib = None
        try:
            if not os.path.exists(path):
                _compile(path)
            lib = _load(path)
        except (OSError, subprocess.SubprocessError, _NoCompiler) as exc:
            warn(f"reading CUPTI buffers in Python, which costs more per launch: the C helper "
                 f"could not be built ({exc}); install a C compiler (cc) or set "
                 f"{NATIVE_ENV}=0 to silence this")
        _built[path] = lib
        return lib


class NoCompiler(Exception):
    pass


_NoCompiler = NoCompiler


def _compile(path: str) -> None:
    compile_source(path, SOURCE)


def compile_source(path: str, code: str) -> None:
    """Builds C `code` into the shared library `path` (atomically: concurrent builds are safe).

    Raises:
        NoCompiler: no C compiler, or it failed.
    """
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") \
        or shutil.which("clang")
    if not compiler:
        raise _NoCompiler("no C compiler: cc, gcc or clang on PATH, or CC")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as work:
        source = os.path.join(work, "walk.c")
        with open(source, "w") as f:
            f.write(code)
        out = os.path.join(work, "walk.so")
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-pthread", "-o", out,
                               source],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise _NoCompiler(f"{compiler} failed: {done.stderr.strip()[:200]}")
        os.replace(out, path)  # whole or not at all, also when processes build at once
    debug(f"built the C helper {path}")


def _load(path: str) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(path)  # CDLL: the GIL is released during each call
    except OSError:  # a damaged cache entry: build it again, once
        os.remove(path)
        _compile(path)
        lib = ctypes.CDLL(path)
    lib.proton_walk.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                ctypes.c_void_p, ctypes.c_int64]
    lib.proton_walk.restype = ctypes.c_int64
    lib.proton_columns.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int32, ctypes.c_int32] + [ctypes.c_void_p] * 9
    lib.proton_columns.restype = ctypes.c_int64
    lib.proton_join_new.argtypes = []
    lib.proton_join_new.restype = ctypes.c_void_p
    lib.proton_join_free.argtypes = [ctypes.c_void_p]
    lib.proton_join_free.restype = None
    lib.proton_join_early.argtypes = [ctypes.c_void_p]
    lib.proton_join_early.restype = ctypes.c_int64
    lib.proton_join_waiting.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.proton_join_waiting.restype = ctypes.c_int64
    lib.proton_join_records.argtypes = [ctypes.c_void_p] * 4 + [
        ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 6
    lib.proton_join_path.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.proton_join_path.restype = ctypes.c_int64
    lib.proton_join_slots.argtypes = [ctypes.c_void_p]
    lib.proton_join_slots.restype = ctypes.c_int64
    lib.proton_paths_live.argtypes = []
    lib.proton_paths_live.restype = ctypes.c_int64
    lib.proton_join_records.restype = ctypes.c_int
    lib.proton_join_finish.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                       ctypes.c_void_p]
    lib.proton_join_finish.restype = ctypes.c_int64
    lib.proton_log_configure.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int32] * 3 + [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
    lib.proton_log_configure.restype = ctypes.c_int
    lib.proton_log_enable.argtypes = [ctypes.c_int]
    lib.proton_log_enable.restype = None
    lib.proton_log_take.argtypes = []
    lib.proton_log_take.restype = ctypes.c_int64
    lib.proton_log_read.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_void_p, ctypes.c_void_p]
    lib.proton_log_read.restype = ctypes.c_int64
    lib.proton_failed_take.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.proton_failed_take.restype = ctypes.c_int64
    lib.proton_log_lost.argtypes = []
    lib.proton_log_lost.restype = ctypes.c_int64
    return lib


class Walker:
    """A completed buffer's record offsets, by the helper when it is built, else in Python."""

    def __init__(self, next_record) -> None:
        """next_record: cuptiActivityGetNextRecord as a ctypes function (argtypes set)."""
        self._next = next_record
        lib = helper()
        self._native = lib.proton_walk if lib is not None else None
        self._next_address = ctypes.cast(next_record, ctypes.c_void_p).value

    @property
    def native(self) -> bool:
        return self._native is not None

    def __call__(self, buffer: int, valid: int):
        """The offsets from `buffer` of its records (a numpy array, or a list in Python)."""
        if self._native is not None:
            out = np.empty(valid // RECORD_ALIGN + 1, dtype=np.int64)
            n = self._native(self._next_address, buffer, valid, out.ctypes.data, len(out))
            return out[:n]
        offsets = []
        record, step = ctypes.c_void_p(), self._next
        append, rec = offsets.append, ctypes.byref(record)
        while step(buffer, valid, rec) == 0:
            append(record.value - buffer)
        return offsets


class Columns:
    """The fields of a completed buffer's records, read in C during the walk: for each group of
    record kinds (kinds sharing one layout), one int64 array per field. None from `create` when
    the helper is not built (then Walker and numpy do it)."""

    KINDS = 256
    """Activity kinds the lookup table covers (CUPTI's are well under this)."""

    def __init__(self, lib: ctypes.CDLL, next_record,
                 groups: list[tuple[list[int], list[tuple[int, int, bool]], int]]) -> None:
        """groups: (kinds, fields as (offset, size, signed), record size) each."""
        self._call = lib.proton_columns
        self._next_address = ctypes.cast(next_record, ctypes.c_void_p).value
        table = np.full(self.KINDS, -1, dtype=np.int32)
        nfields, first, offsets, sizes, signs, record_sizes = [], [], [], [], [], []
        for g, (kinds, fields, record_size) in enumerate(groups):
            for kind in kinds:
                table[kind] = g
            first.append(len(offsets))
            nfields.append(len(fields))
            for at, size, signed in fields:
                if size not in (1, 2, 4, 8):
                    raise ValueError(f"a field of {size} bytes is not an integer")
                offsets.append(at)
                sizes.append(size)
                signs.append(int(signed))
            record_sizes.append(max(record_size, RECORD_ALIGN))
        arr = lambda v: np.array(v, dtype=np.int32)  # noqa: E731
        self._table, self._nfields, self._first = table, arr(nfields), arr(first)
        self._offsets, self._sizes, self._signs = arr(offsets), arr(sizes), arr(signs)
        self._record_sizes = record_sizes
        self._kept = Blocks()

    @classmethod
    def create(cls, next_record, groups) -> "Columns | None":
        lib = helper()
        return None if lib is None else cls(lib, next_record, groups)

    def __call__(self, buffer: int, valid: int) -> tuple[list[list[np.ndarray]], int]:
        """(each group's field columns, the records walked)."""
        blocks, rows, walked = self.read(buffer, valid)
        return [[block[f, :n] for f in range(block.shape[0])]
                for block, n in zip(blocks, rows.tolist())], walked

    def read(self, buffer: int, valid: int, keep: bool = False
             ) -> tuple[list[np.ndarray], np.ndarray, int]:
        """(each group's (fields, capacity) block, each group's rows, the records walked).
        keep: into blocks kept for the next call, valid until then (one caller at a time)."""
        need = [valid // size + 1 for size in self._record_sizes]
        blocks = [self._kept.get(g, n, c) if keep else np.empty((n, c), dtype=np.int64)
                  for g, (n, c) in enumerate(zip(self._nfields.tolist(), need))]
        caps = np.array([b.shape[1] for b in blocks], dtype=np.int64)
        pointers = (ctypes.c_void_p * len(blocks))(*[b.ctypes.data for b in blocks])
        rows = np.zeros(len(blocks), dtype=np.int64)
        walked = self._call(self._next_address, buffer, valid, len(blocks), self.KINDS,
                   self._table.ctypes.data, self._nfields.ctypes.data, self._first.ctypes.data,
                   self._offsets.ctypes.data, self._sizes.ctypes.data, self._signs.ctypes.data,
                   pointers, caps.ctypes.data, rows.ctypes.data)
        return blocks, rows, int(walked)


class Blocks:
    """int64 blocks of (fields, capacity) kept from one buffer to the next, as the C join keeps
    its working memory (see its `scratch`): each keeps its capacity, so a field's rows land on
    the same pages every buffer. It grows (doubling) for a bigger buffer and shrinks only once
    SHRINK_AFTER calls in a row used under a quarter of it (after a burst). What `get` gives is
    valid until its next call with the same key: one caller at a time."""

    SHRINK_AFTER = 64

    def __init__(self) -> None:
        self._blocks: dict[object, np.ndarray] = {}
        self._small: dict[object, int] = {}
        """key -> calls in a row that used under a quarter of its block."""

    def get(self, key: object, fields: int, rows: int) -> np.ndarray:
        """A (fields, capacity >= rows) block, contents undefined."""
        block = self._blocks.get(key)
        if block is not None and block.shape[0] == fields and block.shape[1] >= rows:
            small = self._small[key] + 1 if 4 * rows < block.shape[1] else 0
            self._small[key] = small
            if small < self.SHRINK_AFTER:
                return block
            capacity = 2 * rows  # a burst's room, unused for a while: let it go
        else:
            capacity = max(rows, 2 * block.shape[1]) if block is not None else rows
        self._small[key] = 0
        block = self._blocks[key] = np.empty((fields, capacity), dtype=np.int64)
        return block


KERNEL_COLUMNS = ("correlation id", "name", "device", "start", "end", "stream", "blocks",
                  "threads per block", "registers", "shared memory", "graph node")
"""The kernel columns Join takes and gives back to Python, in order (the C code's K_*)."""
_OUT_FIELDS = tuple(np.cumsum([0, 9, 12, 2, 4, len(KERNEL_COLUMNS)]).tolist())
"""Where Join's outputs lie in its one block: groups (G_FIELDS), rows (R_FIELDS), external,
API, kernels."""


def _launch_flags(calls: list[int], graphs: list[int]) -> np.ndarray:
    """A table by cbid: 1 for a launch call, 2 for a graph launch, 0 for any other call."""
    flags = np.zeros(max([*calls, *graphs, 0]) + 1, dtype=np.uint8)
    flags[list(calls)] = 1
    flags[list(graphs)] = 2
    return flags


class Joined:
    """What Join made of one buffer (int64 numpy columns):
    groups: (path, name, device, blocks, threads, registers, shared memory, GPU ns, count),
      one per (path, kernel, device, launch configuration) of the kernels matched;
    rows: (path, launch start, correlation id, name, device, start, end, stream, blocks,
      threads, registers, shared memory), one per kernel matched;
    first: the earliest launch start among them (None when none matched);
    launches: the launch records (calls that succeeded) the buffer had;
    python: (external (correlation id, path), api (correlation id, start, graph, thread),
      kernels (KERNEL_COLUMNS)) of the launches Python places, for Attributor."""

    def __init__(self, groups, rows, first, launches, python) -> None:
        self.groups, self.rows, self.first = groups, rows, first
        self.launches, self.python = launches, python


class Join:
    """The join of the shadow context's records in C (attribution.Attributor's work for its
    common case, outside the GIL): external correlation, API and kernel records matched by
    correlation id, a buffer's kernels summed per path. Not thread-safe: one caller at a time
    (the collector's lock)."""

    def __init__(self, lib: ctypes.CDLL, custom: int,
                 launches: dict[int, tuple[list[int], list[int]]]) -> None:
        """custom: the external correlation kind scopes push; launches: {API record kind:
        (cbids of launch calls, cbids of graph launches)} (one or two kinds)."""
        if not 1 <= len(launches) <= 2:
            raise ValueError("one or two API record kinds")
        self._lib, self._custom = lib, custom
        kinds, self._flags = [], []
        for kind, (calls, graphs) in launches.items():
            kinds.append(kind)
            self._flags.append(_launch_flags(calls, graphs))
        if len(kinds) == 1:
            kinds.append(-1)
            self._flags.append(np.zeros(1, dtype=np.uint8))
        self._kinds = np.array(kinds, dtype=np.int64)
        self._state = lib.proton_join_new()
        if not self._state:
            raise MemoryError("the C join could not allocate its tables")
        self._kept = Blocks()

    @classmethod
    def create(cls, custom: int, launches: dict) -> "Join | None":
        lib = helper()
        return None if lib is None else cls(lib, custom, launches)

    def __del__(self) -> None:
        if getattr(self, "_state", None):
            self._lib.proton_join_free(self._state)
            self._state = None

    def add(self, blocks: list[np.ndarray], rows: np.ndarray,
            capture: tuple[int, int] | None) -> Joined:
        """One buffer's records as Columns.read gives them (external, API and kernel groups,
        the collector's field order). `capture`: (first, last) timestamps of the stream
        captures seen (launches then go to Python, which knows each thread's windows).
        The Joined's columns are valid until the next add."""
        n_api, n_k = int(rows[1]), int(rows[2])
        need = n_k + self._lib.proton_join_early(self._state) + n_api + 1
        out = self._kept.get("out", _OUT_FIELDS[-1], need)  # one block: one stride for all
        stride = out.shape[1]
        groups, out_rows, ext_out, api_out, kern_out = (
            out[a:b] for a, b in zip(_OUT_FIELDS, _OUT_FIELDS[1:]))
        counts = np.zeros(7, dtype=np.int64)
        capture_from, capture_to = capture or (1, 0)
        pointers = (ctypes.c_void_p * 3)(*[b.ctypes.data for b in blocks])
        caps = np.array([b.shape[1] for b in blocks], dtype=np.int64)
        f0, f1 = self._flags
        if self._lib.proton_join_records(
                self._state, pointers, caps.ctypes.data, rows.ctypes.data, self._custom,
                self._kinds.ctypes.data, f0.ctypes.data, len(f0), f1.ctypes.data, len(f1),
                capture_from, capture_to, stride, groups.ctypes.data, out_rows.ctypes.data,
                ext_out.ctypes.data, api_out.ctypes.data, kern_out.ctypes.data,
                counts.ctypes.data) != 0:
            raise MemoryError("the C join ran out of memory: this buffer's kernels are lost")
        n_groups, n_rows, n_x, n_a, n_kp, first, launches = counts.tolist()
        return Joined(groups[:, :n_groups], out_rows[:, :n_rows], first if n_rows else None,
                      launches, (ext_out[:, :n_x], api_out[:, :n_a], kern_out[:, :n_kp]))

    def slots(self) -> int:
        """The slots of its tables (a few words each): what it holds between buffers."""
        return int(self._lib.proton_join_slots(self._state))

    def path(self, corr: int) -> int | None:
        """The path of launch `corr`'s external record, while its launch record has not come."""
        found = self._lib.proton_join_path(self._state, corr)
        return None if found < 0 else int(found)

    def waiting(self, ts: int) -> int:
        """Launches made by `ts` still waiting for their kernel."""
        return int(self._lib.proton_join_waiting(self._state, ts))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """(paths, kernels): kernels whose launch record never came (KERNEL_COLUMNS), each with
        its external record's path or -1; the tables are emptied."""
        n = self._lib.proton_join_early(self._state)
        kern = np.empty((len(KERNEL_COLUMNS), n + 1), dtype=np.int64)
        paths = np.empty(n + 1, dtype=np.int64)
        got = self._lib.proton_join_finish(self._state, n + 1, kern.ctypes.data,
                                           paths.ctypes.data)
        return paths[:got], kern[:, :got]



ENTER = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32)
"""The python context's launch enter: (correlation id, CUPTI timestamp, cbid)."""


class LaunchLog:
    """The launch callback in C (the SOURCE's launch log). Shadow context: scopes push their
    path with `push`/`pop` (the calling thread's, as CUPTI's external-id stack would keep it),
    CUPTI calls `callback` at each launch call, and the buffer thread reads what was launched
    with `take` as the external and API columns Join takes. Python context (configure with
    `enter`): each launch call's enter goes to Python as (correlation id, time, cbid), its
    exit stays in C, and `failed` gives the calls that failed. One per process (the C state
    is): configure replaces the last one."""

    def __init__(self, lib: ctypes.CDLL, timestamp: int, fields: tuple[int, int, int],
                 launches: dict[int, tuple[int, list[int], list[int]]], custom: int) -> None:
        """timestamp: cuptiGetTimestamp's address; fields: callback_site, correlation_id and
        function_return_value offsets in CUpti_CallbackData; launches: {callback domain (1
        driver, 2 runtime): (its API record kind, launch cbids, graph-launch cbids)};
        custom: the external id kind the columns carry."""
        self._lib, self._custom = lib, custom
        self._flags = {}
        self._kinds = np.full(3, -1, dtype=np.int64)
        for domain, (kind, calls, graphs) in launches.items():
            self._flags[domain] = _launch_flags(calls, graphs)
            self._kinds[domain] = kind
        self._fields, self._timestamp = fields, timestamp
        self._kept = Blocks()
        self.callback = ctypes.cast(lib.proton_on_api, ctypes.c_void_p).value
        """proton_on_api's address: the subscriber's callback."""
        python = ctypes.PyDLL(lib._name)  # keeps the GIL: a push is a few stores
        self.push, self.pop = python.proton_push, python.proton_pop
        self.push.argtypes, self.push.restype = [ctypes.c_int64], None
        self.pop.argtypes, self.pop.restype = [], None
        self._main = python.proton_main_path
        self._main.argtypes, self._main.restype = [ctypes.c_int64], None
        self.configure(None)

    @classmethod
    def create(cls, timestamp: int, fields, launches, custom: int) -> "LaunchLog | None":
        lib = helper()
        return None if lib is None else cls(lib, timestamp, fields, launches, custom)

    def configure(self, forward: int | None, enter=None) -> None:
        """Hand the calls that are not launches to `forward` (a callback's address, or none),
        and each launch call's enter to `enter` (an ENTER, kept alive by the caller) instead
        of logging it; nothing happens until `enable`."""
        none = np.zeros(1, dtype=np.uint8)
        f1, f2 = self._flags.get(1, none), self._flags.get(2, none)
        enter = ctypes.cast(enter, ctypes.c_void_p).value if enter is not None else None
        if self._lib.proton_log_configure(self._timestamp, forward, enter, *self._fields,
                                          f1.ctypes.data, len(f1), f2.ctypes.data, len(f2)):
            raise MemoryError("the launch log could not allocate its tables")

    def enable(self, on: bool) -> None:
        self._lib.proton_log_enable(int(on))

    def main_path(self, path: int | None) -> None:
        """Launches on threads with no path pushed are logged with `path` (the main thread's
        innermost scope) until the next call or configure; None: with none (Python's
        unscoped callback places them)."""
        self._main(EMPTY if path is None else path)

    def take(self) -> tuple[np.ndarray, np.ndarray, int, int]:
        """What was launched since the last take: (external block (correlation id, kind,
        path), API block (kind, correlation id, start, cbid, thread, return value), external
        rows, API rows), the blocks shaped as Columns.read's; valid until the next take."""
        n = int(self._lib.proton_log_take())
        both = self._kept.get("log", 9, n + 1)  # one block: one stride for both
        ext, api = both[:3], both[3:]
        n_ext = self._lib.proton_log_read(self._custom, self._kinds.ctypes.data, both.shape[1],
                                          ext.ctypes.data, api.ctypes.data)
        return ext, api, int(n_ext), n

    def failed(self) -> list[int]:
        """The correlation ids of the launch calls that failed since the last call (the
        python context's)."""
        ids = []
        while True:
            out = np.empty(1024, dtype=np.int64)
            n = int(self._lib.proton_failed_take(out.ctypes.data, len(out)))
            ids += out[:n].tolist()
            if n < len(out):
                return ids

    @property
    def lost(self) -> int:
        """Launches the log could not keep (no memory to grow)."""
        return int(self._lib.proton_log_lost())
