/* Proton's C helper for CUPTI's activity buffers and launch callback (see native.py, which
   builds it at first use with the machine's C compiler, and derives each PROTON_API function's
   ctypes signature from its definition here: keep every parameter's type one of int,
   int32_t, int64_t, uint32_t, size_t, a pointer, or a proton_*_fn typedef). */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proton_records.h" /* generated from records.py: the tables' column indices */

/* What Python calls (the library is built with -fvisibility=hidden: nothing else is seen). */
#define PROTON_API __attribute__((visibility("default")))

typedef int (*proton_next_fn)(uint8_t *buffer, size_t valid, void **record);

/* Walk a completed CUPTI activity buffer with CUPTI's cuptiActivityGetNextRecord (`next`)
   and copy the fields of the records of chosen kinds into columns of
   int64: a record whose kind (the uint32 it starts with) has group[kind] = g >= 0 adds a row to
   group g, its field f (the little-endian integer of sizes[i] bytes at offsets[i], i =
   first[g] + f, sign-extended when signs[i]) going to out[g][f * cap[g] + row]. A group has at
   most cap[g] rows (the caller sizes it for the buffer); rows[g] says how many it got. Returns
   the records walked. */
PROTON_API int64_t proton_columns(proton_next_fn next, uint8_t *buffer, size_t valid,
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

enum { LAUNCH_IN_PYTHON = 1, KERNELS_IN_PYTHON = 2 };

typedef struct {
    proton_map ext;      /* correlation id -> path */
    proton_map launches; /* correlation id -> path, start: waiting for its kernel */
    proton_map deferred; /* correlation id -> LAUNCH_IN_PYTHON: its kernel goes there too;
                            KERNELS_IN_PYTHON: so does its launch (several came early) */
    proton_map early;    /* correlation id -> a kernel (K_COLUMNS) whose launch has not come */
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

PROTON_API proton_join *proton_join_new(void) {
    proton_join *j = (proton_join *)calloc(1, sizeof *j);
    if (!j) return NULL;
    if (map_init(&j->ext, 2, 1024) || map_init(&j->launches, 3, 1024) ||
        map_init(&j->deferred, 2, 64) || map_init(&j->early, 1 + K_COLUMNS, 64)) {
        free(j->ext.slots); free(j->launches.slots); free(j->deferred.slots);
        free(j->early.slots); free(j);
        return NULL;
    }
    return j;
}

PROTON_API void proton_join_free(proton_join *j) {
    if (!j) return;
    free(j->scratch); free(j->group_slots);
    free(j->ext.slots); free(j->launches.slots); free(j->deferred.slots);
    free(j->early.slots); free(j);
}

/* The slots of the join's tables (how much memory they hold). */
PROTON_API int64_t proton_join_slots(const proton_join *j) {
    return j->ext.cap + j->launches.cap + j->deferred.cap + j->early.cap;
}

/* The path of the external record of launch `corr` not yet matched, or -1. */
PROTON_API int64_t proton_join_path(const proton_join *j, int64_t corr) {
    const int64_t *e = map_find(&j->ext, corr);
    return e ? e[1] : -1;
}

/* Kernels held back (their launch record has not come): the caller sizes outputs with it. */
PROTON_API int64_t proton_join_early(const proton_join *j) { return j->early.live; }

/* Launches made from `since` to `ts` still waiting for their kernel (a scan of the table
   only when some may be outside: flush asks every 10 ms). Those made before `since`, when
   kernel activity was not yet on, may never get a record. */
PROTON_API int64_t proton_join_waiting(const proton_join *j, int64_t since, int64_t ts) {
    if (j->newest <= ts && since <= 0) return j->launches.live;
    int64_t n = 0;
    for (int64_t i = 0; i < j->launches.cap; i++) {
        const int64_t *s = j->launches.slots + i * 3;
        if (s[0] != EMPTY && s[2] <= ts && s[2] >= since) n++;
    }
    return n;
}

/* The earliest start from `since` on of the launches waiting for their kernel (`none` when
   none waits): no kernel record still to come started before it (the idle time's watermark;
   a launch made before kernel activity was on may never get one). */
PROTON_API int64_t proton_join_oldest(const proton_join *j, int64_t since, int64_t none) {
    int64_t oldest = none;
    if (j->launches.live == 0) return oldest;
    for (int64_t i = 0; i < j->launches.cap; i++) {
        const int64_t *s = j->launches.slots + i * 3;
        if (s[0] != EMPTY && s[2] >= since && s[2] < oldest) oldest = s[2];
    }
    return oldest;
}

typedef struct {
    int64_t *slots; /* group index + 1, 0 when free */
    int64_t cap;
} proton_groups;

static void copy_kernel(int64_t *to, int64_t stride, int64_t row, const int64_t *k) {
    for (int f = 0; f < K_COLUMNS; f++) to[f * stride + row] = k[f];
}

/* One matched kernel: a row, and its sum in its group. */
static void matched(proton_groups *g, int64_t *groups, int64_t *rows, int64_t stride,
                    int64_t *counts, int64_t path, int64_t launch, const int64_t *k) {
    int64_t r = counts[OUT_ROWS]++;
    int64_t row[R_COLUMNS] = {path, launch, k[K_CORRELATION_ID], k[K_NAME], k[K_DEVICE], k[K_START],
                             k[K_END], k[K_STREAM], k[K_BLOCKS], k[K_THREADS], k[K_REGISTERS],
                             k[K_SHARED]};
    for (int f = 0; f < R_COLUMNS; f++) rows[f * stride + r] = row[f];
    if (launch < counts[OUT_FIRST]) counts[OUT_FIRST] = launch;
    int64_t key[G_NS] = {path, k[K_NAME], k[K_DEVICE], k[K_BLOCKS], k[K_THREADS], k[K_REGISTERS],
                         k[K_SHARED]}; /* the group's columns before its sums */
    uint64_t h = 0;
    for (int f = 0; f < G_NS; f++) h = proton_hash(h ^ (uint64_t)key[f]);
    uint64_t mask = (uint64_t)g->cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        int64_t at = g->slots[i] - 1;
        if (at < 0) {
            at = counts[OUT_GROUPS]++;
            g->slots[i] = at + 1;
            for (int f = 0; f < G_NS; f++) groups[f * stride + at] = key[f];
            groups[G_NS * stride + at] = 0;
            groups[G_COUNT * stride + at] = 0;
        } else {
            int same = 1;
            for (int f = 0; f < G_NS && same; f++) same = groups[f * stride + at] == key[f];
            if (!same) continue;
        }
        groups[G_NS * stride + at] += k[K_END] - k[K_START];
        groups[G_COUNT * stride + at] += 1;
        return;
    }
}

/* One buffer's records, as columns: external (n_ext rows of X_COLUMNS), launch API
   records that succeeded (n_api rows of L_COLUMNS), kernels (n_k rows of K_COLUMNS).
   Out (each column `stride` long, stride >= n_k + early): groups (G_COLUMNS), rows
   (R_COLUMNS) of the kernels matched here; for Python, ext (X_COLUMNS) and api (L_COLUMNS)
   of the launches it must place and kernels (K_COLUMNS) of them. counts: OUT_COLUMNS.
   Launches started within [capture_from, capture_to] go to Python, which
   knows each thread's stream capture windows (a launch recorded into a graph runs nothing
   and leaves its id in `deferred`: a few words per captured launch). Returns 0, or -1 when
   out of memory (the buffer's records are then lost). */
static int proton_join_add(proton_join *j, int64_t n_ext, const int64_t *ext, int64_t n_api,
                    const int64_t *api, int64_t n_k, const int64_t *kernels,
                    int64_t capture_from, int64_t capture_to, int64_t stride, int64_t *groups,
                    int64_t *rows, int64_t *ext_out, int64_t *api_out, int64_t *kernels_out,
                    int64_t *counts) {
    proton_groups g;
    for (int f = 0; f < OUT_COLUMNS; f++) counts[f] = 0;
    counts[OUT_FIRST] = INT64_MAX;
    counts[OUT_LAUNCHES] = n_api;
    map_trim(&j->ext); map_trim(&j->launches); map_trim(&j->deferred); map_trim(&j->early);
    g.cap = 16; /* at most a group per kernel of this buffer or held back */
    while (g.cap < 2 * (n_k + j->early.live + 1)) g.cap *= 2;
    g.slots = reserve(&j->group_slots, &j->group_cap, g.cap);
    if (!g.slots) return -1;
    memset(g.slots, 0, (size_t)g.cap * sizeof(int64_t));
    for (int64_t i = 0; i < n_ext; i++) {
        int64_t *s = map_put(&j->ext, ext[X_CORRELATION_ID * n_ext + i]);
        if (!s) goto oom;
        s[1] = ext[X_PATH * n_ext + i];
    }
    for (int64_t i = 0; i < n_api; i++) {
        int64_t corr = api[L_CORRELATION_ID * n_api + i], start = api[L_START * n_api + i];
        int64_t graph = api[L_GRAPH * n_api + i];
        int64_t *e = map_find(&j->ext, corr), path = e ? e[1] : EMPTY;
        if (e) map_drop(&j->ext, e);
        int64_t *early = map_find(&j->early, corr), *d = map_find(&j->deferred, corr);
        int at_python = d && d[1] == KERNELS_IN_PYTHON;
        if (at_python) map_drop(&j->deferred, d);
        if (graph || path == EMPTY || at_python || (capture_from <= start && start <= capture_to)) {
            /* Python places it */
            int64_t a = counts[OUT_LAUNCHES_LEFT]++;
            for (int f = 0; f < L_COLUMNS; f++) api_out[f * stride + a] = api[f * n_api + i];
            if (path != EMPTY) {
                int64_t x = counts[OUT_EXTERNAL]++;
                ext_out[X_CORRELATION_ID * stride + x] = corr;
                ext_out[X_PATH * stride + x] = path;
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
        int64_t k[K_COLUMNS];
        for (int f = 0; f < K_COLUMNS; f++) k[f] = kernels[f * n_k + i];
        int64_t *s;
        if (k[K_GRAPH_NODE]) { /* a graph's kernel: Python has its launch */
            copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, k);
        } else if ((s = map_find(&j->launches, k[K_CORRELATION_ID])) != NULL) {
            matched(&g, groups, rows, stride, counts, s[1], s[2], k);
            map_drop(&j->launches, s);
        } else if ((s = map_find(&j->deferred, k[K_CORRELATION_ID])) != NULL) {
            copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, k);
            if (s[1] == LAUNCH_IN_PYTHON) map_drop(&j->deferred, s);
        } else if ((s = map_find(&j->early, k[K_CORRELATION_ID])) != NULL) {
            /* a second kernel before its launch: both, and then the launch, go to Python,
               which keeps any number */
            copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, s + 1);
            map_drop(&j->early, s);
            copy_kernel(kernels_out, stride, counts[OUT_KERNELS]++, k);
            if (!(s = map_put(&j->deferred, k[K_CORRELATION_ID]))) goto oom;
            s[1] = KERNELS_IN_PYTHON;
        } else {
            if (!(s = map_put(&j->early, k[K_CORRELATION_ID]))) goto oom;
            memcpy(s + 1, k, sizeof k);
        }
    }
    return 0;
oom:
    return -1;
}

