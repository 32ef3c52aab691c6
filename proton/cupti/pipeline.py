"""How a collector attributes launches and reads CUPTI's activity buffers: one interface
(`Pipeline`), two implementations, chosen once when the collector is made (`choose`).

  * NativePipeline, the default: the C helper (native.c, built at first use) walks each
    buffer and reads its records' fields in one call outside the GIL. In the shadow context
    its launch callback logs each launch with the path its thread pushed (no API or external
    records are asked of CUPTI) and it joins the records by correlation id, summing kernels
    per path; what it cannot place (graph launches, launches with no scope, launches during a
    stream capture) goes on to attribution.Attributor. In the python context its callback
    logs two kinds of launches with no Python: those on a thread running no Python with no
    scope pushed (PyTorch's autograd thread), and those whose stack it walked in C and has
    seen before (native.c's walk; the path is the one Python gave that stack); the buffer
    thread registers them with the Attributor where the Python enter would have. Any other
    launch's enter goes to Python (scopes push their path to C in this context too, so a
    thread's open scope is never frameless).
  * PythonPipeline, where no C compiler is found or the user sets PROTON_NATIVE=0: buffers
    walked by a ctypes call per record, fields read with numpy, records joined by the
    Attributor; scopes push their path as CUPTI's external correlation id, and the python
    context's launch callback is Python's.
Both hand the Attributor the same columns (records.External, records.Launch, records.Placed),
so what a profile holds does not depend on the pipeline (tests/test_native.py replays the same
recorded buffers through both).
"""
from __future__ import annotations

import ctypes
import time
from functools import partial
from typing import Any, Callable, Protocol, cast

import numpy as np

from ..data.paths import ROOT
from ..report import callback_failed
from . import native, records
from .native import Joined
from .records import ApiFields, CopyFields, ExternalFields, KernelFields, SetFields
from .attribution import GroupSink
from .shaping import Shaper



class Launches(Protocol):
    """The collector's launch side as a pipeline sees it (collector.CuptiCollector: not
    imported, it imports this module)."""

    in_callback: bool
    """Launches are attributed in CUPTI's launch callback (the python context)."""
    pushes_ids: bool
    """Scopes push their path ids (the shadow context)."""
    serial: bool
    """Exact PC sampling: the launch callback must be Python's for every call."""
    walk: Any
    """The python context's Walk (the C helper's walk of a launching stack), or None."""
    fields: Any
    """The launch callback's data's field offsets (subscriber.callback_fields; at start)."""
    python_syncs: Any
    """collector.PythonSyncs: the waits where no C launch log times them."""

    def launch_callback(self) -> Any:
        """The Python launch callback (the python context without the C log)."""

    def launch_enter(self, unscoped_now: Any = None) -> Any:
        """The python context's launch enter (on_enter), for the C log to call."""

    def logged_enters(self) -> Any:
        """register(...) of the launches the C log took instead of on_enter."""


