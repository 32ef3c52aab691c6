"""A small C helper, compiled at first use with the machine's C compiler and cached (as Triton
builds its launchers), for the per-record work on CUPTI's thread; Python does it when there is
no compiler.

Walking a completed activity buffer costs a ctypes call per record from Python (three records a
launch) while holding the GIL, so the thread that launches waits. The helper walks the whole
buffer with CUPTI's own cuptiActivityGetNextRecord in one call that releases the GIL, reading
the records' fields as it walks (`Columns`: one call per buffer instead of a numpy gather per
field) and, for the shadow context, joins them (`Join`: the Attributor's common case, kernels
summed per call path), so that Python sees a buffer's sums, not its records. Its launch
callback (`LaunchLog`) stands for CUPTI's API and external records. pipeline.NativePipeline
puts these together.

The C is native.c beside this module, built and loaded by c_loader.py (as pm_native.c and
runtime/intra_native.c are); every column index it uses comes from records.py as a generated
header (proton_records.h), part of the cache key. It binds nothing at build time (CUPTI's
function comes as a pointer at run time), so one build serves every libcupti.

PROTON_NATIVE=0 keeps everything in Python (pipeline.PythonPipeline, as without a compiler);
PROTON_CACHE_DIR moves the cache (c_loader.py).
"""
from __future__ import annotations

import ctypes
from typing import Any, cast

import numpy as np

from . import c_loader, records

RECORD_ALIGN = 8
"""CUPTI's records are 8-byte aligned and at least that long: a buffer of `valid` bytes holds
at most valid // 8 of them."""
EMPTY = -(1 << 63)
"""The C side's "no path" (INT64_MIN)."""

HELPER = c_loader.Helper(
    __package__, "native.c", "helper",
    "reading CUPTI buffers in Python, which costs more per launch: the C helper could not be "
    "built ({exc}); install a C compiler (cc) or set " + c_loader.NATIVE_ENV + "=0 to silence "
    "this",
    lambda: {"proton_records.h": records.c_header()})


def source() -> str:
    """native.c's text."""
    return HELPER.source


def library_path(flags: tuple[str, ...] | None = None) -> str:
    """The cached library for this source, generated header, compiler flags (c_loader.FLAGS
    unless given), compiler, Python ABI and machine."""
    return HELPER.path(flags)


def helper() -> ctypes.CDLL | None:
    """The compiled helper, built once per source version, flags and machine; None (said
    once) when it cannot be built, or PROTON_NATIVE=0."""
    return HELPER.load()


def signatures() -> dict[str, tuple[Any, list]]:
    """{function: (restype, argtypes)} of every PROTON_API function, read from native.c's
    definitions: the one place they are written."""
    return HELPER.signatures()


class Columns:
    """The fields of a completed buffer's records, read in C during the walk: for each group of
    record kinds (kinds sharing one layout), one int64 array per field (without the helper,
    pipeline.PythonPipeline walks and reads with numpy)."""

    KINDS = 256
    """Activity kinds the lookup table covers (CUPTI's are well under this)."""

    def __init__(self, lib: ctypes.CDLL, next_record,
                 groups: list[tuple[list[int], list[tuple[int, int, bool]], int]]) -> None:
        """groups: (kinds, fields as (offset, size, signed), record size) each."""
        self._call = lib.proton_columns
        self._next = next_record  # held: the C walk calls it by address (a ctypes callback
        # freed under it, as a test's temporary one was, crashes the walk)
        self._next_address = ctypes.cast(next_record, ctypes.c_void_p).value
        table = np.full(self.KINDS, -1, dtype=np.int32)
        nfields: list[int] = []
        first: list[int] = []
        offsets: list[int] = []
        sizes: list[int] = []
        signs: list[int] = []
        record_sizes: list[int] = []
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


def _launch_flags(calls: list[int], graphs: list[int]) -> np.ndarray:
    """A table by cbid: 1 for a launch call, 2 for a graph launch, 0 for any other call."""
    flags = np.zeros(max([*calls, *graphs, 0]) + 1, dtype=np.uint8)
    flags[list(calls)] = 1
    flags[list(graphs)] = 2
    return flags


