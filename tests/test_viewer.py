"""proton-viewer on real profiles (recorded on an H100) and on bad input."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from conftest import viewer_in_terminal
from proton.viewer.cli import viewer
from proton.viewer.derive import derive
from proton.viewer.reader import load

DATA = os.path.join(os.path.dirname(__file__), "data")
RECORDED = os.path.join(DATA, "recorded.hatchet")


def show(*args):
    return CliRunner().invoke(viewer, list(args))


def test_default_view_is_kernel_time_in_ms_sorted_hottest_first():
    result = show(RECORDED)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["time", "(ms)", "name"]
    # the column's smallest value is 0.0008 ms: every cell has six decimals
    assert lines[1].split() == ["0.133730", "ROOT"]
    assert lines[2].split() == ["0.124641", "├─", "step"]
    assert lines[3].split()[-1] == "torch"  # 108 us before triton's 16 us


def test_several_metrics_and_depth():
    result = show("-m", "count,avg_time/us,time/%", "-d", "2", RECORDED)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert rows[0] == ["count", "avg_time", "(us)", "time/%", "name"]
    assert rows[1][0] == "46" and rows[1][2] == "100.000" and rows[1][-1] == "ROOT"
    assert {r[-1] for r in rows[2:]} == {"step", "worker", "scale_kernel"}  # ROOT's children only


def test_avg_time_is_time_over_count():
    prof = load(RECORDED)
    avg = derive(prof, "avg_time/ns").values
    time_ns = derive(prof, "time/ns").values
    count = derive(prof, "count").values
    assert (avg - time_ns / count).abs().max() < 1e-9
    assert derive(prof, "TIME/MS").header == "time (ms)"  # case-insensitive


def test_list_names_inclusive_exclusive_and_derived():
    result = show("-l", RECORDED)
    assert result.exit_code == 0
    assert "inclusive: count, time (ns)" in result.output
    assert "device_id" in result.output and "avg_time/us" in result.output


def test_cpu_profile_defaults_to_cpu_time(tmp_path):
    path = tmp_path / "cpu.hatchet"
    path.write_text(json.dumps([{"frame": {"name": "ROOT", "type": "function"}, "metrics": {},
                                 "children": [{"frame": {"name": "load", "type": "function"},
                                               "metrics": {"cpu_time (ns)": 2500000},
                                               "children": []}]}, {}]))
    result = show(str(path))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[2].split() == ["2.500", "└─", "load"]


def test_nodes_without_the_metric_show_blank_not_nan(tmp_path):
    path = tmp_path / "p.hatchet"
    path.write_text(json.dumps([{"frame": {"name": "ROOT"}, "metrics": {"time (ns)": 0, "count": 0},
                                 "children": [{"frame": {"name": "k"}, "children": [],
                                               "metrics": {"time (ns)": 2000, "count": 2}},
                                              {"frame": {"name": "user"}, "children": [],
                                               "metrics": {"tokens (exc)": 5}}]}, {}]))
    result = show("-m", "avg_time/us,tokens (exc)", str(path))
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert ["1", "├─", "k"] in rows or ["1", "└─", "k"] in rows
    assert any(r[-1] == "user" and r[0] != "nan" for r in rows)
    assert "nan" not in result.output.lower()


def test_infinite_values_print_as_inf(tmp_path):
    path = tmp_path / "inf.hatchet"
    path.write_text('[{"frame": {"name": "ROOT"}, "metrics": {"x": 0}, "children": '
                    '[{"frame": {"name": "a"}, "metrics": {"x": 1e400}, "children": []}]}, {}]')
    result = show("-m", "x", str(path))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[2].split() == ["inf", "└─", "a"]


@pytest.mark.parametrize("content,message", [
    (None, "no such file"),
    ("not json at all", "not valid JSON"),
    ('[{"frame": {"name": "ROOT"}, "metrics": {}, "children": [', "truncated"),
    ('{"a": 1}', "not a .hatchet profile"),
    ('[{"frame": {"name": "ROOT"}, "metrics": {}, "children": [{"oops": 1}]}]', "malformed node"),
])
def test_bad_files_give_one_line_and_status_2(tmp_path, content, message):
    path = tmp_path / "bad.hatchet"
    if content is not None:
        path.write_text(content)
    result = show(str(path))
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_unknown_metric_lists_what_is_available():
    result = show("-m", "tflops", RECORDED)
    assert result.exit_code == 2
    assert "unknown metric 'tflops'" in result.output and "avg_time/us" in result.output


def test_triton_written_profile_reads_with_the_same_numbers_as_ours():
    """The same workload (tests/data/record_session.py) profiled by Triton 3.6's Proton and by
    ours on one H200: same tree, same counts, kernel times within 5% (0.25 us for a single
    launch of a 1 us kernel, whose run-to-run spread is larger)."""
    theirs, ours = load(os.path.join(DATA, "triton_recorded.hatchet")), load(RECORDED)

    def by_path(prof, spec):
        values = derive(prof, spec).values
        out = {}
        for node in values.index:
            names, n = [], node
            while n is not None:
                names.append(n.frame["name"])
                n = n.parents[0] if n.parents else None
            out[tuple(reversed(names))] = values[node]
        return out

    assert by_path(theirs, "count") == by_path(ours, "count")
    t_theirs, t_ours = by_path(theirs, "time/us"), by_path(ours, "time/us")
    for path, t in t_ours.items():
        assert t_theirs[path] == pytest.approx(t, rel=0.05, abs=0.25), path


EXAMPLE = os.path.join(DATA, "example_gpu.hatchet")


def test_diff_is_this_minus_other_with_change_in_percent(tmp_path):
    def profile(kernel_ns, extra=None):
        kids = [{"frame": {"name": "k"}, "metrics": {"time (ns)": kernel_ns, "count": 1},
                 "children": []}]
        if extra:
            kids.append({"frame": {"name": extra}, "metrics": {"time (ns)": 500, "count": 1},
                         "children": []})
        return [{"frame": {"name": "ROOT"}, "metrics": {"time (ns)": 0, "count": 0},
                 "children": [{"frame": {"name": "step"}, "metrics": {}, "children": kids}]}, {}]

    before, after = tmp_path / "before.hatchet", tmp_path / "after.hatchet"
    before.write_text(json.dumps(profile(2000, extra="old")))
    after.write_text(json.dumps(profile(3000, extra="new")))
    result = show("-m", "time/us", "-diff", str(before), "--output", "json", str(after))
    assert result.exit_code == 0, result.output
    rows = {tuple(r["path"]): r for r in json.loads(result.output)}
    k = rows[("ROOT", "step", "k")]
    assert k["time (us) Δ"] == pytest.approx(1.0) and k["time (us) Δ%"] == pytest.approx(50.0)
    assert rows[("ROOT", "step", "new")]["time (us) Δ"] == pytest.approx(0.5)
    assert rows[("ROOT", "step", "new")]["time (us) Δ%"] is None  # nothing to compare with
    assert rows[("ROOT", "step", "old")]["time (us) Δ"] == pytest.approx(-0.5)
    assert rows[("ROOT",)]["time (us) Δ"] == pytest.approx(1.0)
    assert rows[("ROOT",)]["time (us) Δ%"] == pytest.approx(40.0)  # 3.5 us over 2.5 us
    tree = show("-m", "time/us", "--diff-profile", str(before), str(after))
    assert tree.output.splitlines()[0].split() == ["time", "(us)", "Δ", "time", "(us)", "Δ%",
                                                   "name"]


def run_of(path: str, tmp_path, name: str, **where) -> str:
    """A copy of the profile at `path` as another run wrote it: its ROOT frame names the host,
    pid (and rank) of that run, as every profile of ours does."""
    with open(path) as f:
        doc = json.load(f)
    doc[0]["frame"].update(where)
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return str(out)


def test_diff_of_two_runs_matches_frames_by_name_not_by_host_or_pid(tmp_path):
    a = run_of(RECORDED, tmp_path, "a.hatchet", host="gpu-a", pid=4242)
    b = run_of(RECORDED, tmp_path, "b.hatchet", host="gpu-a", pid=5151)
    c = run_of(RECORDED, tmp_path, "c.hatchet", host="gpu-b", pid=77, rank=0, world_size=1)
    alone = json.loads(show("-m", "time/us", "--output", "json", a).output)
    for this, other in ((b, a), (c, a), (RECORDED, a)):
        result = show("-m", "time/us", "-diff", other, "--output", "json", this)
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)
        assert sorted(r["path"] for r in rows) == sorted(r["path"] for r in alone)  # one tree
        assert all(r["time (us) Δ"] == 0 and r["time (us) Δ%"] == 0 for r in rows), rows[:3]
    tree = show("-m", "time/us", "-diff", a, b).output.splitlines()
    assert tree[1].split() == ["0", "0", "ROOT"] and "-100" not in "".join(tree)


@pytest.mark.parametrize("metric", ["time/%", "count/%"])
def test_diff_with_a_share_metric_where_one_file_has_no_pid(tmp_path, metric):
    """Issue 46, item 17: a /% metric in a -diff of a run with host and pid against one
    without was a KeyError traceback; now one tree, every share unchanged."""
    a = run_of(RECORDED, tmp_path, "a.hatchet", host="gpu-a", pid=4242)
    for this, other in ((a, RECORDED), (RECORDED, a)):
        result = show("-m", metric, "-diff", other, "--output", "json", this)
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        rows = json.loads(result.output)
        assert rows and all(abs(r[f"{metric} Δ"]) < 1e-9 for r in rows), rows[:3]


def _cpu_profile(path, root="ROOT", **scopes):
    """A CPU run's profile (no GPU): ROOT > step > the scopes, each with its cpu_time in ms."""
    kids = [{"frame": {"name": k, "type": "function"}, "metrics": {"cpu_time (ns)": ms * 10**6},
             "children": []} for k, ms in scopes.items()]
    step = {"frame": {"name": "step", "type": "function"},
            "metrics": {"cpu_time (ns)": sum(scopes.values()) * 10**6}, "children": kids}
    path.write_text(json.dumps([{"frame": {"name": root, "type": "function"}, "metrics": {},
                                 "children": [step]}, {}]))
    return str(path)