class Pipeline(Protocol):
    """What the collector asks of a pipeline. push, pop and main_path are plain attributes,
    fixed when it is made (scopes call them at every enter and exit)."""

    native: bool
    """The C helper does the work."""
    logs_launches: bool
    """Launch calls go to the C launch log: no API or external records are asked of CUPTI."""
    push: Callable[[int], None]
    """Launches on this thread carry the path id until the matching pop (shadow context)."""
    pop: Callable[[], None]
    main_path: Callable[[int], None]
    """The main thread's innermost scope is now this path id (with the launch log)."""
    push_main: Callable[[int], None]
    """With the launch log: push and main_path in one call (a scope the main thread entered)."""
    pop_main: Callable[[int], None]
    """With the launch log: pop, and main_path of the path given (ROOT: none) in one call."""

    def start(self, timestamp: int) -> tuple[Any, Any, Any]:
        """Before CUPTI is subscribed (timestamp: cuptiGetTimestamp's address): the
        subscriber's (C launch log, Python launch enter, Python launch callback), each None
        when not used."""

    def enable(self, on: bool) -> None:
        """Start (after the kinds are enabled) or stop taking launches."""

    def attach(self, raw) -> None:
        """Take `raw`'s (buffers.RawBuffers) completed buffers."""

    def settle(self) -> None:
        """Hand the Attributor what the launch callback holds (under the collector's lock)."""

    def waiting(self, ts: int, since: int = 0) -> int:
        """Launches made from `since` to `ts` it holds that wait for their kernel (beyond the
        Attributor's)."""

    def finish(self, since: int = 0, until: int | None = None) -> int:
        """Give the kernels it holds whose launch never came to the sink; how many of them
        started from `since` to `until` (None: no bound)."""

    def oldest(self, since: int, none: int) -> int:
        """The earliest start from `since` on of the launches it holds that wait for their
        kernel (`none`: none waits)."""

    def take_syncs(self) -> tuple[list[int], list[int], list[int]]:
        """(paths, ns, counts): time spent in synchronizing calls since the last take."""

    def wait_events(self, on: bool) -> None:
        """Keep each wait as an event (for a trace) while on."""

    def take_wait_events(self) -> list[tuple[int, int, int, int]]:
        """The waits kept as events since the last take: (path, start, end, thread id)."""

    launches: int
    """Launch records it joined itself."""
    kernels: int
    """Kernels it joined itself."""
    lost: int
    """Launches its launch log could not keep."""


def choose(shaper: Shaper, launches: Launches, use_native: bool | None = None) -> Pipeline:
    """NativePipeline when the helper is built (use_native None: unless PROTON_NATIVE=0),
    else PythonPipeline."""
    lib = native.helper() if use_native is not False else None
    if lib is None and use_native:
        raise RuntimeError("the C helper is not built here")
    made = NativePipeline(shaper, launches, lib) if lib is not None \
        else PythonPipeline(shaper, launches)
    return cast(Pipeline, made)  # both are: their ctypes calls are typed as plain objects


def _nothing(*args) -> None:
    """push, pop and main_path where the pipeline needs none."""


def _external_ids(s: Shaper, launches: Launches) -> tuple[Callable, Callable]:
    """push and pop as CUPTI's external correlation ids (their kind: the collector's
    CUSTOM2), in the shadow context; nothing in the python context."""
    if not launches.pushes_ids:
        return _nothing, _nothing
    cupti = s.cupti
    return (partial(cupti.activity_push_external_correlation_id, s.custom),
            partial(cupti.activity_pop_external_correlation_id, s.custom))


