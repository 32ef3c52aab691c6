"""context="python" call paths, on the CPU: the path a launch made at a given point would get
(context.frames.launch_parent, the same code the CUPTI launch callback runs), and the file a
CPU-only session writes. tests/test_gpu_python.py checks the kernels on the GPU."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import weakref

import pytest

from conftest import find, run_threads
from torch_like import TORCH_LIKE

import proton
from proton.api import write_profiles
from proton.context.frames import launch_parent, unwind
from proton.context.python import own_files
from proton.data.paths import paths
from proton.runtime.profiler import profiler

HERE = os.path.abspath(__file__)


@pytest.fixture
def python_session(profile_path):
    name, read = profile_path
    proton.start(name, context="python")
    yield read
    unwind(0)
    write_profiles()


def line_of(marker: str) -> int:
    """The line of this file holding `marker` (in a comment), so tests name exact frames."""
    with open(HERE) as f:
        for number, text in enumerate(f, 1):
            if f"# {marker}" in text:
                return number
    raise AssertionError(marker)


def frame(marker: str, function: str) -> str:
    return f"{HERE}:{line_of(marker)}@{function}"


def names(path_id: int) -> list[str]:
    return paths.names(path_id)


def test_the_profilers_own_files_are_its_packages_not_the_checkout_around_them():
    """Run from a checkout's own folder (the README's `python -m pytest`), proton's path holds
    the checkout too (for proton.viewer and friends): its tests and scripts are user code."""
    files = own_files()
    assert HERE not in files
    assert any(f.endswith(os.path.join("proton", "context", "python.py")) for f in files)
    assert any(f.endswith(os.path.join("hooks", "launch.py")) for f in files)


def inner():
    return launch_parent()  # L-inner


def middle():
    return inner()  # L-middle


def test_nested_functions_give_one_frame_each_with_file_line_and_function(python_session):
    got = names(middle())  # L-test
    assert got[-3:] == [frame("L-test", "test_nested_functions_give_one_frame_each_with_file_"
                                        "line_and_function"),
                        frame("L-middle", "middle"), frame("L-inner", "inner")]


def test_the_profilers_own_frames_never_appear(python_session):
    with proton.scope("S"):
        got = names(middle())
    files = [n.rsplit(":", 1)[0] for n in got if "@" in n]
    assert files and not any(f in own_files() for f in files), got
    assert not any("/proton/" in f and "/tests/" not in f for f in files), got


def scoped_call():
    with proton.scope("S"):  # L-scoped-open
        return inner()


def test_a_scope_sits_after_the_frame_that_opened_it(python_session):
    got = names(scoped_call())
    # the opener stays at the line of the `with`: the scope's own metrics share its node
    assert got[-3:] == [frame("L-scoped-open", "scoped_call"), "S", frame("L-inner", "inner")]


def test_a_launch_straight_from_a_scopes_opener_sits_under_the_line_that_launched_it(
        python_session):
    """As in Triton's files, a kernel's parent is always a `file:line@function` frame: the
    opener's line inside the scope (torch.ones(...) right inside a `with`)."""
    with proton.scope("S"):  # L-straight-open
        got = names(launch_parent())  # L-launch-straight
    here = "test_a_launch_straight_from_a_scopes_opener_sits_under_the_line_that_launched_it"
    assert got[-3:] == [frame("L-straight-open", here), "S", frame("L-launch-straight", here)]


def test_a_state_is_the_last_frame_of_every_launch_path_while_set(python_session):
    """As Triton's Proton (and its launch hook's __proton_launch_metadata state): the kernels
    of calls made while a state is set sit right under the state, after every frame."""
    with proton.scope("S"):  # L-state-scope
        proton.enter_state("st")
        got = names(middle())
        proton.exit_state()
        after = names(middle())
    here = "test_a_state_is_the_last_frame_of_every_launch_path_while_set"
    assert got[-5:] == [frame("L-state-scope", here), "S", frame("L-middle", "middle"),
                        frame("L-inner", "inner"), "st"]
    assert after == got[:-1]


@proton.scope("decorated")
def decorated():
    return inner()  # L-decorated


def test_a_decorator_scope_sits_between_the_caller_and_the_function(python_session):
    got = names(decorated())  # L-decorated-caller
    assert got[-4:] == [frame("L-decorated-caller", "test_a_decorator_scope_sits_between_the_"
                                                    "caller_and_the_function"),
                        "decorated", frame("L-decorated", "decorated"), frame("L-inner", "inner")]