/* A copy's CopyName: its kind, and for HtoD and DtoH whether the host side is pageable. */
static int64_t copy_name(int64_t kind, int64_t src, int64_t dst) {
    switch (kind) {
    case CK_HTOD: return src == MK_PAGEABLE ? CN_HTOD_PAGEABLE : CN_HTOD_PINNED;
    case CK_DTOH: return dst == MK_PAGEABLE ? CN_DTOH_PAGEABLE : CN_DTOH_PINNED;
    case CK_DTOD: return CN_DTOD;
    case CK_PTOP: return CN_PTOP;
    case CK_HTOH: return CN_HTOH;
    default: return CN_OTHER;
    }
}

/* A set's columns are a copy's without the kinds (records.SetFields): the columns both have
   sit at the same places, so one row reader serves both. */
_Static_assert((int)SF_CORRELATION_ID == (int)CF_CORRELATION_ID &&
               (int)SF_DEVICE_ID == (int)CF_DEVICE_ID && (int)SF_START == (int)CF_START &&
               (int)SF_END == (int)CF_END && (int)SF_STREAM_ID == (int)CF_STREAM_ID &&
               (int)SF_BYTES == (int)CF_BYTES, "SetFields and CopyFields share their first columns");

/* Row `i` of a copy (CF_ columns) or set (SF_ columns, `set`) group of stride `c`, as kernel
   row `at` of `kern` (K_ columns `n` long): named -1 - its CopyName, no launch configuration
   but its bytes in the shared memory column (records.CopyName says so). */
static void copy_row(int64_t *kern, int64_t n, int64_t at, const int64_t *r, int64_t c,
                     int64_t i, int set) {
    kern[K_CORRELATION_ID * n + at] = r[CF_CORRELATION_ID * c + i];
    kern[K_NAME * n + at] = -1 - (set ? CN_MEMSET
                                      : copy_name(r[CF_COPY_KIND * c + i], r[CF_SRC_KIND * c + i],
                                                  r[CF_DST_KIND * c + i]));
    kern[K_DEVICE * n + at] = r[CF_DEVICE_ID * c + i];
    kern[K_START * n + at] = r[CF_START * c + i];
    kern[K_END * n + at] = r[CF_END * c + i];
    kern[K_STREAM * n + at] = r[CF_STREAM_ID * c + i];
    kern[K_SHARED * n + at] = r[CF_BYTES * c + i];
    kern[K_GRAPH_NODE * n + at] = r[(set ? SF_GRAPH_NODE_ID : CF_GRAPH_NODE_ID) * c + i];
    kern[K_BLOCKS * n + at] = kern[K_THREADS * n + at] = kern[K_REGISTERS * n + at] = 0;
}

