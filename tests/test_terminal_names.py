"""The terminal's tree names frames as the --html report does, its filters match the names it
shows, and --source finds code where the report does (issue 60 item 8)."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer
from proton.viewer.names import readable
from test_html import data, write
from test_html_report import project

DATA = os.path.join(os.path.dirname(__file__), "data")
EXAMPLE = os.path.join(DATA, "example_gpu.hatchet")
ATEN = ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1E"
        "EEEviT0_T1_")

needs_demangler = pytest.mark.skipif(readable(ATEN) == ATEN,
                                     reason="no C++ demangler here (cxxfilt or c++filt)")


def show(*args):
    return CliRunner().invoke(viewer, list(args))


def shown(*args) -> list[str]:
    """The names of the rows the tree would show, as it shows them."""
    result = show("--output", "json", *args)
    assert result.exit_code == 0, result.output
    return [row["path"][-1] for row in json.loads(result.stdout)]


@needs_demangler
def test_exclude_hides_kernels_by_the_demangled_name_the_tree_shows():
    every = shown("-m", "time/ms", EXAMPLE)
    aten = [n for n in every if n.startswith("at::")]
    assert len(aten) >= 4  # torch's elementwise and reduce kernels, demangled
    kept = shown("-m", "time/ms", "-e", "at::", EXAMPLE)
    assert not [n for n in kept if n.startswith("at::")]
    assert set(kept) == set(every) - set(aten)
    # a regex written for the raw names (Triton's viewer matches those) works as before
    assert shown("-m", "time/ms", "-e", "_ZN2at", EXAMPLE) == kept


@needs_demangler
def test_include_keeps_frames_by_the_demangled_name_and_by_the_raw_one():
    only = shown("-m", "time/ms", "-i", "at::native::vectorized_elementwise", EXAMPLE)
    kernels = [n for n in only if n.startswith("at::")]
    assert kernels and all(n.startswith("at::native::vectorized_elementwise_kernel<")
                           for n in kernels)
    assert shown("-m", "time/ms", "-i", "_ZN2at6native29vectorized", EXAMPLE) == only


def _python_profile(tmp_path) -> str:
    """A -c python tree: the script's frames by absolute path, a kernel under them."""
    def frame(name, *children, **metrics):
        return {"frame": {"name": name, "type": "function"}, "metrics": metrics,
                "children": list(children)}

    kernel = frame("add_kernel", **{"time (ns)": 1e6, "count": 1})
    root = frame("ROOT", frame("/home/u/proj/train.py:12@<module>",
                               frame("/home/u/proj/train.py:5@step", kernel)),
                 **{"time (ns)": 0, "count": 0})
    path = tmp_path / "py.hatchet"
    path.write_text(json.dumps([root, {}]))
    return str(path)


def test_python_frames_print_shortened_as_the_report_shows_them(tmp_path):
    path = _python_profile(tmp_path)
    result = show(path)
    assert result.exit_code == 0, result.output
    names = [line.split("─ ")[-1] for line in result.output.splitlines()[2:]]
    assert names == ["<module> (train.py:12)", "step (train.py:5)", "add_kernel"]
    assert "/home/u" not in result.output
    page = data(write(tmp_path, path))["nodes"]["name"]
    assert page[1:] == names  # the same names, by the same function
    full = show("-f", "full", path).output
    assert "/home/u/proj/train.py:5@step" in full
    # Triton's own text keeps its default (full) with --output triton
    triton = show("--output", "triton", "-m", "time/ms", path).output
    assert "/home/u/proj/train.py:5@step" in triton
    refused = show("--output", "triton", "-f", "short", "-m", "time/ms", path)
    assert refused.exit_code == 2 and "no -f short" in refused.output


def test_filters_match_a_python_frame_as_shown_and_as_the_file_has_it(tmp_path):
    path = _python_profile(tmp_path)
    assert shown("-f", "short", "-e", r"step \(", path) == ["ROOT", "<module> (train.py:12)"]
    assert shown("-f", "short", "-e", ".*@step", path) == ["ROOT", "<module> (train.py:12)"]
    # rows for scripts keep the names as the file has them, as other tools print them
    rows = shown(path)
    assert rows[1] == "/home/u/proj/train.py:12@<module>" and rows[-1] == "add_kernel"


def test_source_in_the_terminal_reads_beside_the_profiled_script_as_the_report_does(
        tmp_path, monkeypatch):
    top, profile = project(tmp_path)  # a -c python profile of proj/train.py
    monkeypatch.chdir(top / "runs")  # the kernel's file is one folder up, beside train.py
    result = show("--source", "add_kernel", "--width", "100", profile)
    assert result.exit_code == 0, result.output
    assert "y = x + 1" in result.output and "the sampled lines only" not in result.output
    (page,) = data(write(tmp_path, profile))["source"][0]["files"]
    assert "    y = x + 1" in [ln.get("code") for ln in page["lines"]]
