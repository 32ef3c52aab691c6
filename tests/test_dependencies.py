"""Every package the product imports is declared in pyproject.toml, and the GPU runtime's ones
only on Linux, so `pip install` brings what the code needs and nothing that cannot install."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("proton", "viewer", "compiler", "hooks")

DISTRIBUTION = {"numpy": "numpy", "pandas": "pandas", "hatchet": "llnl-hatchet", "rich": "rich",
                "click": "click", "cxxfilt": "cxxfilt", "msgpack": "msgpack", "cupti": "cupti-python",
                "cuda": "cuda-bindings"}
"""Import name -> the distribution that provides it."""
GPU_RUNTIME = {"cupti-python", "cuda-bindings", "nvidia-cuda-cupti"}
"""Linux only; nvidia-cuda-cupti is never imported (cupti-python loads its libcupti), it is
pinned to the binding's minor release."""
USERS_OWN = {"torch", "triton", "pytest", "rocm_sdk"}
"""Imported only where the user's program brings them (a tensor metric, hook="triton",
`proton pytest`, the bundled examples, TheRock's ROCm wheels for proton._rocm): never needed to
install or to read a profile."""


def _imported() -> dict[str, set[str]]:
    """Top-level names of the third-party modules each file imports."""
    found: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "proton":
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _declared() -> dict[str, str | None]:
    """Declared distribution -> its marker (None: everywhere)."""
    import tomllib

    from packaging.requirements import Requirement

    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = [Requirement(r) for r in tomllib.load(f)["project"]["dependencies"]]
    return {r.name: (str(r.marker) if r.marker else None) for r in deps}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="reads pyproject with tomllib (3.11+)")
def test_every_imported_package_is_declared():
    imported = _imported()
    unknown = {name: files for name, files in imported.items()
               if name not in DISTRIBUTION and name not in USERS_OWN}
    assert not unknown, f"imported but not declared (add to pyproject and DISTRIBUTION): {unknown}"
    declared = _declared()
    missing = {DISTRIBUTION[n] for n in imported if n in DISTRIBUTION} - set(declared)
    assert not missing
    assert not USERS_OWN & set(declared)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="reads pyproject with tomllib (3.11+)")
def test_the_gpu_runtimes_packages_are_linux_only_and_the_rest_install_anywhere():
    declared = _declared()
    for name, marker in declared.items():
        if name in GPU_RUNTIME:
            assert marker == 'sys_platform == "linux"', name
        else:
            assert marker is None, name


def test_the_gpu_runtimes_packages_are_imported_only_by_the_runtimes_cupti_layer():
    for name in ("cupti", "cuda"):
        assert all(path.startswith("proton/cupti/") for path in _imported()[name]), name
