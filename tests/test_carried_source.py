"""A sampled profile carries its source files' text (format.SOURCES_KEY), so the Source view
and --html's Source tab show the code on any machine (issue 60): what the recording side
carries (data/sources.py, PROTON_EMBED_SOURCE), what the viewer takes from a stranger's file
(reader._sources: text only, capped), and that Triton's 3.6 viewer still reads the file."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from unittest import mock

import pytest
from click.testing import CliRunner

from proton.data import sources
from proton.data.paths import KERNEL, LINE, ROOT, paths
from proton.errors import SessionError
from proton.format import SOURCE_FILE_BYTES, SOURCE_TOTAL_BYTES, SOURCES_KEY
from proton.options import PCOptions, parse_options
from proton.viewer.cli import viewer

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
WORKLOAD = os.path.join(os.path.dirname(DATA), "diagnose_workload.py")
CODE = "def k(x):\n    y = x + 1  # carried\n    return y\n"


def profile(tmp_path, carried: dict | None, file: str = "/ci/build/kern.py") -> str:
    """Kernel `k` with samples on lines 2 and 3 of `file`, carrying `carried` (None: no key)."""
    lines = [{"frame": {"name": f"{file}:{n}@k"}, "children": [],
              "metrics": {"num_samples": 10 * n, "num_stalled_samples": 10 * n,
                          "stalled_wait": 10 * n}} for n in (2, 3)]
    root = {"frame": {"name": "ROOT"}, "metrics": {"num_samples": 0},
            "children": [{"frame": {"name": "k"}, "children": lines,
                          "metrics": {"num_samples": 0}}]}
    if carried is not None:
        root[SOURCES_KEY] = carried
    path = tmp_path / "run" / "p.hatchet"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps([root, {}]))
    return str(path)


def show(*args):
    return CliRunner().invoke(viewer, list(args))


def page_of(tmp_path, path: str) -> str:
    out = str(tmp_path / "r.html")
    result = show("--html", out, path)
    assert result.exit_code == 0, result.output
    with open(out) as f:
        return f.read()


# -- the viewer ----------------------------------------------------------------------------------

def test_carried_source_is_shown_with_no_source_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the file named exists nowhere here
    path = profile(tmp_path, {"/ci/build/kern.py": CODE})
    out = show("--source", "k", path)
    assert out.exit_code == 0, out.output
    assert "y = x + 1  # carried" in out.output and "the sampled lines only" not in out.output
    assert "y = x + 1  # carried" in page_of(tmp_path, path)


def test_carried_source_is_the_code_that_ran_before_a_file_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "kern.py").write_text("def k(x):\n    pass  # edited since\n")
    out = show("--source", "k", profile(tmp_path, {"/ci/build/kern.py": CODE})).output
    assert "# carried" in out and "edited since" not in out


def test_carried_text_is_escaped_in_the_page(tmp_path):
    hostile = "def k():\n    '</script><script>alert(1)</script><img src=x onerror=alert(2)>'\n"
    page = page_of(tmp_path, profile(tmp_path, {"/ci/build/kern.py": hostile}))
    assert "<script>alert(1)" not in page and "<img src=x" not in page


@pytest.mark.parametrize("carried,note", [
    ({"/ci/build/kern.py": "x" * (SOURCE_FILE_BYTES + 1)}, "1 carried source file left out"),
    ({"/ci/build/kern.py": 7}, "1 carried source file left out"),
    ({f"/ci/{i}.py": "x" * SOURCE_FILE_BYTES for i in range(SOURCE_TOTAL_BYTES
                                                          // SOURCE_FILE_BYTES)}
     | {"/ci/build/kern.py": CODE}, "1 carried source file left out"),
    (["not", "a", "map"], "is not a map of files; left out"),
])
def test_carried_source_past_its_caps_or_not_text_is_left_out_with_a_note(tmp_path, carried,
                                                                          note):
    path = profile(tmp_path, carried)
    out = show("--source", "k", path)
    assert out.exit_code == 0, out.output
    assert "# carried" not in out.output and "the sampled lines only" in out.output
    tree = show(path)
    assert note in tree.output, tree.output


# -- the recording side --------------------------------------------------------------------------

def test_a_sampled_profile_carries_its_lines_files_and_nothing_else(tmp_path, monkeypatch):
    from proton.runtime.parts.pc import PCState
    from proton.runtime.output import document
    from proton.runtime.profiler import Profiler
    from proton.runtime.session import Phase, Session

    secret = tmp_path / "notes.txt"
    secret.write_text("not source\n")
    kernel = paths.intern(ROOT, "square_dot", KERNEL)
    nodes = {kernel: {"num_samples": 1}}
    for file in (WORKLOAD, str(secret), "/proc/self/environ", str(tmp_path / "gone.py")):
        nodes[paths.intern(kernel, f"{file}:40@square_dot", LINE)] = {"num_samples": 3}
    session = Session(1, "x", str(tmp_path / "x.hatchet"), "shadow", "tree", None,
                      parts={"pc": PCState(PCOptions())})
    doc = document(Profiler(), session, Phase(nodes, [], [], []), {})
    with open(WORKLOAD) as f:
        assert doc[0][SOURCES_KEY] == {WORKLOAD: f.read()}
    session.parts["pc"] = PCState(PCOptions(embed_source=False))
    assert SOURCES_KEY not in document(Profiler(), session, Phase(nodes, [], [], []), {})[0]


def test_carried_files_stay_within_the_caps_smallest_first(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "SOURCE_TOTAL_BYTES", 100)
    monkeypatch.setattr(sources, "SOURCE_FILE_BYTES", 60)
    for name, size in (("a.py", 50), ("b.py", 40), ("c.py", 61), ("d.py", 30)):
        (tmp_path / name).write_text("x" * size)
    got = sources.texts(str(tmp_path / n) for n in ("a.py", "b.py", "c.py", "d.py"))
    assert sorted(os.path.basename(p) for p in got) == ["b.py", "d.py"]  # 30 + 40; a: past 100


def test_embed_source_switch_is_read_when_the_session_starts(monkeypatch):
    monkeypatch.setenv("PROTON_EMBED_SOURCE", "0")
    assert parse_options("r", mode="pcsampling").pc.embed_source is False
    monkeypatch.setenv("PROTON_EMBED_SOURCE", "1")
    assert parse_options("r", mode="pcsampling").pc.embed_source is True
    monkeypatch.setenv("PROTON_EMBED_SOURCE", "no")
    with pytest.raises(SessionError, match="PROTON_EMBED_SOURCE='no' is not 0 or 1"):
        parse_options("r", mode="pcsampling")


# -- Triton's viewer -------------------------------------------------------------------------------

def test_tritons_viewer_reads_a_profile_that_carries_source(tmp_path):
    triton_viewer = pytest.importorskip("triton.profiler.viewer")
    path = profile(tmp_path, {"/ci/build/kern.py": CODE})
    out = io.StringIO()
    with mock.patch.object(sys, "argv", ["proton-viewer", "-m", "num_samples", path]), \
            contextlib.redirect_stdout(out):
        triton_viewer.main()
    assert "50" in out.getvalue() and "kern.py:3@k" in out.getvalue()
    direct = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m",
                             "num_samples", path], capture_output=True, text=True, timeout=120)
    assert direct.returncode == 0, direct.stderr
    assert direct.stdout == out.getvalue()
