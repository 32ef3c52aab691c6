"""The profiler's own Python per launch and per scope, on this machine's CPU (no GPU needed):

    python bench/hot_paths.py [--repeats 7]

  * python-context launch callback: CUPTI's callback at a launch call's enter and exit, as the
    collector builds it, called with a CUpti_CallbackData laid out by cupti-python's own dtype,
    from a loop through 3 library frames (Triton's launch machinery), bare and in a scope; all
    Python (no C helper), and through the C helper's callback (Python at the enter only);
  * Triton hook: the launch enter and exit hooks for a kernel without launch_metadata;
  * scope: `with proton.scope(...)` entered and left while collecting.
A stand-in collector takes the pushes (CUPTI's own push costs the same with or without us).
Microseconds per launch (or scope), best of the repeats, the loop's own cost taken off.
"""
from __future__ import annotations

import argparse
import ctypes
import time
import types

import numpy as np
from cupti import cupti

import proton
from proton.cupti.collector import CuptiCollector
from proton.cupti.subscriber import CALLBACK, callback_fields
from proton.hooks import triton_hook
from proton.runtime.profiler import profiler

N = 100_000
LIBRARY = """
def call(f):
    return launcher(f)
def launcher(f):
    return inner(f)
def inner(f):
    return f()
"""


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


class Metadata:
    """What Triton hands the launch hooks for a kernel without launch_metadata."""

    data = {"name": "tiny_kernel", "function": None}
    extras = False


def per_call(f, call, repeats: int) -> float:
    """us per call of f through the library frames, best of `repeats`, the loop's cost off."""
    def loop(g) -> float:
        t0 = time.perf_counter()
        for _ in range(N):
            call(g)
        return (time.perf_counter() - t0) / N * 1e6

    noop = lambda: None  # noqa: E731
    return min(loop(f) for _ in range(repeats)) - min(loop(noop) for _ in range(repeats))


def launch_callback():
    """The python context's launch callback as the collector builds it (for the session
    started with context="python"), a launch call's cbid, and CUPTI's callback data for its
    enter and exit (laid out by cupti-python's own dtype), with what must stay alive beside
    them: (on_api, cbid, enter, leave, (data, return value), collector)."""
    context = profiler.context
    collector = CuptiCollector(lambda kernels: None, profiler.timeline.unscoped,
                               launch_path=context.launch_path, in_callback=True)
    collector._fields = callback_fields(cupti)
    collector._cupti = types.SimpleNamespace(get_timestamp=time.monotonic_ns)  # no driver here
    on_api = collector._launch_callback()
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


def python_callback(call, repeats: int, native: bool = False) -> tuple[float, float]:
    proton.start("/tmp/hot_paths_python", context="python")
    on_api, cbid, enter, leave, _alive, collector = launch_callback()
    # as CUPTI calls it: through a C function pointer (ctypes' trampoline into Python)
    on_api = (native and through_c(collector, on_api)) or CALLBACK(on_api)

    def launch() -> None:
        on_api(None, 1, cbid, enter)
        on_api(None, 1, cbid, leave)

    bare = per_call(launch, call, repeats)
    with proton.scope("loop"):
        scoped = per_call(launch, call, repeats)
    assert not collector.callback_errors, collector.callback_errors
    proton.finalize()
    return bare, scoped


def hook(call, repeats: int) -> float:
    proton.start("/tmp/hot_paths_hook", hook="triton")
    saved, profiler.collector = profiler.collector, StandIn()
    metadata, enter, leave = Metadata(), triton_hook._enter, triton_hook._exit

    def launch() -> None:
        enter(metadata)
        leave(metadata)

    try:
        with proton.scope("loop"):
            return per_call(launch, call, repeats)
    finally:
        profiler.collector = saved
        proton.finalize()


def scope(call, repeats: int) -> float:
    proton.start("/tmp/hot_paths_scope")
    saved, profiler.collector = profiler.collector, StandIn()

    def enter_and_leave() -> None:
        with proton.scope("x"):
            pass

    try:
        return per_call(enter_and_leave, call, repeats)
    finally:
        profiler.collector = saved
        proton.finalize()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    ns: dict = {}
    exec(compile(LIBRARY, "/usr/lib/python3/site-packages/fake_triton.py", "exec"), ns)
    bare, scoped = python_callback(ns["call"], args.repeats)
    c_bare, c_scoped = python_callback(ns["call"], args.repeats, native=True)
    print(f"python-context launch callback: {bare:.2f} us a launch ({scoped:.2f} in a scope), "
          f"through the C helper {c_bare:.2f} ({c_scoped:.2f}); "
          f"Triton hook: {hook(ns['call'], args.repeats):.2f} us; "
          f"scope enter and exit: {scope(ns['call'], args.repeats):.2f} us")


if __name__ == "__main__":
    main()
