"""The README a newcomer reads first: the GPU commands lead and keep the installed torch, CI runs
its test command, what a user does first comes first, every link and screenshot is there, and the
outputs it shows for a CPU profile are what the viewer prints for the bundled example."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def text(path: str = "README.md") -> str:
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def blocks(markdown: str) -> list[str]:
    """The fenced code blocks, in order."""
    return re.findall(r"^```[a-z]*\n(.*?)^```", markdown, flags=re.M | re.S)


def shown_output(command: str) -> list[str]:
    """The lines the README shows under `$ command`, up to the block's end."""
    block = next(b for b in blocks(text()) if f"$ {command}\n" in b)
    return block.split(f"$ {command}\n", 1)[1].rstrip("\n").splitlines()


def test_the_readme_leads_with_two_gpu_commands_that_keep_the_installed_torch():
    readme = text()
    first = readme.split("## Two commands on a fresh machine\n", 1)[1]
    gpu, cpu = blocks(first)[:2]
    assert first.index("On a GPU machine") < first.index("On a machine without a GPU")
    gpu_lines = gpu.splitlines()
    assert len(gpu_lines) == 2 and all(line.startswith("pip install -e ") for line in gpu_lines)
    assert "torch" not in gpu, "a GPU machine's command must not replace its CUDA torch"
    assert "proton -n example proton/examples/mlp.py && proton-viewer example.hatchet" in gpu_lines[0]
    assert "pytest -m gpu" in gpu_lines[1]
    for need in ("CUDA 13", "cupti-python 13.0", "+cu130", "bench/gpu_run.sh"):
        assert need in first.split("On a machine without a GPU", 1)[0], need
    assert cpu.splitlines()[0].endswith("proton-viewer example.hatchet") and "torch==2.13.0" in cpu


def test_ci_runs_the_readme_test_command():
    cpu = blocks(text().split("On a machine without a GPU", 1)[1])[0]
    test_command = cpu.splitlines()[1]
    assert test_command.endswith("&& python -m pytest -n auto")  # every test, on every core
    assert text(".ci/run").rstrip("\n").splitlines()[-1] == test_command


def test_the_test_command_says_its_time_the_network_and_how_to_get_chromium():
    where = text().split("The test command", 1)[1].split("\n\n", 1)[0]
    for said in ("minutes on 2 cores", "package index", "not network", "apt-get install\nchromium",
                 "skip silently", "-rs"):
        assert said in where, said


def test_what_a_user_does_first_comes_first_and_the_readme_is_short():
    readme = text()
    heads = re.findall(r"^## (.+)$", readme, flags=re.M)
    assert heads[:2] == ["Two commands on a fresh machine", "Reading a profile"]
    reading = readme.split("## Reading a profile\n", 1)[1].split("\n## ", 1)[0]
    assert reading.index("--html") < reading.index("--diagnose")
    assert len(readme.splitlines()) <= 250 and len(readme.split()) <= 2600


def test_every_link_and_screenshot_is_there():
    docs = ["README.md"] + [f"docs/{name}" for name in sorted(os.listdir(os.path.join(ROOT, "docs")))]
    for doc in docs:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text(doc)):
            if not target.startswith(("http://", "https://")):
                path = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), target))
                assert os.path.exists(path), f"{doc} links {target}, which is not there"
    shown = set(re.findall(r"!\[[^]]*\]\((bench/screenshots/\w+\.png)\)", text()))
    assert shown == {f"bench/screenshots/{name}"
                     for name in os.listdir(os.path.join(ROOT, "bench", "screenshots"))}


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory):
    """The bundled example profiled as the README's first command does, and again wider."""
    folder = tmp_path_factory.mktemp("readme")
    example = os.path.join(ROOT, "proton", "examples", "mlp.py")
    for name, width in (("example", "64"), ("wide", "256")):
        done = subprocess.run([sys.executable, "-m", "proton", "-n", name, example, "--steps", "2",
                               "--width", width], cwd=folder, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
    return folder


def run_viewer(*args: str) -> list[str]:
    result = CliRunner().invoke(viewer, list(args))
    assert result.exit_code == 0, result.output
    return result.output.rstrip("\n").splitlines()


@pytest.mark.xdist_group("readme_examples")  # example_runs made once, on one worker
def test_the_metrics_the_readme_lists_for_a_cpu_profile_are_the_ones_listed(example_runs):
    assert run_viewer("-l", str(example_runs / "example.hatchet")) == \
        shown_output("proton-viewer -l example.hatchet")
    shown = shown_output("proton-viewer -m avg_time/ms,time/% example.hatchet")
    printed = run_viewer("-m", "avg_time/ms,time/%", str(example_runs / "example.hatchet"))
    assert printed[:2] == shown[:2]  # the note, then the columns: avg_time is avg_cpu_time there
    # the same frames (their order is by time, which varies from run to run)
    assert sorted(line.split()[-1] for line in printed[2:]) == \
        sorted(line.split()[-1] for line in shown[2:])


@pytest.mark.xdist_group("readme_examples")
def test_the_readme_diff_is_file_minus_other_as_the_viewer_prints_it(example_runs):
    command = "proton -n wide proton/examples/mlp.py --width 2048 && " \
              "proton-viewer wide.hatchet -diff example.hatchet"
    shown = [line for line in shown_output(command) if not line.startswith(("proton:", "5 steps"))]
    wide, example = (str(example_runs / f"{name}.hatchet") for name in ("wide", "example"))
    printed = run_viewer(wide, "-diff", example)
    assert printed[0] == shown[0]
    root = {name: float(run_viewer(path)[1].split()[0].replace(",", ""))
            for name, path in (("wide", wide), ("example", example))}
    delta, percent = (float(v.replace(",", "")) for v in printed[1].split()[:2])
    assert delta == pytest.approx(root["wide"] - root["example"], abs=0.002)
    assert percent == pytest.approx(100 * delta / root["example"], rel=1e-3)
    # and the numbers the README shows are one such difference
    stated = re.search(r"`wide.hatchet`'s ROOT was ([\d,.]+) ms, `example.hatchet`'s ([\d,.]+)",
                       text())
    assert stated
    was, other = (float(v.replace(",", "")) for v in stated.groups())
    assert float(shown[1].split()[0].replace(",", "")) == pytest.approx(was - other, abs=0.002)