def test_repeated_launches_reuse_paths_and_follow_lines_and_scopes(python_session):
    first = []
    for _ in range(3):
        first.append(middle())  # L-loop-a
    assert len(set(first)) == 1
    second = middle()  # L-loop-b
    assert second != first[0]
    assert names(second)[-3] == frame("L-loop-b", "test_repeated_launches_reuse_paths_and_"
                                                  "follow_lines_and_scopes")
    with proton.scope("T"):  # L-loop-c
        in_scope = middle()
    after = middle()  # L-loop-b2
    assert names(in_scope)[-4:-2] == [frame("L-loop-c", "test_repeated_launches_reuse_paths_"
                                                        "and_follow_lines_and_scopes"), "T"]
    assert "T" not in names(after)
    assert names(after)[:-3] == names(first[0])[:-3]  # the frames outside are the same


def generator():
    yield inner()  # L-gen
    yield inner()  # L-gen2


def first_caller(gen):
    return next(gen)  # L-gen-first


def second_caller(gen):
    return next(gen)  # L-gen-second


def test_a_generator_resumed_from_another_caller_gets_that_callers_path(python_session):
    gen = generator()
    a, b = first_caller(gen), second_caller(gen)
    assert names(a)[-3:] == [frame("L-gen-first", "first_caller"), frame("L-gen", "generator"),
                             frame("L-inner", "inner")]
    assert names(b)[-3:] == [frame("L-gen-second", "second_caller"),
                             frame("L-gen2", "generator"), frame("L-inner", "inner")]


def test_each_thread_gets_its_own_path_and_scopes(python_session):
    got = {}

    def worker(tag):
        with proton.scope(f"worker-{tag}"):  # L-worker
            got[tag] = names(inner())

    with proton.scope("main-scope"):
        threads = [threading.Thread(target=worker, args=(t,)) for t in "ab"]
        run_threads(threads)
    for tag in "ab":
        assert got[tag][-3:] == [frame("L-worker", "worker"), f"worker-{tag}",
                                 frame("L-inner", "inner")]
        assert "main-scope" not in got[tag]
        assert got[tag][0].endswith("@_bootstrap")  # the thread's own stack, from threading


def on_foreign_thread(fn) -> None:
    """fn() on a thread Python did not start, as autograd's engine thread calls into Python."""
    import ctypes

    libc = ctypes.CDLL(None)
    body = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda _: fn() and None)
    tid = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(tid), None, body, None) == 0
    assert libc.pthread_join(tid, None) == 0


def test_a_foreign_thread_with_no_scope_launches_below_the_main_threads_scope(
        python_session):
    """As autograd's thread replaying a graphed backward from Python: its frames go below
    where the main thread is, as its launches with no Python frames do; a thread the program
    started keeps its own path (test_each_thread_gets_its_own_path_and_scopes)."""
    got = {}
    with proton.scope("backward"):  # L-main-backward
        main = names(launch_parent())  # L-main-launch
        on_foreign_thread(lambda: got.setdefault("path", names(inner())))  # L-foreign
        run_threads([threading.Thread(target=lambda: got.setdefault("own", names(inner())))])
    here = frame("L-main-backward", "test_a_foreign_thread_with_no_scope_launches_below_the_"
                                    "main_threads_scope")
    # a launch straight from the scope's opener sits under its own line inside the scope
    assert main[-3:] == [here, "backward", frame("L-main-launch", "test_a_foreign_thread_with_"
                                                 "no_scope_launches_below_the_main_threads_scope")]
    assert got["path"][:len(main) - 1] == main[:-1]  # below the main thread's scope, then its own
    assert got["path"][-2:] == [frame("L-foreign", "<lambda>"), frame("L-inner", "inner")]
    assert got["own"][0].endswith("@_bootstrap") and "backward" not in got["own"]


def open_and_return():
    proton.enter_scope("left-open")  # its opener returns at once


def test_a_scope_left_open_by_a_returned_function_follows_the_scope_before_it(python_session):
    with proton.scope("outer"):  # L-left-open
        open_and_return()
        got = names(inner())
        proton.exit_scope("left-open")
    caller = frame("L-left-open", "test_a_scope_left_open_by_a_returned_function_follows_"
                                  "the_scope_before_it")
    assert got[-4:] == [caller, "outer", "left-open", frame("L-inner", "inner")]


