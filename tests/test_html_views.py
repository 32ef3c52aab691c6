"""The --html report's views as a user sees and uses them (issue 36 items 7-11): the page runs
in headless Chromium inside a frame of a small harness page whose script measures what was
drawn (text extents, colours, what is on top), clicks and hovers, and reports back as JSON."""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys

import pytest

from test_html import (BROWSER, DATA, H100, data, kernel, kernels_with_flops, needs_browser,
                       node, points, write)

pytestmark = needs_browser

HARNESS = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="__SRC__" width="__W__" height="__H__" style="border:0;display:block"></iframe>
<pre id="out"></pre><script>
const f = document.getElementById("f");
const sleep = ms => new Promise(r => setTimeout(r, ms));
async function run(win, doc) { __SCRIPT__ }
function poll() {
  let doc = null;
  try { doc = f.contentDocument; } catch (e) {}
  if (!doc || !doc.body || doc.body.dataset.ready !== "1") { setTimeout(poll, 20); return; }
  Promise.resolve().then(() => run(f.contentWindow, doc)).then(
    r => { document.getElementById("out").textContent = JSON.stringify(
      {ok: r, error: doc.body.dataset.error || null}); },
    e => { document.getElementById("out").textContent = JSON.stringify({fail: String(e.stack || e)}); });
}
poll();
</script></body></html>"""


def drive(tmp_path, page: str, fragment: str, script: str, size=(1400, 900)):
    """Open `page#fragment` in a frame of `size`, run `script` (the body of an async JS
    function of `win` and `doc`, the page's window and document) once the page is ready;
    what it returns. Fails on any script error of the page."""
    harness = tmp_path / "harness.html"
    harness.write_text(HARNESS.replace("__SRC__", f"file://{page}#{fragment}")
                       .replace("__W__", str(size[0])).replace("__H__", str(size[1]))
                       .replace("__SCRIPT__", script))
    run = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
                          "--allow-file-access-from-files", "--hide-scrollbars",
                          f"--window-size={size[0] + 40},{size[1] + 200}",
                          "--virtual-time-budget=10000", "--dump-dom", f"file://{harness}"],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    out = re.search(r'<pre id="out">(.*?)</pre>', run.stdout, re.S)
    assert out and out[1], "the harness got no answer: " + run.stderr[-2000:]
    got = json.loads(html.unescape(out[1]))
    assert "fail" not in got, got.get("fail")
    assert got["error"] is None, got["error"]
    return got["ok"]


def source_profile(tmp_path) -> str:
    """pcsampling.hatchet with its SOURCE_DIR lines pointing at tests/data (the code is here)
    and its /gone/ files missing (in a folder the page may read: not on this machine)."""
    with open(os.path.join(DATA, "pcsampling.hatchet")) as f:
        text = f.read().replace("/SOURCE_DIR", DATA).replace("/gone/", f"{tmp_path}/gone/")
    path = tmp_path / "pc.hatchet"
    path.write_text(text)
    return str(path)


# -- 7. flame graph --------------------------------------------------------------------------

LABELS_INSIDE = """
  const rects = [...doc.querySelectorAll("#flamesvg rect[data-id]")].map(r => r.getBBox());
  const out = [];
  for (const t of doc.querySelectorAll("#flamesvg text")) {
    const b = t.getBBox(), r = rects.find(r => r.y <= b.y + 2 && b.y + 2 <= r.y + r.height &&
                                          r.x <= b.x && b.x < r.x + r.width);
    out.push({text: t.textContent, right: b.x + b.width, end: r ? r.x + r.width : -1});
  }
  return out;"""


@pytest.mark.parametrize("width", [1400, 900])
def test_flame_labels_stay_inside_their_frames_cut_with_an_ellipsis(tmp_path, width):
    path = write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    labels = drive(tmp_path, path, "view=flame", LABELS_INSIDE, size=(width, 700))
    assert len(labels) >= 8
    spill = [lb for lb in labels if lb["right"] > lb["end"]]
    assert not spill, spill
    cut = [lb["text"] for lb in labels if lb["text"].endswith("\u2026")]
    assert cut and all(len(t) > 1 for t in cut)  # long kernel names, cut to fit
    # short names whole: forward (9% of the width) with its share where that fits too
    texts = [lb["text"] for lb in labels]
    assert ("forward \u2014 8.8%" if width == 1400 else "forward") in texts
    assert "memcpy HtoD (pageable) \u2014 4.563 ms, 80%" in texts


def test_zoom_keeps_the_ancestors_on_top_and_an_ancestor_zooms_out(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "pcsampling.hatchet"))
    d = data(path)
    names, parents = d["nodes"]["name"], d["nodes"]["parent"]
    backward = node(d, "backward")
    kernel = next(i for i, n in enumerate(names) if n == "matmul_kernel"
                  and parents[i] == backward)
    got = drive(tmp_path, path, f"view=flame&zoom={kernel}", """
      const rows = () => [...doc.querySelectorAll("#flamesvg rect[data-id]")].map(r =>
        [+r.dataset.id, +r.getAttribute("y"), +r.getAttribute("width")]);
      const before = rows();
      doc.querySelector('#flamesvg rect[data-id="0"]').dispatchEvent(new MouseEvent("click", {bubbles: true}));
      return {before, after: rows(), hash: win.location.hash};""")
    before = got["before"]
    width = before[0][2]
    # ROOT, backward, the kernel: one row each, the whole width; the kernel's lines under it
    assert [r[0] for r in before[:3]] == [0, backward, kernel]
    assert [r[1] for r in before[:3]] == [0, 20, 40] and {r[2] for r in before[:3]} == {width}
    assert all(parents[r[0]] == kernel for r in before[3:])
    assert len(got["after"]) > len(before) and "zoom" not in got["hash"]  # back at ROOT


def test_the_flame_graph_fills_the_window_and_scrolls_inside_it(tmp_path):
    def chain(depth):
        n = {"frame": {"name": "k", "type": "function"},
             "metrics": {"time (ns)": 1e6, "count": 1, "device_id": "0", "device_type": "CUDA"},
             "children": []}
        for i in range(depth):
            n = {"frame": {"name": f"scope{i}", "type": "function"}, "metrics": {},
                 "children": [n]}
        return [{"frame": {"name": "ROOT", "type": "function"},
                 "metrics": {"time (ns)": 0, "count": 0}, "children": [n]}, {}]

    measure = """
      const svg = doc.getElementById("flamesvg"), box = svg.parentElement;
      return {window: win.innerHeight, page: doc.scrollingElement.scrollHeight,
              bottom: doc.getElementById("flame").getBoundingClientRect().bottom,
              box: box.clientHeight, graph: svg.getBoundingClientRect().height,
              scrolls: getComputedStyle(box).overflowY};"""
    shallow = drive(tmp_path, write(tmp_path, os.path.join(DATA, "example_gpu.hatchet")),
                    "view=flame", measure)
    assert shallow["window"] - 12 <= shallow["bottom"] <= shallow["window"]
    assert shallow["page"] <= shallow["window"]
    (tmp_path / "deep.hatchet").write_text(json.dumps(chain(150)))
    deep = drive(tmp_path, write(tmp_path, str(tmp_path / "deep.hatchet"), name="d.html"),
                 "view=flame", measure)
    assert deep["page"] <= deep["window"]  # the page does not scroll: the graph's box does
    assert deep["graph"] > deep["box"] > 0.6 * deep["window"] and deep["scrolls"] == "auto"


def test_a_large_graph_draws_no_hairlines_and_groups_narrow_frames(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(DATA), "..", "bench"))
    try:
        from viewer_scale import synthetic
    finally:
        sys.path.pop(0)
    (tmp_path / "big.hatchet").write_text(json.dumps(synthetic(20_000)))
    path = write(tmp_path, str(tmp_path / "big.hatchet"))
    got = drive(tmp_path, path, "view=flame", """
      const w = r => +r.getAttribute("width");
      const drawn = [...doc.querySelectorAll("#flamesvg rect[data-id]")];
      const more = [...doc.querySelectorAll("#flamesvg rect.more")];
      more[0].dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: 50, clientY: 50}));
      return {narrowest: Math.min(...drawn.map(w)), drawn: drawn.length,
              grouped: more.reduce((n, r) => n + +r.dataset.n, 0),
              tip: doc.getElementById("tip").textContent};""")
    assert got["narrowest"] >= 1  # every frame drawn is at least a pixel wide
    assert 500 < got["drawn"] < 5000 and got["grouped"] > 5000
    assert re.match(r"[\d,]+ frames under .* too narrow to draw: zoom in", got["tip"])


# -- 8. source heat --------------------------------------------------------------------------

CONTRAST = """
  const rgb = s => s.match(/[\\d.]+/g).map(Number);
  const lum = c => { const v = c.slice(0, 3).map(x => x / 255).map(x => x <= 0.03928 ? x / 12.92 :
    ((x + 0.055) / 1.055) ** 2.4); return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
  const out = [];
  for (const td of doc.querySelectorAll(".src tbody td")) {
    if (!td.textContent.trim()) continue;
    let bg = [255, 255, 255], el = td;
    for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length < 4 || c[3] > 0) { bg = c.length < 4 ? c : c.slice(0, 3).map((x, i) => x * c[3] + 255 * (1 - c[3])); break; } }
    const a = lum(rgb(getComputedStyle(td).color)), b = lum(bg);
    out.push({text: td.textContent, ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)});
  }
  return out;"""


def test_every_source_heat_cell_is_readable(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "pcsampling.hatchet"))
    cells = drive(tmp_path, path, "view=source", CONTRAST)
    assert any(c["text"] == "652" for c in cells)  # the hottest line's samples
    poor = [c for c in cells if c["ratio"] < 4.5]  # WCAG AA for text
    assert not poor, poor


def test_source_heat_has_headings_a_percent_column_and_the_code(tmp_path):
    path = write(tmp_path, "--source-root", DATA, source_profile(tmp_path))
    got = drive(tmp_path, path, "view=source", """
      const table = doc.querySelector(".src");
      return {heads: [...table.querySelectorAll("th")].map(th => th.textContent),
              rows: [...table.querySelectorAll("tbody tr")].map(tr =>
                [...tr.children].map(td => td.textContent))};""")
    assert got["heads"] == ["samples", "%", "top stalls", "line", "source"]
    row = next(r for r in got["rows"] if r[3] == "18")
    assert row == ["652", "65.2%", "math_pipe_throttle 64%, wait 36%", "18",
                   "        acc += tl.dot(a, b)"]
    assert ["", "", "", "13", "    rk = tl.arange(0, BLOCK_K)"] in got["rows"]  # unsampled


def test_a_source_file_missing_here_says_so_and_shows_its_sampled_lines(tmp_path):
    path = write(tmp_path, "--source-root", DATA, source_profile(tmp_path))
    got = drive(tmp_path, path, "view=source", """
      const k = [...doc.querySelectorAll(".srckernel")].find(s => s.querySelector("h3").textContent === "softmax_kernel");
      return {text: k.textContent, heads: [...k.querySelectorAll("th")].map(th => th.textContent),
              lines: [...k.querySelectorAll("tbody td.n")].map(td => td.textContent)};""")
    assert "Source file not found on this machine, nor by its name under a source root" \
        in got["text"] and "the sampled lines only" in got["text"]
    assert got["heads"] == ["samples", "%", "top stalls", "line"]  # no empty code column
    assert got["lines"] == ["7", "9"]


# -- 9. kernels table ------------------------------------------------------------------------

ROWS = """
  return [...doc.querySelectorAll("#ktable tbody tr")].map(tr => [...tr.children].map(td =>
    [...td.childNodes].filter(n => !(n.tagName === "A")).map(n => n.textContent).join("").trim()));"""


def test_one_row_per_kernel_with_its_call_paths(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "pcsampling.hatchet"))
    rows = drive(tmp_path, path, "view=kernels", ROWS + "")
    heads = data(path)["kernels"]["columns"]
    assert heads[:5] == ["kernel", "call paths", "time (ms)", "% of GPU time", "count"]
    matmul = [r for r in rows if r[0] == "matmul_kernel"]
    assert len(matmul) == 1  # under forward and backward in the file
    assert matmul[0][1] == "forward 56% \u00b7 backward 44%"  # more time first
    with open(os.path.join(DATA, "pcsampling.hatchet")) as f:
        tree = json.load(f)[0]
    times = [k["metrics"]["time (ns)"] for scope in tree["children"] for k in scope["children"]
             if k["frame"]["name"] == "matmul_kernel"]
    assert len(times) == 2 and float(matmul[0][2]) == pytest.approx(sum(times) / 1e6, abs=1e-3)
    assert len(rows) == len({r[0] for r in rows})


def test_util_is_blank_where_it_means_nothing_and_numbers_share_a_format(tmp_path):
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops16": 0, "bytes": 0},
            "children": [kernel("matmul", 2_000_000, 3, flops16=1.2e12, bytes=1e8),
                         kernel("copy_kernel", 123_456, 7, bytes=3e8),
                         kernel("my_custom_op", 45_678, 11)]}
    (tmp_path / "u.hatchet").write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    path = write(tmp_path, str(tmp_path / "u.hatchet"))
    heads = data(path)["kernels"]["columns"]
    rows = {r[0]: dict(zip(heads, r)) for r in drive(tmp_path, path, "view=kernels", ROWS)}
    assert rows["my_custom_op"]["util (%)"] == ""  # neither flops nor bytes: no utilisation
    # memory-bound (a frame named "memcpy" is a copy, format.COPY_FRAME: judged by no roof)
    assert rows["copy_kernel"]["util (%)"] and float(rows["copy_kernel"]["util (%)"]) > 0
    for head in heads[2:]:
        cells = [r[head] for r in rows.values() if r[head]]
        places = {len(c.split(".")[1]) if "." in c else 0 for c in cells}
        assert len(places) == 1, (head, cells)  # one number of decimals in a column
        assert not any("e" in c for c in cells)
    assert rows["copy_kernel"]["time (ms)"] == "0.123" and rows["my_custom_op"]["count"] == "11"


def test_kernel_names_wrap_only_between_words(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    breaks = drive(tmp_path, path, "view=kernels", """
      const out = [];
      for (const td of doc.querySelectorAll("#ktable td.name")) {
        const text = [...td.childNodes].filter(n => n.tagName !== "A");
        let prev = null, last = "";
        for (const n of text) {
          const walker = doc.createTreeWalker(n, NodeFilter.SHOW_TEXT);
          for (let t = n.nodeType === 3 ? n : walker.nextNode(); t; t = n.nodeType === 3 ? null : walker.nextNode())
            for (let i = 0; i < t.length; i++) {
              const r = doc.createRange(); r.setStart(t, i); r.setEnd(t, i + 1);
              const box = r.getClientRects()[0]; if (!box) continue;
              if (prev !== null && box.top > prev + 4) out.push(last + "|" + t.data[i]);
              prev = box.top; last = t.data[i];
            }
        }
      }
      return out;""", size=(900, 900))
    assert breaks  # the long names do wrap at this width
    inside = [b for b in breaks if re.fullmatch(r"\w\|\w", b) and "_" not in b]
    assert not inside, inside


# -- 10. roofline ----------------------------------------------------------------------------

def test_a_roofline_dot_is_labelled_on_hover(tmp_path):
    path = write(tmp_path, kernels_with_flops(tmp_path))
    got = drive(tmp_path, path, "view=roofline", """
      const svg = doc.getElementById("roofsvg"), tip = doc.getElementById("tip");
      const hover = (x, y) => { svg.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: x, clientY: y}));
        return getComputedStyle(tip).display === "block" ? tip.textContent : ""; };
      const out = {}, b = svg.getBoundingClientRect();
      for (const name of ["copy", "softmax", "matmul"]) {  // mark each to learn where it is
        win.location.hash = "view=roofline&kernel=" + name; await sleep(30);
        const c = doc.querySelector("#roofsvg circle.sel").getBoundingClientRect();
        const px = doc.getElementById("roofdots").getContext("2d").getImageData(
          (c.left + c.right) / 2 - b.left, (c.top + c.bottom) / 2 - b.top, 1, 1).data;
        win.location.hash = "view=roofline"; await sleep(30);
        out[name] = {tip: hover((c.left + c.right) / 2, (c.top + c.bottom) / 2), pixel: [...px]};
      }
      out.nothing = hover(b.left + 3, b.top + 3);
      return out;""")
    for name in ("copy", "softmax", "matmul"):
        assert got[name]["tip"].startswith(name), got[name]
        assert "FLOP/byte" in got[name]["tip"] and "TFLOP/s" in got[name]["tip"]
        r, g, b, alpha = got[name]["pixel"]
        assert alpha > 0 and b > r  # a blue dot drawn there
    assert got["nothing"] == ""


def test_a_kernel_clicked_in_the_table_is_marked_in_the_roofline(tmp_path):
    path = write(tmp_path, kernels_with_flops(tmp_path))
    d = data(path)
    k = list(points(d)).index("softmax")
    got = drive(tmp_path, path, "view=kernels", """
      const row = [...doc.querySelectorAll("#ktable tbody tr")].find(tr => tr.cells[0].textContent.startsWith("softmax"));
      row.cells[2].click();
      doc.querySelector('nav button[data-view="roofline"]').click();
      return {marked: [...doc.querySelectorAll("#roofsvg circle.sel")].map(c => c.dataset.k),
              label: [...doc.querySelectorAll("#roofsvg text")].map(t => t.textContent),
              row: doc.querySelector("#ktable tr.sel").cells[0].textContent, hash: win.location.hash};""")
    assert got["row"].startswith("softmax") and got["marked"] == [str(k)]
    assert "softmax" in got["label"] and "kernel=softmax" in got["hash"]


def test_roofline_ticks_read_as_numbers_with_prefixes(tmp_path):
    path = write(tmp_path, kernels_with_flops(tmp_path))
    ticks = drive(tmp_path, path, "view=roofline", """
      return [...doc.querySelectorAll("#roofsvg text")].map(t => t.textContent);""")
    assert {"1 G", "10 T", "100 T", "1 P"} <= set(ticks)  # FLOP/s
    assert {"0.001", "0.1", "1", "10", "1 k", "10 k"} <= set(ticks)  # FLOP per byte
    assert not [t for t in ticks if re.fullmatch(r"1e-?\d+", t)]


def test_the_roof_label_is_never_behind_a_dot(tmp_path):
    """A big kernel right at the roof, under the label's right end."""
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops16": 0, "bytes": 0},
            "children": [kernel("at_the_roof", 1e7, flops16=0.97 * 988e12 * 1e-2, bytes=1e9),
                         kernel("small", 1e3, flops16=1e6, bytes=1e5)]}
    (tmp_path / "roof.hatchet").write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    path = write(tmp_path, str(tmp_path / "roof.hatchet"))
    got = drive(tmp_path, path, "view=roofline&kernel=at_the_roof", """
      const label = [...doc.querySelectorAll("#roofsvg text")].find(t => t.textContent.includes("peak"));
      const b = label.getBoundingClientRect(), hits = [];
      const dot = doc.querySelector("#roofsvg circle").getBoundingClientRect();  // marked
      for (let x = Math.max(b.left, dot.left) + 1; x < Math.min(b.right, dot.right) - 1; x += 2) {
        const e = doc.elementFromPoint(x, b.top + b.height / 2);
        hits.push(e === label ? "label" : e ? e.tagName : "none");
      }
      return hits;""")
    assert got  # the dot does lie under the label
    assert set(got) == {"label"}, got


