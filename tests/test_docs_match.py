"""What a GPU newcomer reads in the README and docs matches the product (issue 60 item 9):
signatures, the examples, the report's tabs, each mode's cost, profiling permission."""
from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys

from click.testing import CliRunner

import proton
from proton.cli import run as proton_command
from proton.viewer.cli import viewer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def documented(signature: inspect.Signature) -> str:
    """A signature as the docs write it: no annotations, defaults as Python code."""
    parts, star = [], False
    for p in signature.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if p.default is p.empty:
            parts.append(p.name)
        else:  # a string as the docs quote it, "shadow"; None, False as Python writes them
            shown = json.dumps(p.default) if isinstance(p.default, str) else repr(p.default)
            parts.append(f"{p.name}={shown}")
    return "(" + ", ".join(parts) + ")"


def test_starts_signature_reads_the_same_in_the_readme_and_the_api_doc():
    want = "start" + documented(inspect.signature(proton.start))
    for doc in ("README.md", "docs/api.md"):
        shown = re.findall(r"`(start\(name.*?\))`", read(doc))  # the full signature
        assert shown, doc
        assert all(s == want for s in shown), (doc, shown, want)


def test_the_profile_decorators_example_runs_as_written(tmp_path):
    text = read("docs/api.md")
    section = text.split("`@proton.profile`\n", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "@proton.profile(" in code
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = CliRunner().invoke(viewer, ["-m", "cpu_count", str(tmp_path / "train.hatchet")])
    assert shown.exit_code == 0, shown.output
    counts = {line.split()[-1]: line.split()[0] for line in shown.output.splitlines()[1:]}
    assert counts.get("forward") == "4" and counts.get("backward") == "4", shown.output


def test_every_tab_of_the_report_is_in_the_docs_and_the_help():
    page = read("viewer/page.html")
    tabs = re.findall(r'<button data-view="\w+">([^<]+)</button>', page)
    assert len(tabs) >= 6, tabs
    section = read("docs/viewer.md").split("## A report to look at", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^- \*\*([^*]+)\*\*", section, flags=re.M)
    assert [t.lower() for t in tabs] == [n.lower() for n in named], (tabs, named)
    words = {6: "six", 7: "seven", 8: "eight"}
    assert f"up to {words[len(tabs)]} tabs" in section
    help_text = " ".join(CliRunner().invoke(viewer, ["--help"]).output.split()).lower()
    html_help = help_text.split("--html report.html", 1)[1].split("--warps", 1)[0]
    for tab in tabs:
        assert tab.lower().split()[0] in html_help, (tab, html_help)


def test_one_table_gives_every_modes_cost():
    doc = read("docs/benchmarks.md")
    table = doc.split("## What each mode costs", 1)[1].split("\n## ", 1)[0]
    first = table[table.index("\n| mode"):].split("\n\n", 1)[0]
    rows = [line for line in first.splitlines() if line.startswith("| ") and "---" not in line]
    asks = " ".join(rows)
    options = {p.name: p for p in proton_command.params}
    wanted = ["-c python", "-d trace", "-k triton", "-m pcsampling", "--counters", "--memory",
              "-b instrumentation"]
    for ask in wanted:
        assert f"`{ask}" in asks, ask
        flag = ask.split()[0]
        assert any(flag in p.opts for p in options.values()), flag  # the flag is real
    for choice in ("python", "shadow"):
        assert choice in options["context"].type.choices
    assert "trace" in options["data"].type.choices
    assert "instrumentation" in options["backend"].type.choices
    for row in rows[1:]:
        cost = row.split("|")[4]
        assert re.search(r"\d", cost), row  # every mode has a measured number


def test_profiling_permission_is_in_the_readme_and_says_how_to_grant_it():
    readme = read("README.md")
    assert "### Profiling permission" in readme
    assert "docs/commands.md#profiling-permission" in readme
    doc = read("docs/commands.md").split("## Profiling permission", 1)[1]
    assert "options nvidia NVreg_RestrictProfilingToAdminUsers=0" in doc
    assert "/etc/modprobe.d/" in doc and "RmProfilingAdminOnly" in doc


def test_the_outputs_shown_for_the_bundled_profiles_are_what_the_viewer_prints():
    """Each `$ proton-viewer ... tests/data/...` block of the README and docs/*.md prints, up to
    a closing `...`, what the command prints now: a re-recorded fixture changes them (issue 60
    item 4)."""
    docs = ["README.md", *(f"docs/{n}" for n in sorted(os.listdir(os.path.join(ROOT, "docs")))
                           if n.endswith(".md"))]
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": ROOT}
    viewer_command = f"{sys.executable} -P -m proton.viewer.cli"
    checked = []
    for doc in docs:
        for command, shown in re.findall(r"^```\n\$ (proton-viewer [^\n]*tests/data/[^\n]*)\n"
                                         r"(.*?)^```", read(doc), flags=re.M | re.S):
            command = command.split("   #")[0].replace("proton-viewer", viewer_command, 1)
            run = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True,
                                 text=True, timeout=120)
            assert run.returncode == 0, (doc, command, run.stderr)
            want, got = shown.splitlines(), run.stdout.splitlines()
            if want[-1] == "...":  # the output's first lines
                want, got = want[:-1], got[:len(want) - 1]
            assert got == want, (doc, command)
            checked.append(doc)
    assert checked.count("README.md") >= 2 and "docs/viewer.md" in checked