/* proton_join_add on the columns proton_columns read (group 0: external records' correlation
   id, kind, id; 1: API records' kind, correlation id, start, cbid, thread, return value; 2:
   kernel records' correlation id, name, device, start, end, stream, grid x y z, block x y z,
   registers, static and dynamic shared memory, graph node; 3 and 4: MEMCPY and MEMCPY2
   records' CF_ columns, 5: MEMSET records' SF_ columns, joined as kernels (copy_row); `cap`
   the stride of each, `rows` their lengths), keeping external ids of kind `custom` and API records of launch calls that
   succeeded: flags[k][cbid] is 1 for a launch, 2 for a graph launch, for API kind
   kinds[k] (k = 0, 1). The rest as proton_join_add. */
PROTON_API int proton_join_records(proton_join *j, int64_t **in, const int64_t *cap,
                                   const int64_t *rows, int64_t custom, const int64_t *kinds,
                                   const uint8_t *flags0, int64_t nflags0,
                                   const uint8_t *flags1, int64_t nflags1,
                                   int64_t capture_from, int64_t capture_to, int64_t stride,
                                   int64_t *groups, int64_t *out_rows,
                                   int64_t *ext_out, int64_t *api_out, int64_t *kernels_out,
                                   int64_t *counts) {
    const uint8_t *flags[2] = {flags0, flags1};
    const int64_t nflags[2] = {nflags0, nflags1};
    int64_t n_ext = 0, n_api = 0, n_k = rows[2] + rows[3] + rows[4] + rows[5];
    int64_t *ext = reserve(&j->scratch, &j->scratch_cap,
                           X_COLUMNS * rows[0] + L_COLUMNS * rows[1] + K_COLUMNS * n_k + 1);
    if (!ext) return -1;
    const int64_t *x = in[0], xc = cap[0];
    for (int64_t i = 0; i < rows[0]; i++)
        n_ext += x[XF_EXTERNAL_KIND * xc + i] == custom;
    for (int64_t i = 0, e = 0; i < rows[0]; i++) {
        if (x[XF_EXTERNAL_KIND * xc + i] != custom) continue;
        ext[X_CORRELATION_ID * n_ext + e] = x[XF_CORRELATION_ID * xc + i];
        ext[X_PATH * n_ext + e++] = x[XF_EXTERNAL_ID * xc + i];
    }
    int64_t *api = ext + X_COLUMNS * n_ext, m = rows[1];
    const int64_t *a = in[1], ac = cap[1];
    for (int64_t i = 0; i < m; i++) { /* columns `m` long first, then packed */
        int64_t kind = a[AF_KIND * ac + i], cbid = a[AF_CBID * ac + i];
        int k = kind == kinds[0] ? 0 : kind == kinds[1] ? 1 : -1;
        if (k < 0 || cbid < 0 || cbid >= nflags[k] || !flags[k][cbid] ||
            a[AF_RETURN_VALUE * ac + i])
            continue;
        api[L_CORRELATION_ID * m + n_api] = a[AF_CORRELATION_ID * ac + i];
        api[L_START * m + n_api] = a[AF_START * ac + i];
        api[L_GRAPH * m + n_api] = flags[k][cbid] == 2;
        api[L_THREAD * m + n_api++] = a[AF_THREAD_ID * ac + i];
    }
    for (int f = 1; f < L_COLUMNS; f++)
        memmove(api + f * n_api, api + f * m, (size_t)n_api * sizeof(int64_t));
    int64_t *kern = api + L_COLUMNS * n_api;
    const int64_t *k = in[2], c = cap[2];
#define KF(field) k[KF_##field * c + i]
    for (int64_t i = 0; i < rows[2]; i++) {
        kern[K_CORRELATION_ID * n_k + i] = KF(CORRELATION_ID);
        kern[K_NAME * n_k + i] = KF(NAME);
        kern[K_DEVICE * n_k + i] = KF(DEVICE_ID);
        kern[K_START * n_k + i] = KF(START);
        kern[K_END * n_k + i] = KF(END);
        kern[K_STREAM * n_k + i] = KF(STREAM_ID);
        kern[K_BLOCKS * n_k + i] = KF(GRID_X) * KF(GRID_Y) * KF(GRID_Z);
        kern[K_THREADS * n_k + i] = KF(BLOCK_X) * KF(BLOCK_Y) * KF(BLOCK_Z);
        kern[K_REGISTERS * n_k + i] = KF(REGISTERS_PER_THREAD);
        kern[K_SHARED * n_k + i] = KF(STATIC_SHARED_MEMORY) + KF(DYNAMIC_SHARED_MEMORY);
        kern[K_GRAPH_NODE * n_k + i] = KF(GRAPH_NODE_ID);
    }
#undef KF
    int64_t at = rows[2];
    for (int g = 3; g <= 5; g++) /* copies and sets: kernel rows named by their CopyName */
        for (int64_t i = 0; i < rows[g]; i++)
            copy_row(kern, n_k, at++, in[g], cap[g], i, g == 5);
    return proton_join_add(j, n_ext, ext, n_api, api, n_k, kern, capture_from, capture_to,
                           stride, groups, out_rows, ext_out, api_out, kernels_out, counts);
}

/* The end: kernels whose launch record never came, as kernels (K_COLUMNS columns, stride)
   with their path (external record, else -1) in `paths`; everything is forgotten. Returns
   how many. */
