"""The profiler service with real processes (no GPU: scopes with CPU time): jobs that listen,
captures by duration and by steps, --all, snapshots, a SIGKILLed job's last snapshot, TCP with
a token, bad requests, permissions."""
from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import find, load

from proton.errors import ProtonError
from proton.service import protocol
from proton.service.endpoint import uid_allowed

JOB = """
import sys, time, proton
steps = int(sys.argv[1])
print("ready", flush=True)
for i in range(steps):
    if "--no-steps" not in sys.argv:
        proton.step()
    with proton.scope("step", {"n": 1}):
        time.sleep(0.01)
print("done", flush=True)
"""


def listening_socket(pid: int) -> str | None:
    """The job's socket, in whichever of this user's endpoint folders it listens."""
    for where in protocol.search_folders():
        if os.path.exists(path := os.path.join(where, f"{pid}.sock")):
            return path
    return None


class Job:
    """A script running under `proton`, its output read after it ends."""

    def __init__(self, folder, *proton_args: str, steps: int = 100_000, env=None,
                 script_args=(), script: str = JOB) -> None:
        (folder / "job.py").write_text(script)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "proton", *proton_args, "job.py", str(steps), *script_args],
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})
        self.pid = self.proc.pid
        try:
            assert self.proc.stdout.readline() == "ready\n"
            deadline = time.monotonic() + 10
            while not (path := listening_socket(self.pid)):
                assert time.monotonic() < deadline, "the job never listened"
                time.sleep(0.01)
            self.socket = path
        except BaseException:
            self.proc.kill()
            self.proc.communicate()
            raise

    def stop(self) -> tuple[str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        return out, err


@pytest.fixture
def jobs():
    started: list[Job] = []
    yield started
    for job in started:
        if job.proc.poll() is None:
            job.proc.kill()
        job.proc.communicate()


def capture(folder, *args: str, timeout: int = 120,
            token: str | None = None) -> subprocess.CompletedProcess:
    """`proton capture ARGS` in `folder`; a TCP `token` goes in PROTON_TOKEN, never argv."""
    env = {**os.environ, **({"PROTON_TOKEN": token} if token else {})}
    return subprocess.run([sys.executable, "-m", "proton", "capture", *args], cwd=folder,
                          capture_output=True, text=True, timeout=timeout, env=env)


def steps_in(path) -> int:
    return find(load(path)[0], "step")["metrics"]["n"]


def test_a_listening_job_records_nothing_until_captured_and_each_capture_is_whole(
        tmp_path, jobs):
    job = Job(tmp_path, "--listen")
    jobs.append(job)
    time.sleep(0.3)
    assert not list(tmp_path.glob("*.hatchet"))
    first = capture(tmp_path, str(job.pid), "--duration", "0.5", "-n", "first")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"pid {job.pid}: wrote {tmp_path / 'first.hatchet'}"
    second = capture(tmp_path, str(job.pid), "--duration", "1", "-n", "second")
    assert second.returncode == 0, second.stderr
    a, b = steps_in(tmp_path / "first.hatchet"), steps_in(tmp_path / "second.hatchet")
    assert 10 < a < 60 and 40 < b < 110 and b > a  # ~10 ms a step: 0.5 s and 1 s of them
    out, err = job.stop()
    assert out == "done\n" or out == ""  # SIGTERM ends it as Ctrl-C would
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == ["first.hatchet",
                                                                  "second.hatchet"]
    said = [line.removeprefix("proton: ") for line in err.splitlines()
            if "no NVIDIA GPU found" in line]  # said as the first capture started
    for line in said:  # what the job said during a capture, the capturer is told too
        assert f"pid {job.pid}: the job said: {line}" in first.stderr


def test_steps_capture_exactly_n_iterations(tmp_path, jobs):
    job = Job(tmp_path, "--listen")
    jobs.append(job)
    for n in (3, 7):
        done = capture(tmp_path, str(job.pid), "--steps", str(n), "-n", f"s{n}")
        assert done.returncode == 0, done.stderr
        assert steps_in(tmp_path / f"s{n}.hatchet") == n


def test_steps_in_a_script_that_never_marks_them_say_so(tmp_path, jobs):
    job = Job(tmp_path, "--listen", script_args=["--no-steps"])
    jobs.append(job)
    done = capture(tmp_path, str(job.pid), "--steps", "3", "--timeout", "1")
    assert done.returncode == 1
    assert "no proton.step() came" in done.stderr and "--duration" in done.stderr
    assert not list(tmp_path.glob("*.hatchet"))
    assert capture(tmp_path, str(job.pid), "--duration", "0.3").returncode == 0  # unharmed


def test_all_captures_every_listening_job_at_once(tmp_path, jobs):
    for _ in range(3):
        jobs.append(Job(tmp_path, "--listen"))
    ps = subprocess.run([sys.executable, "-m", "proton", "ps"], capture_output=True, text=True)
    for job in jobs:
        assert re.search(rf"^{job.pid}\s+idle\s+\d+\s+", ps.stdout, re.M), ps.stdout
    done = capture(tmp_path, "--all", "--duration", "0.5")
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in tmp_path.glob("*.hatchet"))
    assert names == sorted(f"capture.pid{job.pid}.hatchet" for job in jobs)
    skew = re.search(r"started within ([\d.]+) ms of each other \(3 jobs\)", done.stderr)
    assert skew and float(skew[1]) < 500, done.stderr


