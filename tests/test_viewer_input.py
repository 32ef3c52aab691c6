"""proton-viewer on any input a profile can hold: trees of any depth, null metric values, any
frame name, unreadable files and stdin; and a first CPU-only run that reads well (ROOT's total,
empty profiles, -l listing what -m accepts, filters that match nothing)."""
from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import sys

import pytest
from click.testing import CliRunner

from proton.viewer import deep, reader, render
from proton.viewer.cli import viewer
from proton.viewer.derive import available, derive
from proton.viewer.errors import ViewerError
from proton.viewer.reader import load

DATA = os.path.join(os.path.dirname(__file__), "data")
FIXTURES = sorted(os.path.join(DATA, f) for f in os.listdir(DATA) if f.endswith(".hatchet"))
LEVELS = 10_000


def show(*args, input=None):
    return CliRunner().invoke(viewer, list(args), input=input)


def frame(name, *children, **metrics):
    return {"frame": {"name": name, "type": "function"}, "metrics": metrics,
            "children": list(children)}


def write(tmp_path, root, name="p.hatchet", devices=None) -> str:
    path = tmp_path / name
    path.write_text(json.dumps([root, devices or {}]))
    return str(path)


def chain_text(levels: int) -> str:
    """A profile of `levels` nested scopes s0 > s1 > ..., built as text (json.dumps recurses
    per level): scope i has cpu_time (levels - i) us, covering the scopes inside it."""
    parts = ['[{"frame": {"name": "ROOT", "type": "function"}, "metrics": {}, "children": [']
    parts += ['{"frame": {"name": "s%d", "type": "function"}, "metrics": {"cpu_time (ns)": %d}, '
              '"children": [' % (i, (levels - i) * 1000) for i in range(levels)]
    parts.append("]}" * levels + "]}, {}]")
    return "".join(parts)


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("deep") / "chain.hatchet"
    path.write_text(chain_text(LEVELS))
    return str(path)


def cpu_profile(tmp_path) -> str:
    """A CPU-only run: outer (35.5 ms) holds inner (20.25) and inner2 (5.125); other (3.25)
    beside it."""
    return write(tmp_path, frame("ROOT", frame("other", **{"cpu_time (ns)": 3_250_000}),
                                 frame("outer", frame("inner", **{"cpu_time (ns)": 20_250_000}),
                                       frame("inner2", **{"cpu_time (ns)": 5_125_000}),
                                       **{"cpu_time (ns)": 35_500_000})), "cpu.hatchet")


# -- depth ---------------------------------------------------------------------------------------

def test_json_of_the_chain_is_deeper_than_pythons_default_recursion_limit():
    with pytest.raises(RecursionError):
        json.loads(chain_text(LEVELS))  # what the viewer used to die of


def test_ten_thousand_levels_show_the_tree_to_the_depth_asked(chain):
    result = show(chain)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 + 100  # header, ROOT and levels 1..99 (-d 100, as Triton counts)
    assert lines[1].split() == ["10.000", "ROOT"]  # s0's time: the scopes under it are inside it
    assert lines[-1].split()[-1] == "s98" and lines[-1].split()[0] == "9.902"


def test_ten_thousand_levels_list_metrics(chain):
    result = show("-l", chain)
    assert result.exit_code == 0, result.output
    assert "inclusive: cpu_time (ns)" in result.output


def test_ten_thousand_levels_print_sorted_has_every_frame(chain):
    result = show("--print-sorted", chain)
    assert result.exit_code == 0, result.output
    flat = result.output.split("Frames sorted by cpu_time (ms):\n")[1].splitlines()[1:]
    assert len(flat) == LEVELS and flat[0].split() == ["10.000", "s0"]
    assert flat[-1].split() == ["0.001", "s9999"]


@pytest.mark.parametrize("output", ["json", "csv"])
def test_ten_thousand_levels_export_rows(chain, output):
    result = show("--output", output, "-d", "20", chain)
    assert result.exit_code == 0, result.output
    if output == "json":
        rows = json.loads(result.output)
        assert rows[-1]["path"] == ["ROOT"] + [f"s{i}" for i in range(19)]  # 20 levels
        assert rows[0]["cpu_time (ms)"] == pytest.approx(10.0)
    else:
        assert len(result.output.splitlines()) == 1 + 20


def test_ten_thousand_levels_filter_and_threshold(chain):
    include = show("-i", "s9999$", "--print-sorted", chain)
    assert include.exit_code == 0, include.output
    assert "s9999" in include.output.splitlines()[-1]
    exclude = show("-e", "s50$", chain)
    assert exclude.exit_code == 0 and exclude.output.splitlines()[-1].split()[-1] == "s49"
    threshold = show("-t", "9.95", "--output", "csv", chain)
    assert threshold.exit_code == 0 and threshold.output.splitlines()[-1].startswith(
        "ROOT / " + " / ".join(f"s{i}" for i in range(51)) + ",")


