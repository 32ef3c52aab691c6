"""What editors and type checkers see: the public names are the documented ones (and Triton's),
each with its signature (py.typed, TYPE_CHECKING re-exports), and mypy passes on the package."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import resources

import pytest

import proton
import proton.viewer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_section(title: str, path: str = "README.md") -> str:
    """The section of the README (or of a file under docs/) headed `## title`."""
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_public_names_are_the_ones_the_readme_documents():
    api = readme_section("The API")
    listed = api.split("Public names (`proton.__all__`):", 1)[1].split("; the modules", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", listed)) == sorted(proton.__all__)
    assert all(getattr(proton, name) is not None for name in proton.__all__)


def test_every_triton_name_marked_yes_is_exported():
    table = readme_section("Compatibility with `triton.profiler`", "docs/compatibility.md")
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
    yes = [row[0] for row in rows if row[1].strip() == "yes"]
    names = {n for first in yes if not first.startswith(("| `data.", "| `viewer."))
             for n in re.findall(r"`(\w+)`", first) if not n.startswith("TRITON_")}
    assert names and names <= set(proton.__all__)
    data = [re.findall(r"`(?:data\.)?(\w+)", first) for first in yes if first.startswith("| `data.")]
    assert all(hasattr(proton.data, n) for n in data[0])
    viewer = [re.findall(r"`(?:viewer\.)?(\w+)", first) for first in yes
              if first.startswith("| `viewer.")]
    assert viewer and set(viewer[0]) == set(proton.viewer.__all__)


def test_the_package_ships_py_typed():
    assert resources.files("proton").joinpath("py.typed").is_file()
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        assert 'proton = ["py.typed"]' in f.read()


def test_no_module_has_its_mypy_errors_ignored():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        mypy = tomllib.load(f)["tool"]["mypy"]
    ignored = [o["module"] for o in mypy.get("overrides", []) if o.get("ignore_errors")]
    assert not ignored, f"mypy errors ignored in {ignored}"


SOURCES = ("pyproject.toml", "README.md", "proton", "viewer", "compiler", "hooks")


def package_modules(root: str) -> int:
    """How many modules the installed package has: every .py of proton/ and of the folders
    pyproject's package-dir maps under it (viewer/, hooks/, compiler/)."""
    return sum(name.endswith(".py") for source in ("proton", "viewer", "hooks", "compiler")
               for _, _, names in os.walk(os.path.join(root, source)) for name in names)


def mypy_on_the_package(python: str, checkout: str, cache: str) -> str:
    """`mypy` as a developer runs it in the checkout (pyproject's [tool.mypy]; its cache kept in
    `cache`); its output, once it has passed and checked every module of the package, viewer/,
    hooks/ and compiler/ too."""
    run = subprocess.run([python, "-m", "mypy", "--cache-dir", cache], cwd=checkout,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout, run.stdout
    checked = re.search(r"(?:checked|found in) (\d+) source files", run.stdout)
    assert checked and int(checked.group(1)) == package_modules(checkout), (
        f"mypy checked {checked and checked.group(1)} of {package_modules(checkout)} modules "
        "(a new module since the install? run the README's `pip install -e` again)\n" + run.stdout)
    return run.stdout


def readme_editable_install() -> list[str]:
    """The options of the README's editable install (`pip install -e . ...`) that shape it."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    command = re.search(r"pip install -e '?\.(?:\[test\])?'?([^\n&`]*)", text)
    assert command, "the README gives no editable install"
    return [part for value in re.findall(r"--config-settings[ =](\S+)", command.group(1))
            for part in ("--config-settings", value)]


def test_mypy_passes_on_the_package_installed_as_the_readme_says_and_shows_its_signatures(
        tmp_path):
    """mypy, run once on everything: the whole package (viewer/, hooks/ and compiler/ too) as
    installed by the README's editable install, then a user's file that sees its signatures.
    `pip install -e .` by default serves proton.viewer, .hooks and .compiler (mapped from
    their own folders) through an import hook mypy and editors cannot follow: everything
    under `proton` is then Any to them."""
    pytest.importorskip("mypy")
    import shutil
    import sysconfig
    import venv

    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in SOURCES:
        source = os.path.join(ROOT, name)
        if os.path.isdir(source):
            shutil.copytree(source, checkout / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, checkout / name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    # the dependencies (setuptools, mypy, hatchet...) from this interpreter's packages, as a
    # path only: its own editable install of this checkout (a .pth) is not carried over
    with open(os.path.join(site.stdout.strip(), "deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    options = readme_editable_install()
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "-q", "--no-deps", "--no-build-isolation", "--no-index", *options,
                           "-e", str(checkout)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # mypy once over the whole package (the slow part: about a minute on 2 cores); the user's
    # file below reads its analysis from the cache, given the same options as [tool.mypy]
    cache = str(tmp_path / "mypy-cache")
    mypy_on_the_package(str(python), str(checkout), cache)
    user = tmp_path / "user.py"
    user.write_text("import proton\nimport proton.viewer\nimport proton.hooks.launch\n"
                    "reveal_type(proton.start)\nreveal_type(proton.viewer.read)\n"
                    "reveal_type(proton.scope)\n")
    run = subprocess.run([str(python), "-m", "mypy", "--cache-dir", cache,
                          "--ignore-missing-imports", str(user)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert 'Revealed type is "def (name: str | None =, *, context: str =' in run.stdout
    assert 'Revealed type is "def (' in run.stdout.split("\n")[1], run.stdout  # not Any
    assert 'Revealed type is "def (name: str, metrics:' in run.stdout
    imported = subprocess.run([str(python), "-c", "import proton.viewer.cli, proton.hooks, "
                               "proton.compiler; print(proton.viewer.cli.__name__)"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert imported.stdout == "proton.viewer.cli\n", imported.stderr
