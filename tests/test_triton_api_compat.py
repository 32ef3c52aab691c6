"""What a script written for `triton.profiler` sees of ours: states, context depth, text and
typed metrics, session errors, the hook registry, the `proton.profile` module. Checked in the
files written and the values returned, on the CPU."""
from __future__ import annotations

import pytest

from conftest import CollectorStandIn, find, load, stand_in_collector

import proton
from proton.api import write_profiles
from proton.context.frames import unwind
from proton.data.paths import paths


@pytest.fixture(autouse=True)
def no_live_sessions():
    yield
    unwind(0)
    write_profiles()


def names(node: dict) -> list[str]:
    return [c["frame"]["name"] for c in node["children"]]


# -- states ------------------------------------------------------------------------------------
def test_a_scope_entered_while_a_state_is_set_goes_above_the_state(profile_path):
    name, read = profile_path
    proton.start(name)
    with stand_in_collector() as ids:  # what launches would be attributed to
        proton.enter_scope("test0")
        proton.enter_state("warmup")
        assert paths.names(ids.ids[-1]) == ["test0", "warmup"]
        proton.enter_scope("test1", metrics={"a": 1.0})
        assert paths.names(ids.ids[-1]) == ["test0", "test1", "warmup"]
        proton.exit_scope(metrics={"b": 2})  # exit_scope() closes the scope, not the state
        assert paths.names(ids.ids[-1]) == ["test0", "warmup"]
        proton.exit_state()
        assert paths.names(ids.ids[-1]) == ["test0"]
        proton.exit_scope("test0")
        assert ids.ids == []
    proton.finalize()
    root, _ = read()
    assert names(root) == ["test0"] and names(find(root, "test0")) == ["test1"]
    state = find(root, "test0", "test1", "warmup")
    assert state["metrics"] == {"a": 1.0, "b": 2} and state["children"] == []


def test_a_state_set_inside_a_scope_stays_set_after_it_and_across_an_exception(profile_path):
    name, read = profile_path
    proton.start(name)
    with pytest.raises(KeyError):
        with proton.scope("outer"):
            with proton.state("s"):
                with proton.scope("inner", {"n": 1}):
                    raise KeyError("k")
    proton.enter_state("kept")
    with pytest.raises(ValueError):
        with proton.scope("raises", {"n": 2}):
            raise ValueError("v")
    with proton.scope("after", {"n": 3}):
        pass
    proton.exit_state()  # still set: the scopes' exits left it
    proton.finalize()
    root, _ = read()
    assert find(root, "outer", "inner", "s")["metrics"]["n"] == 1
    assert find(root, "raises", "kept")["metrics"]["n"] == 2
    assert find(root, "after", "kept")["metrics"]["n"] == 3


def test_states_nest_and_the_decorator_form_sees_them(profile_path):
    name, read = profile_path
    proton.start(name)

    @proton.scope("fn", {"calls": 1})
    def fn():
        pass

    with proton.state("a"), proton.state("b"):
        fn()
    proton.finalize()
    root, _ = read()
    assert find(root, "fn", "a", "b")["metrics"]["calls"] == 1


def test_a_state_is_not_cpu_timed_and_a_scope_keeps_its_own_cpu_time(profile_path):
    name, read = profile_path
    proton.start(name)  # no GPU: scopes carry their CPU time
    with proton.scope("s"):
        with proton.state("st"):
            with proton.scope("inner", {"n": 1}):
                pass
    proton.finalize()
    root, _ = read()
    assert "cpu_time (ns)" in find(root, "s", "inner")["metrics"]
    assert find(root, "s", "inner", "st")["metrics"] == {"n": 1}
    assert names(find(root, "s")) == ["inner"]  # no empty s/st node


def test_exit_scope_with_only_a_state_set_is_an_error():
    proton.start("never_written_state")
    try:
        proton.enter_state("s")
        with pytest.raises(proton.ScopeError, match="no open scope"):
            proton.exit_scope()
        proton.exit_state()
    finally:
        from proton.runtime.profiler import profiler

        profiler.discard(next(iter(profiler.sessions)))


# -- proton.context.depth ----------------------------------------------------------------------
def test_context_depth_counts_open_scopes_and_is_none_without_a_session(profile_path):
    name, _ = profile_path
    assert proton.context.depth() is None
    sid = proton.start(name)
    assert proton.context.depth(sid) == 0
    with proton.scope("a"):
        with proton.state("s"):
            proton.enter_scope("b")
            assert proton.context.depth(sid) == 2
            proton.exit_scope()
        assert proton.context.depth(sid) == 1
    assert proton.context.depth(sid) == 0
    with pytest.raises(proton.SessionError, match=f"Session has not been initialized: {sid + 1}"):
        proton.context.depth(sid + 1)
    proton.finalize()
    assert proton.context.depth(sid) is None