def test_diff_of_cpu_runs_counts_a_gone_scope_as_its_whole_time_slower(tmp_path):
    """Issue 60, item 1: `old` showed 0.000 and sorted last; it is -200 ms, -100%."""
    before = _cpu_profile(tmp_path / "before.hatchet", old=200)
    after = _cpu_profile(tmp_path / "after.hatchet", new=100)
    result = show("-diff", before, after)
    assert result.exit_code == 0, result.output
    assert result.stdout == """\
cpu_time (ms) Δ  cpu_time (ms) Δ%  name
           -100               -50  ROOT
           -100               -50  └─ step
           -200              -100     ├─ old
            100                       └─ new
"""
    rows = {r["path"][-1]: r for r in json.loads(show("-m", "time/ms", "-diff", before,
                                                      "--output", "json", after).stdout)}
    assert rows["old"]["cpu_time (ms) Δ"] == -200 and rows["old"]["cpu_time (ms) Δ%"] == -100


CPU_RUNS_ONCE = pytest.mark.xdist_group("cpu_runs")
"""The tests of cpu_runs: one xdist worker runs them, so its two runs are made once."""


@CPU_RUNS_ONCE
def test_diff_of_a_plain_cpu_run_against_its_python_context_run(cpu_runs):
    """Issue 60, item 1: ROOT's Δ was FILE's ROOT plus OTHER's frames, its Δ% FILE/OTHER."""
    plain, python = (json.loads(show("-m", "time/ms", "--output", "json", str(p)).stdout)
                     for p in cpu_runs)
    root = {"plain": plain[0]["cpu_time (ms)"], "python": python[0]["cpu_time (ms)"]}
    rows = json.loads(show("-m", "time/ms", "-diff", str(cpu_runs[1]), "--output", "json",
                           str(cpu_runs[0])).stdout)
    assert rows[0]["path"] == ["ROOT"]
    assert rows[0]["cpu_time (ms) Δ"] == pytest.approx(root["plain"] - root["python"], abs=1e-3)
    assert rows[0]["cpu_time (ms) Δ%"] == pytest.approx(
        (root["plain"] - root["python"]) / root["python"] * 100, abs=1e-2)
    gone = [r for r in rows if len(r["path"]) > 2]  # the python frames only OTHER has
    assert gone and all(r["cpu_time (ms) Δ%"] == -100 for r in gone), gone


