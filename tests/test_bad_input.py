"""No input loses a profile: bad API calls are refused where they are made, in one line that
names the argument, with the good calls around them kept; the writer writes whatever was
recorded (any depth, any name, non-finite values); `proton` says when a profile could not be
written and exits non-zero; hang-ups and SIGQUIT write the profile as SIGTERM does."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import sys

import pytest

from conftest import default_signals, find, load

import proton
from proton.api import write_profiles
from proton.context.frames import unwind
from proton.runtime.profiler import profiler


@pytest.fixture(autouse=True)
def no_live_sessions():
    yield
    unwind(0)
    write_profiles()


BAD_CALLS = [
    ("scope name 42", lambda: proton.scope(42)),
    ("scope name ''", lambda: proton.scope("")),
    ("scope name None", lambda: proton.scope(None)),
    ("metrics 5", lambda: proton.scope("s", 5)),
    ("metrics [1]", lambda: proton.enter_scope("s", metrics=[1])),
    ("metric 'n' has value 'x'", lambda: proton.scope("s", {"n": "x"})),
    ("metric name 1", lambda: proton.scope("s", {1: 2})),
    ("metric name 'time' is reserved", lambda: proton.scope("s", {"time": 1})),
    ("scope name 3.5", lambda: proton.cpu_timed_scope(3.5)),
    ("state name 42", lambda: proton.state(42)),
    ("state name 0", lambda: proton.enter_state(0)),
    ("scope name b'x'", lambda: proton.enter_scope(b"x")),
    ("scope name 42", lambda: proton.exit_scope(42)),
    ("exit_scope('nope')", lambda: proton.exit_scope("nope")),
    ("name=123", lambda: proton.start(123)),
    ("name=b'p'", lambda: proton.start(b"p")),
    ("context='stack'", lambda: proton.start("x", context="stack")),
    ("data='graph'", lambda: proton.start("x", data="graph")),
    ("backend='roctracer'", lambda: proton.start("x", backend="roctracer")),
    ("mode='pc'", lambda: proton.start("x", mode="pc")),
    ("mode=3", lambda: proton.start("x", mode=3)),
    ("hook='nvtx'", lambda: proton.start("x", hook="nvtx")),
    ("hook=5", lambda: proton.start("x", hook=5)),
    ("name=7", lambda: proton.profile(name=7)),
    ("decorates a function", lambda: proton.profile("train")),
    ("session='x'", lambda: proton.activate("x")),
    ("session=True", lambda: proton.deactivate(True)),
    ("Session has not been initialized: 999999", lambda: proton.activate(999_999)),
    ("session=1.5", lambda: proton.finalize(1.5)),
    ("output_format='csv'", lambda: proton.finalize(output_format="csv")),
]


@pytest.mark.parametrize("words,call", BAD_CALLS, ids=[w for w, _ in BAD_CALLS])
def test_a_bad_call_raises_one_line_and_the_good_calls_around_it_are_kept(
        words, call, profile_path):
    name, read = profile_path
    proton.start(name)
    with proton.scope("before", {"n": 1}):
        pass
    with pytest.raises(proton.ProtonError) as err:
        with proton.scope("around"):
            call()
    message = str(err.value)
    assert words in message and "\n" not in message, message
    with proton.scope("after", {"n": 2}):
        pass
    proton.finalize()
    root, _ = read()
    assert sorted(c["frame"]["name"] for c in root["children"]) == ["after", "around", "before"]
    assert find(root, "before")["metrics"]["n"] == 1 and find(root, "after")["metrics"]["n"] == 2
    assert find(root, "around")["children"] == []  # the bad call left nothing behind


def test_finalize_twice_by_id_is_a_no_op_and_activating_a_finalized_session_says_so(tmp_path):
    sid = proton.start(str(tmp_path / "p"))
    proton.finalize()
    proton.finalize()
    proton.finalize(sid)
    with pytest.raises(proton.SessionError, match=f"session {sid} was finalized"):
        proton.activate(sid)


def test_ten_thousand_nested_scopes_are_written(profile_path):
    name, _ = profile_path
    proton.start(name)
    for i in range(10_000):
        proton.enter_scope(f"level{i % 10}", metrics={"n": 1})
    unwind(0)
    proton.finalize()
    node, depth = _parse_deep(name + ".hatchet")[0], 0
    while node["children"]:
        (node,) = node["children"]
        depth += 1
    assert depth == 10_000 and node["frame"]["name"] == "level9" and node["metrics"]["n"] == 1


def _parse_deep(path: str):
    """json.load of a deep file, in a thread with room for the parser's recursion."""
    import threading

    out, old = [], sys.getrecursionlimit()
    size = threading.stack_size(256 << 20)
    try:
        sys.setrecursionlimit(100_000)
        thread = threading.Thread(target=lambda: out.append(load(path)))
        thread.start()
        thread.join()
    finally:
        threading.stack_size(size)
        sys.setrecursionlimit(old)
    return out[0]