# -- metrics -----------------------------------------------------------------------------------
def test_properties_and_exclusive_metrics_may_be_text_and_are_never_summed(profile_path):
    name, read = profile_path
    proton.start(name)
    for tile in ("64x64", "128x64"):
        with proton.scope("gemm", {"tile (pty)": tile, "n": 1}):
            with proton.scope("inner", {"backend (exc)": "cutlass", "k (pty)": 2.0}):
                pass
    proton.finalize()
    root, _ = read()
    gemm = find(root, "gemm")
    assert gemm["metrics"]["tile"] == "128x64" and gemm["metrics"]["n"] == 2
    inner = find(root, "gemm", "inner")["metrics"]
    assert inner["backend"] == "cutlass" and inner["k"] == 2.0
    assert "tile" not in root["metrics"] and "backend" not in root["metrics"]
    assert root["metrics"].get("n") == 0  # inclusive metrics alone, for hatchet


def test_text_in_a_summed_metric_is_refused_naming_the_suffixes():
    with pytest.raises(proton.ScopeError, match=r"'a' has value '1' .*\(pty\)' or ' \(exc\)'"):
        proton.scope("s", {"a": "1"})


@pytest.mark.parametrize("first, then, was, now", [
    (1.0, 1, "double", "uint64_t"),
    (1, 2.5, "uint64_t", "double"),
    (-1, "x", "int64_t", "std::string"),
    ([1, 2], 3, "std::vector", "uint64_t"),
])
def test_a_metric_that_changes_type_on_a_scope_is_refused_with_tritons_words(
        profile_path, monkeypatch, first, then, was, now):
    from proton import triton_version

    monkeypatch.setattr(triton_version, "installed", lambda: (3, 6))  # its words; 3.9's below
    name, read = profile_path
    sid = proton.start(name)
    key = "a (pty)" if isinstance(then, str) else "a"
    with proton.scope("s", {key: first}):
        pass
    with pytest.raises(proton.ScopeError) as err:
        with proton.scope("s", {key: then}):
            pass
    assert str(err.value).startswith(
        f"Metric value type mismatch for valueId 0 (a): current={was}, new={now}; ")
    assert proton.context.depth(sid) == 0  # the refused scope did not open
    with proton.scope("s", {key: first}):  # the same type again is fine
        pass
    with proton.scope("other", {key: then}):  # another node may hold another type
        pass
    proton.finalize()
    root, _ = read()
    assert find(root, "other")["metrics"]["a"] == then


def test_ints_of_either_sign_add_up(profile_path):
    name, read = profile_path
    proton.start(name)
    for n in (5, -2):
        with proton.scope("s", {"delta": n}):
            pass
    proton.finalize()
    assert find(read()[0], "s")["metrics"]["delta"] == 3


# -- session ids -------------------------------------------------------------------------------
def test_a_session_id_never_started_is_named_with_tritons_words_and_the_live_ones(tmp_path):
    sid = proton.start(str(tmp_path / "p"))
    for call in (proton.activate, proton.deactivate):
        with pytest.raises(proton.SessionError) as err:
            call(sid + 1)
        assert str(err.value) == (f"Session has not been initialized: {sid + 1} (live "
                                  f"sessions: {sid}); use the id proton.start() returned")
    proton.finalize()
    assert (tmp_path / "p.hatchet").exists()


# -- one mode for the live sessions; pcsampling sessions share the sampler ----------------------
def test_a_session_of_another_mode_beside_a_live_one_is_refused_with_tritons_words(tmp_path):
    sid = proton.start(str(tmp_path / "pc"), mode="pcsampling")
    proton.deactivate(sid)  # deactivated still counts: its sampler is set up
    with pytest.raises(proton.SessionError) as err:
        proton.start(str(tmp_path / "plain"))
    assert str(err.value) == (
        "Cannot add a session with the same profiler but a different mode than existing "
        f"sessions: session {sid} runs with mode='pcsampling:interval=10', this one asks for "
        "mode=None; finalize the live sessions first")
    with pytest.raises(proton.SessionError, match="different mode.*pcsampling:interval=12"):
        proton.start(str(tmp_path / "pc12"), mode="pcsampling:interval=12")
    proton.finalize()
    proton.start(str(tmp_path / "plain"))
    with pytest.raises(proton.SessionError, match="Cannot add a session"):
        proton.start(str(tmp_path / "pc"), mode="pcsampling")
    proton.finalize()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pc.hatchet", "plain.hatchet"]