@pytest.mark.parametrize("metric", ["time/%", "time/ms,time/%"])
def test_diff_of_files_whose_roots_are_named_differently_is_one_tree(tmp_path, metric):
    """Issue 59, item 22: a /% metric against a file whose root is not named ROOT was a
    KeyError traceback. A root is the whole run: the two roots match, FILE's name shown."""
    before = _cpu_profile(tmp_path / "before.hatchet", root="main", old=200)
    after = _cpu_profile(tmp_path / "after.hatchet", new=100)
    for this, other, root in ((after, before, "ROOT"), (before, after, "main")):
        result = show("-m", metric, "-diff", other, "--output", "json", this)
        assert result.exit_code == 0 and "Traceback" not in result.output, result.output
        rows = {r["path"][-1]: r for r in json.loads(result.stdout)}
        assert rows[root]["path"] == [root] and rows[root]["cpu_time/% Δ"] == 0
        assert sorted(rows) == sorted([root, "step", "old", "new"])
    with open(RECORDED) as f:
        doc = json.load(f)
    doc[0]["frame"]["name"] = "main"
    (tmp_path / "main.hatchet").write_text(json.dumps(doc))
    result = show("-m", metric, "-diff", str(tmp_path / "main.hatchet"), RECORDED)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert result.stdout.splitlines()[1].split()[:2] == ["0", "0"]