class PythonPipeline:
    """Everything in Python: see the module's docstring."""

    native = False
    logs_launches = False
    launches = kernels = lost = 0

    def __init__(self, shaper: Shaper, launches: Launches) -> None:
        self._s, self._l = shaper, launches
        cupti = shaper.cupti
        self.push, self.pop = _external_ids(self._s, self._l)
        self.main_path = _nothing  # the records' thread ids and the timeline place them
        self._read_kind = field_reader(cupti.activity_api_dtype, ["kind"])
        self._read_ext = field_reader(cupti.activity_external_correlation_dtype,
                                      _names(ExternalFields))
        self._read_api = field_reader(cupti.activity_api_dtype, _names(ApiFields)[1:])
        self._read_kernel = field_reader(cupti.activity_kernel10_dtype, _names(KernelFields))
        self._read_copies = [field_reader(dtype, _names(table)) for dtype, table in (
            (cupti.activity_memcpy6_dtype, CopyFields),
            (cupti.activity_memcpy_pto_p4_dtype, CopyFields),
            (cupti.activity_memset4_dtype, SetFields))]
        self._next = None

    def start(self, timestamp: int):
        return None, None, self._l.launch_callback() if self._l.in_callback else None

    def enable(self, on: bool) -> None:
        pass

    def attach(self, raw) -> None:
        self._next = raw.next_record
        raw.on_buffer = self.read

    def read(self, buffer: int, valid: int) -> None:
        """The buffer callback: walked through ctypes, read with numpy, joined by the
        Attributor on CUPTI's thread."""
        t0 = time.perf_counter()
        try:
            offsets = walk(self._next, buffer, valid)
            self.read_records(np.frombuffer(cast(Any, (ctypes.c_char * valid).from_address(
                buffer)), dtype=np.uint8), offsets)  # a ctypes array is a buffer
        except BaseException as exc:
            callback_failed("while reading CUPTI records", exc, self._s.callback_errors)
        self._s.after_buffer()
        self._s.callback_seconds += time.perf_counter() - t0

    def read_records(self, buf: np.ndarray, offsets) -> None:
        """The records at `offsets` (bytes from its start) of buffer `buf` (np.uint8)."""
        at = np.asarray(offsets, dtype=np.int64)
        (kinds,) = self._read_kind(buf, at)
        is_api = np.isin(kinds, list(self._s.api_cbids))
        kernels = self._read_kernel(buf, at[kinds == self._s.kernel_kind])
        copies = [read(buf, at[kinds == kind])
                  for read, kind in zip(self._read_copies, self._s.copy_kinds)]
        self._s.digest(self._read_ext(buf, at[kinds == self._s.external_kind]),
                  [kinds[is_api], *self._read_api(buf, at[is_api])], kernels, copies)
        self._s.note_busy(kernels, copies)  # after their launches (idle.py: which step's they are)
        self._s.records += len(at)

    def settle(self) -> None:
        pass

    def waiting(self, ts: int, since: int = 0) -> int:
        return 0

    def oldest(self, since: int, none: int) -> int:
        return none

    def take_syncs(self) -> tuple[list[int], list[int], list[int]]:
        return self._l.python_syncs.take()

    def wait_events(self, on: bool) -> None:
        self._l.python_syncs.keep_events = on

    def take_wait_events(self) -> list[tuple[int, int, int, int]]:
        return self._l.python_syncs.take_events()

    def finish(self, since: int = 0, until: int | None = None) -> int:
        return 0


def walk(next_record, buffer: int, valid: int) -> list[int]:
    """The offsets of a completed buffer's records, by a ctypes call to
    cuptiActivityGetNextRecord (`next_record`, argtypes set) per record."""
    offsets: list[int] = []
    record = ctypes.c_void_p()
    append, rec = offsets.append, ctypes.byref(record)
    while next_record(buffer, valid, rec) == 0:
        append(record.value - buffer)  # type: ignore[operator]  # a record: never NULL
    return offsets


def _names(table: type[records.Table]) -> list[str]:
    return [m.name for m in table]