class Joined:
    """What Join made of one buffer (int64 numpy columns):
    groups: records.Group, one per (path, kernel, device, launch configuration) of the
      kernels matched;
    rows: records.Row, one per kernel matched;
    first: the earliest launch start among them (None when none matched);
    launches: the launch records (calls that succeeded) the buffer had;
    python: (external (records.External), api (records.Launch), kernels (records.Kernel))
      of the launches Python places, for Attributor."""

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

    def __del__(self) -> None:
        if getattr(self, "_state", None):
            self._lib.proton_join_free(self._state)
            self._state = None

    def add(self, blocks: list[np.ndarray], rows: np.ndarray,
            capture: tuple[int, int] | None) -> Joined:
        """One buffer's records as Columns.read gives them (records.INPUT's groups: external,
        API, kernel, copy and set records, the collector's field order). `capture`: (first, last) timestamps of the stream
        captures seen (launches then go to Python, which knows each thread's windows).
        The Joined's columns are valid until the next add."""
        n_api, n_k = int(rows[1]), int(rows[2:].sum())
        need = n_k + self._lib.proton_join_early(self._state) + n_api + 1
        out = self._kept.get("out", records.OUTPUT_AT[-1], need)  # one block: one stride
        stride = out.shape[1]
        groups, out_rows, ext_out, api_out, kern_out = (
            out[a:b] for a, b in zip(records.OUTPUT_AT, records.OUTPUT_AT[1:]))
        counts = np.zeros(len(records.Count), dtype=np.int64)
        capture_from, capture_to = capture or (1, 0)
        pointers = (ctypes.c_void_p * len(blocks))(*[b.ctypes.data for b in blocks])
        caps = np.array([b.shape[1] for b in blocks], dtype=np.int64)
        f0, f1 = self._flags
        if self._lib.proton_join_records(
                self._state, pointers, caps.ctypes.data, rows.ctypes.data, self._custom,
                self._kinds.ctypes.data, f0.ctypes.data, len(f0), f1.ctypes.data, len(f1),
                capture_from, capture_to, stride, groups.ctypes.data, out_rows.ctypes.data,
                ext_out.ctypes.data, api_out.ctypes.data, kern_out.ctypes.data,
                counts.ctypes.data) != 0:
            raise MemoryError("the C join ran out of memory: this buffer's kernels are lost")
        n = counts.tolist()
        C = records.Count
        return Joined(groups[:, :n[C.groups]], out_rows[:, :n[C.rows]],
                      n[C.first] if n[C.rows] else None, n[C.launches],
                      (ext_out[:, :n[C.external]], api_out[:, :n[C.launches_left]],
                       kern_out[:, :n[C.kernels]]))

    def slots(self) -> int:
        """The slots of its tables (a few words each): what it holds between buffers."""
        return int(self._lib.proton_join_slots(self._state))

    def path(self, corr: int) -> int | None:
        """The path of launch `corr`'s external record, while its launch record has not come."""
        found = self._lib.proton_join_path(self._state, corr)
        return None if found < 0 else int(found)

    def waiting(self, ts: int, since: int = 0) -> int:
        """Launches made from `since` to `ts` still waiting for their kernel."""
        return int(self._lib.proton_join_waiting(self._state, since, ts))

    def oldest(self, since: int, none: int) -> int:
        """The earliest start from `since` on of the launches waiting for their kernel
        (`none`: none waits)."""
        return int(self._lib.proton_join_oldest(self._state, since, none))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """(paths, kernels): kernels whose launch record never came (records.Kernel), each with
        its external record's path or -1; the tables are emptied."""
        n = self._lib.proton_join_early(self._state)
        kern = np.empty((len(records.Kernel), n + 1), dtype=np.int64)
        paths = np.empty(n + 1, dtype=np.int64)
        got = self._lib.proton_join_finish(self._state, n + 1, kern.ctypes.data,
                                           paths.ctypes.data)
        return paths[:got], kern[:, :got]



def scope_calls(lib: ctypes.CDLL):
    """(push, pop, main path, push and main path, pop and main path): the launch log's path
    stack calls, through PyDLL, which keeps the GIL (a push is a few stores: releasing and
    taking the GIL would cost more)."""
    python = ctypes.PyDLL(lib._name)
    calls = []
    for name in ("proton_push", "proton_pop", "proton_main_path", "proton_push_main",
                 "proton_pop_main"):
        function = getattr(python, name)
        function.restype, function.argtypes = signatures()[name]
        calls.append(function)
    return tuple(calls)


ENTER = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32)
"""The python context's launch enter: (correlation id, CUPTI timestamp, cbid) -> the path
it gave the launch when that comes from the thread's stack alone (the walk remembers it for
that stack), else -1."""


