"""The layers of ARCHITECTURE.md, read from the code's own imports (ast: import statements and
importlib calls that name a module by a string) and from what a fresh interpreter loads: no
import circle, each layer imports only those below it, the viewer only itself and the file
format, and importing the viewer or the compiler starts no runtime."""
from __future__ import annotations

import ast
import os
import subprocess
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = {"proton": "proton", "hooks": "proton.hooks", "compiler": "proton.compiler",
           "viewer": "proton.viewer"}
"""Top-level folder -> the package it is installed as (pyproject's package-dir)."""
BASE = {"proton.format", "proton.format_msgpack", "proton.errors", "proton.report", "proton.files",
        "proton.rank_merge", "proton.triton_version", "proton.settings"}
# package -> the packages (or modules) it may import, besides itself and BASE. Lowest first.
ALLOWED = {
    "proton.format": set(),
    "proton.format_msgpack": set(),
    "proton.errors": set(),
    "proton.report": set(),
    "proton.files": set(),
    "proton.triton_version": set(),
    "proton.rank_merge": {"proton.format"},
    "proton.settings": {"proton.errors", "proton.report"},
    "proton.mode": BASE,
    "proton.options": BASE | {"proton.mode"},
    "proton.data": BASE,
    "proton.compiler": set(),
    "proton.cupti": BASE | {"proton.options", "proton.data", "proton.compiler"},
    "proton.context": BASE | {"proton.options", "proton.data"},
    "proton.runtime": BASE | {"proton.options", "proton.mode", "proton.data", "proton.cupti",
                              "proton.context", "proton.compiler"},
    "proton.hooks": BASE | {"proton.options", "proton.mode", "proton.data", "proton.compiler",
                            "proton.runtime.ops"},
    "proton.viewer": {"proton.format", "proton.format_msgpack", "proton.files",
                      "proton.rank_merge"},
}
"""What is not here (proton, proton.api, proton.scopes, proton.cli, proton.examples) is the
front door: it may import anything below it."""


def modules() -> dict[str, str]:
    """Module name -> its file, for every module of the four folders."""
    out = {}
    for folder, package in FOLDERS.items():
        for root, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            rel = os.path.relpath(root, os.path.join(ROOT, folder))
            if folder == "proton" and rel.split(os.sep)[0] in FOLDERS:  # not under proton/
                continue
            prefix = package if rel == "." else f"{package}.{rel.replace(os.sep, '.')}"
            for name in files:
                if name.endswith(".py"):
                    module = prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"
                    out[module] = os.path.join(root, name)
    return out


_BY_NAME = {"import_module", "find_spec", "__import__"}
"""Calls that import (or find) a module named by a string: importlib.import_module,
importlib.util.find_spec, __import__."""


def named_import(node: ast.Call, module: str, package: str) -> str | None:
    """The module a call such as `importlib.import_module("proton.x")` or
    `import_module(".x", __name__)` names, when the name is a string literal; else None."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in _BY_NAME or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    target = first.value
    if target.startswith("."):  # relative to the `package` argument
        anchor = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "package"), None)
        if isinstance(anchor, ast.Constant) and isinstance(anchor.value, str):
            base = anchor.value
        elif isinstance(anchor, ast.Name) and anchor.id in ("__name__", "__package__"):
            base = module if anchor.id == "__name__" else package
        else:
            return None
        level = len(target) - len(target.lstrip("."))
        base = base.rsplit(".", level - 1)[0] if level > 1 else base
        target = f"{base}.{target[level:]}" if target[level:] else base
    return target if target.split(".")[0] == "proton" else None


def imports(module: str, path: str, known: set[str]) -> set[str]:
    """The proton modules `module` imports, at module level or inside functions, by import
    statements or by importlib calls that name the module as a string literal."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = set()
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            target = named_import(node, module, package)
            if target:
                out.add(target)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "proton"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            elif (node.module or "").split(".")[0] == "proton":
                base = node.module
            else:
                continue
            for alias in node.names:  # `from . import api` imports a module
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return out - {module}


