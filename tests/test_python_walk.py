"""context="python" through CUPTI's launch callback, as a launch made from Python calls it (no
GPU needed): with the C helper's walk, a launch whose stack was seen before is placed in C with
no Python. Every launch here is placed as Python's own launch_path places it at the same line,
in each way the callback can run: the walk with the GIL held (a PyTorch launch) or released (a
Triton launch), the C helper without the walk, and the Python pipeline (PROTON_NATIVE=0)."""
from __future__ import annotations

import ctypes
import gc
import itertools
import os
import sys
import weakref

import pytest

import proton
from proton.context.frames import launch_parent, unwind
from proton.data.paths import paths
from proton.runtime import ops
from proton.runtime.profiler import profiler

BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")
HELD = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
"""CUPTI's callback called keeping the GIL, as inside a PyTorch op."""
WAYS = ["walk, GIL held", "walk, GIL released", "C without the walk", "Python"]


class Launcher:
    """CUPTI's launch callback of a python-context session, built as the collector builds it
    for `way`. `launch()` is one launch call (enter and exit) made by its own frame, whose
    caller is the code under test; `check()` compares where each went with the path Python's
    launch_path gives at the same line."""

    def __init__(self, way: str, harness) -> None:
        native = way != "Python"
        on_api, self.cbid, self.enter, self.leave, self._alive, self.collector = \
            harness.launch_callback(walk=way.startswith("walk"), native=native)
        self.log = None
        if native:
            through = harness.through_c(self.collector, on_api)
            assert through is not None, "the C helper was not built"
            self.log = self.collector.pipeline.log
            self.call = HELD(self.log.callback) if way == "walk, GIL held" else through
            self._alive += (through,)
        else:
            self.call = harness.CALLBACK(on_api)
        self.data = self._alive[0]
        self.ids = itertools.count(100)
        self.launched: list[tuple[int, int]] = []
        self.compare = True
        """Ask launch_parent at each launch (off: only the callback runs Python's code)."""

    def launch(self) -> None:
        corr = next(self.ids)
        self.data["correlation_id"] = corr
        if not self.compare:
            self.call(None, 1, self.cbid, self.enter)
            self.call(None, 1, self.cbid, self.leave)
            return
        self.call(None, 1, self.cbid, self.enter); want = launch_parent()  # noqa: E702
        self.call(None, 1, self.cbid, self.leave)
        self.launched.append((corr, want))

    def check(self) -> list[list[str]]:
        """Every launch's path as names, after checking it is Python's (the buffer thread
        registers what C logged)."""
        self.collector.pipeline.settle()
        assert not self.collector.callback_errors, self.collector.callback_errors
        got = [self.collector.attributor.launch_path(corr) for corr, _ in self.launched]
        assert [paths.names(p) for p in got] == [paths.names(w) for _, w in self.launched]
        return [paths.names(p) for p in got]

    @property
    def found(self) -> int:
        """Launches the walk placed with no Python."""
        return self.log.walks["found"] if self.log is not None else 0

    def close(self) -> None:
        self.collector.pipeline.enable(False)  # the walk lets its code objects go


