"""Standard output on a full disk (`> /dev/full`) or a closed pipe (`| head`): every command
that prints its result ends with one line and a nonzero status, never a traceback (issue 59,
item 23)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

DATA = os.path.join(os.path.dirname(__file__), "data")
RECORDED = os.path.join(DATA, "recorded.hatchet")
FULL = ("Error: cannot write to standard output: No space left on device; send it to a file "
        "on a disk with room, or to a pipe\n")
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


def run(args: list[str], stdout) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def a_trace(tmp_path) -> str:
    path = tmp_path / "run.chrome_trace"
    path.write_text(json.dumps({"traceEvents": [
        {"name": "k", "ph": "X", "ts": i, "dur": 1, "pid": "GPU 0", "tid": 0}
        for i in range(1000)]}))
    return str(path)


VIEWS = {"tree": [RECORDED], "json": ["--output", "json", RECORDED],
         "csv": ["--output", "csv", RECORDED], "list": ["-l", RECORDED],
         "diagnose": ["--diagnose", os.path.join(DATA, "diagnose_recorded.hatchet")],
         "triton": ["--output", "triton", "-m", "time/ms", RECORDED],
         "trace": ["--output", "trace", "TRACE"]}


@needs_dev_full
@pytest.mark.parametrize("view", VIEWS)
def test_a_full_disk_under_the_viewers_output_is_one_line_and_status_1(view, tmp_path):
    args = [a_trace(tmp_path) if a == "TRACE" else a for a in VIEWS[view]]
    with open("/dev/full", "w") as full:
        done = run(["proton.viewer.cli", *args], full)
    assert (done.returncode, done.stderr) == (1, FULL)


@needs_dev_full
def test_a_full_disk_under_proton_ps_is_one_line_and_status_1():
    with open("/dev/full", "w") as full:
        done = run(["proton", "ps"], full)
    assert (done.returncode, done.stderr) == (1, FULL)


def test_a_closed_pipe_ends_the_viewer_quietly_with_status_1():
    read, write = os.pipe()
    os.close(read)
    try:
        done = run(["proton.viewer.cli", RECORDED], write)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (1, "")