def _addresses(names) -> list[int]:
    """The addresses of these functions of this process's interpreter."""
    return [cast(int, ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value)
            for name in names]  # functions: never NULL


def python_api() -> list[int]:
    """The addresses proton_python_api takes."""
    return _addresses(("PyGILState_Check", "PyGILState_GetThisThreadState", "PyGILState_Ensure",
                       "PyGILState_Release", "PyThreadState_GetFrame", "Py_DecRef"))


WALK_FUNCTIONS = ("PyFrame_GetBack", "PyFrame_GetCode", "PyFrame_GetLasti", "PyObject_GetAttr",
                  "PyObject_SetAttr", "PyLong_AsLongLong", "PyList_Size", "PyList_GetItem",
                  "PyErr_Occurred", "PyErr_Clear", "Py_IncRef", "PyObject_IsTrue",
                  "PyThreadState_GetID")
"""What native.c's walk calls, in its WF_ order (public C API of Python 3.11+)."""


def walk_api(walk) -> tuple[list[int], list[int]] | None:
    """proton_walk_set's (functions, objects) for `walk` (the python context's Walk: the
    thread-local holding each thread's stacks and the attribute names it reads, in native.c's
    WO_ order after None); None where this Python lacks a function (before 3.11)."""
    if not all(hasattr(ctypes.pythonapi, name) for name in WALK_FUNCTIONS):
        return None
    return _addresses(WALK_FUNCTIONS), [id(walk.threads), id(None), *map(id, walk.names)]


