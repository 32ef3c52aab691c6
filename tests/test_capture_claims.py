"""Where a capture's file goes is the capturer's to decide, and it reports only what it checked
(issue 59, item 17): root's capture of another user's job tells the job a file name alone and
takes the file from the job's own folder; whatever paths a job claims, none is printed that is
not the capture's file."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from test_capture_safety import NOBODY, as_nobody, needs_root, shared_tmp  # noqa: F401
from test_service import JOB, steps_in

CLAIMS = r"""
import json, os, socket, sys
folder, leak, claims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
os.umask(0o077)
mine = os.path.join(folder, "mine.hatchet")
with open(mine, "w") as f:
    f.write("[]")
os.symlink("/etc/passwd", os.path.join(folder, "evil.hatchet"))
server = socket.socket(socket.AF_UNIX)
server.bind(os.path.join(folder, f"{os.getpid()}.sock"))  # its own pid: the socket is the job's
server.listen(8)
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    reader = conn.makefile()
    message = json.loads(reader.readline() or "{}")
    if message.get("verb") == "start":  # what root's capture tells the job
        with open(leak, "w") as f:
            f.write(json.dumps(message))
        conn.sendall(json.dumps({"ok": True, "started": 0, "path": "/etc/passwd"}).encode()
                     + b"\n")
        reader.readline()  # stop
        conn.sendall(json.dumps({"ok": True, "paths": claims, "warnings": [],
                                 "merged": {"/etc/passwd": "0-3"}}).encode() + b"\n")
    else:  # a snapshot: written now, as a job writes one when asked (a capture checks that)
        with open(mine, "w") as f:
            f.write("[]")
        conn.sendall(json.dumps({"ok": True, "paths": claims}).encode() + b"\n")
    conn.close()
"""


def other_users_folder(shared_tmp: str) -> str:
    folder = os.path.join(shared_tmp, f"proton-{NOBODY}")
    as_nobody("mkdir", "-m", "700", folder)
    return folder


@needs_root
def test_roots_capture_reports_no_path_a_job_claims_and_tells_it_no_folder(tmp_path, shared_tmp):
    """A job of uid 65534 answers root's capture with /etc/passwd, a link to it in its own
    folder and a file of its own not named for the capture. On main root printed
    `wrote /etc/passwd` and the job was sent root's folder."""
    folder = other_users_folder(shared_tmp)
    leak = os.path.join(folder, "request.json")
    claims = ["/etc/passwd", os.path.join(folder, "evil.hatchet"),
              os.path.join(folder, "mine.hatchet"), ["not", "a", "path"]]
    job = subprocess.Popen(["/usr/bin/python3", "-c", CLAIMS, folder, leak, json.dumps(claims)],
                           user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline() == "ready\n"
        done = subprocess.run([sys.executable, "-m", "proton", "capture", str(job.pid),
                               "--duration", "0.1", "-n", "evil"], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
        snap = subprocess.run([sys.executable, "-m", "proton", "capture", "--snapshot",
                               str(job.pid)], capture_output=True, text=True, timeout=60)
    finally:
        job.kill()
        job.communicate()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == "" and "passwd" not in done.stdout + snap.stdout, done.stdout
    assert f"pid {job.pid}: it says it wrote " in done.stderr and "not reported" in done.stderr
    with open(leak) as f:
        assert json.load(f)["name"] == "evil"  # a file name: nothing of root's folder
    assert os.listdir(tmp_path) == []
    # a snapshot is the job's own file: /etc/passwd (root's) and the link are not reported,
    # its own file (uid 65534, written just now) is, where it is
    assert snap.returncode == 1 and snap.stdout == (
        f"pid {job.pid}: wrote {os.path.join(folder, 'mine.hatchet')}\n"), snap


def job_of_another_user(folder, shared_tmp: str) -> subprocess.Popen:
    """A real `proton --listen` job run as uid 65534; it may read (not write) root's files,
    where this test's Python is installed (CAP_DAC_READ_SEARCH)."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run a job as uid 65534")
    (folder / "job.py").write_text(JOB)
    os.chown(folder, NOBODY, NOBODY)
    env = {**os.environ, "HOME": shared_tmp, "TMPDIR": shared_tmp}
    env.pop("PROTON_SOCKET_DIR", None)
    job = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                            "--clear-groups", "--inh-caps=+dac_read_search",
                            "--ambient-caps=+dac_read_search", sys.executable, "-m", "proton",
                            "--listen", "job.py", "100000"], cwd=folder, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert job.stdout.readline() == "ready\n", job.communicate()
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(shared_tmp, f"proton-{NOBODY}", f"{job.pid}.sock")):
        assert time.monotonic() < deadline, "the job never listened"
        time.sleep(0.01)
    return job


@needs_root
def test_root_takes_another_users_capture_into_its_own_folder_and_replaces_nothing(
        tmp_path, shared_tmp):
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    here = tmp_path / "root"
    here.mkdir(mode=0o700)
    job = job_of_another_user(jobdir, shared_tmp)
    try:
        runs = [subprocess.run([sys.executable, "-m", "proton", "capture", str(job.pid),
                                "--duration", "0.3", "-n", "sub/theirs"], capture_output=True,
                               text=True, timeout=60, cwd=here) for _ in range(2)]
    finally:
        job.terminate()
        _, err = job.communicate(timeout=60)
    first, second = here / "sub" / "theirs.hatchet", here / "sub" / f"theirs.pid{job.pid}.hatchet"
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout == f"pid {job.pid}: wrote {first}\n"
    assert runs[1].returncode == 0, runs[1].stderr
    assert runs[1].stdout == f"pid {job.pid}: wrote {second}\n"
    assert f"pid {job.pid}: {first} exists; wrote {second} instead" in runs[1].stderr
    for path in (first, second):
        assert os.stat(path).st_uid == 0 and steps_in(path) > 5
    assert "Traceback" not in err and not list(jobdir.rglob("*.hatchet"))
    folder = os.path.join(shared_tmp, f"proton-{NOBODY}")
    assert not [p for p in os.listdir(folder) if p.startswith("captures-")]  # taken, tidied