def test_all_over_a_jobs_ranks_gives_rank_files_the_viewer_merges(tmp_path, jobs):
    for rank in range(3):
        jobs.append(Job(tmp_path, "--listen", env={"RANK": str(rank), "WORLD_SIZE": "3",
                                                    "LOCAL_RANK": str(rank)}))
    done = capture(tmp_path, "--all", "--steps", "4", "-n", "job")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == [
        "job.rank0.hatchet", "job.rank1.hatchet", "job.rank2.hatchet"]
    view = subprocess.run([sys.executable, "-m", "proton.viewer.cli", "-m", "n",
                           "--output", "json", str(tmp_path)], capture_output=True, text=True)
    rows = {" / ".join(r["path"]): r for r in json.loads(view.stdout)}
    assert rows["ROOT / step"]["n"] == 12 and rows["ROOT / step"]["n max/mean"] == 1


def test_a_capture_while_the_run_records_is_refused_and_a_snapshot_is_written(tmp_path, jobs):
    job = Job(tmp_path, "-n", "run")
    jobs.append(job)
    time.sleep(0.3)
    refused = capture(tmp_path, str(job.pid), "--duration", "0.2")
    assert refused.returncode == 1 and "a session is already recording" in refused.stderr
    snap = capture(tmp_path, "--snapshot", str(job.pid))
    assert snap.returncode == 0, snap.stderr
    assert snap.stdout.strip() == f"pid {job.pid}: wrote {tmp_path / 'run.hatchet'}"
    early = steps_in(tmp_path / "run.hatchet")
    assert early > 5
    time.sleep(0.3)
    job.stop()
    assert steps_in(tmp_path / "run.hatchet") > early  # the run's own file at its end


def test_a_sigkilled_job_leaves_its_last_periodic_snapshot(tmp_path, jobs):
    job = Job(tmp_path, "-n", "run", "--flush-every", "1")
    jobs.append(job)
    time.sleep(2.5)
    job.proc.kill()
    job.proc.communicate()
    assert steps_in(tmp_path / "run.hatchet") > 50  # a second's worth at least
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_client_that_goes_away_mid_capture_still_gets_its_file_written(tmp_path, jobs):
    job = Job(tmp_path, "--listen")
    jobs.append(job)
    with socket.socket(socket.AF_UNIX) as sock, sock.makefile() as reader:
        sock.connect(protocol.socket_path(job.pid))
        sock.sendall(protocol.encode({"verb": "start", "name": str(tmp_path / "gone")}))
        assert json.loads(reader.readline())["ok"]
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while not (tmp_path / "gone.hatchet").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert steps_in(tmp_path / "gone.hatchet") > 5
    assert capture(tmp_path, str(job.pid), "--duration", "0.2").returncode == 0
    out, err = job.stop()
    assert "the capture's client went away; wrote" in err