def test_scope_metrics_and_cpu_time_land_on_the_python_path(python_session):
    with proton.cpu_timed_scope("timed", {"tokens": 3}):  # L-timed
        pass
    test_frames = names(launch_parent())  # the frames outside this test function, and its own
    proton.finalize()
    root, _ = python_session()
    node = find(root, *test_frames[:-1], frame("L-timed", "test_scope_metrics_and_cpu_time_"
                                                          "land_on_the_python_path"), "timed")
    assert node["metrics"]["tokens"] == 3 and node["metrics"]["cpu_time (ns)"] > 0


def test_contexts_do_not_mix_in_one_process(profile_path):
    name, _ = profile_path
    proton.start(name, context="python")
    try:
        with pytest.raises(proton.SessionError, match="context='python' is live"):
            proton.start(name + "2", context="shadow")
    finally:
        profiler.finalize()


SCRIPT = '''
import proton
from proton.data.paths import paths
from proton.context.frames import launch_parent

def step():
    return launch_parent()

print("PATH", paths.names(step()))
'''


def test_under_the_proton_command_the_path_starts_at_the_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, "-m", "proton", "-c", "python", "-n",
                          str(tmp_path / "p"), str(script)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    got = eval(out.stdout.split("PATH", 1)[1])
    assert got == [f"{script}:9@<module>", f"{script}:7@step"]


def begin_step():
    proton.enter_scope("step")  # like a training callback's on_step_begin: it returns at once


def launch_twice():
    first = names(inner())  # L-twice-a
    with proton.scope("unrelated"):  # a scope change between the launches
        pass
    second = names(inner())  # L-twice-b
    return first, second


def test_a_scope_whose_opener_returned_follows_the_openers_caller(python_session):
    begin_step()  # L-begin
    first, second = launch_twice()  # L-twice-call
    proton.exit_scope("step")
    caller = frame("L-twice-call", "test_a_scope_whose_opener_returned_follows_the_openers_"
                                   "caller")
    assert first[-4:] == [caller, "step", frame("L-twice-a", "launch_twice"),
                          frame("L-inner", "inner")]
    assert second[-4:] == [caller, "step", frame("L-twice-b", "launch_twice"),
                           frame("L-inner", "inner")]


LIBRARY = '''
import proton
from proton.context.frames import launch_parent

def step(first):
    if first:
        proton.enter_scope("phase")
    return launch_parent()
'''


def test_a_library_function_that_opened_a_scope_then_returned_is_not_reused(python_session):
    """The same code at the same offsets, but the second time its frame did not open the
    scope (the first call's frame did, and returned): the path must not be the first one."""
    ns = {}
    exec(compile(LIBRARY, "/usr/lib/python3/site-packages/libx.py", "exec"), ns)
    first = names(ns["step"](True))  # L-lib
    second = names(ns["step"](False))  # L-lib2
    proton.exit_scope("phase")
    assert first[-3:] == ["/usr/lib/python3/site-packages/libx.py:7@step", "phase",
                          "/usr/lib/python3/site-packages/libx.py:8@step"]
    assert second[-3:] == [frame("L-lib2", "test_a_library_function_that_opened_a_scope_then_"
                                           "returned_is_not_reused"),
                           "phase", "/usr/lib/python3/site-packages/libx.py:8@step"]


def test_identical_functions_in_two_files_keep_their_own_file(python_session, tmp_path):
    source = ("from proton.context.frames import launch_parent\n"
              "def f():\n    return launch_parent()\n")
    fs = []
    for name in ("model_a.py", "model_b.py"):
        ns = {}
        exec(compile(source, str(tmp_path / name), "exec"), ns)
        fs.append(ns["f"])
    got = []
    for f in (fs[0], fs[0], fs[1]):
        got.append(names(f())[-1])  # one line: the same offsets in this frame every time
    assert got == [f"{tmp_path / 'model_a.py'}:3@f"] * 2 + [f"{tmp_path / 'model_b.py'}:3@f"]


class Big:
    pass


def launch_with_a_local(refs):
    big = Big()  # a stand-in for a large tensor
    refs.append(weakref.ref(big))
    return inner()


def test_frames_of_returned_calls_and_their_locals_are_let_go(python_session):
    refs = []
    for _ in range(3):
        launch_with_a_local(refs)
    inner()  # the next launch lets the last call's frame go
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    done = []

    def worker():
        launch_with_a_local(refs)
        done.append(1)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    run_threads(threads)
    gc.collect()
    assert len(done) == 5 and all(r() is None for r in refs)  # a thread's end lets them go


def test_a_python_start_that_fails_leaves_scopes_as_they_were(profile_path):
    name, read = profile_path
    with pytest.raises(proton.SessionError):
        proton.start(name, context="python", hook="triton:bogus=1")
    assert profiler.context.name == "shadow"
    proton.start(name)
    with proton.scope("a"):
        pass
    proton.finalize()
    root, _ = read()
    assert [c["frame"]["name"] for c in root["children"]] == ["a"]