class LaunchLog:
    """The launch callback in C (the SOURCE's launch log). Shadow context: scopes push their
    path with `push`/`pop` (the calling thread's, as CUPTI's external-id stack would keep it),
    CUPTI calls `callback` at each launch call, and the buffer thread reads what was launched
    with `take` as the external and API columns Join takes. Python context (configure with
    `enter`): each launch call's enter goes to Python as (correlation id, time, cbid), its
    exit stays in C, and `failed` gives the calls that failed; a thread with no Python frame
    and no path pushed (scopes push in both contexts) has its launches logged, as the shadow
    context's are, and `take` gives them. One per process (the C state
    is): configure replaces the last one. With `walk` (the python context's), a launch on a
    thread running Python whose stack was seen before is logged with its path in C too
    (native.c's walk), and `walks` counts."""

    def __init__(self, lib: ctypes.CDLL, timestamp: int, fields: tuple[int, int, int],
                 launches: dict[int, tuple[int, list[int], list[int]]], custom: int,
                 walk=None) -> None:
        """timestamp: cuptiGetTimestamp's address; fields: callback_site, correlation_id and
        function_return_value offsets in CUpti_CallbackData; launches: {callback domain (1
        driver, 2 runtime): (its API record kind, launch cbids, graph-launch cbids)};
        custom: the external id kind the columns carry; walk: python.Walk, or None."""
        self._lib, self._custom = lib, custom
        self._walk = walk
        held = ctypes.PyDLL(lib._name)  # these keep the GIL: they touch Python objects
        self._walk_set, self._walk_clear = held.proton_walk_set, held.proton_walk_clear
        self._walk_set.restype, self._walk_set.argtypes = signatures()["proton_walk_set"]
        self._walk_clear.restype, self._walk_clear.argtypes = signatures()["proton_walk_clear"]
        self._flags = {}
        self._kinds = np.full(3, -1, dtype=np.int64)
        for domain, (kind, calls, graphs) in launches.items():
            self._flags[domain] = _launch_flags(calls, graphs)
            self._kinds[domain] = kind
        self._fields, self._timestamp = fields, timestamp
        self._kept = Blocks()
        self.callback = ctypes.cast(lib.proton_on_api, ctypes.c_void_p).value
        """proton_on_api's address: the subscriber's callback."""
        self.push, self.pop, self._main = scope_calls(lib)[:3]
        self.configure(None)

    def configure(self, forward: int | None, enter=None, frameless: bool = True) -> None:
        """Hand the calls that are not launches to `forward` (a callback's address, or none),
        and each launch call's enter to `enter` (an ENTER, kept alive by the caller) instead
        of logging it, except (when `frameless`) those of a thread running no Python with no
        path pushed, which are logged as in the shadow context; nothing happens until
        `enable`."""
        none = np.zeros(1, dtype=np.uint8)
        f1, f2 = self._flags.get(1, none), self._flags.get(2, none)
        enter = ctypes.cast(enter, ctypes.c_void_p).value if enter is not None else None
        self._walk_set(None, 0, None, 0)  # off, and what it held let go, before the API changes
        self._lib.proton_python_api(*(python_api() if enter is not None and frameless
                                      else [None] * 6))
        api = walk_api(self._walk) if enter is not None and frameless and self._walk else None
        if api is not None:
            functions, objects = ((ctypes.c_void_p * len(v))(*v) for v in api)
            self._walk_set(functions, len(functions), objects, len(objects))
        if self._lib.proton_log_configure(self._timestamp, forward, enter, *self._fields,
                                          f1.ctypes.data, len(f1), f2.ctypes.data, len(f2)):
            raise MemoryError("the launch log could not allocate its tables")

    def enable(self, on: bool) -> None:
        """Take launches (on) or not; off, every walk seen is forgotten (the code objects it
        kept let go)."""
        self._lib.proton_log_enable(int(on))
        if not on:
            self._walk_clear()

    @property
    def walks(self) -> dict[str, int]:
        """The walk's counts since the last configure or enable(False): launches found (no
        Python), walks remembered, launches not walked, walks held and their words."""
        out = np.zeros(5, dtype=np.int64)
        self._lib.proton_walk_counts(out.ctypes.data)
        return dict(zip(("found", "remembered", "passed", "held", "words"), out.tolist()))

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
        x = len(records.ExternalFields)  # one block: one stride for both
        both = self._kept.get("log", x + len(records.ApiFields), n + 1)
        ext, api = both[:x], both[x:]
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

    def sync_calls(self, calls: dict[int, list[int]], copies: dict[int, list[int]]) -> None:
        """Time the synchronizing calls `calls` and the asynchronous copies `copies` ({callback
        domain: cbids}; a copy counts when it held its thread ASYNC_WAIT_NS or more) from
        enter to exit and sum them per path (the calling thread's innermost pushed path, else
        the main thread's scope, else the root); earlier sums are dropped."""
        f1, f2 = (_flags(calls.get(d, ()), copies.get(d, ())) for d in (1, 2))
        if self._lib.proton_sync_configure(f1.ctypes.data, len(f1), f2.ctypes.data, len(f2)):
            raise MemoryError("the launch log could not allocate its wait sums")

    def own_waits(self, on: bool) -> None:
        """The calling thread's synchronizing calls are the profiler's own while on."""
        self._lib.proton_sync_own(int(on))

    def take_syncs(self) -> tuple[list[int], list[int], list[int]]:
        """(paths, ns, counts): the time the CPU waited in synchronizing calls since the last
        take, summed per path."""
        cap = 256
        while True:
            out = np.empty((cap, 3), dtype=np.int64)
            n = int(self._lib.proton_sync_take(out.ctypes.data, cap))
            if n >= 0:
                return out[:n, 0].tolist(), out[:n, 1].tolist(), out[:n, 2].tolist()
            cap = -n + 64

    def wait_events(self, on: bool) -> None:
        """Keep each wait as an event (take_wait_events) while on, besides its path's sums."""
        self._lib.proton_wait_events(int(on))

    def take_wait_events(self) -> list[tuple[int, int, int, int]]:
        """The waits kept as events since the last take: (path, start, end, thread), CUPTI's
        clock, the thread as threading.get_ident() names it."""
        cap = 1024
        while True:
            out = np.empty((cap, 4), dtype=np.int64)
            n = int(self._lib.proton_wait_events_take(out.ctypes.data, cap))
            if n >= 0:
                return [tuple(row) for row in out[:n].tolist()]
            cap = -n + 1024

    @property
    def wait_events_dropped(self) -> int:
        """Wait events not kept (their log full, or no memory) since sync_calls."""
        return int(self._lib.proton_wait_events_dropped())


ASYNC_WAIT_NS = 20_000
"""native.c's: an asynchronous copy whose call held its thread this long waited for the GPU."""

SLOW_LAUNCH_PATH = -7
"""native.c's: the path of a wait event that is a launch call which held its thread
format.STEP_SLOW_LAUNCH or more (kept while wait events are)."""

WAIT_EVENTS_MAX = 1 << 20
"""native.c's: the wait events held at most between two takes (32 MiB in C)."""


def _flags(calls, copies) -> np.ndarray:
    """One byte per cbid up to the largest: 1 for `calls`, 2 for `copies`."""
    out = np.zeros(max([*calls, *copies, 0]) + 1, dtype=np.uint8)
    out[list(calls)] = 1
    out[list(copies)] = 2
    return out