def test_a_job_that_ends_during_the_capture_is_named_and_writes_what_it_has(tmp_path, jobs):
    # ~3 s left: long enough that a loaded machine (the suite on every core) starts the capture
    # before the job ends (with 0.5 s it sometimes ended first: "no endpoint", status 2)
    job = Job(tmp_path, "--listen", steps=300)
    jobs.append(job)
    begun = time.monotonic()
    done = capture(tmp_path, str(job.pid), "--duration", "30", "-n", "ended")
    # the capture ends with the job (~3 s), not at the 30 s asked for
    assert done.returncode == 1 and time.monotonic() - begun < 20
    assert f"pid {job.pid}: it ended during the capture" in done.stderr
    assert str(tmp_path / "ended.hatchet") in done.stderr
    job.proc.communicate()
    assert steps_in(tmp_path / "ended.hatchet") > 5


TOKEN = "9f2c41d07be35a86c1e0f4d2b7a95c3e"
WRONG = "0b6e1f3a92d84c57e0a1b3c5d7f9e2a4"
"""Tokens of 128 bits (a weaker one is refused)."""


def tcp_job(folder, jobs, rank: int, token: str, env=None) -> tuple[Job, str]:
    job = Job(folder, "--listen", "--listen-tcp", "127.0.0.1:0",
              env={"RANK": str(rank), "WORLD_SIZE": "2", "PROTON_TOKEN": token, **(env or {})})
    jobs.append(job)
    line = ""
    while "listening for captures on tcp" not in line:
        line = job.proc.stderr.readline()
    return job, re.search(r"tcp (\S+:\d+)", line)[1]


def test_two_hosts_stand_in_tcp_endpoints_with_a_token(tmp_path, jobs):
    """Two local processes stand in for two hosts: each rank listens on TCP; one capture
    reaches both with the token, and the viewer merges their files."""
    addresses = [tcp_job(tmp_path, jobs, rank, TOKEN)[1] for rank in (0, 1)]
    bad = capture(tmp_path, "--connect", addresses[0], "--duration", "0.2", token=WRONG)
    assert bad.returncode == 1 and "bad or missing token" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "proton", "capture", "--connect",
                              addresses[0]], capture_output=True, text=True,
                             env={k: v for k, v in os.environ.items() if k != "PROTON_TOKEN"})
    assert missing.returncode == 2 and "needs the job's token" in missing.stderr
    done = capture(tmp_path, "--connect", addresses[0], "--connect", addresses[1],
                   "--duration", "0.5", "-n", "multi", token=TOKEN)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == ["multi.rank0.hatchet",
                                                                  "multi.rank1.hatchet"]


