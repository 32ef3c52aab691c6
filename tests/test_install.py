"""The viewer and `proton ps`/`capture` installed where the GPU runtime cannot be (macOS, Windows).

A real install: a fresh venv (no system packages, so no cupti-python from this machine) gets
the dependencies pyproject declares for a platform other than Linux, and this checkout is
built and installed into it with pip; then its own `proton-viewer` and `proton` commands run on
the recorded fixtures. The venv of dependencies is cached between runs (keyed by the list and
the Python); the checkout is built anew every run. It needs the package index: without one it
skips, saying so (or deselect it: `-m 'not gpu and not network'`, or PROTON_TEST_OFFLINE=1).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import find, load

pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SOURCES = ("pyproject.toml", "README.md", "proton", "viewer", "compiler", "hooks")
OFF_LINUX = ({"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix"},
             {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt"})
LINUX = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}
GPU_ONLY = {"cupti-python", "cuda-bindings", "nvidia-cuda-cupti"}
OFFLINE = re.compile(r"NewConnectionError|Failed to establish a new connection|Temporary failure "
                     r"in name resolution|Network is unreachable|ConnectTimeout|ReadTimeout|"
                     r"No route to host|ProxyError|"
                     # nothing at all for a package every index has: no index answered
                     r"requirement (setuptools|wheel)\S* \(from versions: none\)")
BUILD = ("setuptools>=64", "wheel")
"""What building the checkout needs (setuptools before 70.1 builds wheels with `wheel`)."""
CACHE = Path(os.environ.get("PROTON_TEST_CACHE", Path.home() / ".cache" / "proton-tests"))


@dataclass(slots=True)
class Installed:
    python: Path
    """The venv's interpreter."""
    site: Path
    """Where the checkout was installed (--target): its package and console scripts."""
    env: dict[str, str]
    """What the commands run with: the venv's packages and ours, nothing of this machine's."""

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([*args], cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=300)


def _requirements(markers: dict[str, str]) -> list[str]:
    """pyproject's dependencies that apply on a platform with these marker values."""
    import tomllib

    from packaging.requirements import Requirement

    with open(ROOT / "pyproject.toml", "rb") as f:
        declared = tomllib.load(f)["project"]["dependencies"]
    return sorted(r for r in declared if _applies(Requirement(r), markers))


def _applies(req, markers: dict[str, str]) -> bool:
    return req.marker is None or req.marker.evaluate({**markers, "extra": ""})


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=900)
    if done.returncode == 0:
        return
    said = done.stdout + done.stderr
    if OFFLINE.search(said):
        pytest.skip(f"the package index cannot be reached (pip: {said.strip().splitlines()[-1]})")
    raise AssertionError(f"pip {' '.join(args)} failed:\n{said}")


def _dependency_venv(requirements: list[str], fallback: Path) -> Path:
    """A venv holding `requirements` (and BUILD, to build the checkout), made once per
    list and Python, in a temporary folder renamed into place (runs in parallel share it)."""
    key = hashlib.sha256(json.dumps([requirements, BUILD, sys.version,
                                     os.path.realpath(sys.executable)]).encode()).hexdigest()
    cache = _private_cache(fallback)
    home = cache / f"venv-{key[:16]}"
    python = home / "bin" / "python"
    if python.exists():
        return home
    building = Path(tempfile.mkdtemp(prefix=f"building-{key[:16]}-", dir=cache))
    try:
        venv.create(building, with_pip=True, system_site_packages=False)
        _pip(building / "bin" / "python", "install", "-q", *BUILD, *requirements)
        try:
            building.rename(home)
        except OSError:  # another run put it in place first
            pass
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return home


def _private_cache(fallback: Path) -> Path:
    """CACHE, made a folder only this user may write (the tests run the venvs' Python: in a
    folder others could write, a venv put there first would run their code); `fallback`
    (pytest's temporary folder, not kept) where it cannot be: a read-only home, or a folder
    of another user's."""
    from proton.files import private_dir

    try:
        private_dir(str(CACHE))
    except OSError:
        return fallback
    return CACHE


INSTALLED_ONCE = pytest.mark.xdist_group("installed")
"""The tests of `installed`: one xdist worker runs them, so the venv is installed once."""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    if os.environ.get("PROTON_TEST_OFFLINE"):
        pytest.skip("PROTON_TEST_OFFLINE is set: this test installs packages from the index")
    if sys.version_info < (3, 11) or sys.platform != "linux":
        pytest.skip("reads pyproject with tomllib (3.11+) and makes a Linux venv")
    requirements = _requirements(OFF_LINUX[0])
    home = _dependency_venv(requirements, tmp_path_factory.mktemp("venv"))
    work = tmp_path_factory.mktemp("install")
    source = work / "checkout"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, source / name)
    site = work / "site"
    # --no-build-isolation: setuptools is in the venv already, so building needs no index
    _pip(home / "bin" / "python", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(site), str(source))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PROTON_"))}
    env.update(PATH=f"{site / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(site),
               PYTHONNOUSERSITE="1", PROTON_SOCKET_DIR=str(work / "sockets"), NO_COLOR="1",
               PROTON_CACHE_DIR=str(work / "cache"))
    (work / "sockets").mkdir(mode=0o700)
    return Installed(home / "bin" / "python", site, env)