def test_ten_thousand_levels_diff_against_itself_is_zero(chain):
    result = show("-m", "cpu_time/us", "-diff", chain, "--print-sorted", chain)
    assert result.exit_code == 0, result.output
    tree, flat = result.output.split("Frames sorted by cpu_time (us) Δ:\n")
    assert tree.splitlines()[1].split() == ["0", "0", "ROOT"]  # no change
    flat = flat.splitlines()[1:]
    assert len(flat) == LEVELS and all(line.split()[:2] == ["0", "0"] for line in flat)


def test_deeper_than_the_parser_reaches_is_a_one_line_error(chain, monkeypatch):
    monkeypatch.setattr(deep, "RECURSION_LIMIT", 4000)
    monkeypatch.setattr(deep, "MAX_LEVELS", 1000)
    result = show(chain)
    assert result.exit_code == 2
    assert result.output == (f"Error: {chain!r} nests deeper than the 1,000 levels the viewer "
                             "reads\n")


def test_the_recursion_limit_is_restored_after_a_deep_read(chain):
    before = sys.getrecursionlimit()
    load(chain)
    assert sys.getrecursionlimit() == before


def test_graph_is_hatchets_literal_reader_and_union_without_recursion():
    """graph.py stands in for hatchet's recursive reader, traversal and union: the same node
    ids, depths, frames and data frame on every fixture, and the same unions."""
    import copy

    import hatchet as ht
    import pandas as pd
    from hatchet.graph import Graph as HatchetGraph

    from proton.viewer.graph import from_tree

    def shape(graph):
        return [(n._hatchet_nid, n._depth, n.frame.tuple_repr, len(n.children))
                for n in graph.traverse()]

    pairs = {}
    for path in FIXTURES:
        with open(path) as f:
            root = json.load(f)[0]
        theirs = ht.GraphFrame.from_literal([copy.deepcopy(root)])
        ours = from_tree(copy.deepcopy(root))
        assert shape(ours.graph) == shape(theirs.graph), path
        assert [n._hatchet_nid for n in ours.graph.traverse(order="post")] == \
            [n._hatchet_nid for n in HatchetGraph.traverse(theirs.graph, order="post")]
        a, b = theirs.dataframe.copy(), ours.dataframe.copy()
        a.index, b.index = [n._hatchet_nid for n in a.index], [n._hatchet_nid for n in b.index]
        pd.testing.assert_frame_equal(a, b)
        assert (ours.exc_metrics, ours.inc_metrics) == (theirs.exc_metrics, theirs.inc_metrics)
        pairs[path] = (theirs.graph, ours.graph)
    for x in FIXTURES[:4]:
        for y in FIXTURES:
            assert shape(pairs[x][1].union(pairs[y][1])) == \
                shape(HatchetGraph.union(pairs[x][0], pairs[y][0])), (x, y)


# -- values and names ------------------------------------------------------------------------------

def test_null_metric_values_show_blank_and_never_crash(tmp_path):
    """The writer writes NaN and infinity as null (JSON has neither)."""
    root = frame("ROOT", frame("step", frame("k", **{"time (ns)": None, "count": 2}),
                               frame("k2", **{"time (ns)": 4000, "count": None}),
                               **{"cpu_time (ns)": None}),
                 frame("host", **{"cpu_time (ns)": 1000, "tokens": None}),
                 **{"time (ns)": None, "count": 0})
    path = write(tmp_path, root)
    for args in (["-m", "time/us,avg_time/us,count,time/%,count/%"], ["--print-sorted"],
                 ["-m", "cpu_time/us,cpu_time/%,tokens"], ["-t", "0"]):
        result = show(*args, path)
        assert result.exit_code == 0, (args, result.output)
        assert "nan" not in result.output.lower() and "none" not in result.output.lower()
    tree = [line.split() for line in show("-m", "time/us,count", path).output.splitlines()]
    assert ["2", "│", "└─", "k"] in tree and ["4", "│", "├─", "k2"] in tree  # blank cells
    rows = {r["path"][-1]: r for r in json.loads(show("-m", "time/us,count", "--output", "json",
                                                      path).output)}
    assert rows["k"]["time (us)"] is None and rows["k2"]["count"] is None
    assert rows["ROOT"]["time (us)"] == pytest.approx(4.0)
    csv_rows = show("-m", "time/us", "--output", "csv", path).output.splitlines()
    assert "ROOT / step / k,2," in csv_rows


