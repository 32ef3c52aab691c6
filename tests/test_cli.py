"""The `proton` command: scripts, pytest, exit codes, and the profile always written."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from conftest import default_signals, find, load

from proton.cli import proton as proton_cmd
from proton.format import job_of

SCRIPT = """
import sys, time, proton
print("argv", sys.argv[1:], __name__)
assert proton.start("ignored") is not None
with proton.scope("work", {"n": 1}):
    arg = sys.argv[1]
    if arg == "raise":
        raise RuntimeError("boom")
    if arg == "sleep":
        print("ready", flush=True)
        time.sleep(60)
    sys.exit(int(arg))
"""


def run_proton(tmp_path, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proton", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "main.py"
    path.write_text(SCRIPT)
    return str(path)


@pytest.mark.parametrize("arg,status", [("0", 0), ("3", 3), ("raise", 1)])
def test_script_status_is_protons_and_profile_is_written(tmp_path, script, arg, status):
    run = run_proton(tmp_path, "-n", "cli", script, arg, "--flag")
    assert run.returncode == status, run.stderr
    assert f"argv ['{arg}', '--flag'] __main__" in run.stdout
    assert find(load(tmp_path / "cli.hatchet")[0], "work")["metrics"]["n"] == 1
    assert not (tmp_path / "ignored.hatchet").exists()  # in-script start() joined our session
    if arg == "raise":
        assert "RuntimeError: boom" in run.stderr


def test_the_profile_names_its_script_and_the_report_shows_sources_beside_it(tmp_path):
    """Issue 47: a report of a profile written one folder below its script found no sources
    without --source-root; the profile now names its script (under the command and under
    plain python), and the report looks beside it."""
    (tmp_path / "runs").mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace('assert proton.start("ignored") is not None',
                                     'proton.start("runs/plain")'))
    under = run_proton(tmp_path, "-n", "runs/cmd", str(script), "0")
    plain = subprocess.run([sys.executable, str(script), "0"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert under.returncode == 0 and plain.returncode == 0, under.stderr + plain.stderr
    for name in ("cmd", "plain"):
        assert job_of(load(tmp_path / "runs" / f"{name}.hatchet")[0])["script"] == str(script)


def test_ctrl_c_still_writes_the_profile(tmp_path, script):
    proc = subprocess.Popen([sys.executable, "-m", "proton", script, "sleep"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    assert "ready" in proc.stdout.readline() + proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    work = find(load(tmp_path / "proton.hatchet")[0], "work")
    assert work["metrics"]["n"] == 1


def test_sigterm_still_writes_the_profile(tmp_path, script):
    proc = subprocess.Popen([sys.executable, "-m", "proton", "-n", "term", script, "sleep"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    assert "ready" in proc.stdout.readline() + proc.stdout.readline()
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert (tmp_path / "term.hatchet").exists()


def test_pytest_form(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import proton\ndef test_a():\n    with proton.scope('in_test', {'n': 1}): pass\n")
    run = run_proton(tmp_path, "-n", "tests", "pytest", "-q", "-p", "no:cacheprovider",
                     str(tmp_path / "test_x.py"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    assert find(load(tmp_path / "tests.hatchet")[0], "in_test")["metrics"]["n"] == 1


def test_missing_script_is_a_usage_error():
    result = CliRunner().invoke(proton_cmd, ["nope.py"])
    assert result.exit_code == 2
    assert "no such script 'nope.py'" in result.output


@pytest.mark.parametrize("option,said", [
    ("--bogus", "No such option '--bogus'."),
    ("--nmae", "No such option '--nmae'. (Did you mean one of: '--mode', '--name'?)"),
])
def test_an_unknown_option_before_the_script_is_named_as_an_option(tmp_path, script, option,
                                                                    said):
    result = CliRunner().invoke(proton_cmd, [option, script])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == f"Error: {said}"
    assert "no such script" not in result.output


def test_bad_choice_lists_the_choices():
    result = CliRunner().invoke(proton_cmd, ["-c", "stack", "x.py"])
    assert result.exit_code == 2
    assert "'shadow'" in result.output and "'python'" in result.output


def test_help_has_examples():
    result = CliRunner().invoke(proton_cmd, ["--help"])
    assert result.exit_code == 0
    assert "proton main.py --lr 3e-4" in result.output and "pytest" in result.output


@pytest.mark.parametrize("how", [["run"], ["--"], ["run", "--"]])
@pytest.mark.parametrize("command", ["ps", "capture"])
def test_a_script_named_like_a_subcommand_is_profiled_with_run_or_double_dash(tmp_path, how,
                                                                                command):
    (tmp_path / command).write_text(SCRIPT)
    run = run_proton(tmp_path, *how, command, "0")
    assert run.returncode == 0, run.stderr
    assert "argv ['0'] __main__" in run.stdout
    assert find(load(tmp_path / "proton.hatchet")[0], "work")["metrics"]["n"] == 1


def test_help_lists_the_subcommands_with_examples():
    result = CliRunner().invoke(proton_cmd, ["--help"])
    assert result.exit_code == 0
    commands = result.output.split("Commands:\n")[1].split("\n\n")[0]
    assert [line.split()[0] for line in commands.splitlines()] == ["capture", "ps", "run"]
    assert "proton run ps" in result.output and "proton -- ps" in result.output


def test_a_subcommand_word_still_runs_the_subcommand():
    result = CliRunner().invoke(proton_cmd, ["ps", "--help"])
    assert result.exit_code == 0
    assert result.output.startswith("Usage: proton ps ")


def test_sigterm_stops_a_pytest_run_with_status_143(tmp_path):
    (tmp_path / "test_slow.py").write_text(
        "import time, proton\n"
        "def test_a():\n    with proton.scope('a', {'n': 1}):\n"
        "        print('ready', flush=True)\n        time.sleep(60)\n"
        "def test_b():\n    open('b_ran', 'w').close()\n")
    proc = subprocess.Popen([sys.executable, "-m", "proton", "-n", "pt", "pytest", "-s", "-q",
                             "-p", "no:cacheprovider", str(tmp_path / "test_slow.py")],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    for _ in range(20):
        if "ready" in proc.stdout.readline():
            break
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert not (tmp_path / "b_ran").exists()
    assert find(load(tmp_path / "pt.hatchet")[0], "a")["metrics"]["n"] == 1


def test_triton_hook_without_triton_is_a_usage_error_and_writes_nothing(tmp_path, script):
    hide_triton = ("import sys; sys.modules['triton'] = None; "  # as if Triton were not installed
                   f"sys.argv = ['proton', '-k', 'triton', {script!r}, '0']; "
                   "from proton.cli import main; main()")
    run = subprocess.run([sys.executable, "-c", hide_triton], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "hook='triton' needs Triton" in run.stderr
    assert list(tmp_path.glob("*.hatchet")) == []


def test_a_crashing_script_shows_only_its_own_frames_as_python_would(tmp_path):
    (tmp_path / "crash.py").write_text("def f():\n    raise ValueError('boom')\nf()\n")
    run = run_proton(tmp_path, "crash.py")
    plain = subprocess.run([sys.executable, "crash.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert run.returncode == plain.returncode == 1
    shown = run.stderr[run.stderr.index("Traceback"):run.stderr.index("ValueError: boom")]
    assert shown == plain.stderr[:plain.stderr.index("ValueError: boom")]
    assert "proton/cli.py" not in run.stderr and "runpy" not in run.stderr


def test_a_script_that_does_not_compile_shows_the_syntax_error_alone(tmp_path):
    (tmp_path / "bad.py").write_text("def f(:\n")
    run = run_proton(tmp_path, "bad.py")
    assert run.returncode == 1
    assert "Traceback" not in run.stderr and "SyntaxError" in run.stderr
    assert 'bad.py", line 1' in run.stderr


def test_a_script_run_without_the_command_says_where_finalize_wrote(tmp_path):
    (tmp_path / "mlp.py").write_text("import proton\nproton.start('mlp')\n"
                                     "with proton.scope('s'): pass\nproton.finalize()\n")
    run = subprocess.run([sys.executable, "mlp.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"proton: wrote {tmp_path / 'mlp.hatchet'}\n" in run.stderr
    assert (tmp_path / "mlp.hatchet").exists()


PHASED = """
import sys, time, proton

