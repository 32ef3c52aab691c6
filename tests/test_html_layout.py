"""The --html report's layout on the recorded training fixtures (issue 60 item 7), measured in
headless Chromium at 1400x900 and 1024x700: element boxes and text lines read by a script in
the page's frame (test_html_views.drive). Names wrap, numbers never; the kernel names keep
their room in a narrow window; a shallow tree fills the window; one value reads one way on
the page; frames of no time are counted with where to see them, not listed as 0; library
frames fold as in the terminal; a kernel's warp scopes are a click away."""
from __future__ import annotations

import json
import os
import re

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer
from test_html import DATA, data, needs_browser, write
from test_html_views import drive

SIZES = pytest.mark.parametrize("size", [(1400, 900), (1024, 700)], ids=["1400", "1024"])

LINES = """
  const lines = el => { const r = doc.createRange(); r.selectNodeContents(el);
    return new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top))).size; };"""


def frame(path: str, name: str) -> int:
    return data(path)["nodes"]["name"].index(name)


@needs_browser
@SIZES
def test_details_wrap_names_and_never_numbers_or_headings(tmp_path, size):
    path = write(tmp_path, os.path.join(DATA, "train_gpu.hatchet"))
    got = drive(tmp_path, path, f"view=flame&zoom={frame(path, 'backward')}", LINES + """
      const info = doc.getElementById("flameinfo"), under = info.querySelector("table.under, .under table");
      const cells = [...under.querySelectorAll("th, td")];
      return {numbers: cells.filter(c => c.cellIndex > 0).map(c => [c.textContent, lines(c)]),
              names: cells.filter(c => c.tagName === "TD" && c.cellIndex === 0).map(c => lines(c)),
              right: under.getBoundingClientRect().right, room: info.getBoundingClientRect().right,
              nameWidth: under.querySelector("th").getBoundingClientRect().width};""", size=size)
    assert len(got["numbers"]) == 2 + 2 * 9  # the headings and backward's nine frames
    wrapped = [text for text, n in got["numbers"] if n != 1]
    assert not wrapped, wrapped  # "0.0909 / ms", "time / (ms)" on main
    assert got["right"] <= got["room"] + 1  # the table stays in the details
    assert got["nameWidth"] > 0.5 * size[0]  # the names take the room the numbers leave
    if size[0] == 1024:
        assert max(got["names"]) >= 2  # the longest name wraps rather than stretch the table


@needs_browser
@SIZES
def test_kernel_names_keep_their_room_and_the_page_never_scrolls_sideways(tmp_path, size):
    path = write(tmp_path, os.path.join(DATA, "train_counters.hatchet"))
    got = drive(tmp_path, path, "view=kernels", LINES + """
      const table = doc.getElementById("ktable"), heads = [...table.querySelectorAll("thead th")];
      const numbers = [...table.querySelectorAll("tbody td")].filter(td => !td.classList.contains("name") &&
                                                                   !td.classList.contains("paths"));
      const name = heads[0].getBoundingClientRect();
      table.parentElement.scrollLeft = 10000;  // scrolled to its last column, the names stay
      return {name: name.width, heads: heads.length,
              wrapped: numbers.filter(td => lines(td) > 1).map(td => td.textContent),
              page: doc.scrollingElement.scrollWidth, window: win.innerWidth,
              nameAfter: heads[0].getBoundingClientRect().left - name.left,
              last: heads[heads.length - 1].getBoundingClientRect().right};""", size=size)
    assert got["heads"] == 13  # every column the profile has, none dropped
    assert got["name"] >= 280  # about 200 px on main at 1024, beside mostly empty columns
    assert not got["wrapped"], got["wrapped"]
    assert got["page"] <= got["window"]  # the table scrolls in its box, not the page
    assert abs(got["nameAfter"]) < 1 and got["last"] <= got["window"]