def test_infinite_values_are_null_in_json_output(tmp_path):
    path = tmp_path / "inf.hatchet"
    path.write_text('[{"frame": {"name": "ROOT"}, "metrics": {"x": 0}, "children": '
                    '[{"frame": {"name": "a"}, "metrics": {"x": 1e400}, "children": []}]}, {}]')
    result = show("-m", "x", "--output", "json", str(path))
    assert result.exit_code == 0, result.output
    assert "Infinity" not in result.output
    assert [r["x"] for r in json.loads(result.output)] == [None, None]


NAMES = ["注意力 ✓ ÿ", 'say "hi" \'there\'', "two\nlines", "100% %s %d {0}", "(.*)[x]+?\\d$",
         "x" * 5000, "", "\x1b[31mred", "tab\there"]


def test_any_frame_name_is_shown_on_one_row_and_kept_whole_in_json(tmp_path):
    kids = [frame(name, **{"cpu_time (ns)": 1000 * (i + 1)}) for i, name in enumerate(NAMES)]
    path = write(tmp_path, frame("ROOT", *kids, frame("no metrics")))
    tree = show(path)
    assert tree.exit_code == 0, tree.output
    lines = tree.output.splitlines()
    assert len(lines) == 2 + len(NAMES) + 1  # one row each: the newline is escaped
    assert any(line.endswith("two\\nlines") for line in lines)
    assert "\x1b" not in tree.output and any(line.endswith("\\x1b[31mred") for line in lines)
    rows = json.loads(show("--output", "json", path).output)
    assert {r["path"][-1] for r in rows} == {"ROOT", "no metrics", *NAMES}
    csv_out = show("--output", "csv", "--print-sorted", path)
    assert csv_out.exit_code == 2  # --print-sorted is for the tree: a one-line error, as before
    for name in ["(.*)[x]+?\\d$", "100% %s %d {0}", "注意力 ✓ ÿ"]:
        import re

        found = show("-i", re.escape(name), "--output", "json", path)
        assert found.exit_code == 0, found.output
        assert [r["path"][-1] for r in json.loads(found.output)] == ["ROOT", name]
    assert show("--width", "60", path).exit_code == 0
    assert show("-f", "file_function", path).exit_code == 0


def test_names_that_are_not_text_and_null_metrics_or_children_are_read(tmp_path):
    path = tmp_path / "odd.hatchet"
    path.write_text('[{"frame": {"name": "ROOT"}, "metrics": null, "children": ['
                    '{"frame": {"name": 42}, "metrics": {"cpu_time (ns)": 5}, "children": null},'
                    '{"frame": {"name": null, "type": 3}, "metrics": {}, "children": []}]}, {}]')
    result = show("--output", "json", str(path))
    assert result.exit_code == 0, result.output
    assert sorted(r["path"][-1] for r in json.loads(result.output)) == ["", "42", "ROOT"]


# -- unreadable input, stdin, --version ------------------------------------------------------------

def test_unreadable_file_is_a_one_line_error_naming_it_and_the_fix(tmp_path, monkeypatch):
    path = cpu_profile(tmp_path)
    os.chmod(path, 0)
    try:
        with open(path):
            readable = True  # root reads it anyway: make open refuse as it would for a user
    except PermissionError:
        readable = False
    if readable:
        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied", path)

        monkeypatch.setattr(reader, "open", refuse, raising=False)
    result = show(path)
    os.chmod(path, 0o644)
    assert result.exit_code == 2
    assert result.output == (f"Error: cannot read {path!r}: permission denied; make it "
                             f"readable (chmod u+r {path}) or run as a user who may read it\n")


def test_dash_reads_the_profile_from_stdin(tmp_path):
    path = cpu_profile(tmp_path)
    with open(path) as f:
        text = f.read()
    piped = show("-m", "cpu_time/ms", "-", input=text)
    assert piped.exit_code == 0, piped.output
    assert piped.output == show("-m", "cpu_time/ms", path).output
    listed = show("-l", "-", input=text)
    assert listed.exit_code == 0 and "inclusive: cpu_time (ns)" in listed.output
    diff = show("-m", "cpu_time/ms", "-diff", "-", "--output", "json", path, input=text)
    assert diff.exit_code == 0, diff.output
    assert all(r["cpu_time (ms) Δ"] == 0 for r in json.loads(diff.output))


