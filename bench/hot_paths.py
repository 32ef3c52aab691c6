"""The profiler's own Python per launch and per scope, on this machine's CPU (no GPU needed):

    python bench/hot_paths.py [--repeats 7]

  * python-context launch callback: CUPTI's callback at a launch call's enter and exit, as the
    collector builds it, called with a CUpti_CallbackData laid out by cupti-python's own dtype,
    from a loop through 3 library frames (Triton's launch machinery), bare and in a scope; all
    Python (no C helper), and through the C helper's callback (Python at the enter only);
  * the same callback through the C helper in a PyTorch-like model's forward: nn.Module's
    call machinery (3 library frames a module) around user forwards nested 4 deep, launches
    from several lines of each, with the GIL released (Triton's launcher) or kept (PyTorch),
    the C walk off (Python places every launch) and on (a stack seen before is found in C);
  * a real torch GPT forward on the CPU with the callback called at each torch function
    (a TorchFunctionMode), walk off and on;
  * a launch on a thread that runs no Python (PyTorch's autograd thread): the C helper's
    callback called from a C thread, enter and exit, with no thread state and with one kept;
  * Triton hook: the launch enter and exit hooks for a kernel without launch_metadata;
  * scope: `with proton.scope(...)` entered and left while collecting (a stand-in collector),
    and in a loop with the session live, per context: the collector made as a session makes it
    (the C helper's push and pop) and the idle part's tracker hearing it, CUPTI not started;
    Triton's scope beside it.
A stand-in collector takes the pushes (CUPTI's own push costs the same with or without us).
Microseconds per launch (or scope), best of the repeats, the loop's own cost taken off.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import os
import sys
import time
import types

import proton
from proton.cupti.subscriber import CALLBACK
from proton.hooks import triton_hook
from proton.runtime.profiler import profiler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_like import TORCH_LIKE  # noqa: E402 - the tests' stand-in of nn.Module's frames

from harness import (BEFORE, N, THREAD_CALLBACK, StandIn,  # noqa: E402 - bench/, beside it
                     launch_callback, make_collector, per_call, runner, through_c, timed)

LIBRARY = """
def call(f):
    return launcher(f)
def launcher(f):
    return inner(f)
def inner(f):
    return f()
"""

# PyTorch's nn.Module call machinery (tests/torch_like.py, a library file) and a user model of
# nested modules
MODEL = """
class Linear(Module):
    def forward(self, launch):
        return linear(launch)
class Attention(Module):
    def __init__(self):
        self.qkv, self.out = Linear(), Linear()
    def forward(self, launch):
        self.qkv(launch)
        launch()
        launch()
        return self.out(launch)
class MLP(Module):
    def __init__(self):
        self.up, self.down = Linear(), Linear()
    def forward(self, launch):
        self.up(launch)
        launch()
        return self.down(launch)
class Block(Module):
    def __init__(self):
        self.attn, self.mlp = Attention(), MLP()
    def forward(self, launch):
        launch()
        self.attn(launch)
        launch()
        return self.mlp(launch)
class GPT(Module):
    def __init__(self):
        self.blocks = [Block() for _ in range(4)]
    def forward(self, launch):
        launch()
        for block in self.blocks:
            block(launch)
        return launch()
