"""PROTON_* settings and the command's own options checked when profiling starts (issue 59):
the `proton` command refuses a bad one in one line (exit 2) before the script runs and writes
nothing; `import proton` warns once and uses the default, so a bad value never stops the
user's job (the job's merge with bad settings: tests/test_job_merge.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = 'import proton\nprint("ran", flush=True)\nwith proton.scope("a", {"n": 1}):\n    pass\n'
STEPS = 'import proton\nproton.step()\nwith proton.scope("a", {"n": 1}):\n    proton.step()\nprint("ran")\n'


def environment(**given: str) -> dict:
    """This environment without any PROTON_ setting of the caller's, plus `given`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PROTON_")}, **given}


def run(tmp_path, args: list[str], **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "main.py").write_text(SCRIPT)
    return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=environment(**env))


@pytest.mark.parametrize("name,value,takes", [
    ("PROTON_RANK_FILES", "jobs", "one of both, job, ranks"),
    ("PROTON_MERGE_TIMEOUT", "0", "a number of seconds over 0"),
    ("PROTON_MERGE_TIMEOUT", "abc", "a number of seconds over 0"),
    ("PROTON_MERGE_TIMEOUT", "nan", "a number of seconds over 0"),
    ("PROTON_CAPTURE_GRACE", "60s", "a number of seconds from 0 to 86400"),
    ("PROTON_CAPTURE_PHASE_TIMEOUT", "abc", "a number of seconds over 0"),
    ("PROTON_MAIN_THREAD_TIMEOUT", "inf", "a number of seconds over 0"),
    ("PROTON_GRAPH_METRIC_WORDS", "1e6", "a whole number of 64-bit words"),
])
def test_a_bad_setting_refuses_the_command_in_one_line_before_the_script_runs(
        tmp_path, name, value, takes):
    (tmp_path / "prof.hatchet").write_text("the last run's profile")
    done = run(tmp_path, ["-m", "proton", "-n", "prof", "main.py"], **{name: value})
    assert done.returncode == 2 and "ran" not in done.stdout, done.stderr
    assert done.stderr == f"Error: {name}={value!r} is not {takes}" + \
        done.stderr.split(takes, 1)[1] and done.stderr.count("\n") == 1, done.stderr
    assert f"e.g. {name}=" in done.stderr
    assert (tmp_path / "prof.hatchet").read_text() == "the last run's profile"


@pytest.mark.parametrize("listening", [False, True])
def test_a_bad_capture_setting_under_import_proton_warns_once_and_the_script_runs(
        tmp_path, listening):
    """Issue 59 item 6: PROTON_CAPTURE_GRACE=60s killed every script at its first step()."""
    (tmp_path / "steps.py").write_text(STEPS)
    done = subprocess.run([sys.executable, "steps.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=environment(
                              PROTON_CAPTURE_GRACE="60s", PROTON_CAPTURE_PHASE_TIMEOUT="abc",
                              **({"PROTON_LISTEN": "1"} if listening else {})))
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr
    lines = done.stderr.splitlines()
    for name, value, default in (("PROTON_CAPTURE_GRACE", "60s", "60"),
                                 ("PROTON_CAPTURE_PHASE_TIMEOUT", "abc", "20")):
        said = [line for line in lines if name in line]
        assert len(said) == 1 and said[0].startswith(f"proton: {name}={value!r} is not a ") \
            and said[0].endswith(f"; using the default, {default}"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_setting_made_bad_while_the_job_runs_gives_its_default_and_one_warning(
        monkeypatch, capsys):
    from proton import settings

    monkeypatch.setattr(settings, "_warned", set())
    monkeypatch.setenv("PROTON_MERGE_TIMEOUT", "abc")
    assert settings.value("PROTON_MERGE_TIMEOUT") == 30.0
    assert settings.value("PROTON_MERGE_TIMEOUT") == 30.0
    monkeypatch.setenv("PROTON_MERGE_TIMEOUT", " 2.5 ")
    assert settings.value("PROTON_MERGE_TIMEOUT") == 2.5
    assert capsys.readouterr().err == ("proton: PROTON_MERGE_TIMEOUT='abc' is not a number of "
                                       "seconds over 0 and at most 86400; using the default, 30\n")


@pytest.mark.parametrize("args,env", [
    (["--listen-tcp", "70000"], {}),
    (["--listen-tcp", "7000"], {"PROTON_TOKEN": "abc"}),
    (["--listen-tcp", "7000", "--token-file", "missing"], {}),
])
def test_a_run_refused_because_it_cannot_listen_writes_nothing(tmp_path, args, env):
    """Issue 59 item 3: the refused run wrote an empty profile over the last one at exit."""
    (tmp_path / "prof.hatchet").write_text("the last run's profile")
    done = run(tmp_path, ["-m", "proton", "-n", "prof", *args, "main.py"], **env)
    assert done.returncode == 2 and "ran" not in done.stdout, done.stderr
    assert "Error: cannot listen for captures: " in done.stderr
    assert "wrote" not in done.stderr, done.stderr
    assert (tmp_path / "prof.hatchet").read_text() == "the last run's profile"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["main.py", "prof.hatchet"]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "0.5", "86401"])
def test_flush_every_takes_a_finite_number_of_seconds_from_1_to_a_day(tmp_path, value):
    """Issue 59 item 24: nan spun a core and never snapshot; inf never snapshot."""
    done = run(tmp_path, ["-m", "proton", "--flush-every", value, "main.py"])
    assert done.returncode == 2 and "ran" not in done.stdout, done.stderr
    assert done.stderr.splitlines()[-1] == (f"Error: Invalid value for '--flush-every': "
                                            f"{value!r} is not a number of seconds from 1 to "
                                            "86400")
    assert not (tmp_path / "proton.hatchet").exists()


@pytest.mark.parametrize("option,value,bound", [
    ("--duration", "nan", "over 0"), ("--duration", "inf", "over 0"), ("--duration", "0", "over 0"),
    ("--timeout", "nan", "from 1"), ("--timeout", "inf", "from 1"), ("--timeout", "0.5", "from 1")])
def test_capture_waits_take_finite_seconds(option, value, bound):
    """A capture of nan seconds never ended (no comparison with nan is true); inf neither."""
    from click.testing import CliRunner

    from proton.service.commands import capture

    done = CliRunner().invoke(capture, [option, value, "--steps" if option == "--timeout"
                                        else "--all", *(["1"] if option == "--timeout" else [])])
    assert done.exit_code == 2, done.output
    assert done.output.splitlines()[-1] == (f"Error: Invalid value for '{option}': {value!r} is "
                                            f"not a number of seconds {bound} to 86400")
