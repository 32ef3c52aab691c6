"""A job file from anyone (issue 59, items 8, 9, 21 and 26): its ranks statistics cost what the
file holds, read in time linear in its frames, and a bad entry is one line, never a traceback."""
from __future__ import annotations

import copy
import json
import time

import pytest
from click.testing import CliRunner

from proton import rank_merge
from proton.viewer.cli import viewer
from test_viewer_input import bounded_viewer, frame


def show(*args):
    return CliRunner().invoke(viewer, list(args))


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.startswith("Error: "), \
        result.output
    assert result.output.count("\n") == 1, result.output
    return result.output


def job_document(ranks: int = 4, siblings: int = 1) -> list:
    """The job file the job's own merge writes for `ranks` ranks, each of whose step holds
    `siblings` kernels named k (a kernel on several GPUs, or many launches of one name)."""
    merge = rank_merge.Reducer()
    for r in range(ranks):
        kernels = [frame("k", **{"time (ns)": 10 * (r + 1) + i, "count": 2, "device_id": "0",
                                 "device_type": "CUDA"}) for i in range(siblings)]
        root = frame("ROOT", frame("step", *kernels, **{"cpu_time (ns)": 100 + r}),
                     **{"time (ns)": 0, "count": 0})
        merge.add(rank_merge.leaf(root, r, {}, {"rank": r, "world_size": ranks}))
    return rank_merge.document(merge.result(), ranks)


def write(tmp_path, doc, name="job.hatchet") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return str(path)


def test_a_job_file_reads_with_its_spread(tmp_path):
    """The fixture the tests below break: 4 ranks, kernel k's time 10, 20, 30 and 40 ns."""
    done = show("-m", "time/ns", write(tmp_path, job_document()))
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[-1].split() == ["100", "10", "25", "40", "3", "1.600",
                                                    "└─", "k"]


def test_a_small_job_file_claiming_many_ranks_costs_what_it_holds(tmp_path):
    """Item 8: 365 bytes saying 50 million ranks without listing them took 3.2 GB (2e8: a
    MemoryError traceback): the ranks a file does not list are paid for like its cells."""
    doc = [{"frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 0},
            "children": [{"frame": {"name": "k", "type": "function"},
                          "metrics": {"time (ns)": 5}, "children": [],
                          "ranks": {"n": 1, "few": [0], "stats": {"time (ns)": [5, 0, 5, 0, 1, 0]}}}],
            "ranks": {"n": 1, "few": [0], "size": 200_000_000, "lo": 0,
                      "stats": {"time (ns)": [5, 0, 5, 0, 1, 0]}}}, {}]
    path = write(tmp_path, doc)
    done, seconds, peak_mb = bounded_viewer(path, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 2, done.stderr
    assert "200,000,000 ranks not listed" in done.stderr and "Traceback" not in done.stderr
    assert peak_mb < 400, peak_mb
    doc[0]["ranks"]["size"] = 1000  # a job of that many ranks listed by lo and size reads
    done, _, _ = bounded_viewer(write(tmp_path, doc), timeout=60)
    assert done.returncode == 0 and " 1 of 1000 ranks" not in done.stdout, done.stderr[-2000:]
    assert "[rank 0 only]" in done.stdout or "[ranks 0 of 1000]" in done.stdout, done.stdout


def test_many_same_named_siblings_read_in_linear_time(tmp_path):
    """Item 9: 20,000 kernels of one name under one scope took 131 s (a list.index per frame)
    where the same tree as a plain profile took 1.25 s."""
    path = write(tmp_path, job_document(ranks=2, siblings=20_000))
    start = time.monotonic()
    done, _, _ = bounded_viewer("-d", "1", "-m", "time/ns", path, timeout=120)
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-2000:]
    assert seconds < 20, seconds
    # and each sibling keeps its own spread: the i-th k took 10 + i ns on rank 0, 20 + i on 1
    lines = show("-m", "time/ns", "--output", "json", path).stdout
    rows = [r for r in json.loads(lines) if r["path"][-1] == "k"]
    assert sorted(r["time (ns) min"] for r in rows) == [10.0 + i for i in range(20_000)]
    assert all(r["time (ns) max"] == r["time (ns) min"] + 10 == r["time (ns)"] - r[
        "time (ns) min"] for r in rows)


def _set(doc, where: str, key: str, value) -> list:
    doc = copy.deepcopy(doc)
    node = doc[0] if where == "root" else doc[0]["children"][0]["children"][0]
    if key.startswith("stats."):
        node["ranks"]["stats"][key[6:]] = value
    elif value is None:
        node["ranks"].pop(key)
    else:
        node["ranks"][key] = value
    return doc


@pytest.mark.parametrize("where,key,value,words", [
    ("root", "lo", "x", "has lo 'x', not a rank"),
    ("root", "lo", -1, "has lo -1, not a rank"),
    ("root", "lo", [], "has lo [], not a rank"),
    ("root", "size", -5, "has size -5, not a number of ranks from 1"),  # item 26: means as inf
    ("root", "size", 0, "has size 0, not a number of ranks from 1"),
    ("root", "size", 4.0, "has size 4.0"),
    ("root", "ranks", [0, 1, 2], "lists ranks [0, 1, 2], not its 4 rank numbers"),
    ("kernel", "n", "x", "of frame 'k' has n 'x', not a number of ranks from 0 to 4"),
    ("kernel", "n", 2 ** 70, "has n 1180591620717411303424, not a number of ranks"),
    ("kernel", "n", 5, "has n 5, not a number of ranks from 0 to 4"),
    ("kernel", "few", "x", "has few 'x', not null or a list of at most 4 ranks"),
    ("kernel", "stats", "x", "has stats 'x', not a map of metric to numbers"),
    ("kernel", "stats.time (ns)", 5, "has stats 'time (ns)': 5, not a list of 6 numbers"),
    ("kernel", "stats.time (ns)", ["a", 1, 1, 0, 1, 0], "whose item 0 is not a finite number"),
    ("kernel", "stats.time (ns)", [1, 1, 1, 0, 9, 0], "whose item 4 is not a number of ranks"),
    ("kernel", "stats.time (ns)", [1, 1, 1, -1, 1, 0], "whose item 3 is not a rank"),
    ("kernel", "stats.time (ns)", [1, 1e400, 1, 0, 1, 0], "whose item 1 is not a finite"),
    ("kernel", "stats.time (ns)", [1, 1, None, 0, 1, 0], "whose item 2 is not a finite"),
])
def test_a_bad_ranks_entry_is_one_line_naming_it(tmp_path, where, key, value, words):
    """Item 21: a bad lo, n, stats (or own) in a job file's ranks entries was a traceback in 9
    of 9 cases; item 26: size -5 printed every mean as inf."""
    path = write(tmp_path, _set(job_document(), where, key, value))
    for args in ([path], ["--output", "json", path], ["--diagnose", path], ["-l", path]):
        error = one_line_error(show(*args))
        assert words in error and "give the job file a job wrote, or its rank files" in error


def test_an_entry_the_merge_never_writes_is_ignored(tmp_path):
    """`own` is no key of the format: a bad one (a traceback before) is left alone."""
    doc = job_document()
    doc[0]["children"][0]["ranks"]["own"] = {"time (ns)": "x"}
    done = show("-m", "time/ns", write(tmp_path, doc))
    assert done.exit_code == 0, done.output
    assert "Traceback" not in done.output