FILLED = """
  const flame = doc.getElementById("flame"), info = doc.getElementById("flameinfo");
  const last = [...info.querySelectorAll("tr, p, div")].filter(e => e.getClientRects().length)
    .reduce((m, e) => Math.max(m, e.getBoundingClientRect().bottom), 0);
  const top = flame.getBoundingClientRect().top;
  return {top, window: win.innerHeight, content: Math.min(last, info.getBoundingClientRect().bottom),
          box: doc.getElementById("flamebox").getBoundingClientRect().bottom,
          page: doc.scrollingElement.scrollHeight};"""


@needs_browser
@SIZES
def test_a_shallow_tree_fills_the_window(tmp_path, size):
    path = write(tmp_path, os.path.join(DATA, "train_gpu.hatchet"))
    got = drive(tmp_path, path, "view=flame", FILLED, size=size)
    # 4 levels of 20 px: on main the details listed ROOT's one child and ~60% stayed blank
    blank = (got["window"] - max(got["content"], got["box"])) / (got["window"] - got["top"])
    assert blank < 0.2, got
    assert got["page"] <= got["window"]


ONE_WAY = LINES + """
  const click = el => el.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  const info = doc.getElementById("flameinfo");
  const row = [...info.querySelectorAll(".under tbody tr")].find(tr => tr.cells[0].textContent === NAME);
  const under = row.cells[1].textContent;
  click(row.querySelector("a"));
  const own = [...info.querySelector(".infocols > table").rows].find(r => r.cells[0].textContent === "time (ms)").cells[1].textContent;
  const label = [...doc.querySelectorAll("#flamesvg text")].map(t => t.textContent).find(t => t.startsWith(NAME + " \\u2014 "));
  doc.querySelector('#tabs button[data-view="kernels"]').click();
  const heads = [...doc.querySelectorAll("#ktable thead th")].map(th => th.textContent.replace(/ [\\u25B2\\u25BC]$/, ""));
  const krow = [...doc.querySelectorAll("#ktable tbody tr")].find(tr => tr.cells[0].title === NAME || tr.cells[0].textContent.startsWith(NAME));
  return {under, own, label: label || null, table: krow.cells[heads.indexOf("time (ms)")].textContent};"""


@needs_browser
def test_one_value_reads_one_way_everywhere_on_the_page(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "train_gpu.hatchet"))
    name = "at::native::reduce_kernel<512, 1, at::native::ReduceOp<…>>(…)"
    got = drive(tmp_path, path, f"view=flame&zoom={frame(path, 'forward')}",
                ONE_WAY.replace("NAME", json.dumps(name)), size=(1400, 900))
    # 0.030336 ms: "0.0303 ms", "0.03" and "0.030" on main
    assert got["under"] == "0.030 ms" and got["own"] == "0.030" and got["table"] == "0.030", got
    root = drive(tmp_path, path, "view=flame", """
      return {labels: [...doc.querySelectorAll("#flamesvg text")].map(t => t.textContent),
              own: doc.querySelector("#flameinfo .infocols > table td:nth-child(2)").textContent,
              summary: doc.getElementById("summary").textContent};""")
    assert "ROOT \u2014 2.431 ms, 100%" in root["labels"] and root["own"] == "2.431"
    assert "total 2.431" in root["summary"]


@needs_browser
@SIZES
def test_frames_of_no_time_are_counted_with_a_link_to_their_warps(tmp_path, size):
    path = write(tmp_path, os.path.join(DATA, "train_warps.hatchet"))
    got = drive(tmp_path, path, f"view=flame&zoom={frame(path, 'scoped_norm')}", """
      const info = doc.getElementById("flameinfo");
      const rows = [...info.querySelectorAll(".under tbody tr")].map(tr => tr.textContent);
      const links = [...info.querySelectorAll("a.go")].map(a => [a.textContent, a.getAttribute("href")]);
      const note = info.querySelector(".under .note");  // main: table.under, no note
      const go = info.querySelector('a.go[href^="#view=warps"]');
      if (go) { go.click(); await sleep(50); }
      return {rows, links, note: note && note.textContent, text: info.textContent,
              on: [...doc.querySelectorAll("body > section.on")].map(s => s.id),
              spans: +doc.getElementById("warpspans").dataset.spans};""", size=size)
    # on main: "kernel0.00 ms0%" and its three scopes, and no way to their warps
    assert not got["rows"] and not re.search(r"\b0\.0+ ms|\b0%", got["text"]), got["text"]
    assert got["note"].startswith("4 frames with no time (ms) not listed (inside a kernel:")
    assert ["warps", "#view=warps&warp=0"] in got["links"]
    assert got["on"] == ["warps"] and got["spans"] == 128