"""
LAUNCHES_PER_FORWARD = 2 + 4 * (2 + 5 + 3)


def model():
    """A GPT-like model of nested modules: model(launch) calls launch() from 48 places."""
    ns: dict = {}
    exec(compile(TORCH_LIKE, "/usr/lib/python3/site-packages/fake_torch/nn.py", "exec"), ns)
    exec(compile(MODEL, "/home/user/model.py", "exec"), ns)
    return ns["GPT"]()


class Metadata:
    """What Triton hands the launch hooks for a kernel without launch_metadata."""

    data = {"name": "tiny_kernel", "function": None}
    extras = False


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


HELD = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
"""CUPTI's callback called keeping the GIL, as from inside a PyTorch op (Triton's launcher
releases it: CALLBACK)."""


def c_enter(walk: bool, held: bool):
    """(launch, collector, alive): one launch call's enter through the C helper's callback,
    as a C call (the callback's caller is the frame calling launch(); the launch call's exit
    stays in C: a failed call's id is all it notes)."""
    on_api, cbid, enter, leave, alive, collector = launch_callback(walk)
    through = through_c(collector, on_api)
    if through is None:
        through = CALLBACK(on_api)
    elif held:
        through = HELD(collector.pipeline.log.callback), through
    callback = through[0] if isinstance(through, tuple) else through
    return functools.partial(callback, None, 1, cbid, enter), collector, (through, alive)


def deep_stack(gpt, call, repeats: int, walk: bool = True, held: bool = False) -> float:
    """us per launch of the python context's callback (its enter) through the C helper, in
    the model's forward (the forward's own cost taken off); walk: the C walk on; held: the
    callback keeps the GIL (a PyTorch launch) instead of releasing it (a Triton launch)."""
    proton.start("/tmp/hot_paths_deep", context="python")
    launch, collector, _alive = c_enter(walk, held)

    def forward(f):
        def run():
            for _ in range(N // LAUNCHES_PER_FORWARD // 10):
                gpt(f)
        return run

    try:
        n = N // LAUNCHES_PER_FORWARD // 10 * LAUNCHES_PER_FORWARD
        with proton.scope("step"):
            t = min(timed(call, forward(launch)) for _ in range(repeats))
            t0 = min(timed(call, forward(lambda: None)) for _ in range(repeats))
        assert not collector.callback_errors, collector.callback_errors
        return (t - t0) / n * 1e6
    finally:
        collector.pipeline.enable(False)
        proton.finalize()


def torch_forward(repeats: int, walk: bool = True, forwards: int = 50) -> tuple[float, int]:
    """(us per launch, launches per forward) of the python context's callback (its enter,
    keeping the GIL) called at every torch function of a real GPT forward on the CPU
    (tests/gpt_workload.py's model, small), from inside the op as a kernel launch is; the
    forward with a no-op call there taken off. None without torch."""
    try:
        import torch
    except ImportError:
        return None
    from gpt_workload import GPT  # tests/, on the path (above)

    class Launches(torch.overrides.TorchFunctionMode):
        def __init__(self, launch) -> None:
            super().__init__()
            self.launch = launch

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.launch()
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    torch.set_num_threads(1)  # the ops' own threads would add their noise
    model = GPT(64, 16, 2, 4)  # tiny: the ops' own time is small beside the launches'
    tokens = torch.randint(0, 64, (1, 8))
    count = [0]
    with torch.no_grad(), Launches(lambda: count.__setitem__(0, count[0] + 1)):
        model(tokens)
    proton.start("/tmp/hot_paths_torch", context="python")
    launch, collector, _alive = c_enter(walk, held=True)

    def run(f) -> float:  # the thread's CPU time: the machine's other load moves it less
        with torch.no_grad(), Launches(f):
            t0 = time.thread_time()
            for _ in range(forwards):
                model(tokens)
            return time.thread_time() - t0

    try:
        with proton.scope("step"):
            times = [(run(launch), run(lambda: None)) for _ in range(repeats)]  # in turn
        assert not collector.callback_errors, collector.callback_errors
        t, t0 = (min(column) for column in zip(*times))
        return (t - t0) / (forwards * count[0]) * 1e6, count[0]
    finally:
        collector.pipeline.enable(False)
        proton.finalize()


def frameless(repeats: int, n: int = 20_000, kept: bool = False) -> float:
    """us per launch of the python context's callback through the C helper on a thread that
    runs no Python (a C thread), enter and exit, with no scope open; `kept`: the thread ran
    Python once before and kept its thread state (as PyTorch's autograd thread may)."""
    lib = runner()
    proton.start("/tmp/hot_paths_frameless", context="python")
    on_api, cbid, enter, leave, _alive, collector = launch_callback()
    callback = through_c(collector, on_api) or CALLBACK(on_api)
    as_runner = THREAD_CALLBACK(ctypes.cast(callback, ctypes.c_void_p).value)
    # Python's own: the count it leaves inside ctypes' callback keeps the thread state
    keep = BEFORE(lambda: ctypes.pythonapi.PyGILState_Ensure() and None)
    try:
        seconds = min(lib.on_new_thread_after(as_runner, enter, leave, n, cbid, keep)
                      if kept else lib.on_new_thread(as_runner, enter, leave, n, cbid)
                      for _ in range(repeats))
        assert not collector.callback_errors, collector.callback_errors
        return seconds / n * 1e6
    finally:
        proton.finalize()


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


def below(depth: int, f, *args):
    """f(*args) called `depth` frames further down the stack (a script run under pytest or the
    `proton` command has dozens of frames above its loop)."""
    return f(*args) if depth == 0 else below(depth - 1, f, *args)


def scope_live(repeats: int, context: str = "shadow", hook: str | None = None,
               n: int = 20_000, depth: int = 0, idle: bool = True) -> float:
    """us per `with proton.scope("step"): pass` in a loop (as bench/step_cost.py times it on
    the GPU machine) with the session live: the collector CUPTI would run, made but not
    started (no driver here), so a scope pays the C helper's push and pop (or, without it,
    cupti-python's external-id calls stood in by no-ops) and the context's own work; CUPTI's
    timestamp stood in by time.monotonic_ns. idle: the idle part's tracker listens, as it
    does once CUPTI starts (each top-level scope a step; no CUPTI buffer comes in the loop, so
    its windows pile up as they do between two buffers)."""
    proton.start(f"/tmp/hot_paths_scope_{context}", context=context, hook=hook)
    ctx = profiler.context
    collector = make_collector(lambda kernels: None, unscoped=profiler.timeline.unscoped,
                               launch_path=ctx.launch_path, in_callback=ctx.in_callback,
                               graft=profiler.router.graft, groups=profiler.router.on_groups,
                               moved=profiler.timeline.note)
    collector._cupti = types.SimpleNamespace(get_timestamp=time.monotonic_ns)
    if not collector.pipeline.native:  # cupti-python's push needs the driver
        collector.push = collector.pop = lambda *a: None
        if hasattr(collector, "_push_main"):
            collector.push_main, collector.pop_main = collector._push_main, collector._pop_main
    saved, profiler.collector = profiler.collector, collector
    if idle:  # the idle part's tracker hears every scope, as with CUPTI started
        collector.opened = time.monotonic_ns()
        idle_part = next((p for p in profiler.parts.all if p.name == "idle"), None)
        if idle_part is not None:
            from proton.cupti.settings import PartAsks

            idle_part.collector_asks(None, PartAsks())  # takes no session option
            idle_part.collector_started(collector)
            profiler.parts.listen()
    scope = proton.scope

    def loop(k: int, enter: bool) -> float:
        t0 = time.perf_counter()
        if enter:
            for _ in range(k):
                with scope("step"):
                    pass
        else:
            for _ in range(k):
                pass
        return time.perf_counter() - t0

    try:
        # the loop's caller a plain frame (a generator's would keep the python context's
        # scope from reusing its path: a generator may be resumed from elsewhere)
        t = min([below(depth, loop, n, True) for _ in range(repeats)])
        return (t - min([loop(n, False) for _ in range(repeats)])) / n * 1e6
    finally:
        if idle and idle_part is not None:
            idle_part.collector_stopping()
            profiler.parts.listen()
        profiler.collector = saved
        proton.finalize()


def triton_scope(repeats: int, n: int = 20_000) -> float | None:
    """Triton's Proton's `with scope("step"): pass`, for reference: its libproton calls with
    profiling on but no session (CUPTI cannot start here), a lower bound of its cost."""
    try:
        import triton.profiler as tp
        from triton.profiler import flags
    except ImportError:
        return None
    flags.profiling_on, scope = True, tp.scope

    def loop() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            with scope("step"):
                pass
        return time.perf_counter() - t0

    try:
        return min([loop() for _ in range(repeats)]) / n * 1e6
    finally:
        flags.profiling_on = False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    ns: dict = {}
    exec(compile(LIBRARY, "/usr/lib/python3/site-packages/fake_triton.py", "exec"), ns)
    bare, scoped = python_callback(ns["call"], args.repeats)
    c_bare, c_scoped = python_callback(ns["call"], args.repeats, native=True)
    gpt = model()
    deep = {(walk, held): deep_stack(gpt, ns["call"], args.repeats, walk, held)
            for walk in (False, True) for held in (False, True)}
    torch_us = {walk: torch_forward(args.repeats, walk) for walk in (False, True)}
    print(f"python-context launch callback: {bare:.2f} us a launch ({scoped:.2f} in a scope), "
          f"through the C helper {c_bare:.2f} ({c_scoped:.2f}); "
          f"in a model's forward (deep stack), GIL released (Triton) / kept (PyTorch): "
          f"Python {deep[False, False]:.2f} / {deep[False, True]:.2f} us, "
          f"C walk {deep[True, False]:.2f} / {deep[True, True]:.2f} us; "
          f"on a thread without Python: {frameless(args.repeats):.2f} us "
          f"({frameless(args.repeats, kept=True):.2f} with a thread state kept); "
          f"Triton hook: {hook(ns['call'], args.repeats):.2f} us; "
          f"scope enter and exit: {scope(ns['call'], args.repeats):.2f} us")
    live = [(context + (f" hook={hook}" if hook else ""), scope_live(args.repeats, context, hook))
            for context, hook in (("shadow", None), ("shadow", "triton"), ("python", None))]
    live.append(("python 20 frames deeper", scope_live(args.repeats, "python", depth=20)))
    triton = triton_scope(args.repeats)
    print("scope enter and exit, session live: "
          + ", ".join(f"{name} {us:.2f}" for name, us in live)
          + (f"; Triton's (no session) {triton:.2f}" if triton is not None else "") + " us")
    if torch_us[True] is not None:
        print(f"a real torch GPT forward on the CPU ({torch_us[True][1]} launches, one at each "
              f"torch function, GIL kept): Python {torch_us[False][0]:.2f} us a launch, "
              f"C walk {torch_us[True][0]:.2f} us")


if __name__ == "__main__":
    main()
