"""The capture service against another local user, a token-less TCP peer, hostile requests and
a quick capturer (issue 35, items 4-6 and 10-12), with real processes."""
from __future__ import annotations

import json
import os
import re
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from test_service import (JOB, TOKEN, Job, capture, job_state, jobs, steps_in,  # noqa: F401
                          tcp_job)

from proton.service import protocol

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to act as a second user (uid 65534)")


def as_nobody(*command: str) -> None:
    subprocess.run(command, user=NOBODY, group=NOBODY, extra_groups=[], check=True, timeout=60)


@pytest.fixture
def shared_tmp(monkeypatch):
    """A /tmp of the test's own (mode 1777, as /tmp is) for the jobs, their capturers and this
    process, with no PROTON_SOCKET_DIR: endpoints go where users' jobs put them."""
    tmp = tempfile.mkdtemp(prefix="proton-test-tmp-")
    os.chmod(tmp, 0o1777)
    monkeypatch.setenv("TMPDIR", tmp)
    monkeypatch.setattr(tempfile, "tempdir", tmp)
    monkeypatch.delenv("PROTON_SOCKET_DIR")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield tmp
    shutil.rmtree(tmp)


def request(address: str | None, message: dict | bytes, path: str | None = None) -> dict:
    """One request over TCP (`address`) or the Unix socket `path`, and its reply."""
    family = socket.AF_INET if address else socket.AF_UNIX
    with socket.socket(family) as sock, sock.makefile("rb") as reader:
        sock.settimeout(20)
        if address:
            host, port = address.rsplit(":", 1)
            sock.connect((host, int(port)))
        else:
            sock.connect(path)
        sock.sendall(message if isinstance(message, bytes) else protocol.encode(message))
        return json.loads(reader.readline())


# 4. Squatting the socket folder --------------------------------------------------------------

@needs_root
@pytest.mark.parametrize("runtime", ["a private XDG_RUNTIME_DIR", "none"])
def test_a_socket_folder_another_user_made_is_not_used_and_captures_still_find_the_job(
        tmp_path, shared_tmp, runtime, monkeypatch, jobs):
    squatted = os.path.join(shared_tmp, f"proton-{os.getuid()}")
    as_nobody("mkdir", "-m", "755", squatted)
    if runtime != "none":
        xdg = tmp_path / "run"
        xdg.mkdir(mode=0o700)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    jobs.append(job := Job(tmp_path, "--listen"))
    where = os.path.dirname(job.socket)
    if runtime != "none":
        assert where == str(xdg / "proton")
    else:
        assert re.fullmatch(re.escape(squatted) + r"-\w+", where), where
    info = os.stat(where)
    assert info.st_uid == os.getuid() and info.st_mode & 0o777 == 0o700
    assert os.listdir(squatted) == []
    ps = subprocess.run([sys.executable, "-m", "proton", "ps"], capture_output=True, text=True,
                        timeout=60)
    assert re.search(rf"^{job.pid}\s", ps.stdout, re.M), ps.stdout
    done = capture(tmp_path, str(job.pid), "--duration", "0.3", "-n", "found")
    assert done.returncode == 0, done.stderr
    assert steps_in(tmp_path / "found.hatchet") > 5
    _, err = job.stop()
    assert [line for line in err.splitlines() if squatted + " " in line] == [
        f"proton: {squatted} is not a private folder of this user (owner uid {NOBODY}, mode "
        f"755): listening in {where} instead (`proton ps` and `proton capture` look there too)"]


