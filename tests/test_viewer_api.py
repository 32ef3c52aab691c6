"""proton.viewer's Python API: Triton 3.6's viewer functions (read, parse, derive_metrics,
format_frames, filter_frames, get_min_time_flops/bytes, apply_diff_profile, print_tree, ...)
with its signatures, return types and numbers. Values are checked by hand on a profile written
here, and against Triton's installed `triton.profiler.viewer` (the test extra) on the same
files, random trees included."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import proton.viewer as api
from proton.viewer.errors import ViewerError

DATA = os.path.join(os.path.dirname(__file__), "data")
H100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 5120}
A100 = {"arch": "80", "num_sms": 108, "clock_rate": 1410000, "memory_clock_rate": 1215000,
        "bus_width": 5120}


def node(name: str, metrics: dict | None = None, *children: dict) -> dict:
    return {"frame": {"name": name, "type": "function"}, "metrics": metrics or {},
            "children": list(children)}


def kernel(name: str, ns: int, count: int, device: str = "0", **more) -> dict:
    return node(name, {"time (ns)": ns, "count": count, "device_id": device,
                       "device_type": "CUDA", **more})


def training_profile() -> list:
    """A step: a matmul (with a launch_metadata kernel under it, and an empty scope beside it)
    on an H100, an optimizer kernel on an A100."""
    root = node("ROOT", {"time (ns)": 0, "count": 0, "flops16": 0, "bytes": 0},
                node("train", {"cpu_time (ns)": 5_000_000},
                     node("forward", {},
                          kernel("matmul_kernel", 2_000_000, 4, flops16=8e12, bytes=4e9),
                          node("__proton_launch_metadata", {}, kernel("sum_kernel", 1000, 1))),
                     node("empty_scope")),
                node("optimizer", {}, kernel("adam_kernel", 1_000_000, 2, "1", bytes=3e9)))
    return [root, {"CUDA": {"0": H100, "1": A100}}]


@pytest.fixture
def step(tmp_path) -> str:
    path = tmp_path / "step.hatchet"
    path.write_text(json.dumps(training_profile()))
    return str(path)


def by_name(gf, column: str) -> dict:
    df = gf.dataframe
    return dict(zip(df["name"], df[column]))


# -- read -----------------------------------------------------------------------------------------

def test_read_returns_tritons_four_parts_with_inclusive_sums(step):
    gf, inclusive, exclusive, devices = api.read(step)
    assert inclusive == ["time (ns)", "count", "flops16", "bytes"]  # ROOT's, in file order
    assert exclusive[0] == "name" and {"cpu_time (ns)", "device_id"} <= set(exclusive)
    assert devices == {"CUDA": {"0": H100, "1": A100}}
    times = by_name(gf, "time (ns) (inc)")
    assert times["ROOT"] == 3_000_000 and times["forward"] == 2_000_000
    assert {"time (ns) (inc)", "bytes (inc)"} <= set(gf.inc_metrics)


def test_read_drops_launch_metadata_and_empty_frames_as_triton_does(step):
    gf, *_ = api.read(step)
    names = gf.dataframe["name"].tolist()
    assert "__proton_launch_metadata" not in names and "sum_kernel" not in names
    assert "empty_scope" not in names
    assert {"ROOT", "train", "forward", "matmul_kernel", "optimizer", "adam_kernel"} == set(names)


def test_a_frame_whose_children_are_all_dropped_goes_too_even_with_metrics(tmp_path):
    path = tmp_path / "p.hatchet"
    path.write_text(json.dumps([node("ROOT", {"time (ns)": 0},
                                     node("timed", {"cpu_time (ns)": 7}, node("empty")),
                                     kernel("k", 5, 1)), {}]))
    gf, *_ = api.read(str(path))
    assert gf.dataframe["name"].tolist() == ["ROOT", "k"]


def test_get_raw_metrics_takes_an_open_file_and_sums_nothing(step):
    with open(step) as f:
        gf, inclusive, _, _ = api.get_raw_metrics(f)
    assert inclusive == ["time (ns)", "count", "flops16", "bytes"]
    assert not [c for c in gf.dataframe.columns if c.endswith("(inc)")]


# -- derive_metrics -------------------------------------------------------------------------------

def test_derived_metrics_have_tritons_names_and_values(step):
    gf, inclusive, exclusive, devices = api.read(step)
    names = api.derive_metrics(gf, ["time/ms", "avg_time/us", "tflop16/s", "gbyte/s",
                                    "time/%", "cpu_time/ms", "count"],
                               inclusive, exclusive, devices)
    assert names == ["time/ms (inc)", "avg_time/us (inc)", "tflop16/s (inc)", "gbyte/s (inc)",
                     "time/% (inc)", "cpu_time/ms (inc)", "count (inc)"]
    assert set(names) <= set(gf.inc_metrics)
    expect = {  # column: {frame: value}
        "time/ms (inc)": {"ROOT": 3.0, "matmul_kernel": 2.0, "adam_kernel": 1.0},
        "avg_time/us (inc)": {"ROOT": 500.0, "matmul_kernel": 500.0, "adam_kernel": 500.0},
        "tflop16/s (inc)": {"matmul_kernel": 4000.0, "forward": 4000.0},
        "gbyte/s (inc)": {"matmul_kernel": 2000.0, "adam_kernel": 3000.0, "ROOT": 7e9 / 3e-3 / 1e9},
        "time/% (inc)": {"ROOT": 100.0, "matmul_kernel": 200 / 3, "optimizer": 100 / 3},
        "cpu_time/ms (inc)": {"train": 5.0},
    }
    for column, values in expect.items():
        got = by_name(gf, column)
        for frame, value in values.items():
            assert got[frame] == pytest.approx(value, rel=1e-12), (column, frame)
    # Triton's cpu_time is the scope's own: ROOT has none (our own viewer sums its scopes)
    assert math.isnan(by_name(gf, "cpu_time/ms (inc)")["ROOT"])


def test_util_is_tritons_one_peak_over_the_width(step):
    gf, inclusive, exclusive, devices = api.read(step)
    assert api.derive_metrics(gf, ["util"], inclusive, exclusive, devices) == ["util"]
    assert "util" in gf.exc_metrics
    util = by_name(gf, "util")
    # sm90: 1513 TFLOP/s (8-bit) at 114 SMs and 1755 MHz, scaled; 16-bit takes twice as long
    peak16 = 1513e12 * (132 / 114) * (1980000 / 1755000) / 2
    bandwidth = 2 * 5120 * 2619000 * 1e3 / 8
    assert util["matmul_kernel"] == pytest.approx(max(8e12 / peak16, 4e9 / bandwidth) / 2e-3)
    a100_bandwidth = 2 * 5120 * 1215000 * 1e3 / 8
    assert util["adam_kernel"] == pytest.approx(3e9 / a100_bandwidth / 1e-3)
    assert math.isnan(util["ROOT"]) and math.isnan(util["forward"])  # not kernels


def test_min_times_use_tritons_peaks_for_nvidia_and_amd(tmp_path):
    gpus = {"0": {**H100, "arch": "100", "num_sms": 148, "clock_rate": 1965000},
            "1": {"arch": "gfx942", "num_sms": 304, "clock_rate": 2100000,
                  "memory_clock_rate": 1300000, "bus_width": 8192}}
    root = node("ROOT", {"time (ns)": 0, "flops8": 0, "bytes": 0},
                kernel("b200", 1000, 1, "0", flops8=1e9, bytes=1e6),
                node("mi300", {"time (ns)": 1000, "count": 1, "device_id": "1",
                               "device_type": "HIP", "flops8": 1e9, "bytes": 1e6}))
    (tmp_path / "p.hatchet").write_text(json.dumps([root, {"CUDA": {"0": gpus["0"]},
                                                           "HIP": {"1": gpus["1"]}}]))
    gf, _, _, devices = api.read(str(tmp_path / "p.hatchet"))
    flops = dict(zip(gf.dataframe["name"], api.get_min_time_flops(gf.dataframe, devices)["min_time"]))
    nbytes = dict(zip(gf.dataframe["name"], api.get_min_time_bytes(gf.dataframe, devices)["min_time"]))
    assert flops["b200"] == pytest.approx(1e9 / (148 * 16384 * 1965e6))  # per SM per clock
    assert flops["mi300"] == pytest.approx(1e9 / (4096 * 304 * 2100e6))  # per CU per clock
    assert nbytes["b200"] == pytest.approx(1e6 / (2 * 5120 * 2619000 * 1e3 / 8))
    assert nbytes["mi300"] == pytest.approx(1e6 / 5.3e12)  # MI300X's figure
    assert flops["ROOT"] == 0.0


def test_an_unknown_metric_is_one_line_naming_what_the_profile_has(step):
    gf, inclusive, exclusive, devices = api.read(step)
    with pytest.raises(ViewerError) as err:
        api.derive_metrics(gf, ["tflop8/s"], inclusive, exclusive, devices)
    message = str(err.value)
    assert "'tflop8/s' needs 'flops8'" in message and "flops16" in message
    assert "\n" not in message and "proton-viewer -l" in message
    with pytest.raises(ViewerError, match="no unit"):
        api.derive_metrics(gf, ["time/hours"], inclusive, exclusive, devices)
    with pytest.raises(ViewerError, match="at least one metric"):
        api.parse([], step)


# -- format, filter, diff, print ------------------------------------------------------------------

@pytest.mark.parametrize("fmt,expected", [
    ("full", "/home/u/model/train.py:12@step"), ("file_function_line", "train.py:12@step"),
    ("function_line", "12@step"), ("file_function", "train.py@step"), (None, "/home/u/model/train.py:12@step")])
def test_format_frames_shortens_python_frame_names(tmp_path, fmt, expected):
    (tmp_path / "p.hatchet").write_text(json.dumps([
        node("ROOT", {"time (ns)": 0}, node("/home/u/model/train.py:12@step", {},
                                            kernel("k", 5, 1))), {}]))
    gf, *_ = api.read(str(tmp_path / "p.hatchet"))
    assert api.format_frames(gf, fmt) is gf
    assert gf.dataframe["name"].tolist()[1] == expected


def test_filters_keep_paths_and_sum_raw_metrics_again_but_not_derived_ones(step):
    gf, metrics = api.parse(["time/ms"], step, exclude="optimizer")
    assert "adam_kernel" not in gf.dataframe["name"].tolist()
    assert by_name(gf, "time (ns) (inc)")["ROOT"] == 2_000_000  # summed again
    assert by_name(gf, "time/ms (inc)")["ROOT"] == 3.0  # derived before the filter
    gf, _ = api.parse(["time/ms"], step, include="matmul")
    assert gf.dataframe["name"].tolist() == ["ROOT", "train", "forward", "matmul_kernel"]
    gf, _ = api.parse(["time/ms"], step, threshold=1.5)
    assert gf.dataframe["name"].tolist() == ["ROOT", "train", "forward", "matmul_kernel"]
    assert api.filter_frames(gf) is gf  # no filter, no copy
    with pytest.raises(ViewerError, match="no frame matches include 'nothing'"):
        api.parse(["time/ms"], step, include="nothing")


def test_a_diff_subtracts_the_other_profile_frame_by_frame(step, tmp_path):
    before = training_profile()
    before[0]["children"][1]["children"][0]["metrics"]["time (ns)"] = 400_000
    (tmp_path / "before.hatchet").write_text(json.dumps(before))
    gf, metrics = api.parse(["time/ms"], step)
    diff = api.apply_diff_profile(gf, metrics, str(tmp_path / "before.hatchet"), ["time/ms"],
                                  None, None, None)
    change = by_name(diff, "time/ms (inc)")
    assert change["adam_kernel"] == pytest.approx(0.6) and change["ROOT"] == pytest.approx(0.6)
    assert change["matmul_kernel"] == 0


def test_a_diff_of_two_runs_matches_their_roots_whatever_host_and_pid_they_ran_as(step,
                                                                                tmp_path):
    doc = training_profile()
    for pid in (11, 22):
        doc[0]["frame"].update(host="node-7", pid=pid)
        (tmp_path / f"{pid}.hatchet").write_text(json.dumps(doc))
    gf, metrics = api.parse(["time/ms"], str(tmp_path / "22.hatchet"))
    diff = api.apply_diff_profile(gf, metrics, str(tmp_path / "11.hatchet"), ["time/ms"],
                                  None, None, None)
    change = by_name(diff, "time/ms (inc)")
    assert diff.dataframe["name"].tolist() == gf.dataframe["name"].tolist()  # one tree
    assert change["ROOT"] == 0 and change["adam_kernel"] == 0


def test_print_tree_prints_tritons_text(step, capsys):
    gf, metrics = api.parse(["time/ms", "count"], step)
    api.print_tree(gf, metrics, depth=3, print_sorted=True)
    out = capsys.readouterr().out
    assert out.startswith("3.000 6.000 ROOT\n├─ 1.000 2.000 optimizer\n│  └─ 1.000 2.000 adam_kernel\n"
                          "└─ 2.000 4.000 train\n   └─ 2.000 4.000 forward\n\n"
                          "Sorted kernels by metric time/ms (inc)\n")
    assert out.splitlines()[7] == f"{'train':105} 2.0"


def test_the_package_exports_tritons_names_and_loads_hatchet_only_when_used():
    assert set(api.__all__) == {
        "read", "parse", "derive_metrics", "format_frames", "filter_frames", "get_min_time_flops",
        "get_min_time_bytes", "apply_diff_profile", "print_tree", "get_raw_metrics",
        "match_available_metrics", "show_metrics"}
    assert all(callable(getattr(api, name)) for name in api.__all__)
    code = "import proton.viewer, proton.viewer.cli, sys; assert 'hatchet' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- the same as Triton's own functions -----------------------------------------------------------

triton_viewer = pytest.importorskip("triton.profiler.viewer")


@pytest.fixture(autouse=True)
def recursion_limit():
    """hatchet's filter sets the recursion limit to 1000; give the tests theirs back."""
    limit = sys.getrecursionlimit()
    yield
    sys.setrecursionlimit(limit)