def test_diff_of_ours_against_tritons_file_of_the_same_script(tmp_path):
    """triton_recorded.hatchet is Triton's Proton on the script of recorded.hatchet: its ROOT
    has no host or pid; the same frames match."""
    ours = run_of(RECORDED, tmp_path, "ours.hatchet", host="gpu-a", pid=4242)
    result = show("-m", "count", "-diff", os.path.join(DATA, "triton_recorded.hatchet"),
                  "--output", "json", ours)
    assert result.exit_code == 0, result.output
    rows = {tuple(r["path"]): r for r in json.loads(result.output)}
    assert rows[("ROOT",)]["count Δ"] == 0 and rows[("ROOT", "step", "triton",
                                                     "scale_kernel")]["count Δ"] == 0
    assert len(rows) == len(json.loads(show("-m", "count", "--output", "json", ours).output))


def test_long_names_fold_at_the_width_and_lose_no_character():
    result = show("--width", "60", EXAMPLE)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 60
    whole = show(EXAMPLE).output.splitlines()  # piped: one line per frame
    names = [line.split("─ ")[-1] for line in whole[2:]]
    folded = "".join(line.split("─ ")[-1].lstrip("│ ") if "─ " in line else
                     "\n" + line.lstrip(" │") for line in lines[2:]).replace("\n", "")
    assert folded == "".join(names)
    assert len(lines) > len(whole)


def test_csv_and_sorted_views():
    csv_out = show("-m", "time/us,count", "--output", "csv", "-d", "2", EXAMPLE).output
    header, *rows = csv_out.splitlines()
    assert header == "path,depth,time (us),count"
    assert rows[0] == "ROOT,0,5682.062,62.0"
    assert rows[1] == "ROOT / memcpy HtoD (pageable),1,4562.832,4.0"
    assert all(r.count(" / ") == 1 for r in rows[1:])
    sorted_out = show("-m", "time/us", "--print-sorted", EXAMPLE).output
    flat = sorted_out.split("Frames sorted by time (us):\n")[1].splitlines()[1:]
    values = [float(line.split()[0].replace(",", "")) for line in flat]
    assert values == sorted(values, reverse=True) and values[0] == pytest.approx(4562.832)
    assert flat[0].split(None, 1)[1] == "memcpy HtoD (pageable)"


def test_terminal_output_is_coloured_by_share_of_root():
    text = viewer_in_terminal("-d", "2", "--width", "100", EXAMPLE)
    assert "\x1b[1;31m" in text.splitlines()[1]  # ROOT is 100% of itself: the hottest band
    assert "share of ROOT (5.682)" in text  # the legend


