"""Same numbers as Triton 3.6's proton-viewer on the same files and options.

Triton's viewer prints `v1 v2 name` rows under tree guides; ours is read through --output json.
Values are compared at Triton's printed precision (3 decimals).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer

pytest.importorskip("triton.profiler.viewer")  # triton==3.6.0 comes with the test extra

DATA = os.path.join(os.path.dirname(__file__), "data")
FILES = {name: os.path.join(DATA, name) for name in
         ("recorded.hatchet", "triton_recorded.hatchet", "synthetic.hatchet",
          "example_gpu.hatchet", "python_recorded.hatchet", "triton_python_recorded.hatchet")}


def theirs(path: str, *args: str, multi: bool = False) -> dict[tuple, list]:
    """Rows by path; with multi, every row of a path (names shortened by -f may repeat)."""
    run = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", *args, path],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows, stack = {}, []
    for line in run.stdout.splitlines():
        if not line.strip() or line.startswith(("Sorted", "Warning")):
            continue
        body = line.lstrip("│ ├└─")
        depth = (len(line) - len(body)) // 3
        body = body.removesuffix(" ◀ ").removesuffix(" ▶ ")  # -diff's marks
        *values, name = body.split(" ", len(args[1].split(",")))
        del stack[depth:]
        stack.append(name)
        if multi:
            rows.setdefault(tuple(stack), []).append(float(values[0]))
        else:
            rows[tuple(stack)] = [float(v) for v in values]
    return rows


def ours(path: str, *args: str, multi: bool = False) -> dict[tuple, list]:
    result = CliRunner().invoke(viewer, [*args, "--names", "raw", "--output", "json", path])
    assert result.exit_code == 0, result.output
    out = {}
    for row in json.loads(result.output):
        values = [row[k] for k in row if k not in ("path", "depth")]
        if multi:
            out.setdefault(tuple(row["path"]), []).append(values[0])
        else:
            out[tuple(row["path"])] = values
    return out


def same(a: float | None, b: float) -> bool:
    """Our exact value against Triton's, printed with 3 decimals."""
    if a is None:
        return math.isnan(b)
    return abs(a - b) <= 5e-4 + 1e-9 * abs(b)


@pytest.mark.parametrize("name,metrics", [
    ("recorded.hatchet", "time/us,count"),
    ("recorded.hatchet", "avg_time/ns,time/%"),
    ("triton_recorded.hatchet", "time/ms,count/%"),
    ("synthetic.hatchet", "tflop16/s,gbyte/s"),
    ("synthetic.hatchet", "util,time/s"),
    ("synthetic.hatchet", "tokens,time/ms"),
    ("example_gpu.hatchet", "time/us,avg_time/us"),
])
def test_every_row_has_tritons_numbers(name, metrics):
    expected = theirs(FILES[name], "-m", metrics)
    got = ours(FILES[name], "-m", metrics)
    assert set(got) == set(expected)
    for path, values in expected.items():
        assert all(same(a, b) for a, b in zip(got[path], values)), (path, got[path], values)


@pytest.mark.parametrize("options", [
    ["-i", "tri"], ["-i", ".*scale"], ["-e", "step"], ["-t", "10"], ["-t", "1", "-e", "worker"],
])
def test_filters_show_the_frames_triton_shows(options):
    path = FILES["recorded.hatchet"]
    expected = theirs(path, "-m", "time/us", *options)
    got = ours(path, "-m", "time/us", *options)
    assert set(got) == set(expected)
    for frame, values in expected.items():  # derived values are not recomputed by either
        assert same(got[frame][0], values[0]), frame


@pytest.mark.parametrize("fmt", ["file_function_line", "function_line", "file_function"])
def test_name_formats_match(fmt):
    path = FILES["synthetic.hatchet"]
    assert set(ours(path, "-m", "time/ms", "-f", fmt)) == \
        set(theirs(path, "-m", "time/ms", "-f", fmt))


@pytest.mark.parametrize("name", ["python_recorded.hatchet", "triton_python_recorded.hatchet"])
@pytest.mark.parametrize("fmt", ["full", "file_function_line", "function_line", "file_function"])
def test_python_context_files_show_tritons_names_and_numbers(name, fmt):
    """context="python" files recorded on the H200, ours and Triton's, every frame shown
    (Triton's viewer folds no library frames). Triton's viewer leaves out frames with no time
    at all (its own scope.__enter__ frames in its file); ours shows them empty."""
    expected = theirs(FILES[name], "-m", "time/us", "-f", fmt, multi=True)
    got = ours(FILES[name], "-m", "time/us", "-f", fmt, "--no-collapse-libraries", multi=True)
    assert set(expected) <= set(got) and len(expected) >= 10
    for path, values in got.items():
        timed = sorted(v for v in values if v is not None)
        assert len(timed) == len(expected.get(path, [])), (path, values, expected.get(path))
        assert all(same(a, b) for a, b in zip(timed, sorted(expected.get(path, [])))), path


