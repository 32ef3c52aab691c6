"""The TCP endpoint's token and its gate (issue 46, items 11-14): no token on a command line,
no weak token, guesses slowed and logged, silent connections that cannot starve a real client,
a --steps capture whose client fell silent, a port out of range."""
from __future__ import annotations

import base64
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

from test_capture_safety import NOBODY, as_nobody, needs_root, request, shared_tmp  # noqa: F401
from test_service import (JOB, TOKEN, WRONG, Job, capture, jobs, steps_in,  # noqa: F401
                          tcp_job)

from proton.service import gate, protocol, tokens


def proton(folder, *args: str, env=None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proton", *args], cwd=folder, text=True,
                          capture_output=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_a_token_on_the_command_line_is_refused_with_where_it_goes_instead(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    for args in (["--listen-tcp", "0", "--token", TOKEN, "job.py", "1"],
                 ["capture", "--connect", "127.0.0.1:1", "--token", TOKEN]):
        done = proton(tmp_path, *args)
        assert done.returncode == 2, done.stderr
        assert "readable by every user" in done.stderr and "PROTON_TOKEN" in done.stderr
        assert "--token-file" in done.stderr and "Traceback" not in done.stderr


def test_a_weak_token_is_refused_by_the_job_and_by_the_capturer(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    for token in ("1234", "s3cret", "a" * 40):
        job = proton(tmp_path, "--listen-tcp", "0", "job.py", "1", env={"PROTON_TOKEN": token})
        assert job.returncode == 2 and "too weak" in job.stderr, job.stderr
        assert "done" not in job.stdout  # the script never ran half-protected
        client = proton(tmp_path, "capture", "--connect", "127.0.0.1:1",
                        env={"PROTON_TOKEN": token})
        assert client.returncode == 2 and "too weak" in client.stderr, client.stderr


def test_repeated_and_evenly_stepping_tokens_are_rated_by_what_they_hold_and_refused(tmp_path):
    """Issue 59, item 19: the length-times-alphabet estimate rated these 128 bits and more."""
    weak = {"passwordpasswordpassword1": 56, "abc" * 43: 27, "abcdefghijklmnopqrstuvwxyz0123": 30,
            "0123456789" * 4: 21, "ab" * 40 + "c": 25}
    for token, about in weak.items():
        assert round(tokens.bits(token)) == about, (token, tokens.bits(token))
        (tmp_path / "job.py").write_text(JOB)
        job = proton(tmp_path, "--listen-tcp", "0", "job.py", "1", env={"PROTON_TOKEN": token})
        assert job.returncode == 2 and (
            f"Error: cannot listen for captures: the token from PROTON_TOKEN is too weak (about "
            f"{about} bits; 128 needed): e.g. PROTON_TOKEN=$(openssl rand -hex 16)\n"
            in job.stderr), job.stderr
        if token == "passwordpasswordpassword1":
            break  # the command's line once; the rest by the rating itself


def test_generated_tokens_all_pass_the_strength_check():
    rng = random.Random(59)
    made = [rng.getrandbits(128).to_bytes(16, "big") for _ in range(10_000)]
    for raw in made:  # openssl rand -hex 16, -base64 16, python's token_urlsafe(16)
        for token in (raw.hex(), raw.hex().upper(), base64.b64encode(raw).decode(),
                      base64.urlsafe_b64encode(raw).decode().rstrip("=")):
            assert tokens.bits(token) >= tokens.MIN_BITS, token


def test_a_token_file_must_be_private_and_then_serves_both_sides(tmp_path, jobs):
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    secret.chmod(0o644)
    (tmp_path / "job.py").write_text(JOB)
    shared = proton(tmp_path, "--listen-tcp", "0", "--token-file", str(secret), "job.py", "1",
                    env={"PROTON_TOKEN": ""})
    assert shared.returncode == 2 and "chmod 600" in shared.stderr, shared.stderr
    secret.chmod(0o600)
    job = Job(tmp_path, "--listen", "--listen-tcp", "127.0.0.1:0", "--token-file", str(secret),
              env={"PROTON_TOKEN": ""})
    jobs.append(job)
    line = ""
    while "listening for captures on tcp" not in line:
        line = job.proc.stderr.readline()
    address = line.split("tcp ")[1].split()[0]
    done = subprocess.run([sys.executable, "-m", "proton", "capture", "--connect", address,
                           "--token-file", str(secret), "--duration", "0.2", "-n", "filed"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "PROTON_TOKEN"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "filed.hatchet").exists()


def test_token_guesses_are_answered_late_and_logged_and_the_right_token_still_gets_in(
        tmp_path, jobs):
    job, address = tcp_job(tmp_path, jobs, 0, TOKEN)
    answers: list[tuple[float, str]] = []
    begun = time.monotonic()
    while time.monotonic() < begun + 1.0:  # a guesser that waits for each answer
        error = request(address, {"verb": "status", "token": f"{len(answers):04d}"})["error"]
        answers.append((time.monotonic() - begun, error))
        if len(answers) == 3:  # the owner, from the same address, between two guesses
            assert request(address, {"verb": "status", "token": TOKEN})["ok"]
    assert {a[1] for a in answers} == {"bad or missing token"}
    # answered after the waits of those before: 0, 0.25, 0.75, then 1.75 s
    assert len(answers) == 4 and 1.7 < answers[-1][0] < 2.2, answers
    assert all(late - 0.1 < at < late + 0.4 for (at, _), late in zip(answers, (0, .25, .75)))
    _, err = job.stop()
    logged = [line for line in err.splitlines() if "bad or missing token from" in line]
    assert len(logged) == 3, err  # the 1st, 2nd and 4th: not every one
    assert logged[0] == ("proton: capture endpoint: bad or missing token from 127.0.0.1 (1 so "
                         "far); its next wrong token is answered 0.25 s late (a right one at "
                         "once)")


FLOOD = r"""
import json, socket, sys, threading, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
sent = [0]
def flood():
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with socket.socket() as sock:
            sock.settimeout(0.05)
            try:
                sock.connect((host, port))
                sock.sendall(json.dumps({"verb": "status", "token": "0" * 32}).encode() + b"\n")
                sent[0] += 1
                sock.recv(4096)
            except OSError:
                pass
threads = [threading.Thread(target=flood) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sent[0])
"""


def test_a_wrong_token_flood_from_another_user_never_keeps_the_owner_out(tmp_path, jobs):
    """Issue 59, item 15: a local user with no token floods the job's TCP endpoint with wrong
    ones from 127.0.0.1, the owner's address too; on main the owner got 0 of 20 requests in.
    The owner's are all served, and the job's threads stay bounded."""
    job, address = tcp_job(tmp_path, jobs, 0, TOKEN)
    host, port = address.rsplit(":", 1)
    as_other = dict(user=NOBODY, group=NOBODY, extra_groups=[]) if os.geteuid() == 0 else {}
    flood = subprocess.Popen(["/usr/bin/python3" if as_other else sys.executable, "-c", FLOOD,
                              host, port, "2.5"], stdout=subprocess.PIPE, text=True, cwd="/",
                             **as_other)
    try:
        time.sleep(0.5)  # in full swing
        served, threads = 0, []
        for _ in range(20):
            try:
                served += bool(request(address, {"verb": "status", "token": TOKEN}).get("ok"))
            except (OSError, json.JSONDecodeError):
                pass
            with open(f"/proc/{job.pid}/status") as status:
                threads.append(int(re.search(r"Threads:\s+(\d+)", status.read())[1]))
            time.sleep(0.05)
        out, _ = flood.communicate(timeout=30)
    finally:
        flood.kill()
    assert served == 20, f"{served} of 20 requests with the token were served ({out} wrong)"
    assert int(out) > 200, out  # it was a flood (measured: about 2,000 wrong tokens)
    # the script's thread, the accept loop, at most 16 pending and 16 served connections
    assert max(threads) <= 2 + gate.MAX_PENDING + 16, threads
    assert request(address, {"verb": "status", "token": TOKEN})["ok"]


def test_silent_connections_reopened_in_a_loop_do_not_starve_real_captures(tmp_path, jobs):
    """An attacker keeps 40 connections open that never send a byte, reopening each as soon
    as it is dropped; 20 status requests with the token are made meanwhile."""
    job, address = tcp_job(tmp_path, jobs, 0, TOKEN)
    host, port = address.rsplit(":", 1)
    stop = threading.Event()

    def hold() -> None:
        socks: list[socket.socket] = []
        while not stop.is_set():
            while len(socks) < 40:
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex((host, int(port)))
                socks.append(sock)
            time.sleep(0.05)
            for sock in list(socks):
                try:
                    sock.recv(4096)  # a line or the end: the job let it go
                except BlockingIOError:
                    continue  # still held open, silent
                except OSError:
                    pass
                socks.remove(sock)
                sock.close()
        for sock in socks:
            sock.close()

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for t in holders:
        t.start()
    try:
        time.sleep(1.5)  # the attack is in full swing
        served = 0
        for _ in range(20):
            try:
                served += bool(request(address, {"verb": "status", "token": TOKEN}).get("ok"))
            except (OSError, json.JSONDecodeError):
                pass
            time.sleep(0.05)
    finally:
        stop.set()
        for t in holders:
            t.join()
    assert served >= 18, f"{served} of 20 requests with the token were served"


STEPLESS = JOB.replace('print("ready", flush=True)', 'print("ready", flush=True)\ntime.sleep(600)')


def test_a_steps_capture_whose_client_falls_silent_ends_by_itself(tmp_path, jobs):
    """A --steps capture of a job that marks no step, from a client that then says nothing:
    the job ends it after the client's timeout plus its grace, and the next capture runs."""
    job = Job(tmp_path, "--listen", script=STEPLESS, env={"PROTON_CAPTURE_GRACE": "1"})
    jobs.append(job)
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(job.socket)
    silent.sendall(protocol.encode({"verb": "start", "name": str(tmp_path / "silent"),
                                    "steps": 3, "timeout": 1}))
    reader = silent.makefile("rb")
    assert json.loads(reader.readline())["armed"] == 3
    time.sleep(3)  # 1 s asked + 1 s grace, and a margin
    status = request(None, {"verb": "status"}, job.socket)
    assert status["state"] == "idle", status
    nxt = request(None, {"verb": "start", "name": str(tmp_path / "next"), "duration": 0.2},
                  job.socket)
    assert nxt["ok"], nxt
    reader.close()
    silent.close()
    _, err = job.stop()
    assert "did not come in 2 s and its client said nothing" in err, err


def test_a_port_out_of_range_is_one_line_and_the_job_runs_on(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    plain = subprocess.run([sys.executable, "job.py", "3"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60, env={**os.environ,
                                                       "PROTON_LISTEN": "tcp://127.0.0.1:70000",
                                                       "PROTON_TOKEN": TOKEN})
    assert plain.returncode == 0 and plain.stdout.endswith("done\n"), plain.stderr
    assert "port 70000 is not 0 to 65535" in plain.stderr and "Traceback" not in plain.stderr
    cli = proton(tmp_path, "--listen-tcp", "99999999999999999999", "job.py", "1",
                 env={"PROTON_TOKEN": TOKEN})
    assert cli.returncode == 2 and "is not 0 to 65535" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr


def test_a_job_killed_during_a_capture_is_said_to_have_written_nothing(tmp_path, jobs):
    job = Job(tmp_path, "--listen")
    jobs.append(job)
    running = subprocess.Popen([sys.executable, "-m", "proton", "capture", str(job.pid),
                                "--duration", "10", "-n", "killed"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the capturer sleeps out its duration before it finds the job gone: 10 s, time enough to
    # see the capture start and kill the job inside it (milliseconds), even on loaded cores
    deadline = time.monotonic() + 30
    while request(None, {"verb": "status"}, job.socket)["state"] != "capturing":
        assert time.monotonic() < deadline, "the capture never started"
        time.sleep(0.05)
    job.proc.kill()
    _, err = running.communicate(timeout=60)
    assert running.returncode == 1
    assert f"pid {job.pid}: it ended during the capture without writing" in err, err
    assert "killed, or it crashed" in err and "writes what it has" not in err
    assert not (tmp_path / "killed.hatchet").exists()


IMPOSTOR = r"""
import json, os, socket, sys
folder, pid, leak = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.umask(0o077)
server = socket.socket(socket.AF_UNIX)
server.bind(os.path.join(folder, f"{pid}.sock"))
server.listen(8)
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    try:
        message = json.loads(conn.makefile().readline() or "{}")
    except ValueError:
        message = {}
    if message.get("verb") == "start":  # what root's capture would tell her: its folder
        with open(leak, "w") as f:
            f.write(json.dumps(message))
    try:
        conn.sendall(json.dumps({"ok": True, "pid": pid, "command": "\x1b]0;pwned\x07x.py",
                                 "state": "idle", "steps": 1, "sessions": [], "started": 0,
                                 "path": "\x1b[2J", "armed": 1}).encode() + b"\n")
    except OSError:
        pass  # the client hung up first
    conn.close()
"""


@needs_root
def test_roots_ps_and_capture_ask_nothing_of_a_socket_another_user_placed_for_a_pid(
        tmp_path, shared_tmp):
    """Issue 46, item 10: another user's private folder holds a socket named after a live pid
    not hers (this test's own); root's `ps` and `capture` must see that another process
    answers there, and tell it nothing (root's folder included)."""
    folder = os.path.join(shared_tmp, f"proton-{NOBODY}")
    as_nobody("mkdir", "-m", "700", folder)
    script = os.path.join(shared_tmp, "impostor.py")
    with open(script, "w") as f:
        f.write(IMPOSTOR)
    os.chmod(script, 0o644)
    leak = os.path.join(folder, "leak.json")
    victim = os.getpid()
    impostor = subprocess.Popen(["/usr/bin/python3", script, folder, str(victim), leak],
                                user=NOBODY, group=NOBODY, extra_groups=[],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert impostor.stdout.readline() == "ready\n"
        env = {**os.environ, "TMPDIR": shared_tmp}
        env.pop("PROTON_SOCKET_DIR", None)
        ps = subprocess.run([sys.executable, "-m", "proton", "ps"], capture_output=True,
                            text=True, timeout=60, env=env)
        assert ps.returncode == 0 and "Traceback" not in ps.stderr, ps.stderr
        row = [line for line in ps.stdout.splitlines() if line.startswith(str(victim))]
        assert row and f"answered by pid {impostor.pid}" in row[0], ps.stdout
        assert "\x1b" not in ps.stdout + ps.stderr
        cap = subprocess.run([sys.executable, "-m", "proton", "capture", str(victim),
                              "--duration", "0.2", "-n", "secret"], capture_output=True,
                             text=True, timeout=60, env=env, cwd=tmp_path)
        assert cap.returncode == 1 and f"answered by pid {impostor.pid}" in cap.stderr, cap
        assert "\x1b" not in cap.stdout + cap.stderr
        assert not os.path.exists(leak), open(leak).read()  # root's folder was never sent
    finally:
        impostor.kill()
        impostor.communicate()


WITH_RUNTIME_ROOT = """
import sys
from proton.service import protocol
protocol.RUNTIME_ROOT = sys.argv.pop(1)  # where this test's login sessions' folders are
from proton.cli import main
main()
"""


@needs_root
def test_roots_capture_finds_the_job_past_a_socket_another_user_planted_for_its_pid(
        tmp_path, shared_tmp, jobs, monkeypatch):
    """Issue 59, item 16: uid 65534 squats the job's usual folder (so it listens in its
    $XDG_RUNTIME_DIR, searched last) and binds `<job pid>.sock` in her own folder (searched
    before it). On main root's capture stopped there ("not that job's socket, skipped")."""
    as_nobody("mkdir", "-m", "755", os.path.join(shared_tmp, f"proton-{os.getuid()}"))
    runtime = os.path.join(shared_tmp, "run", str(os.getuid()))
    os.makedirs(runtime, mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)  # the job's, and where Job looks for it
    jobs.append(job := Job(tmp_path, "--listen"))
    assert job.socket == os.path.join(runtime, "proton", f"{job.pid}.sock")
    folder = os.path.join(shared_tmp, f"proton-{NOBODY}")
    as_nobody("mkdir", "-m", "700", folder)
    leak = os.path.join(folder, "leak.json")
    impostor = subprocess.Popen(["/usr/bin/python3", "-c", IMPOSTOR, folder, str(job.pid), leak],
                                user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
                                stdout=subprocess.PIPE, text=True)
    try:
        assert impostor.stdout.readline() == "ready\n"
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}  # root's shell
        root = [sys.executable, "-c", WITH_RUNTIME_ROOT, os.path.join(shared_tmp, "run")]
        cap = subprocess.run([*root, "capture", str(job.pid), "--duration", "0.3", "-n", "found"],
                             capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        assert cap.returncode == 0, cap.stderr
        assert cap.stdout == f"pid {job.pid}: wrote {tmp_path / 'found.hatchet'}\n"
        assert steps_in(tmp_path / "found.hatchet") > 5
        ps = subprocess.run([*root, "ps"], capture_output=True, text=True, timeout=60, env=env)
        rows = [line for line in ps.stdout.splitlines() if line.startswith(f"{job.pid} ")]
        assert len(rows) == 1 and "idle" in rows[0] and "job.py" in rows[0], ps.stdout
        assert not os.path.exists(leak), open(leak).read()  # she was told nothing
    finally:
        impostor.kill()
        impostor.communicate()


def test_a_peers_wrong_guesses_are_pushed_out_before_its_client_not_yet_read():
    """The gate at its per-address bound (every local user is 127.0.0.1): a new connection
    pushes out one that already sent a wrong token, not the owner's, which the job has not
    read yet (on a loaded machine a flood of guesses outran the reader and kept the owner out
    once in 20: the oldest of the address went first)."""
    g = gate.Gate()
    pairs = [socket.socketpair() for _ in range(gate.PER_PEER + 2)]
    try:
        owner, *flood = [a for a, _ in pairs]
        g.admit(owner, "127.0.0.1")
        for conn in flood:
            g.admit(conn, "127.0.0.1")
            g.failed(conn, "bad or missing token", guess=True)  # its answer held back
        assert owner in g._pending and len(g._pending) == gate.PER_PEER
        pushed = [b for a, b in pairs[1:] if a not in g._pending]
        assert len(pushed) == 2 and all(b.recv(200) == gate.BAD_ANSWER for b in pushed)
    finally:
        for a, b in pairs:
            a.close()
            b.close()