def gen_launcher():
    while True:
        yield inner()  # L-gen3


def test_a_generator_resumed_by_one_frame_from_two_lines(python_session):
    test = "test_a_generator_resumed_by_one_frame_from_two_lines"
    g = gen_launcher()
    a = names(next(g))  # L-gen-a
    b = names(next(g))  # L-gen-b
    c = names(next(g))  # L-gen-b2
    assert a[-3:] == [frame("L-gen-a", test), frame("L-gen3", "gen_launcher"),
                      frame("L-inner", "inner")]
    assert b[-3:] == [frame("L-gen-b", test), frame("L-gen3", "gen_launcher"),
                      frame("L-inner", "inner")]
    assert c[-3] == frame("L-gen-b2", test)


@pytest.mark.parametrize("keep", [False, True])
def test_launches_on_a_thread_without_python_keep_its_thread_state_when_asked(keep, tmp_path,
                                                                              monkeypatch):
    """The launch callback called from a C thread (as CUPTI calls it on PyTorch's autograd
    thread): each launch goes to the unscoped path; with PROTON_KEEP_THREAD_STATES=1 the
    thread keeps one Python thread state (a thread-local set in one call is there in the next),
    else each call gets a fresh one (bench/probe_foreign_thread.py times both)."""
    from proton.cupti.collector import KEEP_STATES_ENV
    from proton.cupti.subscriber import passes_on

    bench = os.path.join(os.path.dirname(HERE), "..", "bench")
    monkeypatch.syspath_prepend(bench)  # the benchmarks' shared harness
    import harness as probe

    lib = probe.runner()
    proton.start(str(tmp_path / "foreign_thread"), context="python")
    try:
        monkeypatch.setattr(profiler.timeline, "unscoped", lambda thread, ts: 4242)
        monkeypatch.setenv(KEEP_STATES_ENV, "1" if keep else "0")
        on_api, cbid, enter, leave, _alive, collector = probe.launch_callback()
        local, calls = threading.local(), []

        @passes_on  # as the profiler's own wrappers are: on_api sees no Python frame
        def callback(userdata, domain, cbid, cbdata):
            on_api(userdata, domain, cbid, cbdata)
            local.calls = getattr(local, "calls", 0) + 1
            calls.append(local.calls)

        kept = probe.THREAD_CALLBACK(callback)
        lib.on_new_thread(kept, enter, leave, 3, cbid)
        assert collector.callback_errors == []
        assert calls == ([1, 2, 3, 4, 5, 6] if keep else [1] * 6)
        assert collector.attributor.launch_path(7) == 4242  # the enter registered it there
    finally:
        os.environ.pop("PROTON_KEEP_THREAD_STATES", None)
        proton.finalize()




def deep_model(launch):
    """A GPT-like nest (model > blocks > attention, mlp > linear) calling launch() from
    user lines and from the library's linear."""
    ns: dict = {}
    exec(compile(TORCH_LIKE, "/usr/lib/python3/site-packages/fake_torch_nn.py", "exec"), ns)
    Module, linear = ns["Module"], ns["linear"]

    class Linear(Module):
        def forward(self):
            return linear(launch)

    class Attention(Module):
        def __init__(self):
            self.qkv, self.out = Linear(), Linear()

        def forward(self):
            self.qkv()
            launch()
            launch()
            return self.out()

    class Block(Module):
        def __init__(self):
            self.attn, self.mlp = Attention(), Linear()

        def forward(self, depth):
            launch()
            self.attn()
            if depth:
                self(depth - 1)  # a block inside a block: deeper still
            return self.mlp()

    class Model(Module):
        def __init__(self):
            self.blocks = [Block() for _ in range(3)]

        def forward(self):
            for i, block in enumerate(self.blocks):
                block(i)
                launch()

    return Model()