@pytest.mark.parametrize("text,message", [
    ("", "stdin is empty"),
    ("  \n", "stdin is empty"),
    ("not a profile", "stdin is not a profile: not valid JSON"),
    ('{"a": 1}', "stdin is JSON but not a .hatchet profile"),
])
def test_empty_or_foreign_stdin_is_a_one_line_error(text, message):
    result = show("-", input=text)
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_stdin_cannot_be_both_sides_of_a_diff():
    result = show("-diff", "-", "-", input="[]")
    assert result.exit_code == 2 and "both '-'" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_version_names_the_command_and_the_distribution_that_runs_it():
    # Triton's wheel installs a proton-viewer too: the line says which one this is
    result = show("--version")
    assert result.exit_code == 0
    assert result.output == (
        f"proton-viewer {importlib.metadata.version('proton-profiler')} (proton-profiler, not "
        "Triton's own viewer: that one runs as python -m triton.profiler.viewer)\n")


# -- a first CPU-only run --------------------------------------------------------------------------

def test_root_shows_the_total_of_the_outermost_timed_scopes(tmp_path):
    result = show("-m", "cpu_time/ms,cpu_time/%", cpu_profile(tmp_path))
    assert result.exit_code == 0, result.output
    assert [line.split() for line in result.output.splitlines()] == [
        ["cpu_time", "(ms)", "cpu_time/%", "name"],
        ["38.750", "100.000", "ROOT"],  # outer + other: inner and inner2 are inside outer
        ["35.500", "91.613", "├─", "outer"],
        ["20.250", "52.258", "│", "├─", "inner"],
        ["5.125", "13.226", "│", "└─", "inner2"],
        ["3.250", "8.387", "└─", "other"]]


def test_root_total_skips_nested_timed_scopes_under_untimed_frames(tmp_path):
    path = write(tmp_path, frame("ROOT", frame("group", frame("a", **{"cpu_time (ns)": 2e6}),
                                               frame("c", frame("d", **{"cpu_time (ns)": 1e6}),
                                                     **{"cpu_time (ns)": 4e6})),
                                 frame("b", **{"cpu_time (ns)": 3e6})))
    prof = load(path)
    root = prof.gf.graph.roots[0]
    assert derive(prof, "cpu_time/ms").values[root] == pytest.approx(9.0)
    assert derive(prof, "cpu_time/%").values[root] == pytest.approx(100.0)
    group = root.children[0] if root.children[0].frame["name"] == "group" else root.children[1]
    # an untimed frame (a python frame of -c python) holds the outermost timed scopes in it
    assert derive(prof, "cpu_time/ms").values[group] == pytest.approx(6.0)


def test_legend_names_the_metric_and_roots_total(tmp_path):
    prof = load(cpu_profile(tmp_path))
    column = derive(prof, "cpu_time/ms")
    text = render.legend([column], column.values[prof.gf.graph.roots[0]]).plain
    assert text.startswith("cpu_time (ms): share of ROOT (38.750) ")
    blank = derive(load(write(tmp_path, frame("ROOT", frame("a", tokens=3)))), "tokens")
    assert render.legend([blank], float("nan")).plain.startswith(
        "tokens: ROOT has no total for it; rows are not coloured")


def test_profile_without_scopes_or_kernels_shows_root_and_how_to_get_some(tmp_path):
    path = write(tmp_path, frame("ROOT"))
    note = ("the profile holds no scopes or kernels: wrap regions of the program in "
            "proton.scope(...), or launch kernels on a GPU, while profiling")
    result = show(path)
    assert result.exit_code == 0, result.output
    assert result.output == f"name\nROOT\n{note}\n"
    listed = show("-l", path)
    assert listed.exit_code == 0 and listed.output == f"{note}\n"
    untimed = show(write(tmp_path, frame("ROOT", frame("scope")), "untimed.hatchet"))
    assert untimed.exit_code == 0
    assert untimed.output.splitlines()[:3] == ["name", "ROOT", "└─ scope"]
    assert "hold no metrics" in untimed.output.splitlines()[3]


def test_list_on_a_cpu_only_profile_has_no_empty_list(tmp_path):
    result = show("-l", cpu_profile(tmp_path))
    assert result.output.splitlines() == [
        "inclusive: cpu_time (ns)", "exclusive: (none)",
        "derived:   cpu_time/s, cpu_time/ms, cpu_time/us, cpu_time/ns, cpu_time/%"]


CANDIDATES = ["util", "time/ms", "avg_time/us", "cpu_time/ms", "avg_cpu_time/us", "time/%",
              "cpu_time/%", "count/%", "tokens/%", "device_id/%", "device_type/%", "flop/s",
              "tflop16/s", "tflop8/s", "gbyte/s", "num_samples/%", "count", "tokens"]


