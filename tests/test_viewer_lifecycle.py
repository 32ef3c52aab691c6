"""How a view ends: the command leaves the process with os._exit once its exit handlers ran
(cli._end), and a view run in-process (a notebook, these tests) leaves Python's collector as
it found it."""
import gc
import os
import subprocess
import sys

from click.testing import CliRunner

from proton.viewer.cli import viewer

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PROFILE = os.path.join(DATA, "example_gpu.hatchet")


def test_an_in_process_view_leaves_the_collector_on_and_nothing_frozen():
    assert gc.isenabled()
    result = CliRunner().invoke(viewer, ["-m", "time/ms", PROFILE])
    assert result.exit_code == 0, result.output
    assert "ROOT" in result.output
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


CODE = """\
import atexit, sys
atexit.register(lambda: print("exit handler ran", file=sys.stderr))
from proton.viewer.cli import main
main()
"""


def test_the_command_writes_its_whole_tree_runs_exit_handlers_and_keeps_its_status():
    done = subprocess.run([sys.executable, "-c", CODE, "-m", "time/ms", PROFILE],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "exit handler ran" in done.stderr
    assert done.stdout.endswith("\n")
    rows = [line for line in done.stdout.splitlines() if line.strip()]
    in_process = CliRunner().invoke(viewer, ["-m", "time/ms", PROFILE])
    assert rows == [line for line in in_process.stdout.splitlines() if line.strip()]


def test_the_command_exits_2_on_a_file_that_is_no_profile(tmp_path):
    bad = tmp_path / "bad.hatchet"
    bad.write_text("{not json")
    done = subprocess.run([sys.executable, "-c", CODE, str(bad)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and "exit handler ran" in done.stderr