PROTON_API int64_t proton_join_finish(proton_join *j, int64_t stride, int64_t *kernels_out,
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
   data, and the exit stays in C: a failed call's id is kept for proton_failed_take. A launch
   made on a thread that runs no Python code at the time and has no scope open (PyTorch's
   autograd thread in a backward pass) has no call path to read: it is logged here as in the
   shadow context (under the main thread's innermost scope) and never reaches Python
   (proton_python_api says how to tell; see frameless). Nor does a launch whose Python stack
   the walk has seen before (see walk_find): it is logged with that stack's path. */

typedef int (*proton_timestamp_fn)(uint64_t *timestamp);
typedef void (*proton_callback_fn)(void *userdata, int domain, uint32_t cbid, const void *data);
/* The python context's enter: places the launch; returns its path when it comes from the
   thread's stack alone (the walk may remember it for that stack), else -1. */
typedef int64_t (*proton_enter_fn)(uint32_t corr, uint64_t start, uint32_t cbid);

enum { LOG_CORR, LOG_PATH, LOG_TIME, LOG_DOMAIN, LOG_CBID, LOG_THREAD, LOG_FIELDS };
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

/* Python's C API, from the process's own interpreter (proton_python_api): whether this
   thread holds the GIL, its thread state (NULL: it never ran Python), the GIL taken and
   given back, a thread state's running frame (a new reference, NULL when none) and a
   reference dropped. py_on 0: every launch enter goes to Python. Once given, the functions
   are never cleared: a launch call on another thread may be between two of them (without
   the GIL, or inside Python's enter) while a new session configures. */
typedef int (*proton_check_fn)(void);
typedef void *(*proton_state_fn)(void);
typedef int (*proton_ensure_fn)(void);
typedef void (*proton_release_fn)(int);
typedef void *(*proton_frame_fn)(void *);
typedef void (*proton_decref_fn)(void *);
static proton_check_fn py_holds_gil;
static proton_state_fn py_this_state;
static proton_ensure_fn py_ensure;
static proton_release_fn py_release;
static proton_frame_fn py_frame;
static proton_decref_fn py_decref;
static int py_on;

PROTON_API void proton_python_api(proton_check_fn holds_gil, proton_state_fn this_state,
                                  proton_ensure_fn ensure, proton_release_fn release,
                                  proton_frame_fn frame, proton_decref_fn decref) {
    int on = holds_gil && this_state && ensure && release && frame && decref;
    if (on && !py_frame) { /* the same interpreter's functions every time after */
        py_holds_gil = holds_gil; py_this_state = this_state; py_ensure = ensure;
        py_release = release; py_decref = decref;
        __atomic_store_n(&py_frame, frame, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&py_on, on, __ATOMIC_RELEASE);
}

/* ---- the python context's walk: a launch answered from a stack seen before -----------------
   On a thread running Python, the launch callback walks the thread's frames here through
   Python's C API (functions and objects handed over by proton_walk_set, all public API of
   3.11+) and looks the walk up in a table of walks seen before: a walk is the code object
   and instruction offset of every frame, innermost first, then each open scope's token
   (context/python.py: its name, kind and where it was opened) and the place of the frame
   that opened it. The path of a launch is a function of exactly that (the module docstring
   of context/python.py says how), so a walk found is logged with its path as a frameless
   launch is, with no Python; a walk not found goes to Python's enter, whose answer is
   remembered. Not walked (Python answers as before): a launch the Triton hook named (the
   thread's op_path), a thread Python did not start with no scope open (its path depends on
   the main thread's), a scope whose opening frame is no longer running or was opened
   outside the python context, and stacks deeper than WALK_DEPTH. The table keeps a
   reference to every code object in it, so an address in it is never another code's; it
   is only touched holding the GIL, in stretches that run no Python code (a GIL switch
   could let another thread clear it), and emptied with each session's end. */

typedef void *(*proton_new_fn)(void *);            /* PyFrame_GetBack, PyFrame_GetCode */
typedef int (*proton_lasti_fn)(void *);            /* PyFrame_GetLasti */
typedef void *(*proton_getattr_fn)(void *, void *); /* PyObject_GetAttr */
typedef int (*proton_setattr_fn)(void *, void *, void *); /* PyObject_SetAttr */
typedef long long (*proton_long_fn)(void *);       /* PyLong_AsLongLong */
typedef ptrdiff_t (*proton_size_fn)(void *);       /* PyList_Size */
typedef void *(*proton_item_fn)(void *, ptrdiff_t); /* PyList_GetItem (borrowed) */
typedef void *(*proton_occurred_fn)(void);         /* PyErr_Occurred */
typedef void (*proton_clear_fn)(void);             /* PyErr_Clear */
typedef void (*proton_incref_fn)(void *);          /* Py_IncRef */
typedef int (*proton_true_fn)(void *);             /* PyObject_IsTrue */
typedef uint64_t (*proton_id_fn)(void *);          /* PyThreadState_GetID */

/* proton_walk_set's functions and objects, in this order */
enum { WF_BACK, WF_CODE, WF_LASTI, WF_GETATTR, WF_SETATTR, WF_LONG, WF_SIZE, WF_ITEM,
       WF_OCCURRED, WF_CLEAR, WF_INCREF, WF_TRUE, WF_STATE_ID, WF_COUNT };
enum { WO_THREADS, WO_NONE, WO_STACKS, WO_OP_PATH, WO_VERSION, WO_FOREIGN, WO_OPEN, WO_OPENER,
       WO_TOKEN, WO_KEPT, WO_COUNT };

static void *walk_fns[WF_COUNT];
static void *walk_objs[WO_COUNT];
static int walk_on;

#define WALK_DEPTH 512 /* frames; a deeper stack goes to Python */
#define WALK_SCOPES 64 /* open scopes; more go to Python */
#define WALK_WORDS (1 << 22) /* the table's keys, in words: past this nothing is added */

typedef struct { uint64_t hash; int64_t at, len, path; } walk_entry;
typedef struct {
    walk_entry *entries;
    int64_t n, cap;
    int64_t *index, index_cap; /* entry + 1 by hash, 0: free */
    int64_t *words, nwords, words_cap;
} walk_table;

static walk_table table;
static int64_t walk_generation; /* counts the clears: a walk begun before one adds nothing */
static int64_t walk_hits, walk_added, walk_passed; /* found, remembered, not walked */

static __thread int64_t w_key[2 + 2 * WALK_DEPTH + 2 * WALK_SCOPES];
static __thread void *w_frames[WALK_DEPTH];
static __thread int64_t w_len, w_generation;
static __thread uint64_t w_hash;
static __thread int w_busy; /* a launch inside the enter (none expected): not walked */
/* this thread's open scopes as last read: which Stacks of which thread state (a thread that
   runs Python in calls from C gets a new state, and new Stacks, for each: often at the freed
   one's address, so the address alone does not say), at which version (every scope change
   bumps it), whether they can be walked, each one's opening frame (alive while the version
   holds: its Open keeps it) and token */
static __thread void *w_stacks;
static __thread uint64_t w_state_id;
static __thread int64_t w_version = -1, w_nscopes;
static __thread int w_walkable;
static __thread void *w_openers[WALK_SCOPES];
static __thread int64_t w_tokens[WALK_SCOPES];

#define WCALL(type, f) ((type)walk_fns[f])
#define W_GETATTR(o, name) WCALL(proton_getattr_fn, WF_GETATTR)(o, walk_objs[name])

static void walk_decref(void *o) { py_decref(o); }

/* A Python long attribute of `o`, or -1 (any error cleared). */
static int64_t walk_long(void *o, int name) {
    void *v = W_GETATTR(o, name);
    if (!v) { WCALL(proton_clear_fn, WF_CLEAR)(); return -1; }
    long long x = WCALL(proton_long_fn, WF_LONG)(v);
    walk_decref(v);
    if (x == -1 && WCALL(proton_occurred_fn, WF_OCCURRED)()) WCALL(proton_clear_fn, WF_CLEAR)();
    return (int64_t)x;
}

/* Read the thread's open scopes (`stacks.open`) into w_openers and w_tokens; whether its
   launches can be walked. */
static int walk_scopes(void *stacks) {
    void *open = W_GETATTR(stacks, WO_OPEN), *foreign = W_GETATTR(stacks, WO_FOREIGN);
    int ok = open && foreign;
    ptrdiff_t n = ok ? WCALL(proton_size_fn, WF_SIZE)(open) : -1;
    ok = ok && n >= 0 && n <= WALK_SCOPES;
    if (ok && n == 0) ok = WCALL(proton_true_fn, WF_TRUE)(foreign) == 0; /* foreign: Python */
    for (ptrdiff_t i = 0; ok && i < n; i++) {
        void *item = WCALL(proton_item_fn, WF_ITEM)(open, i);
        void *opener = item ? W_GETATTR(item, WO_OPENER) : NULL;
        ok = opener && opener != walk_objs[WO_NONE];
        if (opener) walk_decref(opener); /* the Open keeps it while the version holds */
        w_openers[i] = opener;
        w_tokens[i] = ok ? walk_long(item, WO_TOKEN) : -1;
        ok = ok && w_tokens[i] >= 0;
    }
    if (open) walk_decref(open);
    if (foreign) walk_decref(foreign);
    if (WCALL(proton_occurred_fn, WF_OCCURRED)()) { WCALL(proton_clear_fn, WF_CLEAR)(); ok = 0; }
    w_nscopes = ok ? n : 0;
    return ok;
}

static uint64_t walk_hash(const int64_t *w, int64_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint64_t)w[i]) * 0x100000001b3ULL;
    return proton_hash(h);
}

/* The table's entry for the walk in w_key (w_len words, w_hash), or NULL. */
static walk_entry *walk_lookup(void) {
    if (!table.index_cap) return NULL;
    uint64_t mask = (uint64_t)table.index_cap - 1;
    for (uint64_t i = w_hash & mask;; i = (i + 1) & mask) {
        int64_t at = table.index[i] - 1;
        if (at < 0) return NULL;
        walk_entry *e = table.entries + at;
        if (e->hash == w_hash && e->len == w_len &&
            memcmp(table.words + e->at, w_key, (size_t)w_len * sizeof(int64_t)) == 0)
            return e;
    }
}

/* The path of this thread's launch from its walk (w_key ready for walk_add): >= 0 found,
   -1 not found, -2 not walked. Holding the GIL; `state`: the thread's state. */
static int64_t walk_find(void *state) {
    if (!walk_on || w_busy) return -2;
    w_generation = walk_generation; /* Python code the calls below may run can clear it */
    void *stacks = W_GETATTR(walk_objs[WO_THREADS], WO_STACKS);
    if (!stacks) { WCALL(proton_clear_fn, WF_CLEAR)(); return -2; }
    int64_t found = -2;
    void *op = W_GETATTR(stacks, WO_OP_PATH);
    if (!op) { WCALL(proton_clear_fn, WF_CLEAR)(); goto out; }
    walk_decref(op);
    if (op != walk_objs[WO_NONE]) goto out; /* the Triton hook named this launch */
    int64_t version = walk_long(stacks, WO_VERSION);
    if (version < 0) goto out;
    uint64_t state_id = WCALL(proton_id_fn, WF_STATE_ID)(state); /* never given twice */
    if (stacks != w_stacks || version != w_version || state_id != w_state_id) {
        w_walkable = walk_scopes(stacks);
        w_stacks = stacks; w_version = version; w_state_id = state_id;
    }
    if (!w_walkable) goto out;
    int64_t n = 0, *key = w_key + 1;
    void *frame = py_frame(state);
    while (frame) {
        if (n == WALK_DEPTH) { walk_decref(frame); goto out; }
        void *code = WCALL(proton_new_fn, WF_CODE)(frame);
        walk_decref(code); /* its frame, running, keeps it */
        key[2 * n] = (int64_t)(intptr_t)code;
        key[2 * n + 1] = WCALL(proton_lasti_fn, WF_LASTI)(frame);
        w_frames[n++] = frame;
        void *back = WCALL(proton_new_fn, WF_BACK)(frame);
        walk_decref(frame); /* a running frame's object is kept by its frame */
        frame = back;
    }
    if (WCALL(proton_occurred_fn, WF_OCCURRED)()) { WCALL(proton_clear_fn, WF_CLEAR)(); goto out; }
    w_key[0] = n;
    int64_t *scopes = key + 2 * n;
    scopes[0] = w_nscopes;
    for (int64_t k = 0; k < w_nscopes; k++) { /* each opener's place, from the outermost */
        int64_t j = 0;
        while (j < n && w_frames[j] != w_openers[k]) j++;
        if (j == n) goto out; /* it returned: where the scope goes depends on more */
        scopes[1 + 2 * k] = w_tokens[k];
        scopes[2 + 2 * k] = n - 1 - j;
    }
    w_len = 2 + 2 * n + 2 * w_nscopes;
    w_hash = walk_hash(w_key, w_len);
    if (w_generation != walk_generation) goto out; /* a session ended meanwhile */
    walk_entry *e = walk_lookup();
    found = e ? e->path : -1;
    if (e) { /* Python's kept frames would outlive their calls: let them go now */
        void *kept = W_GETATTR(stacks, WO_KEPT);
        if (!kept) WCALL(proton_clear_fn, WF_CLEAR)();
        else if (kept != walk_objs[WO_NONE]) {
            walk_decref(kept);
            if (WCALL(proton_setattr_fn, WF_SETATTR)(stacks, walk_objs[WO_KEPT],
                                                     walk_objs[WO_NONE]) != 0)
                WCALL(proton_clear_fn, WF_CLEAR)();
        } else walk_decref(kept);
    }
out:
    walk_decref(stacks);
    if (found == -2) walk_passed++;
    return found;
}

/* Remember `path` for the walk in w_key (found missing by walk_find on this thread, with no
   clear since). Holding the GIL. */
static void walk_add(int64_t path) {
    if (path <= 0 || w_generation != walk_generation || table.nwords + w_len > WALK_WORDS)
        return;
    if (table.n == table.cap) {
        int64_t cap = table.cap ? 2 * table.cap : 256;
        walk_entry *grown = (walk_entry *)realloc(table.entries, (size_t)cap * sizeof *grown);
        if (!grown) return;
        table.entries = grown; table.cap = cap;
    }
    if (!reserve(&table.words, &table.words_cap, table.nwords + w_len)) return;
    if ((table.n + 1) * 2 > table.index_cap) {
        int64_t cap = table.index_cap ? 2 * table.index_cap : 512;
        int64_t *index = (int64_t *)calloc((size_t)cap, sizeof(int64_t));
        if (!index) return;
        for (int64_t i = 0; i < table.n; i++) {
            uint64_t j = table.entries[i].hash & (uint64_t)(cap - 1);
            while (index[j]) j = (j + 1) & (uint64_t)(cap - 1);
            index[j] = i + 1;
        }
        free(table.index);
        table.index = index; table.index_cap = cap;
    }
    if (walk_lookup()) return;
    for (int64_t i = 0; i < w_key[0]; i++) /* its code objects live as long as it does */
        WCALL(proton_incref_fn, WF_INCREF)((void *)(intptr_t)w_key[1 + 2 * i]);
    walk_entry *e = table.entries + table.n;
    e->hash = w_hash; e->at = table.nwords; e->len = w_len; e->path = path;
    memcpy(table.words + table.nwords, w_key, (size_t)w_len * sizeof(int64_t));
    table.nwords += w_len;
    uint64_t mask = (uint64_t)table.index_cap - 1, j = w_hash & mask;
    while (table.index[j]) j = (j + 1) & mask;
    table.index[j] = ++table.n;
    walk_added++;
}

/* Forget every walk (holding the GIL): the table is taken away first, then its code objects
   let go (which may run Python code, and so another thread's walk, on an empty table). */
PROTON_API void proton_walk_clear(void) {
    walk_table old = table;
    memset(&table, 0, sizeof table);
    walk_generation++;
    walk_hits = walk_added = walk_passed = 0;
    for (int64_t i = 0; i < old.n; i++) {
        const int64_t *w = old.words + old.entries[i].at;
        for (int64_t f = 0; f < w[0]; f++) walk_decref((void *)(intptr_t)w[1 + 2 * f]);
    }
    free(old.entries); free(old.index); free(old.words);
}

/* Hand over Python's functions and objects for the walk (the WF_ and WO_ orders; holding the
   GIL), or turn it off (fns NULL). Every walk seen is forgotten. */
PROTON_API void proton_walk_set(void *const *fns, int64_t nfns, void *const *objs, int64_t nobjs) {
    walk_on = 0;
    if (py_decref) proton_walk_clear();
    if (!fns || nfns != WF_COUNT || nobjs != WO_COUNT || !py_decref) return;
    for (int i = 0; i < WF_COUNT; i++) walk_fns[i] = fns[i];
    for (int i = 0; i < WO_COUNT; i++) {
        WCALL(proton_incref_fn, WF_INCREF)(objs[i]); /* never let go: a few strings */
        walk_objs[i] = objs[i];
    }
    w_version = -1;
    walk_on = 1;
}

/* (launches found, walks remembered, launches not walked, walks held, words held). */
PROTON_API void proton_walk_counts(int64_t *out) {
    out[0] = walk_hits; out[1] = walk_added; out[2] = walk_passed;
    out[3] = table.n; out[4] = table.nwords;
}

/* Whether the calling thread launches with no Python frame and no scope of its own (the
   python context would place it under the main thread's scope, as the shadow context does).
   A thread holding the GIL is running Python (its frames go to Python, even in the rare case
   that it has none); a thread that never had a thread state has no frames; one that has a
   thread state but not the GIL is asked for its running frame under the GIL (a thread's frames
   change only on that thread, so the answer holds for this launch call). When it has frames
   the GIL stays taken for Python's enter (*gil: give it back after; -1: not taken), which
   then takes it again at no cost (a Triton launch releases the GIL around the call), and
   *state is the thread's state (NULL when the GIL is not held: no walk). A thread with a
   scope pushed is never frameless. */
static int frameless(int *gil, void **state) {
    *gil = -1;
    *state = NULL;
    if (!__atomic_load_n(&py_on, __ATOMIC_ACQUIRE)) return 0;
    if (py_holds_gil()) {
        *state = py_this_state();
        return 0;
    }
    void *mine = py_this_state();
    if (!mine) return tls_depth == 0; /* a scope pushed: Python (which makes a state) */
    int taken = py_ensure();
    void *frame = py_frame(mine);
    if (!frame && tls_depth == 0) {
        py_release(taken);
        return 1;
    }
    if (frame) py_decref(frame);
    *gil = taken;
    *state = mine;
    return 0;
}

/* Set up the callback: CUPTI's timestamp function, Python's callback for everything else
   (NULL: none), Python's launch enter (NULL: launches are logged), the offsets in
   CUpti_CallbackData of the callback site, correlation id and return value pointer, and the
   launch calls of the driver (domain 1) and runtime (2). Logging is off until enabled; what
   an earlier session left in the log is dropped. */
PROTON_API int proton_log_configure(proton_timestamp_fn now, proton_callback_fn forward,
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

PROTON_API void proton_log_enable(int on) { __atomic_store_n(&log_on, on, __ATOMIC_RELEASE); }

/* Launches on threads with no path pushed go to `path` from now on (EMPTY: to Python). */
PROTON_API void proton_main_path(int64_t path) {
    __atomic_store_n(&main_path, path, __ATOMIC_RELAXED);
}

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
PROTON_API void proton_push(int64_t path) {
    if (tls_depth >= tls_cap && (tls_depth > tls_cap || !paths_grow())) {
        tls_depth++; /* deeper than memory allowed: launches go to the last path kept */
        return;
    }
    tls_paths[tls_depth++] = path;
}

/* Threads holding a path stack now. */
PROTON_API int64_t proton_paths_live(void) {
    return __atomic_load_n(&paths_live, __ATOMIC_RELAXED);
}

PROTON_API void proton_pop(void) {
    if (tls_depth > 0) tls_depth--;
}

/* A scope entered or left on the main thread: the push or pop and proton_main_path in one
   call (one ctypes call each way). `path` is the main thread's innermost scope after it (0,
   the tree's root, when none is open: EMPTY). */
PROTON_API void proton_push_main(int64_t path) {
    proton_push(path);
    __atomic_store_n(&main_path, path, __ATOMIC_RELAXED);
}

PROTON_API void proton_pop_main(int64_t path) {
    proton_pop();
    __atomic_store_n(&main_path, path == 0 ? EMPTY : path, __ATOMIC_RELAXED);
}

/* The main thread's innermost scope now (EMPTY: none). */
PROTON_API int64_t proton_main_path_now(void) {
    return __atomic_load_n(&main_path, __ATOMIC_RELAXED);
}

/* `width` words onto `log`, the mutex held; -1 when it could not grow. */
static int log_push(proton_log *log, const int64_t *entry, int64_t width) {
    if (log->n == log->cap) {
        int64_t cap = log->cap ? 2 * log->cap : 4096;
        int64_t *grown = (int64_t *)realloc(log->data, (size_t)(cap * width) * sizeof(int64_t));
        if (!grown) return -1;
        log->data = grown; log->cap = cap;
    }
    memcpy(log->data + log->n++ * width, entry, (size_t)width * sizeof(int64_t));
    return 0;
}

/* `width` words onto `log`, under the mutex. */
static void log_append(proton_log *log, const int64_t *entry, int64_t width) {
    pthread_mutex_lock(&log_mutex);
    if (log_push(log, entry, width) != 0) log_lost++;
    pthread_mutex_unlock(&log_mutex);
}

/* ---- waits: the CPU blocked on the GPU ----------------------------------------------------
   The synchronizing calls (stream, event, context/device synchronizations and synchronous
   copies; the caller names their cbids with proton_sync_configure) are timed here from their
   enter to their exit on the calling thread and summed per path: the thread's innermost
   pushed path, else the main thread's innermost scope, else the root (0). A call made inside
   another (the driver's under the runtime's) is not counted again. The sums (path, ns, count)
   live in one map, one entry per path that waited, under the log's mutex; the buffer thread
   takes them whole (proton_sync_take), so memory holds the paths, never the calls. */

static const uint8_t *sync_flags[DOMAINS]; /* sync_flags[domain][cbid]: a synchronizing call */
static int64_t sync_n[DOMAINS];
static proton_map sync_sums; /* path -> (ns, count) */
static int64_t sync_lost; /* calls not summed: no memory for their path */
static __thread int32_t tls_sync; /* synchronizing calls entered and not yet left */
static __thread uint64_t tls_sync_start; /* the outermost one's enter time (0: before logging) */
static __thread int32_t tls_sync_kind; /* the outermost one's flag: 1 waits, 2 may wait */
static __thread int32_t tls_sync_own; /* the profiler's own wait (its flush): not the job's */
/* Each wait as an event for a trace (while wait_events_on): (path, start, end, thread), the
   times on CUPTI's clock, the thread pthread_self() (Python's threading.get_ident()). Taken
   after each buffer; WAIT_EVENTS_MAX bounds it should no one take them. */
#define WAIT_FIELDS 4
#define WAIT_EVENTS_MAX (1 << 20)
static int wait_events_on;
static proton_log wait_events;
static int64_t wait_events_dropped; /* events not kept: the log full, or no memory */
#define ASYNC_WAIT_NS 20000 /* an asynchronous copy that held its thread this long waited */
/* A launch call that held its thread this long (format.STEP_SLOW_LAUNCH: a kernel's first
   load, or CUPTI's work inside the launch) is kept as a wait event with this path, so
   that GPU idle time during it is not called the job's (runtime/idle.py). */
#define SLOW_LAUNCH_NS 200000
#define SLOW_LAUNCH_PATH (-7)

/* The synchronizing calls of the driver (domain 1) and runtime (2): flags[cbid] 1 for a call
   that waits for the GPU (a synchronization, a synchronous copy), 2 for an asynchronous copy,
   which waits for the stream's earlier work when its host memory is pageable (torch's
   `.cpu()`): counted only when it held the thread ASYNC_WAIT_NS or more (a pinned one
   returns in a few us). Set before the subscription's callbacks are enabled; earlier sums and
   wait events are dropped, and events are off. */
PROTON_API int proton_sync_configure(const uint8_t *flags1, int64_t n1, const uint8_t *flags2,
                                     int64_t n2) {
    const uint8_t *given[DOMAINS] = {NULL, flags1, flags2};
    const int64_t sizes[DOMAINS] = {0, n1, n2};
    pthread_mutex_lock(&log_mutex);
    for (int d = 1; d < DOMAINS; d++) {
        uint8_t *copy = (uint8_t *)malloc((size_t)sizes[d] + 1);
        if (!copy) { pthread_mutex_unlock(&log_mutex); return -1; }
        memcpy(copy, given[d], (size_t)sizes[d]);
        /* the old table stays allocated: a callback may be reading it */
        __atomic_store_n(&sync_n[d], 0, __ATOMIC_RELEASE);
        __atomic_store_n(&sync_flags[d], copy, __ATOMIC_RELEASE);
        __atomic_store_n(&sync_n[d], sizes[d], __ATOMIC_RELEASE);
    }
    if (!sync_sums.slots && map_init(&sync_sums, 3, MAP_MIN) != 0) {
        pthread_mutex_unlock(&log_mutex);
        return -1;
    }
    for (int64_t i = 0; i < sync_sums.cap; i++) sync_sums.slots[i * 3] = EMPTY;
    sync_sums.live = 0; sync_sums.far = 0; sync_lost = 0;
    wait_events.n = 0; wait_events_dropped = 0;
    __atomic_store_n(&wait_events_on, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&log_mutex);
    return 0;
}

static int is_sync(int domain, uint32_t cbid) {
    if (domain <= 0 || domain >= DOMAINS) return 0;
    int64_t n = __atomic_load_n(&sync_n[domain], __ATOMIC_ACQUIRE);
    const uint8_t *f = __atomic_load_n(&sync_flags[domain], __ATOMIC_ACQUIRE);
    return f && (int64_t)cbid < n ? f[cbid] : 0;
}

/* The calling thread's synchronizing calls are the profiler's own while `on` (a flush's
   synchronize): not timed. */
PROTON_API void proton_sync_own(int on) { tls_sync_own = on; }

static void on_sync(const proton_config *c, const uint8_t *d, int kind) {
    if (tls_sync_own) return;
    uint32_t site;
    memcpy(&site, d + c->site_at, sizeof site);
    if (site == 0) { /* the enter */
        if (tls_sync++ == 0) {
            tls_sync_start = 0;
            tls_sync_kind = kind;
            if (__atomic_load_n(&log_on, __ATOMIC_ACQUIRE)) c->now(&tls_sync_start);
        }
        return;
    }
    if (tls_sync <= 0 || --tls_sync > 0) return;
    if (tls_sync_start == 0 || !__atomic_load_n(&log_on, __ATOMIC_ACQUIRE)) return;
    uint64_t end = 0;
    c->now(&end);
    int64_t ns = end > tls_sync_start ? (int64_t)(end - tls_sync_start) : 0;
    if (tls_sync_kind == 2 && ns < ASYNC_WAIT_NS) return; /* it did not wait */
    int64_t depth = tls_depth < tls_cap ? tls_depth : tls_cap;
    int64_t path = depth ? tls_paths[depth - 1] : __atomic_load_n(&main_path, __ATOMIC_RELAXED);
    if (path == EMPTY) path = 0; /* the root */
    pthread_mutex_lock(&log_mutex);
    int64_t *s = sync_sums.slots ? map_find(&sync_sums, path) : NULL;
    if (s) { s[1] += ns; s[2] += 1; }
    else if (sync_sums.slots && (s = map_put(&sync_sums, path)) != NULL) { s[1] = ns; s[2] = 1; }
    else sync_lost++;
    if (__atomic_load_n(&wait_events_on, __ATOMIC_ACQUIRE)) {
        int64_t event[WAIT_FIELDS] = {path, (int64_t)tls_sync_start, (int64_t)end,
                                      (int64_t)pthread_self()};
        if (wait_events.n >= WAIT_EVENTS_MAX || log_push(&wait_events, event, WAIT_FIELDS))
            wait_events_dropped++;
    }
    pthread_mutex_unlock(&log_mutex);
}

/* A launch call entered at `start` that held its thread SLOW_LAUNCH_NS or more: a wait event
   with SLOW_LAUNCH_PATH (one clock read per launch while wait events are kept). */
static void slow_launch(const proton_config *c, uint64_t start) {
    uint64_t end = 0;
    c->now(&end);
    if (end < start + SLOW_LAUNCH_NS) return;
    pthread_mutex_lock(&log_mutex);
    int64_t event[WAIT_FIELDS] = {SLOW_LAUNCH_PATH, (int64_t)start, (int64_t)end,
                                  (int64_t)pthread_self()};
    if (wait_events.n >= WAIT_EVENTS_MAX || log_push(&wait_events, event, WAIT_FIELDS))
        wait_events_dropped++;
    pthread_mutex_unlock(&log_mutex);
}

/* Keep each wait as an event (on) for a trace, or not (off: those kept stay to be taken). */
PROTON_API void proton_wait_events(int on) {
    __atomic_store_n(&wait_events_on, on, __ATOMIC_RELEASE);
}

/* The wait events since the last take, (path, start, end, thread) into `out` (room for `cap`);
   returns how many, or minus how many there are when `cap` is too small (nothing taken). */
PROTON_API int64_t proton_wait_events_take(int64_t *out, int64_t cap) {
    pthread_mutex_lock(&log_mutex);
    int64_t n = wait_events.n;
    if (n > cap) { pthread_mutex_unlock(&log_mutex); return -n; }
    if (n) memcpy(out, wait_events.data, (size_t)(n * WAIT_FIELDS) * sizeof(int64_t));
    wait_events.n = 0;
    pthread_mutex_unlock(&log_mutex);
    return n;
}

/* Wait events not kept (the log full or no memory) since the last proton_sync_configure. */
PROTON_API int64_t proton_wait_events_dropped(void) {
    return __atomic_load_n(&wait_events_dropped, __ATOMIC_RELAXED);
}

/* The sums since the last take, as (path, ns, count) triples into `out` (room for `cap`);
   returns how many, or minus how many there are when `cap` is too small (nothing taken). */
PROTON_API int64_t proton_sync_take(int64_t *out, int64_t cap) {
    pthread_mutex_lock(&log_mutex);
    int64_t n = sync_sums.live;
    if (n > cap) { pthread_mutex_unlock(&log_mutex); return -n; }
    int64_t k = 0;
    for (int64_t i = 0; i < sync_sums.cap && k < n; i++) {
        int64_t *s = sync_sums.slots + i * 3;
        if (s[0] == EMPTY) continue;
        out[3 * k] = s[0]; out[3 * k + 1] = s[1]; out[3 * k + 2] = s[2];
        k++;
        s[0] = EMPTY;
    }
    sync_sums.live = 0; sync_sums.far = 0;
    pthread_mutex_unlock(&log_mutex);
    return k;
}

/* Synchronizing calls not summed (no memory). */
PROTON_API int64_t proton_sync_lost(void) { return sync_lost; }

PROTON_API void proton_on_api(void *userdata, int domain, uint32_t cbid, const void *data) {
    const proton_config *c = __atomic_load_n(&config, __ATOMIC_ACQUIRE);
    if (!c) return;
    /* a call may be both a wait and a copy (cudaMemcpyAsync to pageable memory): timed here,
       then logged below as the copy's launch */
    int sync = is_sync(domain, cbid);
    if (sync) on_sync(c, (const uint8_t *)data, sync);
    if (!(domain > 0 && domain < DOMAINS && cbid < c->nflags[domain] && c->flags[domain][cbid])) {
        if (!sync && c->forward) c->forward(userdata, domain, cbid, data);
        return;
    }
    const uint8_t *d = (const uint8_t *)data;
    uint32_t site, corr;
    const int32_t *ret;
    memcpy(&site, d + c->site_at, sizeof site);
    memcpy(&corr, d + c->corr_at, sizeof corr);
    int on = __atomic_load_n(&log_on, __ATOMIC_ACQUIRE);
    if (tls_generation != c->generation) {
        tls_generation = c->generation;
        tls_calls = 0;
    }
    if (c->enter) { /* the python context: Python places the launch at its enter */
        /* only the outermost of nested calls (a runtime copy's driver copy) */
        if (site == 0 ? tls_calls++ > 0 : tls_calls > 0 && --tls_calls > 0) return;
        if (!on) return;
        if (site == 0) {
            uint64_t ts = 0;
            c->now(&ts);
            int gil;
            void *state;
            if (frameless(&gil, &state)) { /* as Python would register it, with no Python */
                int64_t entry[LOG_FIELDS] = {corr, __atomic_load_n(&main_path, __ATOMIC_RELAXED),
                                           (int64_t)ts, domain, cbid,
                                           (int64_t)(uint32_t)pthread_self()};
                log_append(&log_now, entry, LOG_FIELDS);
                return;
            }
            int64_t path = state ? walk_find(state) : -2;
            if (path >= 0) { /* a walk seen before: logged with its path, no Python */
                walk_hits++;
                int64_t entry[LOG_FIELDS] = {corr, path, (int64_t)ts, domain, cbid,
                                           (int64_t)(uint32_t)pthread_self()};
                log_append(&log_now, entry, LOG_FIELDS);
            } else {
                w_busy = 1;
                int64_t answer = c->enter(corr, ts, cbid);
                w_busy = 0;
                if (path == -1) walk_add(answer);
            }
            if (gil >= 0) py_release(gil);
        } else {
            memcpy(&ret, d + c->ret_at, sizeof ret);
            if (ret && *ret != 0) { /* no kernel will come: withdrawn */
                int64_t id = corr;
                log_append(&failed, &id, 1);
            }
        }
        return;
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
    int64_t entry[LOG_FIELDS] = {corr, path, (int64_t)start,
                               domain, cbid, (int64_t)(uint32_t)pthread_self()};
    log_append(&log_now, entry, LOG_FIELDS);
    if (tls_start != 0 && __atomic_load_n(&wait_events_on, __ATOMIC_ACQUIRE))
        slow_launch(c, tls_start);
}

/* Take what the log holds (the buffer thread; one taker at a time); returns how many. A
   second call before proton_log_read takes nothing more. */
PROTON_API int64_t proton_log_take(void) {
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
PROTON_API int64_t proton_log_read(int64_t custom, const int64_t *kinds, int64_t stride,
                                   int64_t *ext, int64_t *api) {
    int64_t n_ext = 0, n = log_taken.n;
    for (int64_t i = 0; i < n; i++) {
        const int64_t *e = log_taken.data + i * LOG_FIELDS;
        if (e[LOG_PATH] != EMPTY) {
            ext[XF_CORRELATION_ID * stride + n_ext] = e[LOG_CORR];
            ext[XF_EXTERNAL_KIND * stride + n_ext] = custom;
            ext[XF_EXTERNAL_ID * stride + n_ext++] = e[LOG_PATH];
        }
        api[AF_KIND * stride + i] = kinds[e[LOG_DOMAIN]];
        api[AF_CORRELATION_ID * stride + i] = e[LOG_CORR];
        api[AF_START * stride + i] = e[LOG_TIME];
        api[AF_CBID * stride + i] = e[LOG_CBID];
        api[AF_THREAD_ID * stride + i] = e[LOG_THREAD];
        api[AF_RETURN_VALUE * stride + i] = 0;
    }
    log_taken.n = 0;
    return n_ext;
}

/* The python context's failed launch calls since the last call, at most `cap` into `out`;
   returns how many. */
PROTON_API int64_t proton_failed_take(int64_t *out, int64_t cap) {
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
PROTON_API int64_t proton_log_lost(void) { return log_lost; }