# -- 11. findings ----------------------------------------------------------------------------

def test_a_finding_leads_to_its_kernel_in_the_flame_graph_and_the_source(tmp_path):
    path = write(tmp_path, "--source-root", DATA, source_profile(tmp_path))
    got = drive(tmp_path, path, "view=findings", """
      const first = doc.querySelector("li.finding");
      const links = Object.fromEntries([...first.querySelectorAll("a")].map(a => [a.textContent, a]));
      links["flame graph"].click(); await sleep(50);
      const flame = {view: doc.querySelector("section.on").id,
                     crumbs: [...doc.querySelectorAll("#crumbs a")].map(a => a.textContent),
                     info: doc.getElementById("flameinfo").textContent};
      doc.querySelector('nav button[data-view="findings"]').click();
      const card = [...doc.querySelectorAll("li.finding")].find(li => li.querySelector("b").textContent === "softmax_kernel");
      [...card.querySelectorAll("a")].find(a => a.textContent === "source").click(); await sleep(50);
      const focus = doc.querySelector(".srckernel.focus");
      return {flame, source: {view: doc.querySelector("section.on").id,
              focus: focus && focus.querySelector("h3").textContent,
              top: focus && focus.getBoundingClientRect().top}};""", size=(1400, 500))
    assert got["flame"]["view"] == "flame"
    assert got["flame"]["crumbs"] == ["ROOT", "backward", "matmul_kernel"]  # the finding's path
    assert got["source"]["view"] == "source" and got["source"]["focus"] == "softmax_kernel"
    assert 0 <= got["source"]["top"] < 200  # scrolled to it
