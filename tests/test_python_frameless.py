"""context="python" with the C helper: a launch made on a thread that runs no Python and has no
scope open (PyTorch's autograd thread in a backward pass) is placed in C, with no Python at the
launch, exactly where the Python launch callback places it; a launch with Python frames, or on a
thread with a scope pushed, still goes to Python. CUPTI's callback is called as CUPTI calls it,
from C threads made here (no GPU needed)."""
from __future__ import annotations

import ctypes
import os
import sys
import threading

import pytest

import proton
from proton.cupti import c_loader
from proton.data.paths import paths
from proton.runtime.profiler import profiler

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")
RUNNER = r"""
#include <pthread.h>
#include <stdint.h>
typedef void (*callback)(void *, int, uint32_t, const void *);
typedef void (*python)(void);
struct job { callback cb; python before; const void *enter, *leave; uint32_t cbid; };
static void *run(void *arg) {
    struct job *j = arg;
    if (j->before) j->before(); /* Python first (a thread state, a scope), then C only */
    j->cb(0, 1, j->cbid, j->enter);
    j->cb(0, 1, j->cbid, j->leave);
    return 0;
}
/* one launch call's enter and exit from a new thread, after `before` (may be NULL) */
void launch_on_new_thread(callback cb, python before, const void *enter, const void *leave,
                          uint32_t cbid) {
    struct job j = {cb, before, enter, leave, cbid};
    pthread_t t;
    pthread_create(&t, 0, run, &j);
    pthread_join(t, 0);
}
"""
BEFORE = ctypes.CFUNCTYPE(None)


@pytest.fixture
def runner(helper_cache):
    path = str(helper_cache / "runner.so")
    try:
        c_loader.compile_source(path, RUNNER)
    except c_loader.BuildError:
        pytest.skip("no C compiler: the C helper (and so its launch log) is not built")
    lib = ctypes.CDLL(path)
    lib.launch_on_new_thread.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_uint32]
    return lib


@pytest.fixture
def callback(tmp_path, monkeypatch):
    """(CUPTI's callback through the C helper, the collector, its launch cbid and callback
    data for an enter and an exit of correlation id 7), in a python-context session whose
    main thread is in scope 4242 (the collector told, as a scope's enter tells it: with the C
    launch log that is where launches with no path of their own go, and the timeline, which
    it leaves unnoted, says 1 here to show it is not asked)."""
    monkeypatch.syspath_prepend(BENCH)
    import harness

    proton.start(str(tmp_path / "frameless"), context="python")
    try:
        monkeypatch.setattr(profiler.timeline, "unscoped", lambda thread, ts: 1)
        on_api, cbid, enter, leave, alive, collector = harness.launch_callback()
        through = harness.through_c(collector, on_api)
        assert through is not None, "the C helper was not built"
        collector.main_path(4242)
        yield through, collector, cbid, enter, leave, alive
    finally:
        proton.finalize()


def launch(runner, callback, before=None) -> int | None:
    """One launch (correlation id 7) from a new C thread; its path once the buffer thread has
    read the log (None: never registered)."""
    through, collector, cbid, enter, leave, _alive = callback
    keep = BEFORE(before) if before is not None else None
    runner.launch_on_new_thread(ctypes.cast(through, ctypes.c_void_p),
                                ctypes.cast(keep, ctypes.c_void_p) if keep else None,
                                enter, leave, cbid)
    at_enter = collector.attributor.launch_path(7)
    collector.pipeline.settle()
    return at_enter, collector.attributor.launch_path(7)


def test_a_launch_on_a_thread_that_never_ran_python_is_placed_in_c(runner, callback):
    """No Python at the launch (nothing registered until the buffer thread reads the log),
    and the path the Python callback gives it: the main thread's scope."""
    assert launch(runner, callback) == (None, 4242)


def test_it_goes_under_the_main_threads_scope_read_at_the_launch(runner, callback):
    collector = callback[1]
    collector.main_path(5151)  # the main thread entered a scope: the C log reads it
    assert launch(runner, callback) == (None, 5151)


def test_a_thread_with_a_thread_state_but_no_frame_is_placed_in_c(runner, callback):
    """As PyTorch's autograd thread, which keeps its Python thread state between backward
    calls: it ran Python before, none runs now."""
    states = []

    def before():  # keeps this thread's state for the rest of the thread (never released)
        states.append(ctypes.pythonapi.PyGILState_Ensure())

    assert launch(runner, callback, before) == (None, 4242)
    # inside ctypes' callback the GIL is held (0: PyGILState_LOCKED): the count this leaves
    # keeps the thread state past the callback, into the launch
    assert states == [0]


def test_without_the_c_path_python_places_it_the_same(runner, callback):
    through, collector = callback[:2]
    collector.pipeline.log.configure(None, through.alive[0], frameless=False)
    collector.pipeline.enable(True)
    collector.main_path(4242)  # a configure forgets it
    assert launch(runner, callback) == (4242, 4242)  # registered by Python, at the enter


def test_a_thread_with_a_scope_pushed_goes_to_python(runner, callback):
    """A scope open on the thread (its push reaches C): Python's callback places it."""
    collector = callback[1]
    assert launch(runner, callback, lambda: collector.pipeline.push(99)) == (4242, 4242)


def test_a_thread_running_python_goes_to_python(runner, callback):
    """A launch from Python code on a thread Python did not start (a custom autograd
    Function's backward): its frames, placed by Python at the enter."""
    through, collector, cbid, enter, leave = callback[:5]
    got = {}

    def body(_):
        through(None, 1, cbid, enter)
        through(None, 1, cbid, leave)
        got["path"] = collector.attributor.launch_path(7)
        got["frame"] = sys._getframe().f_code.co_name

    libc = ctypes.CDLL(None)
    fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda arg: body(arg) and None)
    tid = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(tid), None, fn, None) == 0
    assert libc.pthread_join(tid, None) == 0
    assert got["path"] is not None  # placed by Python at the enter: its own frames
    assert paths.names(got["path"])[-1].endswith("@body")