def same_frame(ours, theirs) -> None:
    """The same frames in the same order, at the same depths, with the same values in every
    column both have (NaN where Triton has NaN)."""
    walk = [(n.frame["name"], n._depth) for n in ours.graph.traverse()]
    assert walk == [(n.frame["name"], n._depth) for n in theirs.graph.traverse()]
    a, b = ours.dataframe, theirs.dataframe
    assert a["name"].tolist() == b["name"].tolist()
    for column in b.columns:
        if column == "name" or b[column].dtype == object:
            continue
        np.testing.assert_allclose(a[column].to_numpy(float), b[column].to_numpy(float),
                                   rtol=1e-12, equal_nan=True, err_msg=column)


FILES = ["recorded.hatchet", "triton_recorded.hatchet", "synthetic.hatchet",
         "python_recorded.hatchet", "example_gpu.hatchet"]
SPECS = ["time/ms", "time/s", "avg_time/us", "count/%", "time/%", "flop16/s", "tflop16/s",
         "gbyte/s", "util", "count", "time", "cpu_time/us"]


@pytest.mark.parametrize("name", FILES)
def test_every_metric_triton_derives_has_its_name_and_values(name, tmp_path):
    path = os.path.join(DATA, name)
    mine, theirs = api.read(path), triton_viewer.read(path)
    assert mine[1:] == theirs[1:]  # inclusive, exclusive, device table
    derived = []
    for spec in SPECS:
        try:
            expected = triton_viewer.derive_metrics(theirs[0], [spec], *theirs[1:])
        except Exception:  # noqa: BLE001 - Triton cannot derive it from this file
            if spec == "util" and "bytes" not in mine[0].dataframe:
                # Triton's util fails without a bytes column (KeyError); ours has no bytes
                assert api.derive_metrics(mine[0], [spec], *mine[1:]) == ["util"]
                continue
            with pytest.raises(ViewerError):
                api.derive_metrics(mine[0], [spec], *mine[1:])
            continue
        assert api.derive_metrics(mine[0], [spec], *mine[1:]) == expected
        derived += expected
    assert derived
    same_frame(mine[0], theirs[0])