def _profiles(tmp_path) -> list[str]:
    gpu_no_table = write(tmp_path, frame("ROOT", frame("k", **{"time (ns)": 5, "count": 1,
                                                              "flops16": 9, "device_id": "0"}),
                                         **{"time (ns)": 0, "count": 0, "flops16": 0}),
                         "no_table.hatchet")
    unknown_arch = write(tmp_path, frame("ROOT", frame("k", **{"time (ns)": 5, "count": 1,
                                                              "flops16": 9, "device_id": "0"}),
                                         **{"time (ns)": 0, "count": 0, "flops16": 0}),
                         "sm75.hatchet", {"CUDA": {"0": {"arch": "75", "num_sms": 40,
                                                         "clock_rate": 1, "bus_width": 256,
                                                         "memory_clock_rate": 1}}})
    return FIXTURES + [cpu_profile(tmp_path), gpu_no_table, unknown_arch]


def test_metrics_accepts_exactly_what_list_names(tmp_path):
    profiles = _profiles(tmp_path)
    listed_anywhere = set(CANDIDATES)
    for path in profiles:
        prof = load(path)
        listed = prof.inclusive + prof.exclusive + available(prof)
        listed_anywhere.update(listed)
        for spec in listed:
            column = derive(prof, spec)
            assert len(column.values) == len(prof.gf.dataframe), (path, spec)
    for path in profiles:
        prof = load(path)
        listed = set(prof.inclusive + prof.exclusive + available(prof))
        for spec in listed_anywhere - listed:
            with pytest.raises(ViewerError, match="unknown metric|no peak FLOP/s known"):
                derive(prof, spec)


def test_list_shows_percent_metrics_by_their_short_names():
    listed = show("-l", os.path.join(DATA, "example_gpu.hatchet")).output
    assert "count/%, time/%, tokens/%" in listed and "(ns)/%" not in listed


def test_util_without_flops_or_bytes_is_an_unknown_metric_not_a_blank_column():
    """example_gpu.hatchet's kernels have neither; its copies and sets have bytes, which are no
    kernel's work (they made util available, every kernel at 0)."""
    result = show("-m", "util", os.path.join(DATA, "example_gpu.hatchet"))
    assert result.exit_code == 2
    assert result.output.startswith("Error: unknown metric 'util' for this profile; available: ")
    assert len(result.output.strip().splitlines()) == 1


def test_util_is_blank_not_0_for_a_kernel_that_declared_no_work():
    """diagnose_recorded.hatchet: the Triton kernels with launch_metadata have util; cuBLAS's
    matmul and the Triton kernels without it declared no flops or bytes: unknown, not idle."""
    result = show("-m", "util", "--output", "csv", os.path.join(DATA, "diagnose_recorded.hatchet"))
    assert result.exit_code == 0, result.output
    util = {path.split(" / ")[-1]: value
            for path, _, value in csv.reader(result.output.splitlines()[1:])}
    assert float(util["matmul_4096x4096x4096"]) == pytest.approx(0.676, abs=1e-3)
    assert float(util["strided_copy"]) == pytest.approx(0.118, abs=1e-3)
    assert util["nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"] == ""
    assert util["square_dot"] == "" and util["add_kernel"] == ""


def test_util_on_a_gpu_without_known_peak_names_the_archs_it_knows(tmp_path):
    result = show("-m", "util", _profiles(tmp_path)[-1])
    assert result.exit_code == 2
    assert result.output == ("Error: no peak FLOP/s known for CUDA arch sm75; util needs sm80, "
                             "sm89, sm90 or sm100 (use tflop/s instead)\n")


def test_percent_headers_read_as_asked(tmp_path):
    result = show("-m", "time/%,count/%,tokens/%", "-d", "1",
                  os.path.join(DATA, "example_gpu.hatchet"))
    assert result.output.splitlines()[0].split() == ["time/%", "count/%", "tokens/%", "name"]
    cpu = show("-m", "CPU_TIME/%", "-d", "1", cpu_profile(tmp_path))
    assert cpu.output.splitlines()[0].split() == ["cpu_time/%", "name"]


@pytest.mark.parametrize("args,note", [
    (["-i", "ward"], "no frame matches --include 'ward'"),
    (["-e", ".*"], "no frame matches --exclude '.*'"),
    (["-t", "1000"], "no frame matches -t 1000 on cpu_time (ms)"),
    (["-i", "in", "-t", "50"], "no frame matches --include 'in' -t 50 on cpu_time (ms)"),
])
def test_filter_that_matches_nothing_says_so(tmp_path, args, note):
    path = cpu_profile(tmp_path)
    result = show(*args, path)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["cpu_time (ms)  name", "       38.750  ROOT", note]
    rows = show(*args, "--output", "json", path)
    assert rows.exit_code == 0
    assert [r["path"] for r in json.loads(rows.stdout)] == [["ROOT"]]  # stdout stays JSON
    assert rows.stderr == note + "\n"


