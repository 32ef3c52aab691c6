"""Issue 46, nothing lost and nothing leaked where files are written or read: runs of one name
finishing together, Ctrl-C in finalize(), `--flush-every` when the profile's disk is full, the
viewer's --html target (another user's FIFO, `/dev/stdout`, `-`), the source-root check raced
by a folder swap, and a user metric with a name the viewer's table uses itself."""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from click.testing import CliRunner

from conftest import default_signals, find, load
import proton
from proton.api import write_profiles
from proton.context.frames import unwind
from proton.viewer.cli import viewer
from proton.viewer.source_roots import SourceRoots
from proton.format import job_of

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to act as a second user (uid 65534)")


@pytest.fixture(autouse=True)
def no_live_sessions():
    yield
    unwind(0)
    write_profiles()


def as_nobody(*command: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(command, user=NOBODY, group=NOBODY, extra_groups=[], **kwargs)


def python(code: str, *args: str, cwd, env: dict | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def profiles_in(folder, stem: str = "p") -> dict[str, dict]:
    """Every profile named after `stem` in `folder`: file name -> its root node."""
    return {os.path.basename(p): load(p)[0]
            for p in glob.glob(os.path.join(folder, f"{stem}*.hatchet"))}


# -- 1. runs of one name over an earlier run's file ----------------------------------------------

WRITER = """
    import glob, os, sys, time
    import proton
    proton.start("p")
    with proton.scope("run", {"writer": int(sys.argv[1])}):
        pass
    def judged(frame, event, arg):  # hold each writer right after it judged what is there,
        if event == "return" and frame.f_code.co_name == "other_writer":  # until all have
            open(f"judged.{os.getpid()}", "w").close()
            end = time.monotonic() + 0.5
            while len(glob.glob("judged.*")) < 6 and time.monotonic() < end:
                time.sleep(0.001)
    while not os.path.exists("go"):  # every writer finishes at once
        time.sleep(0.001)
    sys.setprofile(judged)
    proton.finalize()
"""


def test_runs_of_one_name_over_an_earlier_runs_file_each_keep_their_profile(tmp_path):
    """Six runs of one name finish together over an earlier run's p.hatchet. Each writer is
    held (up to 0.5 s) after judging what stands at the name, until all six have judged it:
    the moment at which, unguarded, all of them take the old file for replaceable."""
    lost = []
    for trial in range(2):
        folder = tmp_path / str(trial)
        folder.mkdir()
        (folder / "p.hatchet").write_text(  # an earlier run's, of a process long gone
            '[{"frame": {"name": "ROOT", "type": "function", "host": "h", "pid": 1}, '
            '"metrics": {}, "children": []}, {}]')
        os.utime(folder / "p.hatchet", (time.time() - 3600,) * 2)
        procs = [python(WRITER, str(i), cwd=folder) for i in range(6)]
        time.sleep(3)  # all have started their sessions
        (folder / "go").write_text("")
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert all(p.returncode == 0 for p in procs), errors
        assert glob.glob(str(folder / "judged.*")), "no writer judged an existing file"
        found = profiles_in(folder)
        writers = sorted(find(root, "run")["metrics"]["writer"]
                         for root in found.values() if root["children"])
        lost += [(trial, w) for w in range(6) if w not in writers]
        for name, root in found.items():  # a name other than p.hatchet says whose it is
            pid = job_of(root)["pid"]
            assert name in ("p.hatchet", f"p.pid{pid}.hatchet")
        # the others are told where theirs went
        assert sum(".hatchet instead" in e for e in errors) == len(found) - 1, errors
    assert lost == [], f"{len(lost)} of 12 profiles lost: {lost}"


# -- 2. Ctrl-C during finalize() -----------------------------------------------------------------

INTERRUPTED = """
    import os, signal, sys
    import proton
    proton.start("p")
    for i in range(2000):
        with proton.scope(f"s{i}", {"n": i}):
            pass
    def press_ctrl_c(frame, event, arg):  # the real signal, at a chosen point of finalize()
        if event == "call" and frame.f_code.co_name == sys.argv[1]:
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGINT)
    sys.setprofile(press_ctrl_c)
    proton.finalize()
    print("finalize returned")
"""


@pytest.mark.parametrize("where", ["write", "build", "_dump", "place"])  # output.write first
def test_ctrl_c_during_finalize_still_leaves_the_profile(tmp_path, where):
    proc = python(INTERRUPTED, where, cwd=tmp_path, preexec_fn=default_signals)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGINT and "KeyboardInterrupt" in err, err
    assert "p.hatchet at exit" in err
    root = load(tmp_path / "p.hatchet")[0]
    assert len(root["children"]) == 2000
    assert find(root, "s1999")["metrics"]["n"] == 1999


# -- 3. --flush-every where the profile cannot go ------------------------------------------------

SLOW = """
    import time
    import proton
    with proton.scope("step", {"n": 1}):
        time.sleep(4.5)
"""


@pytest.fixture
def full_disk():
    """A folder on a file system with no space left (a 64 KiB tmpfs, filled)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small file system")
    folder = tempfile.mkdtemp(prefix="proton-full-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", folder],
                      capture_output=True).returncode != 0:
        os.rmdir(folder)
        pytest.skip("cannot mount a tmpfs here")
    try:
        fd = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"x" * 4096):
                pass
        except OSError:  # ENOSPC
            pass
        finally:
            os.close(fd)
        yield folder
    finally:
        subprocess.run(["umount", folder], check=True)
        os.rmdir(folder)


@pytest.mark.parametrize("why", ["full", "not_a_folder"])
def test_flush_every_where_the_profile_cannot_go_keeps_one_fallback_file(tmp_path, why,
                                                                          request):
    where = request.getfixturevalue("full_disk") if why == "full" else str(tmp_path / "blocker")
    if why == "not_a_folder":
        (tmp_path / "blocker").write_text("")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "slow.py").write_text(textwrap.dedent(SLOW))
    run = subprocess.run([sys.executable, "-m", "proton", "-n", os.path.join(where, "p"),
                          "--flush-every", "1", "slow.py"], cwd=tmp_path,
                         env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True,
                         text=True, timeout=120)
    folders = sorted(tmp.iterdir())
    assert len(folders) == 1, (folders, run.stderr)  # 4 snapshots and the final write
    assert [f.name for f in folders[0].iterdir()] == ["p.hatchet"]
    fallback = str(folders[0] / "p.hatchet")
    # the script's status is 0: 2 says the profile is not where asked (stderr says where)
    assert run.returncode == 2 and fallback in run.stderr, run.stderr
    assert find(load(fallback)[0], "step")["metrics"]["n"] == 1


# -- 8. the viewer's --html target ---------------------------------------------------------------

@pytest.fixture(scope="module")
def report_profile(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("report")
    name = str(folder / "p")
    proton.start(name)
    with proton.scope("s", {"n": 2}):
        pass
    proton.finalize()
    os.chmod(folder, 0o755)
    return name + ".hatchet"


@pytest.fixture
def shared_folder():
    """A folder under /tmp every user may write (mode 777: no sticky bit)."""
    shared = tempfile.mkdtemp(prefix="proton-shared-")
    os.chmod(shared, 0o777)
    yield shared
    shutil.rmtree(shared)


def view_html(target: str, profile: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proton.viewer.cli", "--html", target,
                           profile], capture_output=True, timeout=60, **kwargs)


@needs_root
def test_another_users_fifo_at_the_html_target_gets_no_report_and_hangs_nothing(
        report_profile, shared_folder):
    report = os.path.join(shared_folder, "report.html")
    subprocess.run(["mkfifo", "-m", "666", report], user=NOBODY, group=NOBODY,
                   extra_groups=[], check=True, timeout=60)
    # the other user reads what is written into the pipe
    # exec: the spy is cat itself, so kill() ends it (sh's child cat was left behind, blocked)
    spy = as_nobody("sh", "-c", f"exec cat '{report}' > '{shared_folder}/stolen'")
    try:
        time.sleep(0.5)
        run = view_html(report, report_profile)
    finally:
        spy.kill()
        spy.wait()
    assert run.returncode == 0, run.stderr
    stolen = os.path.join(shared_folder, "stolen")
    assert not os.path.exists(stolen) or os.path.getsize(stolen) == 0
    info = os.lstat(report)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
    with open(report) as f:
        assert "<html" in f.read().lower()


def test_a_fifo_at_the_html_target_with_no_reader_does_not_hang_the_viewer(report_profile,
                                                                           tmp_path):
    report = tmp_path / "report.html"
    os.mkfifo(report)
    run = view_html(str(report), report_profile)
    assert run.returncode == 0, run.stderr
    assert stat.S_ISREG(os.lstat(report).st_mode) and "<html" in report.read_text().lower()


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_html_to_standard_output_as_dash_or_dev_stdout(report_profile, target):
    result = CliRunner().invoke(viewer, ["--html", target, report_profile])
    assert result.exit_code == 0, result.output
    assert "<html" in result.stdout.lower() and not os.path.exists("-")


@pytest.mark.parametrize("dev", ["rw", "ro"])
def test_html_to_dev_stdout_redirected_to_a_file_leaves_the_link_alone(report_profile, tmp_path,
                                                                        dev):
    """As root /dev is writable and a rename there would replace the link; as a user it is not
    and the rename fails. Both in a mount namespace of the test's own, over a /dev of its own."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a /dev of the test's own")
    script = (f"mount -t tmpfs -o mode=755 tmpfs /dev && ln -s /proc/self/fd/1 /dev/stdout && "
              f"ln -s /proc/self/fd/2 /dev/stderr && mknod -m 666 /dev/null c 1 3 && "
              f"{'mount -o remount,ro /dev && ' if dev == 'ro' else ''}"
              f"{sys.executable} -m proton.viewer.cli --html /dev/stdout {report_profile} "
              f"> {tmp_path}/out.html; echo rc=$?; stat -c %F /dev/stdout")
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["rc=0", "symbolic", "link"], run.stdout + run.stderr
    assert "<html" in (tmp_path / "out.html").read_text().lower()


# -- 9. the source-root check raced by a folder swap ---------------------------------------------

SWAPPER = """
    import os, sys, time
    inside, outside, link, spare = sys.argv[1:5]
    end = time.monotonic() + float(sys.argv[5])
    while time.monotonic() < end:  # `inside` is now the real folder, now a link out of the root
        os.rename(inside, spare)
        os.rename(link, inside)
        os.rename(inside, link)
        os.rename(spare, inside)
"""


def test_a_folder_swapped_for_a_link_while_the_source_is_read_shows_nothing_outside(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "pkg").mkdir(parents=True)
    outside.mkdir()
    (root / "pkg" / "kernel.py").write_text("INSIDE = 1\n")
    (outside / "kernel.py").write_text("SECRET = 1\n")
    os.symlink(outside, root / "link")
    roots = SourceRoots((str(root),))
    path = str(root / "pkg" / "kernel.py")
    swapper = python(SWAPPER, str(root / "pkg"), str(outside), str(root / "link"),
                     str(root / "spare"), "4", cwd=tmp_path)
    shown = {"INSIDE": 0, "SECRET": 0, None: 0}
    try:
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            text, _ = roots.read(path)
            shown[text.split()[0] if text else None] += 1
    finally:
        swapper.communicate(timeout=60)
    assert shown["SECRET"] == 0, shown
    assert shown["INSIDE"] > 0, shown


# -- 15. a user metric named as the viewer's own columns -----------------------------------------

@pytest.mark.parametrize("name", ["node", "name", "node (exc)"])
def test_a_metric_named_as_the_viewers_own_columns_is_refused_in_one_line(name):
    proton.start("unused")
    with pytest.raises(proton.ScopeError) as err:
        with proton.scope("s", {name: 3}):
            pass
    message = str(err.value)
    assert "\n" not in message and "reserved" in message
    assert "node" in message and "name" in message


@pytest.mark.parametrize("name", ["node", "name"])
def test_a_profile_holding_such_a_metric_is_read_anyway(tmp_path, name):
    path = tmp_path / "old.hatchet"  # as a run before the check wrote it
    path.write_text(json.dumps([
        {"frame": {"name": "ROOT", "type": "function"}, "metrics": {name: 0, "n": 0},
         "children": [{"frame": {"name": "s", "type": "function"},
                       "metrics": {name: 3, "n": 1, "cpu_time (ns)": 1000},
                       "children": []}]}, {}]))
    for args in ([], ["-l"], ["-m", "n"], ["--output", "json", "-m", "n"],
                 ["--html", str(tmp_path / "r.html")]):
        result = CliRunner().invoke(viewer, [*args, str(path)])
        assert result.exit_code == 0 and result.exception is None, (args, result.output)
    listed = CliRunner().invoke(viewer, ["-l", str(path)]).output
    shown = CliRunner().invoke(viewer, ["-m", f"{name} (metric)", str(path)])
    assert f"{name} (metric)" in listed and shown.exit_code == 0, listed + shown.output
    assert "3" in shown.output and "s" in shown.output
