"""bench/peer_table.py: the table of Triton's own Proton tests run against Triton's and ours
(the peer runner's compare.txt), each Triton-passing test ours fails either documented in
bench/peer_differences.txt or listed as failing."""
from __future__ import annotations

import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
TABLE = os.path.join(BENCH, "peer_table.py")

COMPARE = """test                                          triton           project_l2
test_api.py::test_state                       passed           passed
test_profile.py::test_pcsampling              passed           failed
test_profile.py::test_trace                   passed           failed
test_viewer.py::test_util                     failed           failed

triton {'failed': 1, 'passed': 3}
project_l2 {'failed': 3, 'passed': 1}
passed under triton, not under project_l2: 2
    test_profile.py::test_pcsampling
    test_profile.py::test_trace
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TABLE, *args], capture_output=True, text=True)


def test_each_lost_test_is_a_documented_difference_or_failing(tmp_path):
    (tmp_path / "compare.txt").write_text(COMPARE)
    (tmp_path / "differences.txt").write_text(
        "# a comment\n\ntest_profile.py::test_pcsampling  a chance test for both\n")
    done = run(str(tmp_path / "compare.txt"), str(tmp_path / "differences.txt"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("peer suite: triton passed 3; project_l2 passed 1 of those, "
                        "1 documented differences, 1 failing")
    assert "  difference  test_profile.py::test_pcsampling: a chance test for both" in lines
    assert "  FAILING     test_profile.py::test_trace" in lines


COMPARE_39 = """test                                          triton           project
test_api.py::test_state                       passed           passed
test_profile.py::test_trace                   passed           failed
test_api.py::test_scope                       failed           passed

triton {'failed': 1, 'passed': 2}
project {'failed': 1, 'passed': 2}
passed under triton, not under project: 1
    test_profile.py::test_trace (failed)
passed under project, not under triton: 1
    test_api.py::test_scope (triton: failed)
"""


def test_the_39_runners_table_counts_only_what_ours_lost(tmp_path):
    """Triton 3.9's runner says how each lost test ended and lists ours' extra passes too."""
    (tmp_path / "compare.txt").write_text(COMPARE_39)
    (tmp_path / "differences.txt").write_text("test_profile.py::test_trace  a reason\n")
    done = run(str(tmp_path / "compare.txt"), str(tmp_path / "differences.txt"))
    assert done.stdout.splitlines()[0] == ("peer suite: triton passed 2; project passed 1 of "
                                           "those, 1 documented differences, 0 failing")


def test_the_projects_own_differences_file_names_real_tests_with_reasons():
    with open(os.path.join(BENCH, "peer_differences.txt")) as f:
        entries = [line.split(None, 1) for line in f if line.strip() and not line.startswith("#")]
    assert len(entries) <= 5  # the bound on documented differences
    for test, *reason in entries:
        assert "::" in test and test.split("::")[0].startswith("test_"), test
        assert reason and len(reason[0].strip()) > 20, test


def test_a_missing_compare_file_says_so():
    done = run("/nonexistent/compare.txt")
    assert done.returncode == 1 and "not found" in done.stdout