@pytest.mark.parametrize("owner", ["mine, open to all", "another user's"])
def test_a_job_that_cannot_listen_runs_and_records_saying_why_in_one_line(tmp_path, owner,
                                                                        monkeypatch):
    folder = tmp_path / "endpoints"
    folder.mkdir()
    if owner == "another user's":
        if os.geteuid() != 0:
            pytest.skip("needs root to give the folder to a second user (uid 65534)")
        os.chown(folder, NOBODY, NOBODY)
        os.chmod(folder, 0o755)
    else:
        os.chmod(folder, 0o777)
    monkeypatch.setenv("PROTON_SOCKET_DIR", str(folder))
    info = os.stat(folder)
    why = (f"PROTON_SOCKET_DIR: {folder} is not a private folder of this user (owner uid "
           f"{info.st_uid}, mode {info.st_mode & 0o777:o}); make it 0700 or name another")
    (tmp_path / "job.py").write_text(JOB)
    whole = subprocess.run([sys.executable, "-m", "proton", "-n", "whole", "job.py", "5"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0 and whole.stdout == "ready\ndone\n", whole.stderr
    assert steps_in(tmp_path / "whole.hatchet") == 5
    assert [line for line in whole.stderr.splitlines() if "GPU" not in line] == [
        f"proton: cannot listen for captures ({why}); recording the run as usual",
        f"proton: wrote {tmp_path / 'whole.hatchet'}"]
    plain = subprocess.run([sys.executable, "job.py", "5"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, env={**os.environ, "PROTON_LISTEN": "1"})
    assert plain.returncode == 0 and plain.stdout == "ready\ndone\n", plain.stderr
    assert plain.stderr.splitlines() == [
        f"proton: PROTON_LISTEN=1: cannot listen for captures: {why}"]
    assert os.listdir(folder) == []


# 5. Exhausting the TCP endpoint ---------------------------------------------------------------

def answers(socks: list[socket.socket], timeout: float) -> list[bytes | None]:
    """What each socket received until the peer closed it; None for those still open at the
    timeout."""
    got: dict[socket.socket, bytes] = {s: b"" for s in socks}
    done: set[socket.socket] = set()
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while len(done) < len(socks) and time.monotonic() < deadline:
            for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                try:
                    chunk = key.fileobj.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                got[key.fileobj] += chunk
                if not chunk:
                    done.add(key.fileobj)
                    selector.unregister(key.fileobj)
    return [got[s] if s in done else None for s in socks]


def test_idle_tcp_connections_get_one_line_each_and_cannot_wear_the_endpoint_out(tmp_path,
                                                                                  jobs):
    """200 connections that never send the token, to a job allowed 128 descriptors: each is
    refused at once (past the cap) or dropped within seconds, and a capture then works."""
    job, address = tcp_job(tmp_path, jobs, 0, TOKEN)
    _, hard = resource.prlimit(job.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(job.pid, resource.RLIMIT_NOFILE, (128, hard))
    host, port = address.rsplit(":", 1)
    socks = []
    try:
        for _ in range(200):
            socks.append(sock := socket.socket())
            sock.setblocking(False)
            sock.connect_ex((host, int(port)))
        said = answers(socks, timeout=30)
    finally:
        for sock in socks:
            sock.close()
    assert None not in said, f"{said.count(None)} of 200 connections were never answered"
    errors = [json.loads(line)["error"] for line in said]
    dropped = errors.count("no request with the token within 1 s")
    pushed = errors.count("pushed out by newer connections before it sent the token; send it "
                          "at once")
    assert dropped + pushed == 200 and dropped > 0, set(errors)
    assert all(line.count(b"\n") == 1 for line in said)
    done = capture(tmp_path, "--connect", address, "--duration", "0.3",
                   "-n", "after", token=TOKEN)
    assert done.returncode == 0, done.stderr
    assert steps_in(tmp_path / "after.rank0.hatchet") > 5


def test_an_endpoint_out_of_descriptors_serves_again_once_it_has_some(tmp_path, jobs):
    jobs.append(job := Job(tmp_path, "--listen"))
    while request(None, {"verb": "status"}, job.socket)["steps"] < 2:
        time.sleep(0.05)  # its script has imported what it uses: it opens no more files
    held = {int(fd) for fd in os.listdir(f"/proc/{job.pid}/fd")}
    lowest_free = min(set(range(len(held) + 1)) - held)
    soft, hard = resource.prlimit(job.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(job.pid, resource.RLIMIT_NOFILE, (lowest_free, hard))  # accept(): EMFILE
    clients = [socket.socket(socket.AF_UNIX) for _ in range(3)]
    try:
        for sock in clients:
            sock.connect(job.socket)  # into the listening backlog
            sock.sendall(protocol.encode({"verb": "status"}))
        time.sleep(0.5)  # the endpoint meets EMFILE meanwhile
        resource.prlimit(job.pid, resource.RLIMIT_NOFILE, (soft, hard))
        for sock in clients:
            sock.settimeout(20)
            with sock.makefile("rb") as reader:
                assert json.loads(reader.readline())["state"] == "idle"
    finally:
        for sock in clients:
            sock.close()
    _, err = job.stop()
    assert "proton: capture endpoint: cannot accept a connection (Too many open files); " \
           "retrying\n" in err


# 6. Where a capture writes ------------------------------------------------------------------

def test_a_capture_name_outside_the_capturers_folder_is_refused(tmp_path, jobs):
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    (here / "out").symlink_to(tmp_path)
    jobs.append(job := Job(tmp_path, "--listen"))
    for name in ("../../evil1", "out/evil2", str(tmp_path / "evil3")):
        done = capture(here, str(job.pid), "--duration", "0.2", "-n", name)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines()[-1].startswith(f"Error: -n {name}: ")
        assert f"is outside this folder ({here}); a capture writes here or below" in done.stderr
    for name in ("evil4", f"{here}/../../evil5"):  # a request no capture client would send
        reply = request(None, {"verb": "start", "name": name, "duration": 0.1}, job.socket)
        assert not reply["ok"] and "a capture names an absolute path without '..'" in \
            reply["error"]
    assert not list(tmp_path.rglob("*.hatchet"))
    done = capture(here, str(job.pid), "--duration", "0.2", "-n", "sub/fine")
    assert done.returncode == 0, done.stderr
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("*.hatchet")] == [
        (here / "sub" / "fine.hatchet").relative_to(tmp_path)]


def test_a_tcp_capture_writes_only_a_file_name_in_the_jobs_capture_folder(tmp_path, jobs):
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    job, address = tcp_job(tmp_path, jobs, 0, TOKEN, env={"PROTON_CAPTURE_DIR": str(outbox)})
    for name in (str(tmp_path / "abs"), "../up", "sub/x", ".."):
        reply = request(address, {"verb": "start", "name": name, "duration": 0.1,
                                  "token": TOKEN})
        assert not reply["ok"] and reply["error"] == (
            f"name {name!r}: over TCP a capture names a file, which the job writes in "
            f"{outbox} (PROTON_CAPTURE_DIR)")
    assert not list(tmp_path.rglob("*.hatchet"))
    done = capture(tmp_path, "--connect", address, "--duration", "0.2",
                   "-n", "fine", token=TOKEN)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{address}: wrote {outbox / 'fine.rank0.hatchet'}\n"
    assert list(tmp_path.rglob("*.hatchet")) == [outbox / "fine.rank0.hatchet"]


def test_a_capture_never_replaces_a_file_the_job_did_not_write(tmp_path, jobs):
    jobs.append(job := Job(tmp_path, "--listen"))
    theirs = tmp_path / "taken.hatchet"
    theirs.write_text("not the job's\n")
    done = capture(tmp_path, str(job.pid), "--duration", "0.2", "-n", "taken")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (f"pid {job.pid}: {theirs} exists and this job did "
                                            "not write it; give another name or remove it")
    for _ in range(2):  # its own earlier capture it replaces: capture as often as you like
        assert capture(tmp_path, str(job.pid), "--duration", "0.2", "-n", "mine"
                       ).returncode == 0
    late = subprocess.Popen([sys.executable, "-m", "proton", "capture", str(job.pid),
                             "--duration", "2", "-n", "late"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while job_state(job.pid) != "capturing":
        assert time.monotonic() < deadline, "the capture never started"
        time.sleep(0.05)
    placed = tmp_path / "late.hatchet"
    placed.write_text("placed meanwhile\n")
    out, err = late.communicate(timeout=120)
    assert late.returncode == 0, err
    beside = tmp_path / f"late.pid{job.pid}.hatchet"
    assert out == f"pid {job.pid}: wrote {beside}\n"
    assert f"the job said: {placed} exists and this job did not write it; wrote {beside} " \
           "instead" in err
    assert theirs.read_text() == "not the job's\n" and placed.read_text() == "placed meanwhile\n"
    assert steps_in(beside) > 5


# 10. Bad requests ------------------------------------------------------------------------------

DEEP = b'{"verb": "status", "x": ' + b"[" * 30000 + b"]" * 30000 + b"}\n"


def test_bad_requests_each_get_their_own_error_and_no_capturer_hears_of_them(tmp_path, jobs):
    job, address = tcp_job(tmp_path, jobs, 0, TOKEN)
    running = subprocess.Popen([sys.executable, "-m", "proton", "capture", "--connect", address,
                                "--duration", "2", "-n", "legit"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PROTON_TOKEN": TOKEN})
    deadline = time.monotonic() + 30
    while job_state(job.pid) != "capturing":
        assert time.monotonic() < deadline, "the capture never started"
        time.sleep(0.05)
    deep = "not a JSON line (nested too deeply)"
    assert request(address, DEEP) == {"ok": False, "error": deep}
    assert request(None, DEEP, job.socket) == {"ok": False, "error": deep}
    surrogate = json.dumps({"verb": "status", "token": "\ud800"}).encode() + b"\n"
    assert request(address, surrogate) == {"ok": False, "error": "bad or missing token"}
    out, err = running.communicate(timeout=120)
    assert running.returncode == 0, err
    assert out == f"{address}: wrote {tmp_path / 'legit.rank0.hatchet'}\n"
    assert [line for line in err.splitlines() if "the job said" in line
            and "no NVIDIA GPU found" not in line] == []
    _, job_err = job.stop()
    said = [line for line in job_err.splitlines() if "capture endpoint" in line]
    # a bad token is the one thing the job logs (a guess at it); the rest is the sender's alone
    assert "Traceback" not in job_err and len(said) == 1, job_err
    assert "bad or missing token from 127.0.0.1 (1 so far)" in said[0], said


# 11. Back-to-back captures ----------------------------------------------------------------------

BUSY = """
import proton
print("ready", flush=True)
while True:  # Python all the time: the endpoint's threads wait for the GIL, in any order
    proton.step()
    with proton.scope("step", {"n": 1}):
        sum(range(10_000))
"""


def test_twenty_back_to_back_captures_all_start(tmp_path, jobs):
    """Each capture starts the moment the one before has replied (its connection is made
    beforehand, as a scripted capturer's may be): the job is free again before it replies."""
    jobs.append(job := Job(tmp_path, "--listen", script=BUSY))
    conns = [socket.socket(socket.AF_UNIX) for _ in range(20)]
    try:
        conns[0].connect(job.socket)
        for i, sock in enumerate(conns):
            sock.settimeout(30)
            with sock.makefile("rb") as reader:
                sock.sendall(protocol.encode({"verb": "start", "duration": 0.05,
                                              "name": str(tmp_path / f"c{i}")}))
                started = json.loads(reader.readline())
                assert started["ok"], (i, started)
                if i + 1 < len(conns):
                    conns[i + 1].connect(job.socket)
                sock.sendall(protocol.encode({"verb": "stop"}))
                done = json.loads(reader.readline())
            sock.close()
            assert done["ok"] and done["paths"] == [str(tmp_path / f"c{i}.hatchet")], (i, done)
    finally:
        for sock in conns:
            sock.close()


# 12. A --steps capture whose job ends ----------------------------------------------------------

def test_a_steps_capture_whose_job_ends_names_the_file_it_writes(tmp_path, jobs):
    jobs.append(job := Job(tmp_path, "--listen", steps=100))  # ~1 s left
    done = capture(tmp_path, str(job.pid), "--steps", "10000", "-n", "ended")
    assert done.returncode == 1
    path = tmp_path / "ended.hatchet"
    assert done.stderr.splitlines()[-1] == (f"pid {job.pid}: it ended during the capture and "
                                            f"wrote what it had ({path})")
    job.proc.communicate(timeout=60)
    assert steps_in(path) > 5