@pytest.mark.parametrize("args,message", [
    (["-l", "-m", "time/ms"], "-l lists the metrics only"),
    (["--output", "json", "--print-sorted"], "--output json writes the rows"),
    (["--output", "csv", "--width", "80"], "--output csv writes the rows"),
])
def test_conflicting_options_give_one_line_and_status_2(args, message):
    result = show(*args, EXAMPLE)
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def _python_context_profile(tmp_path):
    """A context="python" tree: the user's frames, torch's and Triton's launch machinery
    between them and the kernels."""
    lib = "/usr/lib/python3.12/site-packages"

    def frame(name, *children, **metrics):
        return {"frame": {"name": name, "type": "function"}, "metrics": metrics,
                "children": list(children)}

    gemm = frame("gemm_kernel", time=100, count=1)
    add = frame("add_kernel", time=10, count=1)
    forward = frame("/home/u/model.py:20@forward",
                    frame(f"{lib}/torch/nn/functional.py:2000@linear", gemm))
    root = frame("ROOT", frame("/home/u/train.py:10@main", frame(
        "/home/u/train.py:5@step",
        frame(f"{lib}/torch/nn/modules/module.py:1751@_call_impl",
              frame(f"{lib}/torch/nn/modules/module.py:1762@_wrapped_call_impl", forward)),
        frame(f"{lib}/triton/runtime/jit.py:300@run",
              frame(f"{lib}/triton/backends/nvidia/driver.py:700@__call__", add)))))
    for node in (gemm, add):
        node["metrics"] = {"time (ns)": node["metrics"]["time"], "count": 1}
    root["metrics"] = {"time (ns)": 0, "count": 0}
    path = tmp_path / "py.hatchet"
    path.write_text(json.dumps([root, {}]))
    return str(path)


def test_library_frames_fold_into_their_first_and_the_file_keeps_them(tmp_path):
    path = _python_context_profile(tmp_path)
    folded = {tuple(r["path"])[-1]: r for r in json.loads(
        show("-m", "time/ns", "--output", "json", "-f", "file_function_line", path).output)}
    lib = "module.py:1751@_call_impl [+1 library frame]"
    assert set(folded) == {"ROOT", "train.py:10@main", "train.py:5@step", lib,
                           "model.py:20@forward", "functional.py:2000@linear", "gemm_kernel",
                           "jit.py:300@run [+1 library frame]", "add_kernel"}
    assert folded["gemm_kernel"]["path"][3:] == [lib, "model.py:20@forward",
                                                 "functional.py:2000@linear", "gemm_kernel"]
    assert folded[lib]["time (ns)"] == 100 and folded["ROOT"]["time (ns)"] == 110
    full = json.loads(show("-m", "time/ns", "--output", "json", "--no-collapse-libraries",
                           path).output)
    assert len(full) == len(folded) + 2  # _wrapped_call_impl and driver's __call__ come back
    assert "[+" not in json.dumps(full)


def test_a_vector_metric_shows_one_column_per_element(tmp_path):
    path = tmp_path / "v.hatchet"
    path.write_text(json.dumps([{"frame": {"name": "ROOT"}, "metrics": {"n": 0}, "children": [
        {"frame": {"name": "fwd"}, "metrics": {"n": 3, "lens": [3, 6, 9], "tile": 128},
         "children": []}]}, {}]))
    result = show("-m", "lens,tile", str(path))
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert rows[0] == ["lens[0]", "lens[1]", "lens[2]", "tile", "name"]
    assert rows[2] == ["3", "6", "9", "128", "└─", "fwd"]
    single = show("-m", "lens[1]", "--output", "csv", str(path))
    assert single.output.splitlines()[-1] == "ROOT / fwd,1,6.0"
    wrong = show("-m", "lenz", str(path))
    assert wrong.exit_code != 0 and "lens[0], lens[1], lens[2]" in wrong.output


def test_a_python_script_given_as_the_profile_says_to_profile_it(tmp_path):
    script = tmp_path / "main.py"
    script.write_text("import proton\nprint('hi')\n")
    result = show(str(script))
    assert result.exit_code == 2 and "truncated" not in result.output
    assert result.output == (f"Error: {str(script)!r} is a Python script, not a profile; "
                             f"profile it with `proton {script}`, then read the .hatchet file "
                             "it writes (proton-viewer proton.hatchet)\n")