def random_profile(rng: random.Random) -> list:
    """A random tree of scopes and kernels: names that repeat (never among siblings: hatchet
    orders same-named siblings by their memory address, so no two runs of Triton's viewer
    agree there), empty scopes, launch metadata frames, kernels with and without flops and
    bytes."""
    words = ["attn", "mlp", "matmul_kernel", "softmax_kernel", "step", "x"]
    root = node("ROOT", {"time (ns)": 0, "count": 0, "flops16": 0, "bytes": 0},
                kernel("first_kernel", rng.randint(1, 10**7), 1))  # ROOT is never pruned
    nodes = [root]
    for _ in range(rng.randint(1, 80)):
        parent = rng.choice(nodes)
        roll = rng.random()
        if roll < 0.05:
            child = node("__proton_launch_metadata")
        elif roll < 0.5:
            child = node(f"{rng.choice(words)}{rng.randint(0, 2)}",
                         {"cpu_time (ns)": rng.randint(1, 10**6)} if rng.random() < 0.3 else {})
        else:
            extra = {"flops16": rng.randint(0, 10**12)} if rng.random() < 0.5 else {}
            if rng.random() < 0.7:
                extra["bytes"] = rng.randint(0, 10**9)
            child = kernel(f"{rng.choice(words)}_{rng.randint(0, 3)}", rng.randint(1, 10**7),
                           rng.randint(1, 100), rng.choice("01"), **extra)
        if child["frame"]["name"] in {c["frame"]["name"] for c in parent["children"]}:
            continue
        parent["children"].append(child)
        nodes.append(child)
    return [root, {"CUDA": {"0": H100, "1": A100}}]