class FakeSampler:
    """Stands in for cupti/pc_collector.PCCollector: counts samples the test adds."""

    def __init__(self) -> None:
        from proton.data.pc_samples import SampleTable

        self.table = SampleTable({0: "smsp__pcsamp_warps_issue_stalled_long_scoreboard"})
        self.table.functions[(7, 0)] = "kern"
        self.active, self.finished, self.device, self.calls = False, False, 0, []

    def sample(self, n: int) -> None:
        key = (None, 7, 0, 0x10, 0)
        self.table.counts[key] = self.table.counts.get(key, 0) + n

    def counted(self) -> dict:
        return dict(self.table.counts)

    def resume(self) -> None:
        self.active = True
        self.calls.append("resume")

    def pause(self) -> None:
        self.active = False
        self.calls.append("pause")

    def read(self) -> None:
        self.calls.append("read")

    def finish(self) -> None:
        self.finished = True
        self.calls.append("finish")

    def line_finder(self):
        return lambda crc, function, offset: "no line info"


class FakeCollector(CollectorStandIn):
    def __init__(self) -> None:
        super().__init__()
        self.pc = FakeSampler()


def test_a_second_pcsampling_session_shares_the_sampler_and_takes_the_samples_after_its_start(
        tmp_path):
    from proton.runtime.profiler import profiler

    collector = FakeCollector()
    pc = collector.pc
    profiler.collector = collector  # as if the first session had started it on a GPU
    try:
        first = proton.start(str(tmp_path / "first"), mode="pcsampling")
        pc.sample(5)
        second = proton.start(str(tmp_path / "second"), mode="pcsampling")
        pc.sample(3)
        proton.deactivate(first)  # the second still samples
        assert pc.calls == ["resume"] and pc.active
        proton.finalize(first)  # reads, and sampling goes on
        assert pc.calls == ["resume", "read"] and not pc.finished
        pc.sample(2)
        proton.finalize(second)
        assert pc.calls == ["resume", "read", "pause", "finish"]
    finally:
        profiler.collector = None
    samples = {p: find(load(tmp_path / f"{p}.hatchet")[0], "kern")["metrics"]["num_samples"]
               for p in ("first", "second")}
    assert samples == {"first": 8, "second": 5}


# -- the hook registry -------------------------------------------------------------------------
def test_a_triton_hook_session_registers_its_hook_and_the_chain_holds_it_only_while_active(
        tmp_path):
    knobs = pytest.importorskip("triton").knobs
    from proton.hooks import HookManager, LaunchHook, triton_hook

    chain = knobs.runtime.launch_enter_hook.calls
    user = lambda metadata: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(user)
    try:
        sid = proton.start(str(tmp_path / "h"), hook="triton")
        proton.activate(sid)
        assert HookManager.active_hooks == [LaunchHook()]
        assert HookManager.session_hooks[sid] == {LaunchHook(): True}
        # the hook's own function, no dispatch per launch, and first: the op exists before any
        # other enter hook runs (the instrumentation backend's reads where the launch goes)
        assert chain == [triton_hook._enter, user]
        proton.deactivate(sid)
        proton.deactivate(sid)
        assert HookManager.active_hooks == [] and HookManager.session_hooks[sid] == {
            LaunchHook(): False}
        assert chain == [user]  # launches pay nothing while the session is paused
        proton.start(str(tmp_path / "h"), hook="triton")  # resumes it
        assert triton_hook._enter in chain
        proton.finalize(sid)
        assert HookManager.session_hooks == {} and chain == [user]
    finally:
        knobs.runtime.launch_enter_hook.remove(user)
    assert (tmp_path / "h.hatchet").exists()


def test_hooks_of_several_kinds_run_in_priority_order_through_the_manager():
    knobs = pytest.importorskip("triton").knobs
    from proton.hooks import Hook, HookManager, InstrumentationHook, LaunchHook

    seen = []

    class Recording(Hook):
        def __init__(self, name: str, priority: int) -> None:
            self.name, self.priority = name, priority

        def enter(self, metadata) -> None:
            seen.append(("enter", self.name))

        def exit(self, metadata) -> None:
            seen.append(("exit", self.name))

    low, high = Recording("low", 0), Recording("high", 50)
    HookManager.register(low, 7)
    assert knobs.runtime.launch_enter_hook.calls[-1] == low.enter
    HookManager.register(high, 7)
    HookManager.register(InstrumentationHook(""), 8)
    HookManager.register(LaunchHook(), 8)
    try:
        assert [type(h).__name__ for h in HookManager.active_hooks] == [
            "LaunchHook", "Recording", "Recording", "InstrumentationHook"]
        assert HookManager.enter in knobs.runtime.launch_enter_hook.calls
        HookManager.unregister(8)
        knobs.runtime.launch_enter_hook.calls[-1]("metadata")
        knobs.runtime.launch_exit_hook.calls[-1]("metadata")
        assert seen == [("enter", "high"), ("enter", "low"), ("exit", "low"), ("exit", "high")]
    finally:
        HookManager.unregister()
    assert HookManager.active_hooks == [] and HookManager.enter not in \
        knobs.runtime.launch_enter_hook.calls


