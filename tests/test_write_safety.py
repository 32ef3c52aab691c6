"""Issue 59, where profiles are written: Ctrl-C during the write at exit (item 2), a long valid
name (4), temporary files a SIGKILL left (7), a lock another user could hold (14) and output
folders reached through another user's symlink (18). Real signals, a real second uid."""
from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import default_signals, find, load
from test_service import Job, capture, jobs  # noqa: F401  (jobs: a fixture)
from test_writes import (NOBODY, as_nobody, full_disk, needs_root,  # noqa: F401  (fixtures)
                         no_live_sessions, python)
import proton
from proton.errors import ProfileWriteError, SessionError

EARLIER_RUN = ('[{"frame": {"name": "ROOT", "type": "function", "host": "h", "pid": 1}, '
               '"metrics": {}, "children": []}, {}]')
"""A profile of a process long gone."""


def record(path: str, n: int = 1) -> None:
    """A session at `path` with one scope holding `n`, written."""
    proton.start(path)
    with proton.scope("s", {"n": n}):
        pass
    proton.finalize()


def temporaries(folder, stem: str = "p.hatchet") -> list[str]:
    return sorted(glob.glob(os.path.join(glob.escape(str(folder)), f"{stem}.*.tmp")))


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The temporary folder (where a profile goes when it cannot go where asked), the test's."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.fixture
def shared_folder():
    """A folder every user may write, without the sticky bit (mode 777), owned by root."""
    shared = tempfile.mkdtemp(prefix="proton-shared-")
    os.chmod(shared, 0o777)
    yield shared
    subprocess.run(["rm", "-rf", shared], check=True)


# -- 2. Ctrl-C during the write at exit -----------------------------------------------------------

AT_EXIT = """
    import json, os, signal, sys
    import proton
    proton.start("p")
    for i in range(2000):
        with proton.scope(f"s{i}", {"n": i}):
            pass
    where, then = sys.argv[1:3]
    module, name = where.split(".")
    real = getattr(sys.modules[module], name)
    def press_ctrl_c(*args, **kwargs):  # the real signal, at each write
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)
    setattr(sys.modules[module], name, press_ctrl_c)
    if then == "finalize":  # interrupted here, the session is left to the exit's write
        proton.finalize()
"""


@pytest.mark.parametrize("where", ["json.dump", "os.link"])  # writing it, putting it in place
@pytest.mark.parametrize("then", ["exit", "finalize"])
def test_ctrl_c_during_the_write_at_exit_waits_for_the_whole_file_then_ends_as_ctrl_c(
        tmp_path, where, then):
    """Plain `python`: the script never calls finalize(), or is interrupted in it; a Ctrl-C
    in the write at exit is held until the file is whole, then ends the process as Ctrl-C
    does (killed by SIGINT: 130 in the shell), with no 'Exception ignored' traceback."""
    proc = python(AT_EXIT, where, then, cwd=tmp_path, preexec_fn=default_signals)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGINT, err
    assert "Exception ignored" not in err, err
    assert "proton: interrupted; finishing the profile's write first (Ctrl-\\ ends it " \
        "now)\n" in err
    assert f"proton: wrote {tmp_path / 'p.hatchet'} at exit\n" in err
    root = load(tmp_path / "p.hatchet")[0]
    assert len(root["children"]) == 2000 and find(root, "s1999")["metrics"]["n"] == 1999
    assert temporaries(tmp_path) == []


# -- 4. a long valid name -------------------------------------------------------------------------

LONG = "p" * 230  # with .hatchet, 238 bytes: a name every Linux file system takes


def test_a_long_valid_name_is_written_where_asked_and_leaves_no_folder(tmp_path, private_tmp):
    record(str(tmp_path / LONG), 1)
    record(str(tmp_path / LONG), 2)  # and replaced by the next run of that name
    assert find(load(tmp_path / f"{LONG}.hatchet")[0], "s")["metrics"]["n"] == 2
    assert sorted(os.listdir(tmp_path)) == [f"{LONG}.hatchet", "tmp"]
    assert os.listdir(private_tmp) == []