def test_filter_that_matches_something_adds_no_note(tmp_path):
    result = show("-i", "inner", cpu_profile(tmp_path))
    assert result.exit_code == 0 and "no frame matches" not in result.output


# -- resource bounds: what a hostile file can make the viewer read, hold and spend ---------------

BOMB_SECONDS, BOMB_MB = 60, 1500
"""Generous bounds for a bomb: before the bounds, the one below took 143 s and 23.6 GB."""
# The peak is this image's VmHWM: ru_maxrss would carry the forking pytest's own peak across
# exec (CI's full run read 456 MB for a viewer that had used 58).
VIEWER_CODE = """\
import atexit, sys
def report():  # at exit: the viewer's main ends the process itself (os._exit)
    with open("/proc/self/status") as status:
        hwm = [line.split()[1] for line in status if line.startswith("VmHWM:")]
    print("maxrss_kb", hwm[0], file=sys.stderr)
atexit.register(report)
from proton.viewer.cli import main
main()
"""


def bounded_viewer(*args: str, timeout: float = BOMB_SECONDS):
    """proton-viewer ARGS in a child limited to 8 GB of address space (a bomb must fail there,
    not take the machine): (completed process, seconds, its peak resident MB)."""
    import resource
    import subprocess
    import time

    def limit() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = 8 << 30 if hard == resource.RLIM_INFINITY else min(8 << 30, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))

    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", VIEWER_CODE, *args], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=limit)
    seconds = time.monotonic() - start
    peak = [line for line in done.stderr.splitlines() if line.startswith("maxrss_kb ")]
    return done, seconds, int(peak[-1].split()[1]) / 1024 if peak else float("inf")


def bomb_text(levels: int, elements: int) -> str:
    """The issue's bomb: `levels` nested scopes, the first with a vector of `elements`."""
    vector = "[" + ",".join(map(str, range(elements))) + "]"
    parts = ['[{"frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 0}, '
             '"children": [']
    parts += ['{"frame": {"name": "s%d", "type": "function"}, "metrics": {"time (ns)": 1%s}, '
              '"children": [' % (i, f', "v": {vector}' if i == 0 else "") for i in range(levels)]
    parts.append("]}" * levels + "]}, {}]")
    return "".join(parts)