FILTERS = [{"include": ".*attn"}, {"include": "mlp1"}, {"exclude": ".*kernel"},
           {"exclude": "step"}, {"threshold": 0.5}, {"threshold": 5.0},
           {"include": "x", "threshold": 0.01}]


@pytest.mark.parametrize("seed", range(12))
def test_random_trees_read_derive_filter_diff_and_print_as_tritons_do(seed, tmp_path):
    rng = random.Random(seed)
    paths = []
    for side in ("a", "b"):
        paths.append(str(tmp_path / f"{side}.hatchet"))
        with open(paths[-1], "w") as f:
            json.dump(random_profile(rng), f)
    metrics = ["time/ms", "util", "tflop16/s", "count"]
    for options in [{}, *FILTERS]:
        try:
            theirs, names = triton_viewer.parse(metrics, paths[0], **options)
        except Exception:  # noqa: BLE001 - hatchet's EmptyFilter: nothing left
            with pytest.raises(ViewerError, match="no frame matches"):
                api.parse(metrics, paths[0], **options)
            continue
        ours, mine = api.parse(metrics, paths[0], **options)
        assert mine == names
        same_frame(ours, theirs)
        if not options:
            theirs = triton_viewer.apply_diff_profile(theirs, names, paths[1], metrics, None,
                                                      None, None)
            ours = api.apply_diff_profile(ours, mine, paths[1], metrics, None, None, None)
            same_frame(ours, theirs)
        printed, depth = [], rng.randint(1, 6)
        for module, gf in ((triton_viewer, theirs), (api, ours)):
            with contextlib.redirect_stdout(io.StringIO()) as out:
                module.print_tree(gf, names, depth=depth, format="full", print_sorted=True)
            printed.append(out.getvalue())
        assert printed[1] == printed[0]


