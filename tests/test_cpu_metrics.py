"""Metrics on a profile of a run without a GPU, typos in metric and option names, and the
metrics every --help text names (issue 60 item 6)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

import pytest
from click.testing import CliRunner

from proton.viewer import triton_api
from proton.viewer.cli import viewer
from proton.viewer.derive import derive
from proton.viewer.errors import ViewerError
from proton.viewer.reader import load

DATA = os.path.join(os.path.dirname(__file__), "data")
NOTE = "note: no kernel ran in this profile (a run without a GPU): "


def frame(name, *children, **metrics):
    return {"frame": {"name": name, "type": "function"}, "metrics": metrics,
            "children": list(children)}


@pytest.fixture
def cpu_profile(tmp_path) -> str:
    """What `proton` writes without a GPU: `step` (30 ms, 2 GFLOP declared) holding `fwd`
    (20 ms), each entered once; ROOT carries the inclusive user metrics only."""
    root = frame("ROOT", frame("step", frame("fwd", **{"cpu_time (ns)": 20e6, "cpu_count": 1}),
                               flops=2e9, bytes=6e6, **{"cpu_time (ns)": 30e6, "cpu_count": 1}),
                 flops=0, bytes=0)
    path = tmp_path / "cpu.hatchet"
    path.write_text(json.dumps([root, {}]))
    return str(path)


def show(*args):
    return CliRunner().invoke(viewer, list(args))


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if not line.startswith("note:")]


def test_count_is_the_scopes_entries_with_the_note(cpu_profile):
    result = show("-m", "count", cpu_profile)
    assert result.exit_code == 0, result.output
    assert rows(result.output)[0] == ["cpu_count", "name"]
    assert rows(result.output)[2] == ["1", "└─", "step"]
    assert f"{NOTE}count shows the scopes' cpu_count" in result.output


def test_declared_flops_give_rates_over_cpu_time(cpu_profile):
    result = show("-m", "gflop/s,gbyte/s", cpu_profile)
    assert result.exit_code == 0, result.output
    table = rows(result.output)
    assert table[0] == ["cpu_gflop/s", "cpu_gbyte/s", "name"]
    # 2e9 flops and 6e6 bytes in 30 ms; ROOT's time is its timed scopes'
    assert table[1] == ["66.667", "0.200", "ROOT"] and table[2][:2] == ["66.667", "0.200"]
    assert (f"{NOTE}gflop/s, gbyte/s show the scopes' cpu_gflop/s, cpu_gbyte/s"
            in result.output)
    listed = show("-l", cpu_profile).output
    assert "cpu_gflop/s" in listed and "cpu_tbyte/s" in listed


def test_a_typo_gets_the_closest_metric_besides_the_list(cpu_profile):
    result = show("-m", "flopz", cpu_profile)
    assert result.exit_code == 2
    assert "unknown metric 'flopz' for this profile (did you mean 'flops'?);" in result.output
    assert "cpu_time/ms" in result.output and len(result.output.splitlines()) == 1
    gpu = show("-m", "tflops", os.path.join(DATA, "synthetic.hatchet"))
    assert "(did you mean 'tflop16/s'?)" in gpu.output and gpu.exit_code == 2
    triton = show("--output", "triton", "-m", "cuont", os.path.join(DATA, "synthetic.hatchet"))
    assert "metric 'cuont' is not in this profile (did you mean 'count'?)" in triton.output


def test_tritons_parse_maps_time_as_the_command_does(cpu_profile):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gf, names = triton_api.parse(["time/ms", "count"], cpu_profile)
    assert names == ["cpu_time/ms (inc)", "cpu_count"]
    df = gf.dataframe.set_index("name")
    assert df.loc["ROOT", "cpu_time/ms (inc)"] == pytest.approx(30.0)  # not nan
    assert df.loc["fwd", "cpu_time/ms (inc)"] == pytest.approx(20.0)
    assert [str(w.message) for w in caught] == [
        "no kernel ran in this profile (a run without a GPU): time/ms, count show the scopes' "
        "cpu_time/ms, cpu_count"]


def test_output_triton_prints_the_mapped_time_on_root(cpu_profile):
    result = CliRunner().invoke(viewer, ["--output", "triton", "-m", "time/ms,time/%",
                                         cpu_profile])
    assert result.exit_code == 0, result.output
    assert rows(result.output)[:3] == [["30.000", "100.000", "ROOT"],
                                       ["└─", "30.000", "100.000", "step"],
                                       ["└─", "20.000", "66.667", "fwd"]]
    assert f"{NOTE}time/ms, time/% show the scopes' cpu_time/ms, cpu_time/%" in result.output


def test_a_gpu_profile_keeps_its_own_count_and_rates():
    prof = load(os.path.join(DATA, "synthetic.hatchet"))
    assert derive(prof, "count").header == "count"
    assert derive(prof, "gflop16/s").header == "gflop16/s"
    result = show("-m", "count,gflop16/s", os.path.join(DATA, "synthetic.hatchet"))
    assert result.exit_code == 0 and "note:" not in result.output


def test_an_unknown_hook_names_the_valid_one_on_one_line(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    proc = subprocess.run([sys.executable, "-P", "-m", "proton", "-k", "tritn", str(script)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    error = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert error == ["Error: hook='tritn' is not supported (did you mean 'triton'?); choose "
                     "'triton', or leave it out"]


# -- the metrics --help texts name ------------------------------------------------------------

def _help_texts() -> dict[str, str]:
    """Each command's help as written: its docstring, epilog and every option's help."""
    from proton.cli import proton

    commands = {"proton-viewer": viewer, "proton": proton,
                **{f"proton {n}": c for n, c in proton.commands.items()}}
    return {name: "\n".join(filter(None, [c.help, c.epilog,
                                          *(getattr(p, "help", None) for p in c.params)]))
            for name, c in commands.items()}


def _named_metrics(text: str) -> list[str]:
    """The metrics a help text names: after `-m` in a proton-viewer command line (each line,
    each parenthesis), and in an `e.g.` list of metrics."""
    found = []
    for part in re.split(r"[\n();]", text):
        if "proton-viewer" in part:
            found += re.findall(r"(?:^|\s)-m\s+(\S+)", part)
    found += re.findall(r"e\.g\. ((?:[\w%/]+,)+[\w%/]+)", text)
    return [spec for specs in found for spec in specs.split(",")]


def _accepted(spec: str, profiles: list) -> bool:
    for prof in profiles:
        try:
            derive(prof, spec)
            return True
        except ViewerError:
            continue
    return False


def test_every_metric_a_help_text_names_is_one_the_viewer_accepts(tmp_path):
    """`proton run -h` once suggested `-m dram_gbs`, which no profile has (dram_gbyte/s)."""
    paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(DATA)
                   for name in names if name.endswith(".hatchet") and ".rank" not in name)
    profiles = [load(p) for p in paths]
    named = {cmd: _named_metrics(text) for cmd, text in _help_texts().items()}
    assert "dram_gbyte/s" in named["proton run"] and "tflop16/s" in named["proton-viewer"]
    refused = {cmd: [s for s in specs if not _accepted(s, profiles)]
               for cmd, specs in named.items()}
    assert refused == {cmd: [] for cmd in named}
