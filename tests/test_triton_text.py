"""`proton-viewer --output triton` prints what Triton 3.6's proton-viewer prints, byte for byte,
and `proton-viewer` takes every option Triton's takes. The reference is Triton's installed
viewer (the test extra), run in this process on the same files: tests/data and profiles
written here."""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys
from unittest import mock

import pytest
from click.testing import CliRunner

from proton.viewer import parse
from proton.viewer.cli import expand_prefixes, viewer
from proton.viewer.triton_text import tree

triton_viewer = pytest.importorskip("triton.profiler.viewer")

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.fixture(autouse=True)
def recursion_limit():
    """hatchet's filter sets the recursion limit to 1000; give the tests theirs back."""
    limit = sys.getrecursionlimit()
    yield
    sys.setrecursionlimit(limit)


def theirs(*args: str) -> str | None:
    """What Triton's proton-viewer prints on stdout; None where it fails."""
    out = io.StringIO()
    with mock.patch.object(sys, "argv", ["proton-viewer", *args]), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            triton_viewer.main()
        except Exception:  # noqa: BLE001 - Triton's viewer raises where ours says why
            return None
    return out.getvalue()


def ours(*args: str):
    return CliRunner().invoke(viewer, ["--output", "triton", *args])


def data(name: str) -> str:
    return os.path.join(DATA, name)


OPTIONS = [
    ["-m", "time/ms"],
    ["-m", "time/us,count,avg_time/us"],
    ["-m", "time/%,time/ms", "--print-sorted"],
    ["-l"],
    ["-m", "time/ms", "-d", "2"],
    ["-m", "time/ms", "-t", "0.001"],
    ["-m", "time", "-t", "100000"],
    ["-m", "time/ms", "-i", ".*kernel.*"],
    ["-m", "time/ms", "-e", ".*mm.*"],
    ["-m", "time/ms", "-f", "function_line"],
    ["-m", "time/ms", "-f", "file_function", "--print-sorted"],
    ["-m", "time/ms", "-f", "file_function_line"],
    ["-m", "count/%,time/ns", "-diff", data("recorded.hatchet")],
    ["--metrics", "time/s", "--depth", "3", "--format", "full", "--threshold", "1e-6"],
]
FILES = ["recorded.hatchet", "triton_recorded.hatchet", "python_recorded.hatchet",
         "triton_python_recorded.hatchet", "synthetic.hatchet", "example_gpu.hatchet",
         "diagnose_recorded.hatchet"]


def without_job_keys(path: str, folder) -> str:
    """A copy of the profile whose ROOT frame says nothing of where it ran (no host, pid):
    Triton's viewer matches frames on every frame key, so only then do two runs' ROOTs meet
    in its -diff, as in ours (which matches by name and type)."""
    with open(path) as f:
        doc = json.load(f)
    doc[0]["frame"] = {k: v for k, v in doc[0]["frame"].items() if k in ("name", "type")}
    out = os.path.join(folder, "nojob." + os.path.basename(path))
    with open(out, "w") as f:
        json.dump(doc, f)
    return out


@pytest.mark.parametrize("name", FILES)
def test_text_is_tritons_byte_for_byte_on_every_option(name, tmp_path):
    compared = 0
    for options in OPTIONS:
        if "-diff" in options:  # what Triton prints where the two ROOTs match
            base = without_job_keys(options[-1], tmp_path)
            expected = theirs(*options[:-1], base, without_job_keys(data(name), tmp_path))
            expected = expected and expected.replace(base, options[-1])
        else:
            expected = theirs(*options, data(name))
        result = ours(*options, data(name))
        if expected is None:  # Triton raises (a filter that leaves nothing): one line, exit 2
            assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, options
            continue
        assert result.exit_code == 0, result.output
        assert result.stdout == expected, options
        compared += 1
    assert compared >= len(OPTIONS) - 2


def step_profile() -> list:
    """Flops and bytes on two GPUs, a scope's CPU time, negative bytes (Triton warns)."""
    def node(name, metrics, *children):
        return {"frame": {"name": name}, "metrics": metrics, "children": list(children)}

    def kernel(name, ns, device, **more):
        return node(name, {"time (ns)": ns, "count": 3, "device_id": device,
                           "device_type": "CUDA", **more})

    gpus = {"0": {"arch": "90", "num_sms": 132, "clock_rate": 1980000,
                  "memory_clock_rate": 2619000, "bus_width": 5120},
            "1": {"arch": "100", "num_sms": 148, "clock_rate": 1965000,
                  "memory_clock_rate": 4000000, "bus_width": 8192}}
    root = node("ROOT", {"time (ns)": 0, "count": 0, "flops8": 0, "flops16": 0, "bytes": 0},
                node("train", {"cpu_time (ns)": 9_000_000},
                     kernel("gemm_fp8", 1_500_000, "1", flops8=6e12, bytes=2e8),
                     kernel("gemm_fp16", 2_500_000, "0", flops16=5e12, bytes=3e8)),
                node("loader", {}, kernel("copy", 700_000, "0", bytes=-5)))
    return [root, {"CUDA": gpus}]


