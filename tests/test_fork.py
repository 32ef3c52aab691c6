"""Processes forked after a session started (os.fork, multiprocessing's "fork"), in real
processes: the parent's profile is whole and only its own, a child writes nothing of its
parent's and exits cleanly, and a child's own session gets its own file. DataLoader workers
on a GPU: tests/test_gpu_fork.py."""
from __future__ import annotations

import subprocess
import sys

from conftest import find, load
from proton.format import job_of


def run(tmp_path, script: str, *command: str) -> subprocess.CompletedProcess:
    """`script` run as a file in `tmp_path`, by python or under `command` (the proton CLI)."""
    (tmp_path / "job.py").write_text(script)
    return subprocess.run([sys.executable, *(command or ()), "job.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def names(node: dict) -> list[str]:
    return sorted(c["frame"]["name"] for c in node["children"])


def profiles(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("*.hatchet"))


def assert_quiet(stderr: str) -> None:
    """No child crashed and none wrote a profile (its parent's or its own) at exit."""
    assert "Traceback" not in stderr and "at exit" not in stderr, stderr


OS_FORK = """
import os, sys, proton
proton.start("run")
with proton.scope("parent", {"n": 1}):
    pid = os.fork()
    if pid == 0:
        with proton.scope("child", {"n": 1}):
            pass
        sys.exit(0)  # the child's atexit handlers run here
    _, status = os.waitpid(pid, 0)
with proton.scope("after", {"n": 1}):
    pass
proton.finalize()
print(os.getpid(), os.waitstatus_to_exitcode(status))
"""


def test_an_os_fork_child_writes_nothing_and_leaves_the_parents_profile_whole(tmp_path):
    done = run(tmp_path, OS_FORK)
    assert done.returncode == 0, done.stderr
    parent, child_status = map(int, done.stdout.split())
    assert child_status == 0
    assert_quiet(done.stderr)
    assert profiles(tmp_path) == ["run.hatchet"]
    root = load(tmp_path / "run.hatchet")[0]
    assert job_of(root)["pid"] == parent
    assert names(root) == ["after", "parent"]  # nothing of the child's
    assert find(root, "parent")["metrics"]["n"] == 1 and not find(root, "parent")["children"]


MP_OWN_SESSION = """
import multiprocessing as mp, os, proton

def work():
    proton.start("run")  # the parent's name, in the child
    with proton.scope("worker", {"n": 1}):
        pass
    proton.finalize()

if __name__ == "__main__":
    proton.start("run")
    with proton.scope("parent", {"n": 1}):
        child = mp.get_context("fork").Process(target=work)
        child.start()
        child.join()
    proton.finalize()
    print(os.getpid(), child.pid, child.exitcode)
"""


def test_a_forked_child_starting_the_parents_session_name_writes_its_own_pid_file(tmp_path):
    done = run(tmp_path, MP_OWN_SESSION)
    assert done.returncode == 0, done.stderr
    parent, child, status = map(int, done.stdout.split())
    assert status == 0
    assert_quiet(done.stderr)
    assert profiles(tmp_path) == sorted(["run.hatchet", f"run.pid{child}.hatchet"])
    mine, its = load(tmp_path / "run.hatchet")[0], load(tmp_path / f"run.pid{child}.hatchet")[0]
    assert (job_of(mine)["pid"], names(mine)) == (parent, ["parent"])
    assert job_of(its)["pid"] == child  # forked inside the parent's scope, and still in it:
    assert names(its) == ["parent"] and find(its, "parent", "worker")["metrics"]["n"] == 1
    assert (f"a forked process: session 'run' writes {tmp_path / f'run.pid{child}.hatchet'}"
            in done.stderr)


POOL = """
import multiprocessing as mp, proton

def square(x):
    with proton.scope("square", {"n": 1}):
        return x * x

if __name__ == "__main__":
    with proton.scope("main", {"n": 1}):
        pool = mp.get_context("fork").Pool(2)
        print(sum(pool.map(square, range(10))))
        pool.terminate()  # SIGTERM to each worker
        pool.join()
"""


def test_a_fork_pool_under_the_proton_command_ends_quietly_with_one_profile(tmp_path):
    done = run(tmp_path, POOL, "-m", "proton", "-n", "run")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "285\n"
    assert_quiet(done.stderr)
    assert "KeyboardInterrupt" not in done.stderr and "SIGTERM" not in done.stderr, done.stderr
    assert [line for line in done.stderr.splitlines() if "wrote" in line] == [
        f"proton: wrote {tmp_path / 'run.hatchet'}"]
    root = load(tmp_path / "run.hatchet")[0]
    assert names(root) == ["main"] and find(root, "main")["metrics"]["n"] == 1


STILL_HANDLED = """
import os, signal, time
from proton import cli
# as `proton run` has it while the script runs
cli._replaced[signal.SIGTERM] = signal.getsignal(signal.SIGTERM)
signal.signal(signal.SIGTERM, cli._on_signal)
cli._profiled_pid = os.getpid()
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, cli._on_signal)  # as if the at-fork reset had not taken
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(os.WTERMSIG(status) if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}")
"""


def test_a_forked_child_that_kept_the_commands_handler_ends_on_sigterm_as_without_it(tmp_path):
    """Once in a full suite a fork Pool's worker kept proton's handler (its at-fork reset had
    not taken) and outlived pool.terminate(), hanging pool.join(). The handler itself now
    ends a child as the signal's own handler would, not as the parent's Ctrl-C (before: the
    child raised KeyboardInterrupt and died of SIGINT after its traceback)."""
    done = run(tmp_path, STILL_HANDLED)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "15", done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