def test_nesting_and_vector_bomb_shows_in_seconds_with_bounded_memory(tmp_path):
    path = tmp_path / "bomb.hatchet"
    path.write_text(bomb_text(10_000, 100_000))
    assert 1_000_000 < path.stat().st_size < 2_000_000  # the 1.7 MB
    done, seconds, peak_mb = bounded_viewer(str(path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert seconds < BOMB_SECONDS and peak_mb < BOMB_MB, (seconds, peak_mb)
    assert f"note: {str(path)!r}: vector metric 'v' has 100,000 elements; the viewer shows " \
           "the first 256" in done.stderr


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_devices_are_refused_at_once_with_one_line(device):
    done, seconds, _ = bounded_viewer(device)
    assert done.returncode == 2 and seconds < BOMB_SECONDS
    errors = [line for line in done.stderr.splitlines() if not line.startswith("maxrss_kb")]
    assert errors == [f"Error: {device!r} is a device, not a file; give the .hatchet file a "
                      "profile wrote"]


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "p.hatchet")
    done, _, _ = bounded_viewer(str(tmp_path / "p.hatchet"), timeout=30)
    assert done.returncode == 2
    assert "is a pipe (FIFO), not a file; pipe it into stdin instead: ... | proton-viewer -" \
        in done.stderr


def test_a_file_or_stdin_past_the_size_cap_is_refused_naming_the_cap_and_the_override(
        tmp_path, monkeypatch):
    path = write(tmp_path, frame("ROOT", frame("k", **{"cpu_time (ns)": 1, "pad": "x" * 3_000_000})))
    monkeypatch.setenv(reader.MAX_MB_ENV, "2")
    for args, source, text in (((path,), repr(path), None), (("-",), "stdin", _text(path))):
        result = show(*args, input=text)
        assert result.exit_code == 2
        assert result.output == (f"Error: {source} holds more than 2 MiB, the most the viewer "
                                 "reads; to read it anyway set PROTON_VIEWER_MAX_MB to more MiB\n")
    monkeypatch.setenv(reader.MAX_MB_ENV, "4")
    assert show(path).exit_code == 0


def test_a_bad_size_cap_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv(reader.MAX_MB_ENV, "lots")
    result = show(cpu_profile(tmp_path))
    assert result.exit_code == 2
    assert result.output == ("Error: PROTON_VIEWER_MAX_MB='lots' is not a number of MiB from 1 "
                             "to 1,048,576; e.g. PROTON_VIEWER_MAX_MB=1024\n")


def test_a_vector_past_the_cap_is_cut_with_a_note(tmp_path):
    path = write(tmp_path, frame("ROOT", frame("k", lens=list(range(1000)))))
    result = show("-l", path)
    assert result.exit_code == 0, result.output
    assert "lens[255]" in result.stdout and "lens[256]" not in result.stdout
    assert result.stderr == (f"note: {path!r}: vector metric 'lens' has 1,000 elements; the "
                             f"viewer shows the first {reader.MAX_VECTOR}\n")


def test_too_many_cells_of_frames_by_metrics_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_CELLS", 1000)  # the same rule as 100M, with a small file
    frames = [frame(f"f{i}", **{f"m{i}": 1}) for i in range(40)]
    path = write(tmp_path, frame("ROOT", *frames))
    result = show(path)
    assert result.exit_code == 2
    assert result.output.endswith("has 41 frames and 40 distinct metrics, 1,640 cells; the "
                                  "viewer holds up to 1,000 (a metric on one frame takes a cell "
                                  "on every frame)\n")
    assert len(result.output.splitlines()) == 1


def test_ranks_whose_frames_by_metrics_pass_the_cap_together_are_a_one_line_error(
        tmp_path, monkeypatch):
    from proton.viewer import ranks

    monkeypatch.setattr(reader, "MAX_CELLS", 1000)
    monkeypatch.setattr(ranks, "MAX_CELLS", 1000)
    files = [write(tmp_path, frame("ROOT", *[frame(f"r{r}f{i}", **{f"r{r}m{i}": 1})
                                             for i in range(30)]), name=f"j.rank{r}.hatchet")
             for r in (0, 1)]
    result = show(*files)
    assert result.exit_code == 2
    assert result.output == ("Error: the 2 ranks have 61 frames and 60 distinct metrics "
                             "together, 3,660 cells a rank; the viewer holds up to 1,000: merge "
                             "fewer files, or show one with --rank R\n")


# -- values no profile should hold: each shown sanely or refused in one line ---------------------

H100 = {"CUDA": {"0": {"arch": "90", "num_sms": 132, "clock_rate": 1755000,
                       "memory_clock_rate": 2619000, "bus_width": 5120}}}


def kernel_profile(tmp_path, devices=None, **metrics) -> str:
    """One kernel on GPU 0 with time, flops and bytes (each overridable) under a scope."""
    values = {"time (ns)": 2e6, "count": 10, "device_id": "0", "device_type": "CUDA",
              "flops16": 1e12, "bytes": 1e9, **metrics}
    root = frame("ROOT", frame("step", frame("mm", **values)), **{"time (ns)": 0, "count": 0,
                                                                  "flops16": 0, "bytes": 0})
    return write(tmp_path, root, devices=H100 if devices is None else devices)


def html_of(tmp_path, *args: str):
    page = str(tmp_path / "r.html")
    result = show("--html", page, *args)
    return result, page


@pytest.mark.parametrize("metrics", [{"time (ns)": 5e-324}, {"flops16": 5e-324},
                                     {"flops16": 1e308, "bytes": 5e-324}])
def test_times_and_flops_too_small_or_large_for_a_float_show_without_a_traceback(
        tmp_path, metrics):
    path = kernel_profile(tmp_path, **metrics)
    for args in (["--diagnose"], ["--diagnose", "--output", "json"],
                 ["-m", "time/ms,tflop16/s,gbyte/s,util"]):
        result = show(*args, path)
        assert result.exit_code == 0 and result.exception is None, (args, result.output)
    result, page = html_of(tmp_path, path)
    assert result.exit_code == 0 and result.exception is None, result.output
    html = _text(page)
    assert "NaN" not in html and "Infinity" not in html


@pytest.mark.parametrize("devices", [
    {"CUDA": "x"}, [1], {"CUDA": None}, {"CUDA": {"0": "x"}}, {"CUDA": {"0": [1]}},
    {"CUDA": {"0": {**H100["CUDA"]["0"], "num_sms": "x"}}},
    {"CUDA": {"0": {**H100["CUDA"]["0"], "num_sms": None}}},
    {"CUDA": {"0": {**H100["CUDA"]["0"], "num_sms": 1e308}}},
    {"CUDA": {"0": {**H100["CUDA"]["0"], "memory_clock_rate": 10 ** 30}}},
    {"CUDA": {"0": {**H100["CUDA"]["0"], "clock_rate": -1}}},
    {"CUDA": {"0": {**H100["CUDA"]["0"], "memory_clock_rate": 5e-324}}},
])
def test_a_device_table_of_the_wrong_shape_or_values_is_read_as_far_as_it_makes_sense(
        tmp_path, devices):
    path = kernel_profile(tmp_path, devices=devices, grid_blocks=64, block_threads=128)
    for args in (["--diagnose"], ["-m", "time/ms,tflop16/s"]):
        result = show(*args, path)
        assert result.exit_code == 0 and result.exception is None, (args, result.output)
    result, _ = html_of(tmp_path, path)
    assert result.exit_code == 0 and result.exception is None, result.output
    util = show("-m", "util", path)  # the GPU's figures are not all there: no util
    assert util.exit_code == 2 and util.output.startswith("Error: unknown metric 'util'")
    assert len(util.output.splitlines()) == 1


def test_whole_numbers_past_a_float_show_blank_and_past_4300_digits_are_one_line(tmp_path):
    path = kernel_profile(tmp_path, **{"time (ns)": 10 ** 400, "count": 2 ** 64})
    for args in ([], ["-m", "time/ms,avg_time/us,count"], ["--diagnose"]):
        result = show(*args, path)
        assert result.exit_code == 0 and result.exception is None, (args, result.output)
    assert html_of(tmp_path, path)[0].exit_code == 0
    long = tmp_path / "long.hatchet"
    long.write_text('[{"frame": {"name": "ROOT"}, "metrics": {"n": 1%s}, "children": []}, {}]'
                    % ("0" * 5000))
    result = show(str(long))
    assert result.exit_code == 2
    assert result.output == (f"Error: {str(long)!r} is not a profile: it holds a number of "
                             "more than 4,300 digits\n")


def test_source_lines_a_billion_apart_or_past_any_file_are_drawn_in_a_few_rows(tmp_path):
    lines = {"1": 10, "999999999": 20, "9" * 5000: 5}
    root = frame("ROOT", frame("k", *[frame(f"/x/k.py:{n}@k", num_samples=v)
                                      for n, v in lines.items()], num_samples=0),
                 num_samples=0)
    path = write(tmp_path, root)
    result = show("--source", "k", path)
    assert result.exit_code == 0, result.output
    assert "k: 35 samples, 0.0% stalled, 1 call path, 5 samples not mapped to a line" in \
        result.output
    assert len(result.output.splitlines()) < 20
    page = str(tmp_path / "r.html")  # in a child: a row per line between would take 100s of GB
    done, seconds, _ = bounded_viewer("--html", page, path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert os.path.getsize(page) < 100_000 and seconds < BOMB_SECONDS


def test_a_job_claiming_billions_of_ranks_notes_the_missing_ones_at_once(tmp_path):
    files = [write(tmp_path, {**frame("ROOT", frame("s", **{"cpu_time (ns)": 1})),
                              "frame": {"name": "ROOT", "rank": r, "world_size": 2 ** 31 - 1}},
                   name=f"j.rank{r}.hatchet") for r in (0, 5)]
    done, seconds, _ = bounded_viewer("-m", "cpu_time/ms", *files)  # a list of them: 80 GB
    assert done.returncode == 0 and seconds < BOMB_SECONDS, done.stderr[-2000:]
    assert "note: 2 of the job's 2147483647 ranks merged; missing ranks 1-4,6-2147483646" in \
        done.stderr


def test_a_lone_surrogate_in_a_name_is_shown_as_its_escape(tmp_path):
    path = tmp_path / "s.hatchet"
    path.write_text('[{"frame": {"name": "ROOT"}, "metrics": {}, "children": [{"frame": '
                    '{"name": "k\\ud800", "no_lines": "\\udc00"}, "metrics": {"cpu_time (ns)": 1, '
                    '"n\\ud800": 1}, "children": []}]}, {}]')
    for args in ([], ["-l"], ["--output", "csv"], ["--print-sorted"]):
        result = show(*args, str(path))
        assert result.exit_code == 0 and result.exception is None, (args, result.output)
    assert html_of(tmp_path, str(path))[0].exit_code == 0
    assert "k\\ud800" in show(str(path)).output and "n\\ud800" in show("-l", str(path)).output


def test_a_messagepack_profile_with_numbers_for_metric_names_reads_them_as_text(tmp_path):
    from proton.format_msgpack import packb

    path = tmp_path / "p.hatchet_msgpack"
    path.write_bytes(packb([{"frame": {"name": "ROOT"}, "metrics": {1: 0},
                             "children": [{"frame": {"name": "k"}, "metrics": {2: 3},
                                           "children": []}]}, {}]))
    result = show("-l", str(path))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("inclusive: 1\nexclusive: 2\n")


def _text(path) -> str:
    with open(path) as f:
        return f.read()