def test_filters_merge_same_named_siblings_as_hatchet_does(tmp_path):
    path = tmp_path / "twins.hatchet"
    path.write_text(json.dumps([node("ROOT", {"time (ns)": 0, "count": 0},
                                     node("step", {}, kernel("k", 5, 1)),
                                     node("step", {}, kernel("k", 7, 1), kernel("j", 1, 1))),
                                {}]))
    ours, _ = api.parse(["time/ns"], str(path), exclude="j")
    theirs, _ = triton_viewer.parse(["time/ns"], str(path), exclude="j")
    for gf in (ours, theirs):
        assert sorted(zip(gf.dataframe["name"], gf.dataframe["time (ns) (inc)"])) == \
            [("ROOT", 12), ("k", 12), ("step", 12)]


def test_parse_and_filter_frames_take_text_and_maps_in_metrics(tmp_path):
    """Issue 59, item 20: parse and filter_frames raised pandas' TypeError on a metric value
    that is text or a map; now a one-line ViewerError where a number is needed, and the
    filters leave such a value out of their sums."""
    path = tmp_path / "odd.hatchet"
    path.write_text(json.dumps([node("ROOT", {"time (ns)": 0, "count": 0, "flops": 0},
                                     node("s", {}, kernel("k", 5, 1, flops="lots", tag="fast")),
                                     node("s", {}, kernel("k", 7, 1, flops={"a": 1}),
                                          kernel("j", 1, 1, flops=4, tag={"b": 2}))), {}]))
    # either offender may be named first: same-named siblings (the two s) come in hatchet's
    # order, which breaks ties between equal frames by memory address
    with pytest.raises(ViewerError, match=r"^'tag' of frame ('k' is 'fast'|'j' is \{'b': 2\}), "
                                          r"not a number; "):
        api.parse(["tag/%"], str(path))
    gf, _ = api.parse(["time/ns"], str(path), exclude="j")
    assert sorted(zip(gf.dataframe["name"], gf.dataframe["time (ns) (inc)"])) == \
        [("ROOT", 12), ("k", 12), ("s", 12)]
    raw, *_ = api.read(str(path))
    kept = api.filter_frames(raw, include="s")
    assert by_name(kept, "flops (inc)")["j"] == 4 and math.isnan(by_name(kept, "flops (inc)")["k"])