def owner(module: str) -> str | None:
    """The ALLOWED entry `module` falls under (the longest matching prefix)."""
    found = [p for p in ALLOWED if module == p or module.startswith(p + ".")]
    return max(found, key=len) if found else None


GRAPH = {m: imports(m, p, set(modules())) for m, p in modules().items()}


def within(module: str, allowed: set[str]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if owner(m)))
def test_each_layer_imports_only_the_layers_below_it(module):
    layer = owner(module)
    bad = sorted(i for i in GRAPH[module] if not within(i, ALLOWED[layer] | {layer}))
    assert not bad, f"{module} ({layer}) imports {bad}"


def test_from_a_checkout_only_the_mapped_folders_import_as_proton_packages():
    """Run from the repository root, proton.viewer, .hooks and .compiler are its folders of
    those names (pyproject's package-dir), and no other folder there is part of proton."""
    code = ("import importlib, os, proton\n"
            "for name in ('viewer', 'hooks', 'compiler'):\n"
            "    print(os.path.relpath(importlib.import_module('proton.' + name).__file__))\n"
            "for name in ('tests', 'docs'):\n"
            "    try:\n"
            "        importlib.import_module('proton.' + name)\n"
            "    except ImportError:\n"
            "        print('no proton.' + name)\n")
    run = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [
        os.path.join("viewer", "__init__.py"), os.path.join("hooks", "__init__.py"),
        os.path.join("compiler", "__init__.py"), "no", "proton.tests", "no", "proton.docs"]


def test_no_import_circle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(GRAPH.get(module, ())):
            if state.get(dep) == 1:
                raise AssertionError("import circle: " + " -> ".join(
                    path[path.index(dep):] + [dep]) if dep in path else dep)
            if dep in GRAPH and not state.get(dep):
                visit(dep, path + [dep])
        state[module] = 2

    for module in sorted(GRAPH):
        if not state.get(module):
            visit(module, [module])


@pytest.mark.parametrize("line,found", [
    ('importlib.import_module("proton.runtime.profiler")', "proton.runtime.profiler"),
    ('import_module(".profiler", "proton.runtime")', "proton.runtime.profiler"),
    ('importlib.import_module("..cupti.collector", __package__)', "proton.cupti.collector"),
    ('importlib.util.find_spec("proton.cupti")', "proton.cupti"),
    ('__import__("proton.runtime")', "proton.runtime"),
])
def test_importlib_calls_naming_a_module_are_edges(tmp_path, line, found):
    path = tmp_path / "mod.py"
    path.write_text(f"import importlib, importlib.util\n"
                    f"from importlib import import_module\n\ndef f():\n    {line}\n")
    edges = imports("proton.viewer.mod", str(path), set(modules()))
    assert edges == {found}
    layer = owner("proton.viewer.mod")
    assert not within(found, ALLOWED[layer] | {layer})  # the layer test would fail on it


def test_hooks_reach_the_runtime_only_through_ops():
    used = {i for m in GRAPH if m.startswith("proton.hooks") for i in GRAPH[m]
            if i.startswith("proton.runtime")}
    assert used == {"proton.runtime.ops"}


@pytest.mark.parametrize("statement,allowed", [
    ("import proton", ("proton",)),
    ("import proton.viewer.cli, proton.viewer.reader, proton.viewer.derive, "
     "proton.viewer.render, proton.viewer.source, proton.viewer.source_view, "
     "proton.viewer.select, proton.viewer.diff, proton.viewer.export",
     ("proton", "proton.viewer", "proton.format")),
    ("import proton.compiler.kernels", ("proton", "proton.compiler")),
])
def test_a_fresh_interpreter_loads_no_runtime_for_the_viewer_or_compiler(statement, allowed):
    code = f"{statement}\nimport sys\nprint(sorted(m for m in sys.modules if m == 'proton' " \
           "or m.startswith('proton.') or m == 'cupti'))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    loaded = eval(run.stdout.strip().splitlines()[-1])
    assert loaded and not [m for m in loaded if not within(m, set(allowed))], loaded


