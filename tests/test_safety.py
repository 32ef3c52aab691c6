"""docs/safety.md: metric values are checked or made plain where they are given, a profile
is never lost to a value or to the writer, and no file is written through a name that another
user could have placed first (a symlink at a predictable temporary name)."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import find, load
import proton
from proton.api import write_profiles
from proton.context.frames import unwind
from proton.data import writer
from proton.format_msgpack import unpackb
from proton.viewer.cli import viewer
from proton.viewer.reader import load as view


@pytest.fixture(autouse=True)
def no_live_sessions():
    yield
    unwind(0)
    write_profiles()


def record(name: str, metrics: dict, data: str = "tree", output_format: str = "") -> None:
    """One session: a scope "s" with `metrics` and a scope "t" with n=1."""
    proton.start(name, data=data)
    with proton.scope("s", metrics):
        pass
    with proton.scope("t", {"n": 1}):
        pass
    proton.finalize(output_format=output_format)


# -- 1. metric values ----------------------------------------------------------------------------

PLAIN = [
    (np.int64(4096), 4096), (np.int32(-7), -7), (np.uint8(255), 255), (np.float32(1.5), 1.5),
    (np.float16(0.25), 0.25), (np.longdouble(2.5), 2.5), (Decimal("1.25"), 1.25),
    (Fraction(1, 4), 0.25), (np.uint64(2**64 - 1), 2.0**64), (np.array(3, dtype=np.int16), 3),
    (np.array([1, 2], dtype=np.uint32), [1, 2]), ([np.float32(0.5), Decimal(2)], [0.5, 2.0]),
    ((Fraction(3, 2), 1), [1.5, 1]),
]


@pytest.mark.parametrize("value,written", PLAIN, ids=[repr(v)[:30] for v, _ in PLAIN])
def test_numpy_decimal_and_fraction_metrics_are_written_as_plain_numbers(value, written,
                                                                         profile_path):
    name, read = profile_path
    record(name, {"n": value})
    root, _ = read()
    assert find(root, "s")["metrics"]["n"] == written
    assert type(find(root, "s")["metrics"]["n"]) is type(written)  # 4096, not 4096.0
    assert find(root, "t")["metrics"]["n"] == 1


def test_a_numpy_metric_under_the_proton_command_is_written_and_exits_0(tmp_path):
    (tmp_path / "s.py").write_text(
        "import numpy as np, proton\nx = np.zeros((64, 32))\n"
        "with proton.scope('step', {'tokens': np.prod(x.shape), 'loss': np.float32(0.5)}):\n"
        "    pass\n")
    run = subprocess.run([sys.executable, "-m", "proton", "-n", "p", "s.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "could not" not in run.stderr, run.stderr
    metrics = find(load(tmp_path / "p.hatchet")[0], "step")["metrics"]
    assert (metrics["tokens"], metrics["loss"]) == (2048, 0.5)


REFUSED = [
    (np.complex64(1 + 2j), "complex64", "real numbers"), (3j, "complex", "real numbers"),
    (True, "bool", "real numbers"), (np.bool_(True), "bool", "real numbers"),
    ("12", "str", "real numbers"), ([1, 2j], "element 1 is 2j (complex)", "real numbers"),
    (np.array([1 + 1j, 2]), "element 0 is (1+1j) (complex)", "real numbers"),
    ([[1, 2]], "element 0 is [1, 2] (list)", "real numbers"),
    (Decimal("sNaN"), "Decimal", "no float holds"),
    (Decimal("1e400"), "Decimal", "beyond what a float holds"),
    (Fraction(10**400, 3), "Fraction", "beyond what a float holds"),
    (np.longdouble("1e400"), "longdouble", "beyond what a float holds"),
]


@pytest.mark.parametrize("value,kind,why", REFUSED, ids=[repr(v)[:30] for v, _, _ in REFUSED])
def test_a_metric_that_is_not_a_real_number_is_refused_at_the_call_with_one_line(
        value, kind, why, profile_path):
    name, read = profile_path
    proton.start(name)
    with pytest.raises(proton.ProtonError) as err:
        proton.scope("s", {"tokens": value})
    message = str(err.value)
    assert message.startswith("metric 'tokens' has value ") and "\n" not in message, message
    assert kind in message and why in message, message
    with proton.scope("t", {"n": 1}):
        pass
    proton.finalize()
    assert find(read()[0], "t")["metrics"]["n"] == 1  # the session goes on


# -- 2. huge ints --------------------------------------------------------------------------------

@pytest.mark.parametrize("digits", [401, 4301, 10_000])
def test_an_int_no_float_holds_is_refused_at_the_call_saying_its_size(digits, profile_path):
    name, read = profile_path
    proton.start(name)
    with pytest.raises(proton.ProtonError) as err:
        proton.scope("s", {"n": 10 ** (digits - 1)})
    message = str(err.value)
    assert f"metric 'n' has value <int of about {digits} digits> (int), beyond what a float " \
           "holds" in message and "\n" not in message, message
    with pytest.raises(proton.ProtonError, match="element 1 is <int of about"):
        proton.scope("s", {"n": [1, 10 ** (digits - 1)]})
    proton.finalize()
    assert read()[0]["children"] == []


@pytest.mark.parametrize("fmt", ["hatchet", "hatchet_msgpack"])
def test_ints_past_64_bits_are_written_as_floats_the_viewer_reads(fmt, tmp_path):
    name = str(tmp_path / "big")
    proton.start(name)
    with proton.scope("s", {"n": 10**30}):
        pass
    for _ in range(3):  # each fits in 64 bits, their sum does not
        with proton.scope("t", {"n": 2**63 - 1}):
            pass
    proton.finalize(output_format=fmt)
    path = f"{name}.{fmt}"
    with open(path, "rb") as f:
        raw = f.read()
    root = (unpackb(raw) if fmt == "hatchet_msgpack" else json.loads(raw))[0]
    assert find(root, "s")["metrics"]["n"] == 1e30
    assert find(root, "t")["metrics"]["n"] == float(3 * (2**63 - 1))
    frame = view(path).gf.dataframe.set_index("name")
    assert frame.loc["s", "n"] == 1e30 and frame.loc["ROOT", "n (inc)"] == 1e30 + 3 * 2.0**63
    result = CliRunner().invoke(viewer, ["-m", "n", path])
    assert result.exit_code == 0 and " s\n" in result.output, result.output


# -- the writer keeps the profile whatever a value is ----------------------------------------

def _doc_with(value) -> list:
    return [{"frame": {"name": "ROOT", "type": "function", "odd": value},
             "metrics": {"n": 0}, "children": [{"frame": {"name": "s", "type": "function"},
                                                "metrics": {"n": 3}, "children": []}]}, {}]


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_value_the_encoder_refuses_costs_that_value_not_the_profile(encoding, tmp_path,
                                                                      capsys):
    path = str(tmp_path / "p.hatchet")
    assert writer.write(_doc_with([np.int32(7), object(), 2**70, "\udc80"]), path,
                        encoding=encoding) == path
    with open(path, "rb") as f:
        raw = f.read()
    root, _ = unpackb(raw) if encoding == "msgpack" else json.loads(raw)
    assert root["frame"]["odd"] == [7, None, 2.0**70, "?"]
    assert find(root, "s")["metrics"]["n"] == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert "TypeError" in line or "MsgpackError" in line, line
    assert "writing it with 1 value(s) that are not numbers, text, lists or maps as null" in line
    assert os.listdir(tmp_path) == ["p.hatchet"]  # no temporary file left


def test_a_profile_that_cannot_go_where_asked_nor_encode_whole_still_reaches_the_fallback(
        tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    (tmp_path / "blocker").write_text("")  # a file where the folder should be
    with pytest.raises(proton.ProfileWriteError) as err:
        writer.write(_doc_with(np.float32(0.5)), str(tmp_path / "blocker" / "p.hatchet"))
    fallback = str(err.value).split("; wrote ")[1].split(" instead")[0]
    root = load(fallback)[0]
    assert root["frame"]["odd"] == 0.5 and find(root, "s")["metrics"]["n"] == 3


# -- 3. files another user could place -----------------------------------------------------------

@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text("the job's user owns this\n")
    return path


FORMATS = [("tree", "", ".hatchet"), ("tree", "hatchet_msgpack", ".hatchet_msgpack"),
           ("trace", "", ".chrome_trace")]


@pytest.mark.parametrize("data,fmt,ext", FORMATS, ids=[e for _, _, e in FORMATS])
def test_a_symlink_at_the_old_temporary_name_is_not_followed(data, fmt, ext, tmp_path, victim):
    name = str(tmp_path / "p")
    planted = f"{name}{ext}.{os.getpid()}.tmp"  # the name the writer used to open
    os.symlink(victim, planted)
    record(name, {"n": 2}, data=data, output_format=fmt)
    assert victim.read_text() == "the job's user owns this\n"
    assert os.readlink(planted) == str(victim)
    with open(name + ext, "rb") as f:
        raw = f.read()
    if data == "trace":
        assert {e["name"] for e in json.loads(raw)["traceEvents"] if e["ph"] == "X"} >= {"s", "t"}
    else:
        root = (unpackb(raw) if fmt else json.loads(raw))[0]
        assert find(root, "s")["metrics"]["n"] == 2


def test_a_symlink_at_the_profile_name_is_replaced_not_followed(tmp_path, victim):
    name = str(tmp_path / "p")
    os.symlink(victim, name + ".hatchet")
    record(name, {"n": 2})
    assert victim.read_text() == "the job's user owns this\n"
    assert not os.path.islink(name + ".hatchet")
    assert find(load(name + ".hatchet")[0], "s")["metrics"]["n"] == 2


def test_a_symlink_at_a_part_files_name_is_not_followed(tmp_path, victim):
    name = str(tmp_path / "pf")
    for planted in (f"{name}.part_0.hatchet", f"{name}.part_0.hatchet.{os.getpid()}.tmp"):
        os.symlink(victim, planted)
    sid = proton.start(name, mode="periodic_flushing:format=hatchet")
    with proton.scope("s", {"n": 2}):
        pass
    proton.data.advance_phase(session=sid)
    proton.finalize()
    assert victim.read_text() == "the job's user owns this\n"
    assert find(load(f"{name}.part_0.hatchet")[0], "s")["metrics"]["n"] == 2


def test_a_fifo_at_the_profile_name_does_not_hang_the_write(tmp_path):
    os.mkfifo(tmp_path / "p.hatchet")  # no writer: opening it to read would wait for ever
    run = subprocess.run([sys.executable, "-c", "import proton\nproton.start('p')\n"
                          "with proton.scope('s', {'n': 2}): pass\nproton.finalize()\n"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert find(load(tmp_path / "p.hatchet")[0], "s")["metrics"]["n"] == 2


def test_the_fallback_goes_to_a_new_folder_only_the_user_may_enter(tmp_path, monkeypatch,
                                                                   victim):
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    for planted in ("p.hatchet", f"p.hatchet.{os.getpid()}.tmp", "proton-p.hatchet"):
        os.symlink(victim, shared / planted)  # names one might guess in a shared /tmp
    (tmp_path / "blocker").write_text("")
    proton.start(str(tmp_path / "blocker" / "p"))
    with proton.scope("s", {"n": 2}):
        pass
    with pytest.raises(proton.ProfileWriteError) as err:
        proton.finalize()
    fallback = str(err.value).split("; wrote ")[1].split(" instead")[0]
    folder = os.lstat(os.path.dirname(fallback))
    assert os.path.dirname(os.path.dirname(fallback)) == str(shared)
    assert stat.S_ISDIR(folder.st_mode) and stat.S_IMODE(folder.st_mode) == 0o700
    assert folder.st_uid == os.getuid() and not os.path.islink(fallback)
    assert victim.read_text() == "the job's user owns this\n"
    assert find(load(fallback)[0], "s")["metrics"]["n"] == 2


def test_the_html_report_replaces_a_symlink_at_its_name(tmp_path, victim):
    name = str(tmp_path / "p")
    record(name, {"n": 2})
    report = tmp_path / "report.html"
    os.symlink(victim, report)
    result = CliRunner().invoke(viewer, ["--html", str(report), name + ".hatchet"])
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "the job's user owns this\n"
    assert not report.is_symlink() and "<html" in report.read_text().lower()


def test_written_files_get_the_mode_open_would_give(tmp_path):
    old = os.umask(0o027)
    try:
        record(str(tmp_path / "p"), {"n": 2})
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "p.hatchet").st_mode) == 0o640


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user (uid 65534)")
def test_another_user_of_a_shared_folder_cannot_make_the_job_overwrite_its_files(tmp_path,
                                                                                 victim):
    shared = tempfile.mkdtemp(prefix="proton-shared-")  # under /tmp: the other user reaches it
    try:
        os.chmod(shared, 0o777)  # writable by all, no sticky bit: links there are followed
        name = os.path.join(shared, "p")
        for planted in (f"{name}.hatchet", f"{name}.hatchet.{os.getpid()}.tmp"):
            subprocess.run(["ln", "-s", str(victim), planted], user=NOBODY, group=NOBODY,
                           extra_groups=[], check=True, timeout=60)
        assert os.lstat(name + ".hatchet").st_uid == NOBODY
        record(name, {"n": 2})
        assert victim.read_text() == "the job's user owns this\n"
        written = os.lstat(name + ".hatchet")
        assert stat.S_ISREG(written.st_mode) and written.st_uid == 0
        assert find(load(name + ".hatchet")[0], "s")["metrics"]["n"] == 2
    finally:
        shutil.rmtree(shared)


def test_the_html_report_goes_to_a_pipe_as_standard_output_and_a_fifo_at_its_name_is_replaced(
        tmp_path):
    """A pipe is reached through `-` (standard output), never by opening a name: a FIFO at the
    report's name, even the user's own behind a link, is replaced by the page (issue 46)."""
    name = str(tmp_path / "p")
    record(name, {"n": 2})
    piped = subprocess.run([sys.executable, "-m", "proton.viewer.cli", "--html", "-",
                            name + ".hatchet"], stdout=subprocess.PIPE, timeout=60)
    assert piped.returncode == 0 and b"<html" in piped.stdout.lower()
    fifo, link = tmp_path / "pipe", tmp_path / "out.html"
    os.mkfifo(fifo)
    os.symlink(fifo, link)
    result = CliRunner().invoke(viewer, ["--html", str(link), name + ".hatchet"])
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and not os.path.islink(link)
    assert "<html" in link.read_text().lower()
