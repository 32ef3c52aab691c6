"""PC samples into kernel and line nodes, without a GPU: drained columns as CUPTI hands them
(cupti/pcsampling.Drained) replayed into data/pc_samples."""
from __future__ import annotations

import numpy as np
import pytest

from proton.cupti.pcsampling import Drained
from proton.options import PCOptions, parse_mode
from proton.errors import SessionError
from proton.data.pc_samples import SampleTable, metric_name, split

P = "smsp__pcsamp_warps_issue_stalled_"
REASONS = {3: P + "long_scoreboard", 4: P + "long_scoreboard_not_issued", 7: P + "wait",
           9: P + "no_instructions", 11: P + "selected"}
CRC, OTHER = 0xFCC97F07, 0x1234


def drained(rows, names=None) -> Drained:
    """rows: (crc, function index, pc offset, reason index, samples)."""
    crc, fn, off, reason, samples = (np.array(c, dtype=np.int64) for c in zip(*rows))
    return Drained(crc=crc.astype(np.uint64), offset=off.astype(np.uint64),
                   function=fn.astype(np.uint32), reason=reason.astype(np.uint32),
                   samples=samples, names=names or {(CRC, 1): "matmul_kernel"})


def lines(crc, function, offset):
    if crc != CRC:
        return "its cubin has no line info (compile with -lineinfo)"
    return ("/src/mm.py", 30 if offset < 0x100 else 31)


def test_metric_names_are_tritons():
    assert metric_name(P + "long_scoreboard") == ("stalled_long_scoreboard", False)
    assert metric_name(P + "long_scoreboard_not_issued") == ("stalled_long_scoreboard", True)
    assert metric_name(P + "no_instructions") == ("stalled_no_instruction", False)


def test_not_issued_counts_as_sample_not_stall_and_stalls_sum():
    table = SampleTable(REASONS)
    table.add([drained([(CRC, 1, 0x10, 3, 50), (CRC, 1, 0x10, 4, 20), (CRC, 1, 0x20, 7, 5),
                        (CRC, 1, 0x200, 11, 9)])])
    out = table.attribute(lines, lambda path, fn: [(42, 1.0)])
    by_line = {a.line: table.metrics(a.counts) for a in out}
    line30 = by_line["/src/mm.py", 30]
    assert line30["num_samples"] == 75 and line30["num_stalled_samples"] == 55
    assert line30["stalled_long_scoreboard"] == 50 and line30["stalled_wait"] == 5
    assert line30["stalled_no_instruction"] == 0  # every reason is a column, zeros included
    line31 = by_line["/src/mm.py", 31]
    assert (line31["num_samples"], line31["stalled_selected"]) == (9, 9)
    for metrics in by_line.values():
        assert sum(v for k, v in metrics.items() if k.startswith("stalled_")) == \
            metrics["num_stalled_samples"]
    assert {a.kernel for a in out} == {42}


def test_continuous_samples_split_by_gpu_time_in_whole_numbers():
    table = SampleTable(REASONS)
    table.add([drained([(CRC, 1, 0x10, 3, 101), (CRC, 1, 0x10, 7, 10)])])
    table.add([drained([(CRC, 1, 0x10, 3, 2)])])  # a later drain adds to the same PC
    nodes = [(1, 3e6), (2, 1e6)]  # node 1 ran the function three times as long
    out = table.attribute(lines, lambda path, fn: nodes if path is None else [(9, 1)])
    got = {a.kernel: table.metrics(a.counts) for a in out}
    assert got[1]["stalled_long_scoreboard"] + got[2]["stalled_long_scoreboard"] == 103
    assert got[1]["num_samples"] + got[2]["num_samples"] == 113
    assert got[1]["stalled_long_scoreboard"] == 77 and got[2]["stalled_long_scoreboard"] == 26
    for m in got.values():
        assert all(isinstance(v, int) for v in m.values())


def test_exact_mode_keeps_each_launch_path():
    table = SampleTable(REASONS)
    table.add([drained([(CRC, 1, 0x10, 3, 7)])], path=5)
    table.add([drained([(CRC, 1, 0x10, 3, 2)])], path=6)
    out = table.attribute(lines, lambda path, fn: [(100 + path, 1)])
    assert sorted((a.kernel, a.counts[3]) for a in out) == [(105, 7), (106, 2)]


def test_samples_without_lines_stay_on_the_kernel_with_the_reason():
    table = SampleTable(REASONS)
    table.add([drained([(OTHER, 0, 0x10, 7, 4), (OTHER, 0, 0x30, 7, 6)],
                       names={(OTHER, 0): "elementwise_kernel"})])
    (a,) = table.attribute(lines, lambda path, fn: [(3, 1)])
    assert a.line is None and a.function == "elementwise_kernel" and a.counts == {7: 10}
    assert "no line info" in a.why


@pytest.mark.parametrize("n,weights", [(0, [1, 2]), (1, [1, 1, 1]), (10, [0, 0]), (7, [5])])
def test_split_sums_to_n(n, weights):
    parts = split(n, weights)
    assert sum(parts) == n and len(parts) == len(weights) and min(parts) >= 0


def test_parse_mode():
    assert parse_mode(None) is None and parse_mode("") is None
    assert parse_mode("pcsampling") == PCOptions(10, False)
    assert parse_mode("pcsampling:interval=14:serialize=1") == PCOptions(14, True)
    assert parse_mode("pcsampling:serialize=1") == PCOptions(13, True)  # exact: 8x sparser
    for bad, words in (("pc", "not supported"), ("pcsampling:interval=40", "5..31"),
                       ("pcsampling:rate=3", "interval=N")):
        with pytest.raises(SessionError, match=words):
            parse_mode(bad)


def test_cupti_errors_name_the_problem_and_the_fix():
    from proton.cupti.pcsampling import explain

    assert "permission" in explain("cuptiPCSamplingEnable", 35)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in explain("cuptiPCSamplingEnable", 35)
    assert "does not support PC sampling" in explain("cuptiPCSamplingEnable", 27)
    assert "another profiler" in explain("cuptiPCSamplingEnable", 26)
    assert "error 99" in explain("cuptiPCSamplingStart", 99)