@pytest.mark.parametrize("options", [
    ["-m", "util,tflop8/s,tflop16/s,gbyte/s"], ["-m", "bytes"], ["-m", "cpu_time/ms"],
    ["-m", "avg_time/us,time/%", "--print-sorted", "-d", "1"]])
def test_util_rates_and_warnings_are_tritons_on_a_written_profile(tmp_path, options):
    path = tmp_path / "step.hatchet"
    path.write_text(json.dumps(step_profile()))
    expected = theirs(*options, str(path))
    assert expected, options
    assert ours(*options, str(path)).stdout == expected


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("color", [False, True])
def test_the_tree_is_hatchets_console_text(tmp_path, seed, color):
    """Our renderer against hatchet's own, colour included (a terminal's), on random trees
    and on a diff (frames only in one profile marked)."""
    from hatchet.external.console import ConsoleRenderer

    rng = random.Random(seed)
    paths = []
    for side in "ab":
        doc = step_profile()
        for _ in range(rng.randint(0, 40)):
            parents = [doc[0]]
            while parents[-1]["children"] and rng.random() < 0.6:
                parents.append(rng.choice(parents[-1]["children"]))
            parents[-1]["children"].append(
                {"frame": {"name": f"k{rng.randint(0, 10**6)}"}, "children": [],
                 "metrics": {"time (ns)": rng.randint(1, 10**7), "count": 1, "device_id": "0"}})
        paths.append(str(tmp_path / f"{side}.hatchet"))
        with open(paths[-1], "w") as f:
            json.dump(doc, f)
    metrics = ["time/ms", "util", "count"][:rng.randint(1, 3)]
    gf, derived = parse(metrics, paths[0])
    other, _ = triton_viewer.parse(metrics, paths[1])
    for frame in (gf, gf.sub(other)):
        depth = rng.randint(1, 5)
        expected = ConsoleRenderer(unicode=True, color=color).render(
            frame.graph.roots, frame.dataframe, metric_column=derived, annotation_column=None,
            precision=3, name_column="name", expand_name=True, context_column="file", rank=0,
            thread=0, depth=depth, highlight_name=False, colormap="RdYlGn",
            invert_colormap=False, colormap_annotations=None, render_header=False,
            min_value=None, max_value=None)
        assert tree(frame, derived, depth=depth, color=color) == expected


def test_without_metrics_it_prints_nothing_as_triton_does_and_says_so_on_stderr():
    assert theirs(data("recorded.hatchet")) == ""
    result = ours(data("recorded.hatchet"))
    assert result.exit_code == 0 and result.stdout == ""
    assert "-m time/ms" in result.stderr


@pytest.mark.parametrize("args,message", [
    (["-m", "time/ms", "-i", "a", "-e", "b"], "-i or -e, not both"),
    (["-m", "time/ms", "--names", "raw"], "drop --names"),
    (["-m", "time/ms", "--width", "80"], "drop --width"),
    (["-m", "tflop8/s"], "'tflop8/s' needs 'flops8'"),
    (["-m", "time/ms", "-i", "nothing"], "no frame matches include 'nothing'"),
])
def test_what_triton_cannot_do_is_one_line_and_exit_2(args, message):
    result = ours(*args, data("recorded.hatchet"))
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.splitlines()) == 1


def test_one_profile_only_as_triton_reads():
    result = ours("-m", "time/ms", data("recorded.hatchet"), data("synthetic.hatchet"))
    assert result.exit_code == 2 and "reads one profile" in result.stderr


# -- every option of Triton's, in our own view too -------------------------------------------------

