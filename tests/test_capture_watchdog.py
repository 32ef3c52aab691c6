"""The capture's watchdog (endpoint.run_phase): a phase that outruns its deadline abandons the
capture with one line to the capturer and the job's stderr, frees the endpoint at once, and
tidies up if the work finishes late."""
from __future__ import annotations

import threading
import time

import pytest

from proton.service.endpoint import CaptureAbandoned, run_phase


def test_a_phase_past_its_deadline_abandons_the_capture_with_one_line(capsys):
    release = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(CaptureAbandoned) as caught:
        run_phase("stop", lambda: release.wait(10), 0.2)
    waited = time.monotonic() - t0
    release.set()
    message = str(caught.value)
    assert 0.15 < waited < 2  # the deadline, not the work's own 10 s
    assert "abandoned" in message and "stop" in message and "\n" not in message
    assert message in capsys.readouterr().err  # the job's stderr says it too


def test_work_that_finishes_after_the_deadline_is_tidied_up():
    release, tidied = threading.Event(), []
    with pytest.raises(CaptureAbandoned):
        run_phase("start", lambda: release.wait(10) and 7, 0.1, late=tidied.append)
    release.set()
    deadline = time.monotonic() + 5
    while not tidied and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tidied == [7]


def test_a_phase_in_time_gives_its_result_or_its_error_and_nothing_is_tidied():
    tidied = []
    assert run_phase("write", lambda: ["a.hatchet"], 5, late=tidied.append) == ["a.hatchet"]

    def fail():
        raise ValueError("disk full")

    with pytest.raises(ValueError, match="disk full"):
        run_phase("write", fail, 5, late=tidied.append)
    assert tidied == []