@INSTALLED_ONCE
def test_the_gpu_runtimes_dependencies_install_on_linux_only(installed):
    metadata = next(installed.site.glob("proton_profiler-*.dist-info")) / "METADATA"
    from packaging.requirements import Requirement

    declared = [Requirement(line.split(":", 1)[1].strip())
                for line in metadata.read_text().splitlines() if line.startswith("Requires-Dist:")]
    on_linux = {r.name for r in declared if _applies(r, LINUX)}
    assert GPU_ONLY <= on_linux
    for markers in OFF_LINUX:
        names = {r.name for r in declared if _applies(r, markers)}
        assert names == on_linux - GPU_ONLY, markers["sys_platform"]


@INSTALLED_ONCE
def test_the_venv_has_neither_cupti_nor_cuda_bindings_and_uses_the_installed_checkout(installed,
                                                                                     tmp_path):
    run = installed.run(str(installed.python), "-c",
                        "import importlib.util as u, proton\n"
                        "print(proton.__file__)\n"
                        "print(u.find_spec('cupti'), u.find_spec('cuda'))", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    where, missing = run.stdout.splitlines()
    assert Path(where).is_relative_to(installed.site)
    assert missing == "None None"


@INSTALLED_ONCE
def test_proton_viewer_draws_the_tree_of_a_recorded_profile(installed, tmp_path):
    run = installed.run("proton-viewer", "--width", "200", str(DATA / "example_gpu.hatchet"),
                        cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:3] == ["time (ms)  name", "    5.682  ROOT",
                         "    4.563  ├─ memcpy HtoD (pageable)"]
    assert "    0.522  ├─ backward" in lines and "    0.500  ├─ forward" in lines
    assert "    0.287  │  ├─ cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(…)" \
        in lines  # demangled: cxxfilt works in this install


@INSTALLED_ONCE
def test_proton_viewer_html_writes_a_self_contained_report(installed, tmp_path):
    run = installed.run("proton-viewer", "--html", "report.html",
                        str(DATA / "example_gpu.hatchet"), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "wrote report.html" in run.stderr
    page = (tmp_path / "report.html").read_text()
    assert page.lstrip().lower().startswith("<!doctype html>")
    assert "backward" in page and "optimizer" in page


@INSTALLED_ONCE
def test_proton_viewer_diagnose_gives_its_findings(installed, tmp_path):
    run = installed.run("proton-viewer", "--diagnose", str(DATA / "diagnose_recorded.hatchet"),
                        cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("GPU time per step, by what the GPU did")
    assert "\n1. scope launch_bound: 75.729 ms of wall time, 1.765 ms of GPU time (10%)" \
        in run.stdout
    assert "\n3. ieee_dot: 6.534 ms of GPU time (37%)" in run.stdout
    assert "[stalled line] line 65 of diagnose_workload.py" in run.stdout


@INSTALLED_ONCE
def test_proton_ps_says_no_job_is_listening(installed, tmp_path):
    run = installed.run("proton", "ps", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("no job is listening for captures")


@INSTALLED_ONCE
def test_proton_runs_a_script_with_cpu_time_and_one_line_on_what_is_missing(installed, tmp_path):
    (tmp_path / "main.py").write_text(
        "import proton\nwith proton.scope('work', {'n': 1}):\n    sum(range(100000))\n")
    run = installed.run("proton", "-n", "laptop", "main.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines()[0].startswith(
        "proton: cupti-python is not installed, so GPU kernels are not profiled; recording "
        "scopes with CPU time only")
    assert sum("cupti" in line for line in run.stderr.splitlines()) == 1
    work = find(load(tmp_path / "laptop.hatchet")[0], "work")
    assert work["metrics"]["n"] == 1 and work["metrics"]["cpu_time (ns)"] > 0


JOB = """
import os, time, proton
print("ready", flush=True)
while not os.path.exists("stop"):
    with proton.scope("step", {"n": 1}):
        time.sleep(0.005)
    proton.step()
"""


@INSTALLED_ONCE
def test_proton_ps_and_capture_reach_a_listening_job_that_records_cpu_time(installed, tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    job = subprocess.Popen(["proton", "--listen", "job.py"], cwd=tmp_path, env=installed.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 60
        while str(job.pid) not in (ps := installed.run("proton", "ps", cwd=tmp_path)).stdout:
            assert time.monotonic() < deadline, ps.stdout + ps.stderr
            time.sleep(0.1)
        capture = installed.run("proton", "capture", str(job.pid), "--steps", "3", "-n", "cap",
                                cwd=tmp_path)
        assert capture.returncode == 0, capture.stderr
        assert f"pid {job.pid}: the job said: cupti-python is not installed" in capture.stderr
        assert find(load(tmp_path / "cap.hatchet")[0], "step")["metrics"]["n"] == 3
    finally:
        (tmp_path / "stop").touch()
        try:
            job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            job.communicate()
            raise


def test_the_venv_cache_is_private_and_another_users_is_not_used(tmp_path, monkeypatch):
    """The cached venvs' Python runs in these tests: their folder is made one only we may write (a folder of
    ours others could write would let them put a venv there first), and a folder of another
    user's is passed over for pytest's temporary folder."""
    import stat

    shared = tmp_path / "cache"
    shared.mkdir()
    shared.chmod(0o777)
    fallback = tmp_path / "fallback"
    monkeypatch.setattr(sys.modules[__name__], "CACHE", shared)
    assert _private_cache(fallback) == shared
    assert stat.S_IMODE(shared.stat().st_mode) & 0o022 == 0
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # as if it were not ours
    assert _private_cache(fallback) == fallback