@pytest.mark.parametrize("args", [
    ["-l"], ["--list"], ["-m", "time/ms"], ["--metrics", "time/ms"], ["-i", "ROOT"],
    ["--include", "ROOT"], ["-e", "nothing"], ["--exclude", "nothing"], ["-t", "0"],
    ["--threshold", "0"], ["-d", "2"], ["--depth", "2"], ["-f", "function_line"],
    ["--format", "file_function"], ["--print-sorted"], ["-diff", data("recorded.hatchet")],
    ["--diff-profile", data("recorded.hatchet")],
    ["--met", "time/ms", "--dep", "1", "--print"],  # argparse's unique prefixes
    ["--metr=time/us", "--incl", "ROOT"],
])
@pytest.mark.parametrize("triton_text", [False, True])
def test_every_triton_option_is_taken_in_both_views(args, triton_text):
    extra = ["--output", "triton"] if triton_text else []
    if triton_text and "-m" not in args and "--metrics" not in args \
            and not any(a.startswith("--met") for a in args):
        args = [*args, "-m", "time/ms"]
    result = CliRunner().invoke(viewer, [*extra, *args, data("recorded.hatchet")])
    assert result.exit_code == 0, result.output
    assert result.stdout


def test_prefixes_expand_only_when_unique_and_before_a_double_dash():
    longs = ["--metrics", "--max", "--depth", "--print-sorted"]
    assert expand_prefixes(["--dep", "3", "--m", "x", "--", "--dep"], longs) == \
        ["--depth", "3", "--m", "x", "--", "--dep"]
    assert expand_prefixes(["--me=time/ms", "--print"], longs) == \
        ["--metrics=time/ms", "--print-sorted"]


# -- -d counts levels as Triton's viewer does ------------------------------------------------------

@pytest.mark.parametrize("depth", ["1", "2", "3"])
def test_depth_shows_the_levels_tritons_viewer_shows(depth):
    """`-d 1` is ROOT alone in Triton's viewer, our --output triton and our own tree (ours
    showed ROOT and its children)."""
    path = data("example_gpu.hatchet")
    expected = theirs("-m", "time/ms", "-d", depth, path)
    assert ours("-m", "time/ms", "-d", depth, path).stdout == expected
    own = CliRunner().invoke(viewer, ["-m", "time/ms", "-d", depth, "--width", "2000", path])
    assert own.exit_code == 0, own.output
    rows = own.output.splitlines()[1:]  # under the header
    assert len(rows) == len(expected.strip().splitlines())
    assert rows[0].split()[-1] == "ROOT" and (len(rows) == 1) == (depth == "1")


def _odd_values(tmp_path, value) -> str:
    """A profile whose kernel `k` holds `value` (text, a map) in its exclusive `bytes` and
    `tag` and in its summed `flops`, and same-named scopes `s` for the filters to merge."""
    def kernel(name, odd):
        return {"frame": {"name": name, "type": "function"},
                "metrics": {"time (ns)": 7, "count": 1, "flops": odd, "bytes": odd, "tag": odd},
                "children": []}
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops": 0},
            "children": [{"frame": {"name": "s", "type": "function"}, "metrics": {},
                          "children": [kernel("k", value), kernel("j", 3)]},
                         {"frame": {"name": "s", "type": "function"}, "metrics": {},
                          "children": [kernel("k", 2)]}]}
    path = tmp_path / "odd.hatchet"
    path.write_text(json.dumps([root, {}]))
    return str(path)


@pytest.mark.parametrize("value", ["fast", {"a": 1}], ids=["text", "map"])
@pytest.mark.parametrize("args", [["-m", "tag/%"], ["-m", "bytes/%"], ["-m", "byte/s"],
                                  ["-m", "tag"], ["-m", "tag", "-diff", "SELF"]])
def test_text_or_a_map_where_triton_computes_is_one_line(tmp_path, value, args):
    """Issue 59, item 20: a pandas TypeError (Triton's viewer fails the same way)."""
    path = _odd_values(tmp_path, value)
    result = ours(*[path if a == "SELF" else a for a in args], path)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("Error: '")
    assert "not a number" in result.stderr


@pytest.mark.parametrize("value", ["fast", {"a": 1}], ids=["text", "map"])
@pytest.mark.parametrize("args", [["-m", "time/ms", "-i", "k"], ["-m", "flops", "-i", "s"],
                                  ["-m", "flop/s", "-e", "j"], ["-m", "time/ns", "-t", "1"]])
def test_text_or_a_map_in_a_summed_metric_reads_blank_when_filters_merge_frames(
        tmp_path, value, args):
    """Issue 59, item 20: merging same-named frames summed the text (a TypeError); a value
    that is no number counts as missing, as in every other sum."""
    result = ours(*args, _odd_values(tmp_path, value))
    assert result.exit_code == 0, result.output
    if args[1] == "flops":  # k's text is left out of its sum; its other value stays
        assert {"   ├─ 2.000 k", "   └─ 2.000 k"} & set(result.stdout.splitlines())