def test_a_long_name_a_live_process_holds_goes_beside_it_shortened(tmp_path, private_tmp,
                                                                    capfd):
    """NAME.pid<PID>.hatchet beside a 245-byte name would be 266 bytes: NAME is shortened."""
    name = "p" * 245
    held = tmp_path / f"{name}.hatchet"
    held.write_text(EARLIER_RUN.replace('"h"', json.dumps(socket.gethostname())).replace(
        '"pid": 1', f'"pid": {os.getppid()}'))  # a process still running
    record(str(tmp_path / name), 4)
    beside = f"{'p' * (255 - 3 - len(f'.pid{os.getpid()}.hatchet'))}.pid{os.getpid()}.hatchet"
    assert sorted(os.listdir(tmp_path)) == sorted([held.name, beside, "tmp"])
    assert find(load(tmp_path / beside)[0], "s")["metrics"]["n"] == 4
    assert f"wrote {tmp_path / beside} instead" in capfd.readouterr().err


def test_a_name_no_file_system_takes_is_refused_at_start_in_one_line(tmp_path, private_tmp):
    name = str(tmp_path / ("p" * 250))  # 258 bytes with .hatchet
    with pytest.raises(SessionError) as err:
        proton.start(name)
    assert str(err.value) == (f"the profile would be written to '{name}.hatchet': its file "
                              "name is 258 bytes, over the 255 its file system allows; give "
                              "a shorter name")
    assert sorted(os.listdir(tmp_path)) == ["tmp"] and os.listdir(private_tmp) == []


def test_a_profile_that_cannot_go_anywhere_leaves_no_empty_folder(tmp_path, full_disk,
                                                                   monkeypatch):
    """Where asked is not a folder, and the temporary folder is full (a 64 KiB tmpfs): the
    error says both, and no empty proton-* folder is left behind, attempt after attempt."""
    monkeypatch.setenv("TMPDIR", full_disk)
    monkeypatch.setattr(tempfile, "tempdir", full_disk)
    (tmp_path / "blocker").write_text("")
    for _ in range(3):
        with pytest.raises(ProfileWriteError, match="nor to"):
            record(str(tmp_path / "blocker" / "p"))
    assert os.listdir(full_disk) == ["filler"]


def test_a_capture_with_a_long_valid_name_is_written(tmp_path, jobs):  # noqa: F811
    jobs.append(job := Job(tmp_path, "--listen"))
    done = capture(tmp_path, str(job.pid), "--duration", "0.2", "-n", LONG)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"pid {job.pid}: wrote {tmp_path / LONG}.hatchet\n"
    assert find(load(tmp_path / f"{LONG}.hatchet")[0], "step")["metrics"]["n"] > 0


# -- 7. temporary files a SIGKILL left ------------------------------------------------------------

KILLED = """
    import os, signal
    import proton
    proton.start("p")
    with proton.scope("s", {"n": 1}):
        pass
    def die(*args, **kwargs):  # SIGKILL with the temporary file whole, as it is put in place
        os.kill(os.getpid(), signal.SIGKILL)
    os.link = os.replace = die
    proton.finalize()
"""