def test_a_tcp_endpoint_without_a_token_is_refused(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    done = subprocess.run([sys.executable, "-m", "proton", "--listen-tcp", "0", "job.py", "1"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "PROTON_TOKEN"})
    assert done.returncode == 2 and "needs a token" in done.stderr


BAD_START = {"name": [1, [], {}, True, 1.5], "context": [1, "bogus", None], "data": ["x", 2],
             "mode": [3, "nonsense"], "hook": [[], "tritonx"], "steps": [-3, 0, "x", True, 1.5]}
"""Start options that are always refused: a valid start would begin a capture."""


def random_request(rng: random.Random) -> bytes:
    kind = rng.randrange(7)
    if kind == 0:
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        return noise.replace(b"\n", b" ") + b"\n"  # one line, one reply
    if kind == 1:
        return b"x" * (protocol.MAX_MESSAGE + rng.randrange(1, 5000)) + b"\n"
    if kind == 2:
        return json.dumps(rng.choice([[], 1, "s", None, 2.5])).encode() + b"\n"
    if kind == 3:
        return protocol.encode({"verb": rng.choice(["go", "", None, 7, "STATUS", "kill"])})
    if kind == 4:
        key = rng.choice(sorted(BAD_START))
        return protocol.encode({"verb": "start", key: rng.choice(BAD_START[key])})
    if kind == 5:
        return protocol.encode({"verb": "stop"})
    return protocol.encode({"verb": "status"})


def test_fuzzed_requests_get_errors_and_the_job_runs_on_unharmed(tmp_path, jobs):
    job = Job(tmp_path, "--listen", steps=400)
    jobs.append(job)
    rng = random.Random(7)
    answered = 0
    path = protocol.socket_path(job.pid)
    for connection in range(40):  # 40 connections, 2,000 requests
        with socket.socket(socket.AF_UNIX) as sock, sock.makefile("rb") as reader:
            sock.connect(path)
            sock.settimeout(10)
            for _ in range(50):
                sock.sendall(random_request(rng))
                reply = json.loads(reader.readline())
                assert set(reply) >= {"ok"} and (reply["ok"] or reply["error"])
                if not reply["ok"]:
                    assert "\n" not in reply["error"] and len(reply["error"]) < 300
                else:
                    assert reply.get("state") == "idle"  # only status succeeds
                answered += 1
            if connection % 2:  # half end on a truncated request
                sock.sendall(b'{"verb": "start", "na')
                sock.shutdown(socket.SHUT_WR)
                assert "truncated" in json.loads(reader.readline())["error"]
    assert answered == 2000
    assert capture(tmp_path, str(job.pid), "--steps", "2", "-n", "after").returncode == 0
    assert steps_in(tmp_path / "after.hatchet") == 2
    out, err = job.proc.communicate(timeout=60)
    assert out == "done\n" and job.proc.returncode == 0  # its output unchanged
    assert "Traceback" not in err and "capture endpoint:" not in err
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == ["after.hatchet"]


def test_the_endpoint_is_private():
    folder, moved = protocol.private_folder()
    assert moved is None and stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert uid_allowed(1000, own=1000) and uid_allowed(0, own=1000)
    assert not uid_allowed(1001, own=1000)


def test_a_job_socket_is_mode_0600(tmp_path, jobs):
    job = Job(tmp_path, "--listen")
    jobs.append(job)
    assert stat.S_IMODE(os.stat(protocol.socket_path(job.pid)).st_mode) == 0o600


def test_an_endpoint_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "shared"
    monkeypatch.setenv("PROTON_SOCKET_DIR", str(bad))
    bad.mkdir(mode=0o777)
    os.chmod(bad, 0o777)
    with pytest.raises(ProtonError, match="not a private folder"):
        protocol.private_folder()


def test_capture_errors_are_one_line(tmp_path):
    none = capture(tmp_path, "999999999", "--duration", "1")
    assert none.returncode == 2 and "no process 999999999" in none.stderr
    me = capture(tmp_path, str(os.getpid()), "--duration", "1")
    assert me.returncode == 2 and "is not listening for captures" in me.stderr
    both = capture(tmp_path, "1", "--duration", "1", "--steps", "2")
    assert both.returncode == 2 and "one of --duration, --steps and --snapshot" in both.stderr


def test_a_duration_capture_whose_client_falls_silent_is_stopped_by_the_job(tmp_path, jobs,
                                                                          monkeypatch):
    """A client that asked for 0.2 s and never says stop nor closes (a vanished host): the
    job ends the capture itself after the duration and its grace."""
    job = Job(tmp_path, "--listen", env={"PROTON_CAPTURE_GRACE": "0.5"})
    jobs.append(job)
    with socket.socket(socket.AF_UNIX) as sock, sock.makefile() as reader:
        sock.connect(protocol.socket_path(job.pid))
        sock.sendall(protocol.encode({"verb": "start", "name": str(tmp_path / "silent"),
                                      "duration": 0.2}))
        assert json.loads(reader.readline())["ok"]
        done = json.loads(reader.readline())  # no stop sent: the job's own limit ends it
    assert done["ok"] and done["paths"] == [str(tmp_path / "silent.hatchet")]
    assert steps_in(tmp_path / "silent.hatchet") > 5


def test_a_sampling_capture_without_a_gpu_says_so_and_writes_the_scopes(tmp_path, jobs):
    job = Job(tmp_path, "--listen")
    jobs.append(job)
    done = capture(tmp_path, str(job.pid), "--duration", "0.3", "-m", "pcsampling", "-n", "pc")
    assert done.returncode == 0, done.stderr
    assert "the job said: no NVIDIA GPU found; recording scopes with CPU time" in done.stderr
    assert steps_in(tmp_path / "pc.hatchet") > 0


NESTED = """
import time, proton
print("ready", flush=True)
while True:
    with proton.scope("step"):
        for _ in range(10):
            with proton.scope("work"):
                time.sleep(0.02)
"""


def test_a_duration_capture_counts_the_part_of_scopes_open_at_its_edges(tmp_path, jobs):
    """A 0.5 s window inside 200 ms steps: the steps open as it begins and ends count their
    part inside it, so the step covers its work and both are about the window."""
    job = Job(tmp_path, "--listen", script=NESTED)
    jobs.append(job)
    began = time.perf_counter()
    done = capture(tmp_path, str(job.pid), "--duration", "0.5", "-n", "edges")
    capture_ms = (time.perf_counter() - began) * 1e3  # the window lies inside the capture
    assert done.returncode == 0, done.stderr
    root = load(tmp_path / "edges.hatchet")[0]
    step = find(root, "step")["metrics"]["cpu_time (ns)"] / 1e6
    work = find(root, "step", "work")["metrics"]["cpu_time (ns)"] / 1e6
    # the job records from before the client starts its 0.5 s until the stop reaches it;
    # work is the window less the moments between sleeps (well under 10% here)
    assert 450 <= work <= step <= capture_ms, (work, step, capture_ms)


FORKING = """
import os, sys, time, proton
print("ready", flush=True)
while not os.path.exists("fork"):
    time.sleep(0.01)
child = os.fork()
if child == 0:  # steps in the child: the capture its parent armed is not the child's
    for _ in range(5):
        proton.step()
        with proton.scope("child", {"n": 1}):
            pass
    sys.exit(0)
_, status = os.waitpid(child, 0)
print("child", child, os.waitstatus_to_exitcode(status), flush=True)
while True:
    proton.step()
    with proton.scope("step", {"n": 1}):
        time.sleep(0.01)
"""


def job_state(pid: int) -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(protocol.socket_path(pid))
        sock.sendall(protocol.encode({"verb": "status"}))
        return json.loads(sock.makefile().readline())["state"]


def test_a_child_forked_while_a_steps_capture_waits_neither_starts_nor_writes_it(tmp_path, jobs):
    job = Job(tmp_path, "--listen", script=FORKING)
    jobs.append(job)
    waiting = subprocess.Popen([sys.executable, "-m", "proton", "capture", str(job.pid),
                                "--steps", "3", "-n", "steps"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not job_state(job.pid).startswith("waiting for proton.step()"):
        assert time.monotonic() < deadline, "the capture was never armed"
        time.sleep(0.05)
    (tmp_path / "fork").touch()
    _, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    root = load(tmp_path / "steps.hatchet")[0]
    assert [c["frame"]["name"] for c in root["children"]] == ["step"] and steps_in(
        tmp_path / "steps.hatchet") == 3
    out, err = job.stop()
    assert re.search(r"^child \d+ 0$", out, re.M), out
    assert "Traceback" not in err and "proton: wrote" not in err, err  # the child wrote nothing
    assert [p.name for p in tmp_path.glob("*.hatchet")] == ["steps.hatchet"]


def users_own_socket(pid: int) -> str:
    """Where the job would listen without PROTON_SOCKET_DIR: the user's real folder."""
    return os.path.join(tempfile.gettempdir(), f"proton-{os.getuid()}", f"{pid}.sock")


def test_test_jobs_listen_in_the_sessions_private_folder_not_the_users(
        tmp_path, jobs, private_endpoint_folder, monkeypatch):
    jobs.append(mine := Job(tmp_path, "--listen"))
    monkeypatch.setenv("PROTON_SOCKET_DIR", str(tmp_path / "other"))
    jobs.append(elsewhere := Job(tmp_path, "--listen"))
    monkeypatch.setenv("PROTON_SOCKET_DIR", private_endpoint_folder)
    assert os.path.exists(os.path.join(private_endpoint_folder, f"{mine.pid}.sock"))
    assert not os.path.exists(users_own_socket(mine.pid))
    assert not os.path.exists(users_own_socket(elsewhere.pid))
    ps = subprocess.run([sys.executable, "-m", "proton", "ps"], capture_output=True, text=True)
    listed = re.findall(r"^(\d+)\s", ps.stdout, re.M)
    assert listed == [str(mine.pid)], ps.stdout  # even as root: one folder, this session's


IMPORTS = """
import os, sys, threading
import proton.viewer, proton.data, proton
print(threading.active_count(), flush=True)
sys.stdin.readline()
{entry}
print(threading.active_count(), flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("entry", ["proton.step()", "with proton.scope('train'): pass"])
def test_proton_listen_opens_nothing_at_import_and_listens_from_the_first_step_or_scope(
        tmp_path, entry):
    (tmp_path / "s.py").write_text(IMPORTS.format(entry=entry))
    with subprocess.Popen([sys.executable, "s.py"], cwd=tmp_path, text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          env={**os.environ, "PROTON_LISTEN": "1"}) as job:
        assert job.stdout.readline() == "1\n"  # no endpoint thread
        assert not os.path.exists(protocol.socket_path(job.pid))
        job.stdin.write("\n")
        job.stdin.flush()
        assert int(job.stdout.readline()) > 1
        assert os.path.exists(protocol.socket_path(job.pid))
        job.stdin.write("\n")
        job.stdin.flush()
        assert job.wait(timeout=60) == 0
    assert not os.path.exists(protocol.socket_path(job.pid))  # removed as it exits


def test_an_idle_listening_job_ended_by_sigterm_says_nothing_was_recorded(tmp_path, jobs):
    job = Job(tmp_path, "--listen")
    jobs.append(job)
    out, err = job.stop()
    assert job.proc.returncode == 128 + signal.SIGTERM
    assert err == "proton: SIGTERM; nothing was recorded\n"
    assert not list(tmp_path.glob("*.hatchet"))


def test_a_listening_job_that_served_captures_says_what_they_wrote_when_it_ends(tmp_path, jobs):
    job = Job(tmp_path, "--listen")
    jobs.append(job)
    for n in range(4):
        done = capture(tmp_path, str(job.pid), "--steps", "1", "-n", f"c{n}")
        assert done.returncode == 0, done.stderr
        assert "capturing 1 step of 1 job..." in done.stderr
    out, err = job.stop()
    assert job.proc.returncode == 128 + signal.SIGTERM
    last = err.splitlines()[-1]
    assert last == (f"proton: SIGTERM; no capture running (its captures wrote 4 files: ..., "
                    f"{tmp_path / 'c1.hatchet'}, {tmp_path / 'c2.hatchet'}, "
                    f"{tmp_path / 'c3.hatchet'})"), err


FAKE_JOB = """
import json, os, socket, sys, threading, time
how = sys.argv[1]
path = os.path.join(os.environ["PROTON_SOCKET_DIR"], f"{os.getpid()}.sock")
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen(16)
print("ready", flush=True)

def answer(conn):
    try:
        reply(conn)
    except OSError:  # ps hung up
        pass

def reply(conn):
    conn.recv(65536)
    if how == "ok only":  # a reply with none of the fields a status has
        conn.sendall(b'{"ok": true}\\n')
    elif how == "lies":  # fields of the wrong types
        conn.sendall(json.dumps({"ok": True, "pid": os.getpid(), "state": "idle",
                                 "sessions": [7], "steps": "many"}).encode() + b"\\n")
    elif how == "escapes":  # a status whose text would clear the terminal and retitle it
        conn.sendall(json.dumps({"ok": True, "pid": os.getpid(), "state": "idle\\x1b[2J",
                                 "command": "x\\x1b]0;owned\\x07\\ny", "steps": 3}).encode()
                     + b"\\n")
    elif how == "another pid":
        conn.sendall(json.dumps({"ok": True, "pid": 1, "state": "idle"}).encode() + b"\\n")
    elif how == "trickle":  # a byte every 0.1 s, never a whole line
        for _ in range(1000):
            conn.sendall(b" ")
            time.sleep(0.1)
    elif how == "flood":  # megabytes without a newline
        conn.sendall(b"x" * (4 << 20))
    time.sleep(120)  # "silent" and the others: hold the connection open, answer nothing

while True:
    conn, _ = server.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"""
"""A process listening where a job would (its own pid's socket) that answers `how` badly."""

BROKEN = ["ok only", "lies", "escapes", "another pid", "silent", "trickle", "flood"]


def test_ps_lists_every_job_within_seconds_whatever_broken_jobs_beside_it_answer(tmp_path,
                                                                                  jobs):
    jobs.append(good := Job(tmp_path, "--listen"))
    began = time.monotonic()
    assert subprocess.run([sys.executable, "-m", "proton", "ps"], capture_output=True,
                          timeout=60).returncode == 0
    alone = time.monotonic() - began  # Python's start and the good job's row
    (tmp_path / "fake.py").write_text(FAKE_JOB)
    fakes = {}
    try:
        for how in BROKEN:
            fake = subprocess.Popen([sys.executable, "fake.py", how], cwd=tmp_path, text=True,
                                    stdout=subprocess.PIPE)
            fakes[fake.pid] = (how, fake)
            assert fake.stdout.readline() == "ready\n"
        began = time.monotonic()
        ps = subprocess.run([sys.executable, "-m", "proton", "ps"], capture_output=True,
                            text=True, timeout=60)
        took = time.monotonic() - began
    finally:
        for _, fake in fakes.values():
            fake.kill()
            fake.communicate()
    assert ps.returncode == 0 and ps.stderr == "", ps.stderr
    assert took - alone < 3, (took, alone)  # every row at once, 1.5 s each at most
    rows = {int(line.split()[0]): line for line in ps.stdout.splitlines()[1:]}
    assert re.match(rf"{good.pid}\s+idle\s+\d+\s+", rows[good.pid]), ps.stdout
    said = {how: rows[pid].split(None, 1)[1].strip() for pid, (how, _) in fakes.items()}
    assert re.fullmatch(r"idle\\x1b\[2J +3 +x\\x1b\]0;owned\\x07\\ny", said.pop("escapes"))
    assert all(line.startswith("unreachable: ") for line in said.values()), said
    assert said["ok only"] == "unreachable: bad answer: state none is not str"
    assert said["lies"] == "unreachable: bad answer: sessions is not a list of paths"
    assert "\x1b" not in ps.stdout
    assert said["another pid"].startswith("unreachable: bad answer: it answers as pid 1,")
    assert said["silent"] == said["trickle"] == "unreachable: no answer in 1.5 s"
    assert said["flood"] == "unreachable: bad answer: message over 65536 bytes"