def test_a_chrome_trace_given_to_the_tree_points_at_output_trace(tmp_path):
    trace = tmp_path / "run.chrome_trace"
    trace.write_text('{"traceEvents": [], "otherData": {"t0_ns": 1}}')
    for args in ([], ["--diagnose"]):
        result = show(*args, str(trace))
        assert result.exit_code == 2
        assert result.output == (f"Error: {str(trace)!r} is a Chrome trace (proton -d trace), "
                                 "not a tree; merge it for Perfetto with: proton-viewer --output "
                                 f"trace {trace} > trace.json\n")


def test_text_that_is_no_json_is_not_called_truncated(tmp_path):
    path = tmp_path / "notes.hatchet"
    path.write_text("hello\n")
    result = show(str(path))
    assert result.exit_code == 2 and "truncated" not in result.output
    assert result.output.endswith("give the .hatchet file a profile wrote\n")


def _one_kernel(tmp_path, ns: float) -> str:
    path = tmp_path / "one.hatchet"
    path.write_text(json.dumps([{"frame": {"name": "ROOT", "type": "function"},
                                 "metrics": {"time (ns)": 0, "count": 0}, "children": [
        {"frame": {"name": "k", "type": "function"}, "children": [],
         "metrics": {"time (ns)": ns, "count": 1, "device_id": "0", "device_type": "CUDA"}}]},
        {}]))
    return str(path)


def test_csv_and_json_numbers_carry_no_float_noise_and_json_ends_with_a_newline(tmp_path):
    path = _one_kernel(tmp_path, 3300)  # 3300 * 1e-3 is 3.3000000000000003 in floats
    csv_out = show("-m", "time/us,time/ms", "--output", "csv", path).output
    assert csv_out == ("path,depth,time (us),time (ms)\n"
                       "ROOT,0,3.3,0.0033\n"
                       "ROOT / k,1,3.3,0.0033\n")
    json_out = show("-m", "time/us", "--output", "json", path).output
    assert json_out.endswith("]\n") and json.loads(json_out)[1]["time (us)"] == 3.3


def test_html_says_its_size_in_human_units(tmp_path):
    from proton.viewer.render import size

    result = show("--html", str(tmp_path / "r.html"), _one_kernel(tmp_path, 3300))
    written = os.path.getsize(tmp_path / "r.html")
    assert result.exit_code == 0 and f"({size(written)}); open it" in result.output
    assert [size(n) for n in (512, 9_500, 31_000, 999_600, 4_200_000)] == \
        ["512 B", "9.5 KB", "31 KB", "1.0 MB", "4.2 MB"]


def test_diff_lists_the_largest_change_first_faster_or_slower(tmp_path):
    def profile(**ns):
        return [{"frame": {"name": "ROOT"}, "metrics": {"time (ns)": 0, "count": 0},
                 "children": [{"frame": {"name": k}, "metrics": {"time (ns)": v, "count": 1},
                               "children": []} for k, v in ns.items()]}, {}]

    before, after = tmp_path / "before.hatchet", tmp_path / "after.hatchet"
    before.write_text(json.dumps(profile(a=1000, b=5000, c=2000)))
    after.write_text(json.dumps(profile(a=2000, b=1000, c=2500)))
    tree = show("-m", "time/us", "-diff", str(before), "--print-sorted", str(after))
    assert tree.output == """\
time (us) Δ  time (us) Δ%  name
     -2.500       -31.250  ROOT
     -4.000       -80.000  ├─ b
      1.000       100.000  ├─ a
      0.500        25.000  └─ c

Frames sorted by time (us) Δ:
time (us) Δ  time (us) Δ%  name
     -4.000       -80.000  b
      1.000       100.000  a
      0.500        25.000  c
"""
    rows = json.loads(show("-m", "time/us", "-diff", str(before), "--output", "json",
                           str(after)).output)
    assert [r["path"][-1] for r in rows] == ["ROOT", "b", "a", "c"]