def work(scope="work"):
    with proton.scope(scope, {"n": 1}):
        time.sleep(0.01)

@proton.profile(name="deco")
def decorated():
    work()

how = sys.argv[1]
if how == "decorator":
    for _ in range(10):
        decorated()
        work("between")  # outside the session: not recorded
elif how == "start":
    for _ in range(5):
        sid = proton.start("deco")
        work()
        proton.deactivate(sid)
        work("between")
elif how == "finalize":  # a script that writes its profile in two parts
    for _ in range(2):
        proton.start("deco")
        work()
        proton.finalize()
        work("between")
proton.finalize()
"""
"""Each way a script records `work` (10 ms in a scope) in and out of its own session."""


@pytest.mark.parametrize("how,calls", [("decorator", 10), ("start", 5), ("finalize", 2)])
def test_the_scripts_own_start_and_deactivate_lose_nothing_under_the_command(tmp_path, how,
                                                                             calls):
    """`proton -n deco script.py` keeps every call the script records, as `python script.py`
    does; the script's deactivate() or finalize() pauses the command's session, its next
    start() resumes it, and the command writes it when the script ends."""
    (tmp_path / "phased.py").write_text(PHASED)
    plain = subprocess.run([sys.executable, "phased.py", how], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    alone = load(tmp_path / "deco.hatchet")[0]
    (tmp_path / "deco.hatchet").unlink()
    run = run_proton(tmp_path, "-n", "deco", "phased.py", how)
    assert run.returncode == 0, run.stderr
    root = load(tmp_path / "deco.hatchet")[0]
    work = find(root, "work")["metrics"]
    assert work["n"] == calls and work["cpu_time (ns)"] >= calls * 10e6, work
    between = [c for c in root["children"] if c["frame"]["name"] == "between"]
    assert all("n" not in c["metrics"] for c in between), between  # paused in between
    if how != "finalize":  # python alone rewrites the file at each finalize: the last part
        assert find(alone, "work")["metrics"]["n"] == calls