def reference_path(frame) -> list[str]:
    """The python context's path of a launch made at `frame`, by its definition: every
    frame's file:line@function from the outermost, the profiler's own left out."""
    from proton.context import python
    from proton.format import frame_name

    out = []
    while frame is not None:
        if frame.f_code.co_filename not in python.SKIPPED:
            out.append(frame_name(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return out[::-1]


def test_deep_module_stacks_give_the_same_paths_as_a_full_walk(python_session):
    """Forward passes through nested modules, three times (the kept frames, the walks seen and
    the fast path all serve later passes), and with a scope entered and left between passes:
    every launch's path is the one a full walk of its stack gives."""
    got, want = [], []

    def launch():  # both on one line: the same frame at the same line
        got.append(names(launch_parent())), want.append(reference_path(sys._getframe()))

    model = deep_model(launch)
    for step in range(3):
        model()
        with proton.scope("between"):
            pass
    assert len(got) == 3 * (6 + 12 + 18 + 3)  # blocks nested 0, 1 and 2 deep, the model's
    assert got == want
    # deep: the innermost launches sit 21 frames below the model's own (4 a module call)
    assert max(map(len, want)) - min(map(len, want)) == 21


def opened(found: list) -> None:
    """Called right inside a scope the caller entered: its path beside the one a full walk
    gives (launch_path at its opener with no kept frames: how a scope's path was found before
    scopes took it from their parent's, or from the thread's anchor)."""
    from proton.context import python
    from proton.context.stack import per_thread

    st = per_thread.stacks
    top = st.open[-1]
    st.kept = None
    found.append((top.name, top.path, python.launch_path(top.opener)))


def scoped_function(found: list) -> None:
    with proton.scope("fn"):  # L-fn: a function's outermost scope, called from a loop
        opened(found)
        with proton.scope("fn-inner"):
            opened(found)
            scoped_helper(found)


def scoped_helper(found: list) -> None:
    with proton.scope("helper"):  # below a scope its caller's caller opened
        opened(found)


@proton.scope("decorated-helper")
def decorated_helper(found: list) -> None:
    opened(found)  # through the profiler's own frames


def scoped_generator(found: list):
    with proton.scope("gen"):
        opened(found)
        yield
        with proton.scope("gen-inner"):  # resumed from another caller
            opened(found)
        yield


def resume(gen) -> None:
    next(gen, None)


def test_scope_paths_found_without_a_walk_are_a_full_walks(python_session):
    """A training loop's scopes, three passes: the loop's own (the anchor from the second
    pass), nested ones in one function (the parent's path), callees' below them (the frames in
    between walked), a function's outermost scope called from two lines of the loop (the
    anchor must tell them apart), a generator's, one opened after a scope left open by a
    returned function, and a worker thread's: each scope's path is the full walk's."""
    found: list = []

    def loop() -> None:
        for _ in range(3):
            with proton.scope("step"):
                opened(found)
                with proton.scope("forward"):
                    opened(found)
                    scoped_helper(found)
                    decorated_helper(found)
                with proton.scope("backward"):
                    opened(found)
            scoped_function(found)  # L-site-a
            scoped_function(found)  # L-site-b
            gen = scoped_generator(found)
            resume(gen)
            resume(gen)
            resume(gen)
            with proton.scope("outer"):
                open_and_return()
                with proton.scope("after-left-open"):
                    opened(found)
                proton.exit_scope("left-open")

    loop()
    worker = threading.Thread(target=loop)
    run_threads([worker])
    assert len(found) == 2 * 3 * 14
    assert [(name, got) for name, got, _ in found] == [(name, want) for name, _, want in found]
    fn = [names(got) for name, got, _ in found if name == "fn"]  # two call sites, each reused
    assert {tuple(p[-3:]) for p in fn[0::2]} == {(frame("L-site-a", "loop"),
                                                  frame("L-fn", "scoped_function"), "fn")}
    assert {tuple(p[-3:]) for p in fn[1::2]} == {(frame("L-site-b", "loop"),
                                                  frame("L-fn", "scoped_function"), "fn")}


class Held:
    pass


def scoped_step():
    with proton.scope("step"):
        launch_parent()


def loop_with_a_local(refs):
    big = Held()  # a stand-in for a model's tensors
    refs.append(weakref.ref(big))
    scoped_step()


def test_a_session_end_lets_go_of_an_idle_threads_returned_frames(profile_path):
    """A thread that ran a loop (a scope and a launch in it) and now waits: at the session's
    end the python context lets go of the frames it kept of that thread (the loop's, and so
    its locals), as it does the ending thread's, not only at that thread's next scope."""
    name, _ = profile_path
    refs, ran, stop = [], threading.Event(), threading.Event()

    def worker():
        loop_with_a_local(refs)
        ran.set()
        stop.wait(60)

    proton.start(name, context="python")
    thread = threading.Thread(target=worker)
    try:
        thread.start()
        assert ran.wait(60)
        write_profiles()
        gc.collect()
        assert thread.is_alive() and refs[0]() is None
    finally:
        stop.set()
        thread.join()