def test_every_package_folder_is_installed():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    listed = set(re.findall(r'"([\w.]+)"', re.search(r"^packages = \[(.*?)\]", text,
                                                     re.S | re.M).group(1)))
    packages = {m for m, p in modules().items() if p.endswith("__init__.py")}
    assert packages == listed


def test_the_python_context_leaves_out_every_profiler_file_but_the_examples():
    from proton.context.python import own_files

    files = own_files()
    mods = modules()
    for module in ("proton.runtime.ops", "proton.context.frames", "proton.cupti.collector",
                   "proton.hooks.triton_hook", "proton.scopes", "proton.api"):
        assert mods[module] in files, module
    assert mods["proton.examples.mlp"] not in files


BENCH = os.path.join(ROOT, "bench")


def bench_imports() -> dict[str, set[str]]:
    """bench/'s scripts -> the scripts beside them each imports (anywhere in it: a function's
    own import counts)."""
    names = {f[:-3] for f in os.listdir(BENCH) if f.endswith(".py")}
    graph = {}
    for name in names:
        with open(os.path.join(BENCH, name + ".py")) as f:
            tree = ast.parse(f.read())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module)
        graph[name] = found & names - {name}
    return graph


def test_bench_scripts_share_the_harness_and_import_no_circle():
    graph = bench_imports()
    assert "harness" in graph["hot_paths"] and "harness" in graph["probe_foreign_thread"]
    assert not graph["harness"], "the harness imports no measurement"

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for dep in graph[todo.pop()] - seen:
                seen.add(dep)
                todo.append(dep)
        return seen

    circles = sorted(name for name in graph if name in reach(name))
    assert not circles, f"bench/ scripts in an import circle: {circles}"


_ENTRY = re.compile(r"( *)((?:[\w.]+/?(?:, |,$))*[\w./]+,?)(?:  |$)")
"""A line of ARCHITECTURE.md's map that names files: its indent, then names (`a.py, b.py`,
`runtime/`, `hooks/hook.py`), then two spaces and what they are (a name list may wrap)."""


def mapped_files() -> set[str]:
    """The files and folders ARCHITECTURE.md's map names, as paths from the repository root
    (a name under `runtime/` in the map is `proton/runtime/NAME`)."""
    with open(os.path.join(ROOT, "ARCHITECTURE.md")) as f:
        block = f.read().split("```\n")[1]  # the map: the first fenced block
    named: set[str] = set()
    folders: list[tuple[int, str]] = []  # the open folders: (indent, path)
    for line in block.splitlines():
        found = _ENTRY.match(line)
        if not found or len(found[1]) > 12:  # a description's continuation
            continue
        indent, names = len(found[1]), [n.strip() for n in found[2].split(",") if n.strip()]
        while folders and folders[-1][0] >= indent:
            folders.pop()
        under = folders[-1][1] + "/" if folders else ""
        named |= {under + name.rstrip("/") for name in names}
        if len(names) == 1 and names[0].endswith("/"):
            folders.append((indent, under + names[0].rstrip("/")))
    return named


def test_architecture_names_every_module():
    """Every module of the four folders has its line in ARCHITECTURE.md's map (a package's
    __init__ is named by its folder's line; the bundled examples are user scripts), and the
    map names nothing that is not there."""
    named = mapped_files()
    assert {"proton/_rocm.py", "proton/runtime/profiler.py", "proton/cupti/subscriber.py",
            "viewer/source_view.py", "hooks/hook.py"} <= named  # wrapped, listed, nested
    gone = sorted(n for n in named if not os.path.exists(os.path.join(ROOT, n)))
    assert not gone, f"ARCHITECTURE.md's map names {gone}, which are not there"
    missing = []
    for module, path in sorted(modules().items()):
        rel = os.path.relpath(path, ROOT)
        folder, base = os.path.split(rel)
        if rel not in named and not (base == "__init__.py" and folder in named) \
                and not folder.startswith(os.path.join("proton", "examples")):
            missing.append(rel)
    assert not missing, f"ARCHITECTURE.md's map does not name {missing}"