def test_non_finite_metrics_are_written_as_null_in_valid_json(profile_path):
    name, _ = profile_path
    proton.start(name)
    with proton.scope("s", {"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "ok": 2.5}):
        pass
    proton.finalize()

    def refuse(constant):
        raise AssertionError(f"{constant} in the file: not JSON")

    with open(name + ".hatchet") as f:
        root, _ = json.load(f, parse_constant=refuse)
    metrics = find(root, "s")["metrics"]
    metrics.pop("cpu_time (ns)", None)  # without a GPU scopes carry their time
    metrics.pop("cpu_count", None)  # ... and their entries
    assert metrics == {"nan": None, "inf": None, "ninf": None, "ok": 2.5}
    assert root["metrics"] == {"nan": 0, "inf": 0, "ninf": 0, "ok": 0}


NAMES = ["naïve ✓ 世界", 'quote " and \\ backslash', "new\nline\ttab", "%s {0} $x", "(.*)[",
         "x" * 5000]


def test_names_of_any_text_round_trip(profile_path):
    name, read = profile_path
    proton.start(name)
    for text in NAMES:
        with proton.scope(text, {"n": 1}):
            pass
    proton.finalize()
    root, _ = read()
    assert sorted(c["frame"]["name"] for c in root["children"]) == sorted(NAMES)


def test_a_trace_without_a_gpu_records_each_scope_as_a_host_span(tmp_path, monkeypatch):
    """In Triton 3.6's layout (tests/test_trace_lanes.py: Triton 3.9's)."""
    if profiler.gpu:
        pytest.skip("a GPU session's trace holds kernels (tests/test_gpu.py)")
    monkeypatch.setattr("proton.triton_version.after_3_6", lambda: False)
    proton.start(str(tmp_path / "tr"), data="trace")
    with proton.scope("outer"):
        with proton.scope("inner"):
            pass
    proton.finalize()
    events = load(tmp_path / "tr.chrome_trace")["traceEvents"]
    spans = {e["name"]: e for e in events if e.get("cat") == "scope"}
    assert set(spans) == {"outer", "inner"}
    assert spans["inner"]["args"]["call_stack"] == ["ROOT", "outer", "inner"]
    outer, inner = spans["outer"], spans["inner"]
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    assert {e["pid"] for e in spans.values()} == {"host"}


# -- the `proton` command, in real processes ------------------------------------------------


def _proton(*args, cwd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proton", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, **kw)


@pytest.mark.parametrize("exit_code,expected", [(0, 2), (3, 3)])
def test_proton_exits_non_zero_when_the_profile_cannot_be_written_where_asked(
        tmp_path, exit_code, expected):
    (tmp_path / "blocker").write_text("")  # a file where the output folder should be
    (tmp_path / "s.py").write_text("import sys, proton\nwith proton.scope('a', {'n': 1}): pass\n"
                                   f"sys.exit({exit_code})\n")
    run = _proton("-n", "blocker/p", "s.py", cwd=tmp_path)
    assert run.returncode == expected, run.stderr
    (line,) = [ln for ln in run.stderr.splitlines() if "could not write" in ln]
    assert str(tmp_path / "blocker" / "p.hatchet") in line
    fallback = line.split("; wrote ")[1].split(" instead")[0]
    assert find(load(fallback)[0], "a")["metrics"]["n"] == 1


def test_a_script_recursing_600_scopes_deep_gets_its_profile(tmp_path):
    (tmp_path / "s.py").write_text("import proton\ndef f(n):\n    with proton.scope('f'):\n"
                                   "        if n:\n            f(n - 1)\nf(600)\n")
    run = _proton("-n", "deep", "s.py", cwd=tmp_path)
    assert run.returncode == 0 and "could not" not in run.stderr, run.stderr
    node, depth = _parse_deep(str(tmp_path / "deep.hatchet"))[0], 0
    while node["children"]:
        (node,) = node["children"]
        depth += 1
    assert depth == 601


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM])
def test_a_hang_up_or_quit_writes_the_profile_and_exits_128_plus_the_signal(tmp_path, signum):
    (tmp_path / "s.py").write_text(
        "import time, proton\nwith proton.scope('before', {'n': 1}): pass\n"
        "with proton.scope('waiting'):\n    print('ready', flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "proton", "-n", "sig", "s.py"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    assert "ready" in proc.stdout.readline()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert f"{signal.Signals(signum).name}; writing the profile" in err
    root, _ = load(tmp_path / "sig.hatchet")
    assert [c["frame"]["name"] for c in root["children"]] == ["before", "waiting"]


def _ignore_hang_up() -> None:
    default_signals()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_a_job_started_ignoring_hang_ups_keeps_running_through_one(tmp_path):
    """`nohup proton train.py &`: closing the terminal must not end (or write) the job."""
    (tmp_path / "s.py").write_text(
        "import sys, proton\nwith proton.scope('waiting'):\n    print('ready', flush=True)\n"
        "    sys.stdin.readline()\nwith proton.scope('after', {'n': 1}): pass\n")
    proc = subprocess.Popen([sys.executable, "-m", "proton", "-n", "sig", "s.py"], cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_ignore_hang_up)
    assert "ready" in proc.stdout.readline()
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0, err
    assert "SIGHUP" not in err
    assert find(load(tmp_path / "sig.hatchet")[0], "after")["metrics"]["n"] == 1


def test_a_profile_that_cannot_be_written_at_exit_is_reported_once(tmp_path):
    (tmp_path / "blocker").write_text("")
    run = subprocess.run([sys.executable, "-c", "import proton\nproton.start('blocker/p')\n"
                          "with proton.scope('a'): pass\n"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0
    assert run.stderr.count("could not write") == 1, run.stderr


def test_a_part_proton_off_does_not_know_fails_start_in_one_line(tmp_path, monkeypatch):
    """PROTON_OFF names what the collector leaves out; a typo must not silently record
    everything (nor nothing): start() refuses it, naming the parts, and starts no session."""
    monkeypatch.setenv("PROTON_OFF", "copies,wait")
    with pytest.raises(proton.SessionError) as err:
        proton.start(str(tmp_path / "p"))
    assert str(err.value) == ("PROTON_OFF='copies,wait': wait is not a part; choose from "
                              "copies, waits, idle")
    assert not profiler.sessions
    monkeypatch.setenv("PROTON_OFF", " copies , idle,")  # spaces and a trailing comma are fine
    sid = proton.start(str(tmp_path / "q"))
    proton.finalize(sid)
    assert (tmp_path / "q.hatchet").exists()