def test_launch_hook_is_one_object_under_both_names():
    from proton.hooks import LaunchHook
    from proton.hooks.launch import COMPUTE_METADATA_SCOPE_NAME, LaunchHook as Launch

    assert LaunchHook is Launch and LaunchHook() is Launch() and Launch.priority == 100
    assert COMPUTE_METADATA_SCOPE_NAME == "__proton_launch_metadata"


# -- proton.profile: Triton's module, and the decorator ---------------------------------------
ORDERS = [
    "import proton; proton.profile",
    "import proton.profile",
    "from proton.profile import _select_backend",
    "from proton import profile",
    "from proton.api import profile; import proton.profile",
]


@pytest.mark.parametrize("first", ORDERS)
def test_proton_profile_is_the_decorator_and_tritons_module_whichever_is_imported_first(
        tmp_path, first):
    import subprocess
    import sys

    code = f"""{first}
import proton, proton.profile as module
@proton.profile
def bare(x):
    return x + 1
@proton.profile(name="named")
def named(x):
    return x * 2
assert bare(1) == 2 and named(2) == 4 and bare.__name__ == "bare"
from proton import profile
assert profile is module is proton.profile and module.profile is proton.api.profile
assert module.start is proton.start and module.DEFAULT_PROFILE_NAME == "proton"
proton.finalize()
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["named.hatchet", "proton.hatchet"]


@pytest.mark.parametrize("newer, amd", [(False, "roctracer"), (True, "rocprofiler")])
def test_select_backend_follows_tritons_active_driver(monkeypatch, newer, amd):
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget

    from proton import triton_version
    from proton.profile import _select_backend

    monkeypatch.setattr(triton_version, "after_3_6", lambda: newer)  # Triton 3.9 names its own

    class Driver:
        backend = "cuda"

        def get_current_target(self):
            return GPUTarget(self.backend, 90, 32)

    driver = Driver()
    monkeypatch.setattr(triton.runtime.driver, "_active", driver)
    assert _select_backend() == "cupti"
    driver.backend = "hip"
    assert _select_backend() == amd
    driver.backend = "cpu"
    with pytest.raises(proton.SessionError, match="no profiling backend for Triton's target "
                                                  "'cpu'; Proton profiles NVIDIA"):
        _select_backend()


# -- the `proton` command ----------------------------------------------------------------------
def tritons_options(monkeypatch) -> dict[tuple[str, ...], list | None]:
    """Triton's `proton` options, read from its own argparse parser: option strings ->
    choices."""
    import argparse

    proton_cli = pytest.importorskip("triton.profiler.proton")
    seen = []

    def keep(parser, *args, **kwargs):
        seen.append(parser)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)
    with pytest.raises(SystemExit):
        proton_cli.parse_arguments()
    return {tuple(a.option_strings): a.choices for a in seen[0]._actions if a.option_strings}


def test_the_command_takes_every_option_and_choice_tritons_takes(monkeypatch):
    import click

    from proton.cli import run

    ours = {opt: param for param in run.params for opt in param.opts}
    triton = tritons_options(monkeypatch)
    assert len(triton) >= 7  # -h, -n, -b, -c, -m, -d, -k
    for options, choices in triton.items():
        params = {ours.get(o) for o in options} - {None}
        assert len(params) == 1 or options == ("-h", "--help"), options
        if choices and params:
            param = params.pop()
            taken = param.type.choices if isinstance(param.type, click.Choice) else None
            assert taken is None or {c for c in choices if c} <= set(taken), options


def test_version_says_which_proton_runs():
    from click.testing import CliRunner
    from importlib.metadata import version

    from proton.cli import proton as command

    result = CliRunner().invoke(command, ["--version"])
    assert result.exit_code == 0
    assert result.output == (f"proton {version('proton-profiler')} (proton-profiler, not "
                             "Triton's own Proton: that one runs as python -m "
                             "triton.profiler.proton)\n")


@pytest.mark.parametrize("backend", ["roctracer", "rocprofiler"])  # Triton 3.6's, 3.9's
def test_tritons_amd_backend_is_taken_and_refused_in_one_line(tmp_path, backend):
    from click.testing import CliRunner

    from proton.cli import proton as command

    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    result = CliRunner().invoke(command, ["-b", backend, str(script)])
    assert result.exit_code == 2 and "ran" not in result.output
    assert f"Error: backend='{backend}' (AMD GPUs) is not supported: Proton profiles NVIDIA " \
           "GPUs; use backend='cupti' or none" in result.output


def test_a_forked_child_drops_its_parents_hook_from_tritons_chain(tmp_path):
    pytest.importorskip("triton")
    import subprocess
    import sys

    code = """
