"""cupti-python and the libcupti it loads are of one CUDA minor release (issue 60 item 9): the
install pins both, and a session that finds another release loaded says so in one line."""
from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

import pytest

from proton.cupti.buffers import libcupti_mismatch

ROOT = Path(__file__).resolve().parents[1]


def test_another_minor_release_gets_one_line_naming_both_and_the_fix():
    line = libcupti_mismatch("/x/libcupti.so.13", binding="13.0.1", library="13.5.25")
    assert line is not None and "\n" not in line
    assert "cupti-python 13.0.1" in line and "libcupti 13.5.25" in line
    assert "pip install 'nvidia-cuda-cupti~=13.0.0'" in line


def test_the_same_minor_release_says_nothing():
    assert libcupti_mismatch("/x/libcupti.so.13", binding="13.0.1", library="13.0.85") is None


def test_a_libcupti_not_from_the_wheel_is_not_judged():
    """A CUDA toolkit's libcupti has no package version to compare."""
    assert libcupti_mismatch("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                             binding="13.0.1") is None


def test_pyproject_pins_the_libcupti_of_the_bindings_minor_release():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {d.split(">=")[0].strip(): d for d in deps}
    assert ">=13.0.1,<13.1" in pins["cupti-python"], pins
    assert ">=13.0.85,<13.1" in pins["nvidia-cuda-cupti"], pins


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cupti-python is Linux only")
def test_this_install_loads_no_mismatched_libcupti():
    """What the install brought here: the wheel's libcupti is the binding's release."""
    try:
        dist = distribution("nvidia-cuda-cupti")
        version("cupti-python")
    except PackageNotFoundError:
        pytest.skip("cupti-python is not installed here")
    libs = [dist.locate_file(f) for f in dist.files or () if f.name.startswith("libcupti.so")]
    assert libs, "nvidia-cuda-cupti holds no libcupti"
    assert libcupti_mismatch(str(libs[0])) is None, libcupti_mismatch(str(libs[0]))


@pytest.mark.gpu
def test_a_gpu_session_on_this_install_says_nothing_of_its_libcupti(tmp_path):
    import subprocess

    code = ("import proton, torch\nproton.start('run')\n(torch.ones(8, device='cuda') + 1).sum()"
            ".item()\nproton.finalize()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CUPTI records" not in done.stderr, done.stderr
    assert (tmp_path / "run.hatchet").stat().st_size > 0