def test_diff_matches_triton_where_both_profiles_have_the_frame():
    """-diff OTHER: FILE minus OTHER. Triton prints nan for frames FILE lacks; we count them as 0
    in FILE (so the change is minus OTHER's value) and check that separately."""
    this, other = FILES["example_gpu.hatchet"], FILES["recorded.hatchet"]
    expected = theirs(this, "-m", "time/us", "-diff", other, multi=True)
    got = ours(this, "-m", "time/us", "-diff", other)
    assert set(got) == set(expected)
    # FILE's ROOT names its host, pid and script: Triton's diff (hatchet's, by the whole frame)
    # prints two ROOTs, FILE's unmatched and OTHER's as nan; ours matches frames by name
    root = expected.pop(("ROOT",))
    assert root[0] == pytest.approx(5682.062) and math.isnan(root[1])
    assert same(got[("ROOT",)][0], root[0] - theirs(other, "-m", "time/us")[("ROOT",)][0])
    compared = 0
    for path, values in expected.items():
        assert len(values) == 1, path
        if math.isnan(values[0]):
            assert got[path][0] < 0 and got[path][1] == -100.0, path  # gone in FILE
        else:
            assert same(got[path][0], values[0]), (path, got[path], values)
            compared += 1
    assert compared >= 10


def test_tritons_diff_of_two_of_our_runs_matches_every_frame(tmp_path):
    """Two runs of one script (two pids): Triton's -diff (hatchet's, which tells frames apart
    by their every key) pairs each frame with the other run's, as ours does; the writing
    process is the root's "job", not its frame."""
    script = tmp_path / "run.py"
    script.write_text("import sys, proton\n"
                      "proton.start(sys.argv[1])\n"
                      "with proton.scope('step', {'tokens': int(sys.argv[2])}):\n"
                      "    with proton.scope('inner', {'tokens': 1}):\n"
                      "        pass\n"
                      "proton.finalize()\n")
    for name, tokens in (("a", "30"), ("b", "10")):
        done = subprocess.run([sys.executable, str(script), str(tmp_path / name), tokens],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    a, b = str(tmp_path / "a.hatchet"), str(tmp_path / "b.hatchet")
    expected = theirs(a, "-m", "tokens", "-diff", b, multi=True)
    assert expected == {("ROOT",): [20.0], ("ROOT", "step"): [20.0],
                        ("ROOT", "step", "inner"): [0.0]}  # one row each: every frame paired
    assert {k: v[:1] for k, v in ours(a, "-m", "tokens", "-diff", b).items()} == expected
    with open(a) as f:
        root = json.load(f)[0]
    assert root["job"]["pid"] != 0 and "pid" not in root["frame"]


def test_vectors_and_properties_in_our_file_leave_tritons_numbers_alone(tmp_path):
    import proton

    name = str(tmp_path / "v")
    proton.start(name)
    for i in range(2):
        with proton.scope("fwd", {"tokens": 10, "tile (pty)": 64 * (i + 1), "lens": [1, 2]}):
            pass
    proton.finalize()
    expected = theirs(name + ".hatchet", "-m", "tokens")
    got = ours(name + ".hatchet", "-m", "tokens")
    assert expected == {("ROOT",): [20.0], ("ROOT", "fwd"): [20.0]}
    assert got == expected


def test_kernel_scopes_read_as_the_file_holds_them(tmp_path):
    """A tree of kernel scopes (backend="instrumentation") made as the runtime makes it, from
    the buffer recorded on an H100 (kernel > load, compute, store) read as three launches:
    every scope, the one with children included, shows in Triton's viewer and ours the value
    its node holds in the file (a viewer adds children into a node whose metric the root also
    carries)."""
    from test_html_warps import scoped_profile

    path = scoped_profile(tmp_path)
    with open(path) as f:
        root = json.load(f)[0]
    held, todo = {}, [(root, ())]
    while todo:
        node, above = todo.pop()
        names = (*above, node["frame"]["name"])
        held[names] = node["metrics"]
        todo += [(child, names) for child in node["children"]]
    kernel = ("ROOT", "train_step", "scoped", "kernel")
    assert held[kernel]["normalized_cycles"] < 2 * held[(*kernel, "compute")]["normalized_cycles"]
    for metric in ("normalized_cycles", "cycles"):
        expected, got = theirs(path, "-m", metric), ours(path, "-m", metric)
        scopes = [p for p in held if metric in held[p]]
        for names in sorted(scopes, key=len, reverse=True):  # the scopes, then any above
            assert same(got[names][0], held[names][metric]), (metric, names, got[names])
            assert same(held[names][metric], expected[names][0]), (metric, names,
                                                                   expected[names])
        assert len(scopes) == 4 and kernel in scopes  # only the scopes hold it