import os, proton
from triton import knobs
from proton.hooks import triton_hook
proton.start("parent", hook="triton")
pid = os.fork()
if pid == 0:
    ok = triton_hook._enter not in knobs.runtime.launch_enter_hook.calls
    proton.start("child", hook="triton:config")  # its own options
    ok = ok and triton_hook._enter in knobs.runtime.launch_enter_hook.calls
    proton.finalize()
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0
assert triton_hook._enter in knobs.runtime.launch_enter_hook.calls
proton.finalize()
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert len(written) == 2 and written[0].startswith("child.pid") and \
        written[1] == "parent.hatchet"


def test_a_state_as_a_decorator_names_the_scopes_its_function_enters(profile_path):
    name, read = profile_path
    proton.start(name)

    @proton.state("warmup")
    def step(fail: bool = False):
        with proton.scope("fwd", {"n": 1}):
            if fail:
                raise KeyError("k")

    with proton.scope("loop"):
        step()
        with pytest.raises(KeyError):
            step(fail=True)
        with proton.scope("after", {"n": 1}):
            pass
    proton.finalize()
    root, _ = read()
    assert find(root, "loop", "fwd", "warmup")["metrics"]["n"] == 2
    assert find(root, "loop", "after")["metrics"]["n"] == 1  # unset after each call


# -- Triton 3.9's modules and words ----------------------------------------------------------------
def test_triton_39s_state_module_holds_the_metadata_names_and_proton_state_stays_the_class(
        profile_path):
    from proton.state import COMPUTE_METADATA_SCOPE_NAME, COMPUTE_METADATA_SCOPE_PREFIX

    assert COMPUTE_METADATA_SCOPE_NAME == "__proton_launch_metadata"
    assert COMPUTE_METADATA_SCOPE_PREFIX == "__proton_launch_metadata:"
    name, read = profile_path
    proton.start(name)
    with proton.scope("outer"):
        with proton.state("warmup"):  # still the class after the module was imported
            pass
    proton.finalize()
    assert find(read()[0], "outer")["frame"]["name"] == "outer"


@pytest.mark.parametrize("version, word", [((3, 6), "uint64_t"), ((3, 9), "int64_t")])
def test_a_metric_type_clash_names_the_int_as_the_installed_triton_does(
        profile_path, monkeypatch, version, word):
    from proton import triton_version

    monkeypatch.setattr(triton_version, "installed", lambda: version)
    name, _ = profile_path
    proton.start(name)
    with pytest.raises(proton.ScopeError) as caught:
        with proton.scope("s", {"a": 1.0}):
            pass
        with proton.scope("s", {"a": 1}):
            pass
    proton.finalize()
    assert f"current=double, new={word};" in str(caught.value)


def test_rocm_module_configures_nothing_without_therock():
    from proton import _rocm

    assert _rocm.configure_runtime() is None


class CountingHook(proton.hooks.Hook):
    """A user's hook, as Triton 3.9 takes one in start(hook=...)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def activate(self) -> None:
        self.calls.append("activate")

    def deactivate(self) -> None:
        self.calls.append("deactivate")


def test_a_hook_of_the_users_serves_its_session_while_it_is_active(profile_path):
    from triton import knobs

    from proton.hooks import HookManager

    name, _ = profile_path
    hook = CountingHook()
    sid = proton.start(name, hook=hook)
    assert HookManager.active_hooks == [hook]
    assert hook.enter in knobs.runtime.launch_enter_hook.calls  # Triton calls it per launch
    proton.deactivate(sid)
    assert HookManager.active_hooks == [] and hook.enter not in knobs.runtime.launch_enter_hook.calls
    proton.activate(sid)
    proton.finalize()
    assert hook.calls == ["activate", "deactivate", "activate", "deactivate"]
    assert hook.enter not in knobs.runtime.launch_enter_hook.calls