@pytest.fixture(params=WAYS)
def launcher(request, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(BENCH)
    import harness

    proton.start(str(tmp_path / "walk"), context="python")
    made = None
    try:
        made = Launcher(request.param, harness)
        made.way, made.harness = request.param, harness
        yield made
    finally:
        if made is not None:
            made.close()
        unwind(0)
        proton.finalize()


def walks(launcher) -> bool:
    return launcher.way.startswith("walk")


def two_lines(launcher):
    launcher.launch()
    launcher.launch()


def test_a_loop_launching_from_two_lines_is_found_after_its_first_pass(launcher):
    for _ in range(5):
        two_lines(launcher)
    names = launcher.check()
    assert names[0] != names[1] and names[2:4] == names[:2]
    assert names[0][-2].endswith("@two_lines")
    assert launcher.found == (8 if walks(launcher) else 0)


def shared(launcher):
    launcher.launch()


def caller_a(launcher):
    shared(launcher)


def caller_b(launcher):
    shared(launcher)


def test_the_same_line_reached_from_two_callers_keeps_each_callers_path(launcher):
    for _ in range(3):
        caller_a(launcher)
        caller_b(launcher)
    names = launcher.check()
    assert names[0][-3].endswith("@caller_a") and names[1][-3].endswith("@caller_b")
    assert names[2:] == names[:2] * 2
    assert launcher.found == (4 if walks(launcher) else 0)


def generator(launcher):
    while True:
        launcher.launch()
        yield


def resume_first(gen):
    next(gen)


def resume_second(gen):
    next(gen)


def test_a_generator_resumed_from_another_caller_gets_that_callers_path(launcher):
    gen = generator(launcher)
    for _ in range(3):
        resume_first(gen)
        resume_second(gen)
    names = launcher.check()
    assert names[0][-3].endswith("@resume_first") and names[1][-3].endswith("@resume_second")
    assert names[2:] == names[:2] * 2


def scoped_step(launcher, i):
    launcher.launch()
    with proton.scope("inside"):
        launcher.launch()
        with proton.scope(f"nested{i % 2}"):
            launcher.launch()
    launcher.launch()


def test_scopes_opened_between_launches_sit_after_the_frame_that_opened_them(launcher):
    for i in range(4):
        scoped_step(launcher, i)
    names = launcher.check()
    assert "inside" not in names[0] and "inside" not in names[3]
    assert names[1][-3:-1] == [names[1][-3], "inside"] and names[1][-3].endswith("@scoped_step")
    assert names[2][-4:-1] == [names[2][-4], "inside", "nested0"]
    assert names[6][-4:-1] == [names[6][-4], "inside", "nested1"]
    assert names[8:] == names[:8]
    # each launch is new once: four lines, and the second nested scope's line
    assert launcher.found == (16 - 5 if walks(launcher) else 0)


def open_and_return():
    proton.enter_scope("left open")


def test_a_scope_whose_opener_returned_is_placed_by_python(launcher):
    for _ in range(2):
        open_and_return()
        two_lines(launcher)
        proton.exit_scope()
    names = launcher.check()
    assert "left open" in names[0]
    assert launcher.found == 0  # where it goes depends on more than the stack: never walked


def test_an_op_the_triton_hook_opened_is_the_launchs_path(launcher):
    saved, profiler.collector = profiler.collector, launcher.harness.StandIn()  # collecting
    try:
        for _ in range(3):
            ops.enter_op("kernel_op")
            launcher.launch()
            ops.exit_op()
            launcher.launch()
    finally:
        profiler.collector = saved
    names = launcher.check()
    assert [n[-1] for n in names[::2]] == ["kernel_op"] * 3
    assert "kernel_op" not in names[1] and names[3] == names[1]
    assert launcher.found == (2 if walks(launcher) else 0)


def test_a_freed_code_object_never_lends_its_path_to_the_next(launcher, tmp_path):
    """New functions, each freed before the next is made (same size: the allocator would
    give the next one the freed one's address): each launch names its own file. The walk
    keeps every code object it remembers alive until the session's end, and no longer."""
    kept = []
    for i in range(40):
        ns = {}
        exec(compile("def f(launch):\n    launch()\n", str(tmp_path / f"m{i}.py"), "exec"), ns)
        ns["f"](launcher.launch)
        kept.append(weakref.ref(ns["f"].__code__))
        ns.clear()  # f, its globals and (unless kept) its code freed here
    names = launcher.check()
    assert [n[-2] for n in names] == [f"{tmp_path / f'm{i}.py'}:2@f" for i in range(40)]
    alive = sum(r() is not None for r in kept)
    assert alive == (40 if walks(launcher) else alive)
    launcher.close()
    proton.finalize()  # and the python context's own tables let go of them
    gc.collect()
    assert all(r() is None for r in kept)


class Big:
    pass


def launch_with_a_local(launcher, refs):
    big = Big()  # a stand-in for a large tensor
    refs.append(weakref.ref(big))
    launcher.launch()


def step(launcher, refs=None):
    if refs is not None:
        launch_with_a_local(launcher, refs)
    two_lines(launcher)


def test_frames_of_returned_calls_and_their_locals_are_let_go(launcher):
    """Python keeps the frames of a launch it placed for the next one; a launch the walk
    finds lets them go, as Python's next launch would."""
    launcher.compare = False  # only the callback's own Python runs
    refs = []
    for i in range(3):  # two_lines' launches seen; last, a new launch, then those two
        step(launcher, refs if i == 2 else None)
    gc.collect()
    assert [r() for r in refs] == [None]
    assert launcher.found == (2 + 2 if walks(launcher) else 0)
    launcher.check()


def torch_model(torch):
    """Blocks of attention and MLP, nested in Sequentials (nn.Module's call frames around
    each forward)."""

    class Attention(torch.nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y)

    class Block(torch.nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.norm, self.attn = torch.nn.LayerNorm(dim), Attention(dim)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                           torch.nn.Linear(4 * dim, dim))

        def forward(self, x):
            x = x + self.attn(self.norm(x))
            return x + self.mlp(x)

    torch.manual_seed(0)
    return torch.nn.Sequential(Block(16), torch.nn.Sequential(Block(16), Block(16)))


def launches_in(torch, launcher):
    """A launch at every torch function the model calls, from inside it (as a kernel launch
    is made from inside the op)."""

    class Launches(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            launcher.launch()
            return func(*args, **(kwargs or {}))

    return Launches()


def test_deep_torch_module_stacks_get_pythons_paths_and_are_found_after_a_pass(launcher):
    torch = pytest.importorskip("torch")
    model = torch_model(torch)
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        for _ in range(3):
            with launches_in(torch, launcher):
                model(x)
    names = launcher.check()
    per_pass = len(names) // 3
    assert per_pass > 20 and names[per_pass:2 * per_pass] == names[:per_pass]
    # Sequential > Block > Sequential > Block > Attention: each forward behind nn.Module's calls
    assert max(sum(f.endswith("@forward") for f in n) for n in names) == 5
    assert any(f.endswith("@_call_impl") for f in names[0])
    # every launch of the later passes, and those of the third block in the first (the second
    # block's stack again), are found with no Python
    assert launcher.found >= (2 * per_pass + 1 if walks(launcher) else 0)


RECONFIGURED = r"""
import sys, threading
sys.path.insert(0, sys.argv[1])
import harness, proton
from proton.cupti import native
proton.start(sys.argv[2], context="python")
on_api, cbid, enter, leave, alive, collector = harness.launch_callback()
through = harness.through_c(collector, on_api)
log, python_enter = collector.pipeline.log, through.alive[0]

def enter_(corr, ts, cbid_):
    # meanwhile, on another thread, the next session makes its launch log (configure(None))
    other = threading.Thread(target=log.configure, args=(None,))
    other.start()
    other.join()
    return python_enter(corr, ts, cbid_)

kept = native.ENTER(enter_)
log.configure(None, kept)
collector.pipeline.enable(True)
through(None, 1, cbid, enter)  # the GIL released, as around a Triton launch: C takes it
through(None, 1, cbid, leave)
print("launched")
"""


def test_a_launch_whose_enter_outlives_its_session_returns_safely(helper_cache, tmp_path):
    """A launch call's Python enter is still running (on its thread, the GIL taken by C)
    when the next session makes its launch log: the call returns through C, which gives the
    GIL back as it found it, and the process goes on (it used to call a function pointer the
    new log had cleared: a segfault)."""
    import subprocess

    from proton.cupti import c_loader

    if c_loader.compiler() is None:
        pytest.skip("no C compiler: the C helper is not built")
    done = subprocess.run([sys.executable, "-c", RECONFIGURED, BENCH, str(tmp_path / "p")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PROTON_CACHE_DIR": str(helper_cache)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("launched")


ONE_THREAD = r"""
#include <pthread.h>
typedef void (*python)(int);
struct job { python f; int n; };
static void *run(void *arg) {
    struct job *j = arg;
    for (int i = 0; i < j->n; i++) j->f(i);
    return 0;
}
/* f(0) .. f(n - 1), one after the other, on one new thread */
void calls_on_one_thread(python f, int n) {
    struct job j = {f, n};
    pthread_t t;
    pthread_create(&t, 0, run, &j);
    pthread_join(t, 0);
}
"""


def test_a_thread_given_a_new_thread_state_per_call_gets_each_calls_scope(helper_cache,
                                                                          tmp_path, monkeypatch):
    """A thread Python did not start that calls into Python again and again (a C++ thread
    pool's callbacks), each call with a fresh thread state and so fresh thread-local Stacks,
    usually at the freed one's address: each call's launch goes under the scope that call
    opened (the walk once read the last call's scopes as this one's: 'b' launches under
    'a')."""
    from proton.cupti import c_loader

    monkeypatch.syspath_prepend(BENCH)
    try:
        c_loader.compile_source(str(tmp_path / "one.so"), ONE_THREAD)
    except c_loader.BuildError:
        pytest.skip("no C compiler: the C helper is not built")
    import harness

    runner = ctypes.CDLL(str(tmp_path / "one.so"))
    proton.start(str(tmp_path / "fresh"), context="python")
    try:
        on_api, cbid, enter, leave, alive, collector = harness.launch_callback()
        through = harness.through_c(collector, on_api)
        assert through is not None, "the C helper was not built"
        data, opened = alive[0], []

        def call(i):  # ctypes gives each call its own thread state on this thread
            name = "a" if i < 6 else "b"
            with proton.scope(name):
                data["correlation_id"] = 100 + i
                through(None, 1, cbid, enter)
                through(None, 1, cbid, leave)
            opened.append(name)

        keep = ctypes.CFUNCTYPE(None, ctypes.c_int)(call)
        runner.calls_on_one_thread(keep, 12)
        collector.pipeline.settle()
        assert not collector.callback_errors, collector.callback_errors
        # each launch: the call's scope, then the call's line that launched it
        got = [paths.names(collector.attributor.launch_path(100 + i))[-2] for i in range(12)]
        assert opened == ["a"] * 6 + ["b"] * 6
        assert got == opened
        assert collector.pipeline.log.walks["found"] > 0  # the walk ran: it found the repeats
        collector.pipeline.enable(False)
    finally:
        proton.finalize()


def frames_out(frame) -> int:
    """How many frames from `frame` out to the thread's first."""
    n = 0
    while frame is not None:
        n, frame = n + 1, frame.f_back
    return n


def down(launcher, k: int, scopes: int) -> None:
    """k calls deeper, then `scopes` scopes opened here and two launches inside them."""
    if k:
        return down(launcher, k - 1, scopes)
    for i in range(scopes):
        proton.enter_scope(f"s{i}")
    launcher.launch()
    launcher.launch()
    for _ in range(scopes):
        proton.exit_scope()


@pytest.mark.parametrize("deep", [512, 513])
def test_a_stack_at_the_walks_limits_gets_pythons_paths(launcher, deep):
    """A launch `deep` frames down (the launch's own frame included) inside 64 open scopes,
    the most the walk keys: at 512 frames it is walked (its key fills the walk's arrays to
    their last word) and found at the repeat; one frame deeper it goes to Python."""
    k = deep - 2 - frames_out(sys._getframe())  # down(k) .. down(0) and the launch's frame
    assert k > 0
    for _ in range(2):
        down(launcher, k, 64)
    names = launcher.check()
    assert names[0][-65:-1] == [f"s{i}" for i in range(64)]  # then the launch's frame
    assert names[2:] == names[:2]
    assert launcher.found == (2 if walks(launcher) and deep == 512 else 0)
