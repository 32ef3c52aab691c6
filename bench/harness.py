"""What the CPU cost benchmarks share: the python context's launch callback as the collector
builds it and CUPTI would call it (no GPU, no driver), a stand-in collector, a C thread that runs
no Python to call it from, and the best-of-repeats timers. bench/hot_paths.py and
bench/probe_foreign_thread.py measure with these (and the python-context tests drive the same
callback); neither imports the other.
"""
from __future__ import annotations

import ctypes
import inspect
import os
import subprocess
import tempfile
import time
import types

import numpy as np
from cupti import cupti

from proton.cupti import collector as collector_module
from proton.cupti.collector import CuptiCollector
from proton.cupti.subscriber import CALLBACK, callback_fields
from proton.runtime.profiler import profiler

N = 100_000
"""Calls per timed loop of per_call."""


class StandIn:
    """The collector as scopes and the hook see it."""

    pushes_ids = True

    def push(self, path: int) -> None:
        pass

    def pop(self) -> None:
        pass

    def timestamp(self) -> int:
        return time.monotonic_ns()

    def main_path(self, path: int) -> None:
        pass

    def push_main(self, path: int) -> None:
        pass

    def pop_main(self, path: int) -> None:
        pass


def make_collector(sink, **made) -> CuptiCollector:
    """A collector made as the tree on the path makes one (cupti/settings.py's
    CollectorSettings), or as an earlier tree did (keywords; older still, no `moved`), so the
    benchmarks time a tree before and after a change alike."""
    try:
        from proton.cupti.settings import CollectorSettings
    except ImportError:
        if "moved" not in inspect.signature(CuptiCollector).parameters:
            made.pop("moved", None)
        return CuptiCollector(sink, **made)
    return CuptiCollector(CollectorSettings(sink, **made))


def per_call(f, call, repeats: int) -> float:
    """us per call of f through the library frames, best of `repeats`, the loop's cost off."""
    def loop(g) -> float:
        t0 = time.perf_counter()
        for _ in range(N):
            call(g)
        return (time.perf_counter() - t0) / N * 1e6

    noop = lambda: None  # noqa: E731
    return min(loop(f) for _ in range(repeats)) - min(loop(noop) for _ in range(repeats))


def timed(call, f) -> float:
    t0 = time.perf_counter()
    call(f)
    return time.perf_counter() - t0


def launch_callback(walk: bool = True, native: bool | None = None,
                    keep: bool | None = None):
    """The python context's launch callback as the collector builds it (for the session
    started with context="python"), a launch call's cbid, and CUPTI's callback data for its
    enter and exit (laid out by cupti-python's own dtype), with what must stay alive beside
    them: (on_api, cbid, enter, leave, (data, return value), collector). walk: the C helper
    walks the stack (off: every launch with Python frames goes to Python, as before it could);
    native: the collector's pipeline (None: the C helper's when built; False: Python's).
    keep: built with PROTON_KEEP_THREAD_STATES set to it (None: as the environment says)."""
    if keep is not None:
        os.environ[collector_module.KEEP_STATES_ENV] = "1" if keep else "0"
    context = profiler.context
    collector = make_collector(lambda kernels: None, unscoped=profiler.timeline.unscoped,
                               launch_path=context.launch_path, in_callback=True,
                               walk=context.walk if walk else None, native=native)
    collector.fields = callback_fields(cupti)
    collector._cupti = types.SimpleNamespace(get_timestamp=time.monotonic_ns)  # no driver here
    on_api = collector.launch_callback()
    cbid = next(iter(collector._driver_cbids))
    ret = ctypes.c_int32(0)
    data = np.zeros(2, dtype=cupti.callback_data_dtype)
    data["callback_site"] = [0, 1]  # enter, exit
    data["correlation_id"] = 7
    data["function_return_value"] = ctypes.addressof(ret)
    enter, leave = data.ctypes.data, data.ctypes.data + data.dtype.itemsize
    return on_api, cbid, enter, leave, (data, ret), collector


def through_c(collector, on_api):
    """CUPTI's callback as the python context subscribes it with the C helper built: the C
    launch log's, which hands Python only the enter (CUPTI's timestamp stood in by libc's
    time(), which takes the same pointer); None without the helper."""
    from proton.cupti import native

    libc = ctypes.CDLL(None)
    collector._cupti = cupti  # its enums (launch_callback stood in its clock)
    if not collector.pipeline.native:
        return None
    log, enter, _ = collector.pipeline.start(ctypes.cast(libc.time, ctypes.c_void_p).value)
    enter = native.ENTER(enter)
    log.configure(None, enter)
    collector.pipeline.enable(True)
    callback = CALLBACK(log.callback)
    callback.alive = (enter, log)
    return callback


RUNNER = r"""
#include <pthread.h>
#include <stdint.h>
#include <time.h>
typedef void (*callback)(void *, uint32_t, uint32_t, void *);
typedef void (*python)(void);
struct job { callback cb; void *enter, *leave; int n; uint32_t cbid; double seconds;
             python before; };
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static void *run(void *arg) {
    struct job *j = arg;
    if (j->before) j->before(); /* Python once first: the thread may keep a thread state */
    double t0 = now();
    for (int i = 0; i < j->n; i++) {
        j->cb(0, 1, j->cbid, j->enter);
        j->cb(0, 1, j->cbid, j->leave);
    }
    j->seconds = now() - t0;
    return 0;
}
/* n launches' enter and exit callbacks on a new thread; seconds they took */
double on_new_thread(callback cb, void *enter, void *leave, int n, uint32_t cbid) {
    struct job j = {cb, enter, leave, n, cbid, 0, 0};
    pthread_t t;
    pthread_create(&t, 0, run, &j);
    pthread_join(t, 0);
    return j.seconds;
}
/* the same after `before` ran on the new thread */
double on_new_thread_after(callback cb, void *enter, void *leave, int n, uint32_t cbid,
                           python before) {
    struct job j = {cb, enter, leave, n, cbid, 0, before};
    pthread_t t;
    pthread_create(&t, 0, run, &j);
    pthread_join(t, 0);
    return j.seconds;
}
"""
BEFORE = ctypes.CFUNCTYPE(None)
THREAD_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                            ctypes.c_void_p)


def runner() -> ctypes.CDLL:
    """The C runner (RUNNER), built with the machine's compiler ($CC, else cc)."""
    work = tempfile.mkdtemp(prefix="proton-probe-")
    src, out = os.path.join(work, "runner.c"), os.path.join(work, "runner.so")
    with open(src, "w") as f:
        f.write(RUNNER)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", out, src,
                    "-lpthread"], check=True)
    lib = ctypes.CDLL(out)
    lib.on_new_thread.restype = ctypes.c_double
    lib.on_new_thread.argtypes = [THREAD_CALLBACK, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                  ctypes.c_uint32]
    lib.on_new_thread_after.restype = ctypes.c_double
    lib.on_new_thread_after.argtypes = [THREAD_CALLBACK, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                        ctypes.c_uint32, BEFORE]
    return lib