def field_reader(dtype, names: list[str]):
    """reader(buffer, offsets) -> one numpy array per name: that field of the record at each
    offset of a buffer of bytes (np.uint8). One vectorised gather per field, so a buffer of
    thousands of records costs a few numpy calls, not Python per record.

    The layout comes from cupti-python's own numpy dtype for the record, so it follows the
    binding's version. CUPTI's records start 8-byte aligned, so a field at an offset that is a
    multiple of its size is read as one element of the buffer viewed as that type (one index
    per record); any other field byte by byte."""
    specs = [(dtype.fields[n][1], dtype.fields[n][0].newbyteorder("<")) for n in names]
    steps = {dt.itemsize: np.arange(dt.itemsize) for _, dt in specs}
    align = native.RECORD_ALIGN

    def read(buf: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        views: dict = {}
        aligned = not (offsets % align).any()  # as CUPTI lays records out
        for at, dt in specs:
            size = dt.itemsize
            if aligned and at % size == 0 and align % size == 0:
                words = views.get(dt.str)
                if words is None:
                    words = views[dt.str] = buf[: len(buf) // size * size].view(dt)
                out.append(words[(offsets + at) // size])
            else:
                out.append(buf[(offsets + at)[:, None] + steps[size]].view(dt).ravel())
        return out

    return read


class NativePipeline:
    """The C helper: see the module's docstring. Its launch log is used in both contexts
    unless the launch callback must be Python's for every call (exact PC sampling) or the
    API records are wanted (PROTON_RECORD_CUPTI); it joins in the shadow context when the
    collector has a group sink and nothing is recorded."""

    native = True

    def __init__(self, shaper: Shaper, launches: Launches, lib: ctypes.CDLL) -> None:
        self._s, self._l = shaper, launches
        self._lib = lib
        recording = self._s.recorded is not None
        serial = self._l.serial
        self.joins = self._s.groups is not None and not self._l.in_callback and not recording
        self.logs_launches = (self.joins or self._l.in_callback) and not recording and not serial
        self.log: native.LaunchLog | None = None
        """Made at start (it needs CUPTI's timestamp function)."""
        self.join: native.Join | None = None
        self.columns: Any = None
        """native.Columns: read(...) where the C join runs, else called (made at attach)."""
        self._joined = [0, 0]
        """Launch records and kernels the C join matched."""
        self._register_logged: Any = None
        """The python context's launches the C log took instead of Python (no frames)."""
        if self.logs_launches:
            # the python context pushes too: a thread with a scope open is never frameless
            (self.push, self.pop, self._main, self.push_main,
             self.pop_main) = native.scope_calls(lib)
            self.main_path: Callable[[int], None] = self._main_path
        else:
            self.push, self.pop = _external_ids(self._s, self._l)
            self.main_path = _nothing

    def unscoped_now(self, thread: int, ts: int) -> int:
        """With the launch log, the `unscoped` of a launch Python places at the launch call
        itself (the python context's enter with no frame and no scope): the main thread's
        innermost scope now, as the log would read it (the timeline is not noted)."""
        path = self._lib.proton_main_path_now()
        return ROOT if path == native.EMPTY else path

    def _main_path(self, path_id: int) -> None:
        """With the C launch log: launches on threads with no scope are logged with
        `path_id`, and the C join places their kernels (ROOT: left to `unscoped`, as before
        any scope)."""
        self._main(native.EMPTY if path_id == ROOT else path_id)

    @property
    def launches(self) -> int:
        return self._joined[0]

    @property
    def kernels(self) -> int:
        return self._joined[1]

    @property
    def lost(self) -> int:
        return self.log.lost if self.log is not None else 0

    def start(self, timestamp: int):
        if not self.logs_launches:
            return None, None, self._l.launch_callback() if self._l.in_callback else None
        cupti, K = self._s.cupti, self._s.cupti.ActivityKind
        domains = {int(cupti.CallbackDomain.DRIVER_API): int(K.DRIVER),
                   int(cupti.CallbackDomain.RUNTIME_API): int(K.RUNTIME)}
        launches: Any = {domain: (kind, *map(list, self._s.api_cbids[kind]))
                    for domain, kind in domains.items()}
        self.log = native.LaunchLog(self._lib, timestamp, self._l.fields, launches, self._s.custom,
                                    walk=self._l.walk)
        if self._l.in_callback:
            self._register_logged = self._l.logged_enters()
        return self.log, self._l.launch_enter(self.unscoped_now) if self._l.in_callback else None, None

    def enable(self, on: bool) -> None:
        if self.log is not None:
            self.log.enable(on)

    def attach(self, raw) -> None:
        self.columns = native.Columns(self._lib, raw.next_record, self.column_groups())
        if self.joins:
            self.join = native.Join(self._lib, self._s.custom, {
                kind: (launches.tolist(), graphs.tolist())
                for kind, (launches, graphs) in self._s.api_cbids.items()})
        raw.on_buffer = self.read

    def column_groups(self) -> list:
        """native.Columns' groups: the record kinds and the fields of records.INPUT."""
        cupti = self._s.cupti

        def fields(dtype, table):
            return [(dtype.fields[m.name][1], dtype.fields[m.name][0].itemsize,
                     dtype.fields[m.name][0].kind == "i") for m in table]

        return [([self._s.external_kind], fields(cupti.activity_external_correlation_dtype, ExternalFields),
                 cupti.activity_external_correlation_dtype.itemsize),
                (list(self._s.api_cbids), fields(cupti.activity_api_dtype, ApiFields),
                 cupti.activity_api_dtype.itemsize),
                ([self._s.kernel_kind], fields(cupti.activity_kernel10_dtype, KernelFields),
                 cupti.activity_kernel10_dtype.itemsize)] + [
                ([kind], fields(dtype, table), dtype.itemsize) for kind, dtype, table in zip(
                    self._s.copy_kinds, (cupti.activity_memcpy6_dtype,
                                  cupti.activity_memcpy_pto_p4_dtype,
                                  cupti.activity_memset4_dtype),
                    (CopyFields, CopyFields, SetFields))]

    def read(self, buffer: int, valid: int) -> None:
        """The buffer callback: the fields read in C as it walks, then the same join as
        PythonPipeline's; or, when it joins too, the sums of the kernels it joined (what it
        leaves to Python goes to the Attributor)."""
        t0 = time.perf_counter()
        try:
            if self.join is not None:
                with self._s.lock:
                    logged = self.log.take() if self.log is not None else None
                    blocks, rows, walked = self.columns.read(buffer, valid, keep=True)
                    used = [block[:, :int(n)] for block, n in zip(blocks, rows)]
                    if logged is not None:  # the launches, as their records would read
                        blocks[0], blocks[1], rows[0], rows[1] = logged
                    self._note_launches(blocks[1], rows[1])
                    self._s.note_busy(used[2], used[3:])  # records.INPUT: kernels, then copies
                    self._join_columns(blocks, rows)
            else:
                (ext, api, kernels, *copies), walked = self.columns(buffer, valid)
                with self._s.lock:
                    self._withdraw()  # the logged launches first: their kernels may be here
                self._s.digest(ext, api, kernels, copies)
                self._s.note_busy(kernels, copies)  # after their launches
            self._s.records += walked
        except BaseException as exc:
            callback_failed("while reading CUPTI records", exc, self._s.callback_errors)
        self._s.after_buffer()
        self._s.callback_seconds += time.perf_counter() - t0

    def _note_launches(self, api: np.ndarray, n: int) -> None:
        """The C join's launch calls (API columns, the first n) to the collector's `launched`
        (any other call among them is a correlation id no record names), copied: the columns
        are reused."""
        n = int(n)
        if n:
            self._s.note_launches(api[ApiFields.correlation_id, :n].copy(),
                                  api[ApiFields.start, :n].copy())

    def _join_columns(self, blocks: list[np.ndarray], rows: np.ndarray) -> None:
        """Records as Columns.read gives them through the C join, to the sinks (what it
        leaves to Python to the Attributor). Under the lock."""
        joined = cast(native.Join, self.join).add(blocks, rows, self._s.attributor.capture_span())
        try:
            self._route(joined)
        finally:  # the join has let go of these: lose none of them
            external, api, kernels = joined.python
            if len(api[0]) or len(kernels[0]):
                self._s.attribute(external, api, kernels)

    def _route(self, joined: Joined) -> None:
        """The C join's sums to the group sink (its rows, made on demand, to the kernel sink's
        way when the sessions need each kernel)."""
        self._joined[0] += joined.launches - len(joined.python[1][0])
        if joined.first is None:
            return
        G, R, K = records.Group, records.Row, records.Kernel
        g = joined.groups
        groups = list(zip(g[G.path].tolist(), self._s.texts(g[G.name]), g[G.device].tolist(),
                          self._s.configs(*(g[G[m.name]] for m in records.CONFIG)),
                          g[G.ns].tolist(), g[G.count].tolist()))
        self._joined[1] += joined.rows.shape[1]

        def rows() -> list[tuple]:
            r = joined.rows
            none = np.zeros(r.shape[1], dtype=records.DTYPE)  # C joins no graph kernel
            # k.name: the member's name (mypy takes it for the column named `name`)
            kernels = [r[R[cast(str, k.name)]] if k.name in R.__members__ else none for k in K]
            placed = self._s.kernel_columns(kernels)[:records.Placed.graph_node]
            return list(zip(r[R.path].tolist(), r[R.launch].tolist(), *placed))

        cast(GroupSink, self._s.groups)(groups, joined.first, rows)  # set: the join runs

    def settle(self) -> None:
        """What the C launch log holds since the last buffer, before counting what waits or
        finishing: the launches logged, through the join; the python context's failed calls,
        withdrawn."""
        self._withdraw()
        if self.log is None or self.join is None:
            return
        ext, api, n_ext, n_api = self.log.take()
        self._note_launches(api, n_api)
        if n_api:
            none = [np.empty((len(table), 1), dtype=records.DTYPE)
                    for table in records.INPUT[2:]]
            self._join_columns([ext, api, *none],
                               np.array([n_ext, n_api] + [0] * len(none), dtype=records.DTYPE))

    def _withdraw(self) -> None:
        """The python context's launches the C log took (made with no Python frame), to the
        Attributor as its launch callback registers them, then the launch calls that failed
        (the C launch log keeps them): no kernel will come for them. Under the lock. The
        failed calls are taken first: a call's enter is logged before its failure, so both
        are in hand when the failure is."""
        if self.log is None or not self._l.in_callback:
            return
        failed = self.log.failed()
        ext, api, n_ext, n_api = self.log.take()
        if n_api:
            X, A = records.ExternalFields, records.ApiFields
            known = dict(zip(ext[X.correlation_id, :n_ext].tolist(),
                             ext[X.external_id, :n_ext].tolist()))
            corrs = api[A.correlation_id, :n_api].tolist()
            self._register_logged(corrs, [known.get(corr, -1) for corr in corrs],
                                  api[A.start, :n_api].tolist(), api[A.cbid, :n_api].tolist(),
                                  api[A.thread_id, :n_api].tolist())
        for corr in failed:
            self._s.attributor.cancel_launch(corr)

    def waiting(self, ts: int, since: int = 0) -> int:
        return self.join.waiting(ts, since) if self.join is not None else 0

    def oldest(self, since: int, none: int) -> int:
        return self.join.oldest(since, none) if self.join is not None else none

    def take_syncs(self) -> tuple[list[int], list[int], list[int]]:
        if self.log is None:
            return self._l.python_syncs.take()
        return self.log.take_syncs()

    def wait_events(self, on: bool) -> None:
        if self.log is None:
            self._l.python_syncs.keep_events = on
        else:
            self.log.wait_events(on)

    def take_wait_events(self) -> list[tuple[int, int, int, int]]:
        if self.log is None:
            return self._l.python_syncs.take_events()
        return self.log.take_wait_events()

    def finish(self, since: int = 0, until: int | None = None) -> int:
        if self.join is None:
            return 0
        # kernels the Attributor holds go to their external record's path, which the join kept
        for corr in self._s.attributor.early_ids():
            path = self.join.path(corr)
            if path is not None:
                self._s.attributor.external.setdefault(corr, path)
        paths_, kernels = self.join.finish()
        lost = len(paths_)
        if lost:
            placed = self._s.kernel_columns(kernels)[:records.Placed.graph_node]
            start = records.Placed.start  # its launch never came: its own start stands in
            self._s.sink([(ROOT if p < 0 else p, k[start]) + k
                     for p, k in zip(paths_.tolist(), zip(*placed))])
            self._joined[1] += lost
            starts = kernels[records.Kernel.start]
            inside = starts >= since
            if until is not None:
                inside &= starts <= until
            lost = int(inside.sum())
        return lost
