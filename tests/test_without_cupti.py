"""A GPU session where cupti-python is absent (macOS, Windows, a `--no-deps` install): one line
names the problem and the fix, and the session records scopes with CPU time, as without a GPU.

The module is made absent for real: a `sitecustomize` in the child puts a finder first on
`sys.meta_path` that refuses to import it, so Proton meets the same ImportError it would meet on
a laptop."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import find, load

from proton.cupti.gpu import CUPTI_REQUIREMENT

ROOT = Path(__file__).resolve().parent.parent

BLOCKER = """
import importlib.abc, os, sys

class _Absent(importlib.abc.MetaPathFinder):
    names = os.environ["ABSENT_MODULES"].split(",")

    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Absent())
"""

SCRIPT = """
import proton
proton.start("run")
with proton.scope("outer"):
    with proton.scope("inner", {"n": 1}):
        sum(range(100000))
proton.finalize()
"""

LINUX_LINE = ("proton: cupti-python is not installed, so GPU kernels are not profiled; recording "
              "scopes with CPU time only (on a machine with an NVIDIA GPU: pip install "
              f"'{CUPTI_REQUIREMENT}')")


def _without(tmp_path: Path, modules: str, *args: str) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": path,
                                            "ABSENT_MODULES": modules})


def _cpu_timed(path: Path) -> dict:
    inner = find(load(path)[0], "outer", "inner")
    assert inner["metrics"]["n"] == 1
    assert inner["metrics"]["cpu_time (ns)"] > 0
    return inner


def test_the_blocker_really_hides_cupti(tmp_path):
    run = _without(tmp_path, "cupti", "-c", "import cupti")
    assert run.returncode == 1 and "No module named 'cupti'" in run.stderr


def test_start_without_cupti_python_says_so_in_one_line_and_records_cpu_time(tmp_path):
    (tmp_path / "main.py").write_text(SCRIPT)
    run = _without(tmp_path, "cupti", "main.py")
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [LINUX_LINE, f"proton: wrote {tmp_path / 'run.hatchet'}"]
    _cpu_timed(tmp_path / "run.hatchet")


def test_the_proton_command_without_cupti_python_profiles_the_script_with_cpu_time(tmp_path):
    (tmp_path / "main.py").write_text(SCRIPT)
    run = _without(tmp_path, "cupti", "-m", "proton", "-n", "cmd", "main.py")
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert lines.count(LINUX_LINE) == 1
    assert [line for line in lines if line != LINUX_LINE] == [
        f"proton: wrote {tmp_path / 'cmd.hatchet'}"]
    _cpu_timed(tmp_path / "cmd.hatchet")


def test_without_cuda_bindings_the_line_names_cuda_bindings(tmp_path):
    (tmp_path / "main.py").write_text(SCRIPT)
    run = _without(tmp_path, "cuda", "main.py")
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [LINUX_LINE.replace("cupti-python is", "cuda-bindings is"),
                                       f"proton: wrote {tmp_path / 'run.hatchet'}"]
    _cpu_timed(tmp_path / "run.hatchet")


def test_off_linux_the_line_says_gpu_profiling_needs_linux(tmp_path):
    run = _without(tmp_path, "cupti", "-c", "from proton.cupti.gpu import missing_bindings\n"
                   "print(missing_bindings('darwin'))")
    assert run.stdout.strip() == (
        "GPU kernels are profiled on Linux only (cupti-python is not installed here); recording "
        "scopes with CPU time only (profile on a Linux GPU machine, read the file here with "
        "proton-viewer)")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_the_fix_asks_for_what_pyproject_declares():
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    assert f"{CUPTI_REQUIREMENT}; sys_platform == 'linux'" in deps