def test_time_on_a_run_without_a_gpu_shows_cpu_time_and_says_so(tmp_path):
    path = tmp_path / "cpu.hatchet"  # what proton/examples/mlp.py writes on a CPU machine
    path.write_text(json.dumps([{"frame": {"name": "ROOT", "type": "function"}, "metrics": {},
                                 "children": [{"frame": {"name": "load", "type": "function"},
                                               "metrics": {"cpu_time (ns)": 2500000},
                                               "children": []},
                                              {"frame": {"name": "save", "type": "function"},
                                               "metrics": {"cpu_time (ns)": 1500000},
                                               "children": []}]}, {}]))
    result = show("-m", "time/ms,time/%", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout == """\
cpu_time (ms)  cpu_time/%  name
        4.000     100.000  ROOT
        2.500      62.500  ├─ load
        1.500      37.500  └─ save
"""
    assert result.stderr == ("note: no kernel ran in this profile (a run without a GPU): "
                             "time/ms, time/% show the scopes' cpu_time/ms, cpu_time/%\n")
    count = show("-m", "count", str(path))
    assert count.exit_code == 2 and count.stderr.startswith(
        "Error: unknown metric 'count' for this profile; no kernel ran in it (a run without a "
        "GPU); its metrics: cpu_time/s, ")


CPU_RUN = """
import time, proton
proton.start("cpu")
def work():
    with proton.cpu_timed_scope("step"):
        time.sleep(0.002)
def main():
    for _ in range(4):
        work()
    with proton.cpu_timed_scope("tiny"):
        pass
main()
proton.finalize()
"""


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    """A script profiled without a GPU, by itself and under `proton -c python`."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("cpu")
    (folder / "run.py").write_text(CPU_RUN)
    for args in (["run.py"], ["-m", "proton", "-c", "python", "-n", "python", "run.py"]):
        done = subprocess.run([sys.executable, *args], cwd=folder, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    return folder / "cpu.hatchet", folder / "python.hatchet"


@CPU_RUNS_ONCE
def test_list_puts_cpu_time_with_the_inclusive_metrics(cpu_runs):
    result = show("-l", str(cpu_runs[0]))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "inclusive: cpu_time (ns)"
    assert "cpu_time" not in lines[1]


@CPU_RUNS_ONCE
def test_avg_time_on_a_cpu_profile_is_the_time_per_entry_of_each_scope(cpu_runs):
    result = show("-m", "avg_time/ms,avg_cpu_time/ms,time/ms", str(cpu_runs[0]))
    assert result.exit_code == 0, result.output
    step = next(line.split() for line in result.output.splitlines() if line.endswith(" step"))
    avg, avg_cpu, total = float(step[0]), float(step[1]), float(step[2])
    assert avg == avg_cpu == pytest.approx(total / 4, rel=1e-3)
    assert 2.0 <= avg < 50


def cells_of(output: str) -> list[str]:
    """The first column's cells of a tree's rows."""
    return [line.split()[0] for line in output.splitlines()
            if line[:1] == " " or line.split()[-1] == "ROOT"]


@CPU_RUNS_ONCE
def test_each_column_has_one_number_format(cpu_runs):
    result = show("-m", "time/ms", str(cpu_runs[0]))
    assert result.exit_code == 0, result.output
    cells = cells_of(result.output)
    assert len(cells) == 3 and all("e" not in cell for cell in cells), cells
    assert len({len(cell.split(".")[1]) for cell in cells}) == 1, cells  # the same decimals
    seconds = show("-m", "time/s", str(cpu_runs[0]))
    cells = cells_of(seconds.output)
    assert len({len(cell.split(".")[1]) for cell in cells}) == 1, cells
    assert all("e" not in cell for cell in cells) or all("e-" in cell for cell in cells), cells


@CPU_RUNS_ONCE
def test_python_frames_of_a_cpu_run_show_the_time_of_the_scopes_inside_them(cpu_runs):
    result = show("-m", "time/ms", "-f", "full", str(cpu_runs[1]))
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()[1:]]
    by_name = {row[-1]: row[0] for row in rows if len(row) > 1}
    module = next(name for name in by_name if name.endswith("@<module>"))
    assert float(by_name[module]) == pytest.approx(float(by_name["ROOT"]), rel=1e-3)
    work = next(name for name in by_name if name.endswith("@work"))
    assert float(by_name[work]) == pytest.approx(float(by_name["step"]), rel=1e-3)