def test_scopes_inside_a_kernel_are_not_kernel_rows(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "train_warps.hatchet"))
    d = data(path)
    names = [d["nodes"]["name"][r[0][0]] for r in d["kernels"]["rows"]]
    assert names == ["scoped_norm"]  # and not its scopes kernel, load, compute, store (main)


def tree_names(*args: str) -> list[str]:
    out = CliRunner().invoke(viewer, [*args, os.path.join(DATA, "python_recorded.hatchet")])
    assert out.exit_code == 0, out.output
    return [re.sub(r"^[\s\d.]+(?:[│├└─ ]+)?", "", line) for line in out.output.splitlines()[1:]]


@pytest.mark.parametrize("fold", [[], ["--no-collapse-libraries"]], ids=["folded", "kept"])
def test_library_frames_fold_in_the_page_as_in_the_terminal(tmp_path, fold):
    terminal = tree_names(*fold)
    page = data(write(tmp_path, *fold, os.path.join(DATA, "python_recorded.hatchet")))["nodes"]
    assert len(page["name"]) == len(terminal)  # 24 frames on the page on main, 18 in the tree
    marked = [n for n in terminal if n.endswith("library frames]")]
    assert len(marked) == (4 if not fold else 0)
    shown = [n for n in page["name"] if n.endswith("library frames]")]
    assert [m.rsplit(" [", 1)[1] for m in marked] == [s.rsplit(" [", 1)[1] for s in shown]


@needs_browser
def test_sandwich_merges_a_functions_callers_above_it_and_leads_back_to_each_place(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "python_recorded.hatchet"))
    names = data(path)["nodes"]["name"]
    first = names.index("scale_kernel")
    got = drive(tmp_path, path, f"view=flame&zoom={first}", """
      const info = doc.getElementById("flameinfo");
      const go = [...info.querySelectorAll("a.go")].find(a => a.textContent === "callers and callees");
      if (!go) return {link: false};
      go.click(); await sleep(50);
      const rects = [...doc.querySelectorAll("#flamesvg rect[data-sw]")].map(r =>
        ({name: r.dataset.sw, y: +r.getAttribute("y"), w: +r.getAttribute("width")}));
      const places = [...info.querySelectorAll(".under tbody tr")].map(tr => tr.cells[1].textContent);
      const hash = win.location.hash;
      info.querySelector(".under tbody tr:last-child a").click();
      return {link: true, rects, places, hash, back: win.location.hash,
              svgWidth: doc.getElementById("flamesvg").getBoundingClientRect().width};""")
    assert got["link"]  # main: no way to a function's callers over the whole tree
    kernel = [r for r in got["rects"] if r["name"] == "scale_kernel"]
    assert len(kernel) == 1  # drawn once, its callers above it, its (no) callees below
    above = [r for r in got["rects"] if r["y"] == kernel[0]["y"] - 20]
    # its three places, all called through Triton's launcher (its library frames folded)
    assert [r["name"] for r in above] == ["<lambda> (jit.py:370) [+2 library frames]"]
    assert above[0]["w"] == kernel[0]["w"] == pytest.approx(got["svgWidth"], abs=1)
    assert len(got["places"]) == 3 and "sandwich=scale_kernel" in got["hash"]
    assert "sandwich" not in got["back"] and "zoom=" in got["back"]  # a place, in the call tree