HOLD_LOCK = """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_killed_writers_temporary_files_are_removed_by_the_next_write_and_nothing_else(
        tmp_path):
    """Three runs killed (SIGKILL) as their file is put in place leave three whole temporary
    files; a minute later the next run of that name removes them, and nothing else of the
    kind: not one a live writer holds locked, nor one just made, nor another user's, a link
    or a folder at such a name, nor another target's."""
    for _ in range(3):
        proc = python(KILLED, cwd=tmp_path)
        proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL
    stale = temporaries(tmp_path)
    assert len(stale) == 3 and all(os.path.getsize(t) > 100 for t in stale)
    a_minute_ago = time.time() - 60

    def old(path: str) -> str:
        os.utime(path, (a_minute_ago,) * 2, follow_symlinks=False)
        return path

    def like_ours(n: int, stem: str = "p.hatchet") -> str:
        return str(tmp_path / f"{stem}.{n:016x}.tmp")

    def ours(path: str) -> str:
        with open(path, "w") as f:
            f.write("x")
        return path

    for t in stale:  # a minute later
        old(t)
    mine = tmp_path / "mine.txt"
    mine.write_text("keep\n")
    kept = {"locked by a live writer": old(ours(like_ours(2))),
            "another target's": old(ours(like_ours(3, "q.hatchet"))),
            "a hard link to a file of ours": like_ours(4),
            "a symlink to a file of ours": like_ours(5),
            "a folder": like_ours(6)}
    os.link(mine, kept["a hard link to a file of ours"])
    os.symlink(mine, kept["a symlink to a file of ours"])
    os.mkdir(kept["a folder"])
    for key in ("a hard link to a file of ours", "a symlink to a file of ours", "a folder"):
        old(kept[key])
    if os.geteuid() == 0:
        kept["another user's"] = old(ours(like_ours(7)))
        os.chown(kept["another user's"], NOBODY, NOBODY)
    holder = python(HOLD_LOCK, kept["locked by a live writer"], cwd=tmp_path,
                    stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == "held\n"
        kept["just made (a writer elsewhere may be at work)"] = ours(like_ours(1))
        record(str(tmp_path / "p"))
    finally:
        holder.communicate("", timeout=60)
    assert [t for t in stale if os.path.lexists(t)] == []
    assert {k: p for k, p in kept.items() if not os.path.lexists(p)} == {}
    assert mine.read_text() == "keep\n" and find(load(tmp_path / "p.hatchet")[0], "s")


# -- 14. a lock another user could hold -----------------------------------------------------------

@needs_root
def test_another_user_holding_a_lock_on_the_folder_or_file_delays_no_write(shared_folder,
                                                                          capfd):
    """The old lock was a flock on the folder, which anyone who may read it can hold: the
    write waited 10 s and went to p.pid<PID>.hatchet. Another user holds the folder and the
    earlier run's file locked; this run replaces that file at once."""
    os.chmod(shared_folder, 0o755)
    target = os.path.join(shared_folder, "p.hatchet")
    with open(target, "w") as f:
        f.write(EARLIER_RUN)
    os.chmod(target, 0o644)
    os.utime(target, (time.time() - 3600,) * 2)
    holders = [as_nobody("flock", "-x", held, "sh", "-c", "echo held; cat",
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for held in (shared_folder, target)]
    try:
        assert [h.stdout.readline() for h in holders] == ["held\n"] * 2
        began = time.monotonic()
        record(os.path.join(shared_folder, "p"), 7)
        took = time.monotonic() - began
    finally:
        for h in holders:
            h.communicate("", timeout=60)
    assert took < 3, f"the write took {took:.1f} s"
    assert sorted(os.listdir(shared_folder)) == ["p.hatchet"]
    assert find(load(target)[0], "s")["metrics"]["n"] == 7
    assert "instead" not in capfd.readouterr().err


# -- 18. output folders reached through another user's symlink ------------------------------------

@needs_root
def test_an_output_folder_through_another_users_link_is_refused_at_start_in_one_line(
        shared_folder, private_tmp):
    theirs = os.path.join(shared_folder, "theirs")
    as_nobody("mkdir", "-m", "777", theirs).wait()
    as_nobody("ln", "-s", theirs, os.path.join(shared_folder, "exp1")).wait()
    name = os.path.join(shared_folder, "exp1", "prof")
    with pytest.raises(SessionError) as err:
        proton.start(name)
    assert str(err.value) == (
        f"the profile would be written to '{name}.hatchet': {shared_folder}/exp1 is a "
        f"symlink of uid {NOBODY} in a folder others may write, not followed; give the "
        "folder's real path")
    assert os.listdir(theirs) == []
    mine = os.path.join(shared_folder, "mine")  # a link of your own is followed
    os.mkdir(os.path.join(shared_folder, "real"))
    os.symlink(os.path.join(shared_folder, "real"), mine)
    record(os.path.join(mine, "sub", "prof"), 3)
    assert find(load(os.path.join(shared_folder, "real", "sub", "prof.hatchet"))[0],
                "s")["metrics"]["n"] == 3


@needs_root
def test_an_output_folder_swapped_for_another_users_link_after_start_gets_nothing(
        shared_folder, private_tmp):
    """The folder was yours when the run began; another user renames it away and links
    the name to a folder of hers before the write. The profile goes to the temporary folder
    (the error says where), never into hers."""
    theirs = os.path.join(shared_folder, "theirs")
    exp = os.path.join(shared_folder, "exp1")
    as_nobody("mkdir", "-m", "777", theirs).wait()
    os.mkdir(exp)
    proton.start(os.path.join(exp, "prof"))
    with proton.scope("s", {"n": 5}):
        pass
    as_nobody("mv", exp, exp + ".gone").wait()
    as_nobody("ln", "-s", theirs, exp).wait()
    with pytest.raises(ProfileWriteError) as err:
        proton.finalize()
    assert os.listdir(theirs) == []
    fallback, = glob.glob(str(private_tmp / "proton-*" / "prof.hatchet"))
    assert str(err.value) == (f"could not write {exp}/prof.hatchet ({exp} is a symlink of "
                              f"uid {NOBODY} in a folder others may write, not followed; "
                              "give the folder's real path); wrote "
                              f"{fallback} instead; give a name in a writable folder")
    assert find(load(fallback)[0], "s")["metrics"]["n"] == 5
