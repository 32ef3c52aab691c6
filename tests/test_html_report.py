"""The --html report read at a glance (issue 47): each view drawn in headless Chromium at
1400x900 and 1000x700 and measured as a user would look at it: the flame graph as tall as its
tree with its details readable and its labels carrying time and share, roofline dots in the
colour of the roof that judges them with labels that never overlap, findings grouped by kernel,
the kernels table's share and percentages, only the tabs a profile has, the source beside the
profiled script, and the warps of one CTA zoomed into."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from proton.format import job_of
from proton.viewer.source_roots import SourceRoots
from test_html import DATA, H100, data, kernel, needs_browser, write
from test_html_views import drive

SIZES = [(1400, 900), (1000, 700)]
sizes = pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])


# -- flame graph -----------------------------------------------------------------------------

FLAME_LAYOUT = """
  const box = doc.getElementById("flamebox"), svg = doc.getElementById("flamesvg"),
        info = doc.getElementById("flameinfo");
  return {window: win.innerHeight, page: doc.scrollingElement.scrollHeight,
          box: box.getBoundingClientRect().height, graph: svg.getBoundingClientRect().height,
          info: info.getBoundingClientRect().height, infoBottom: info.getBoundingClientRect().bottom,
          infoFits: info.scrollHeight <= info.clientHeight + 1,
          rows: [...info.querySelector("table").querySelectorAll("tr")].map(tr => tr.textContent),
          under: [...info.querySelectorAll(".under tbody tr")].map(tr => tr.textContent),
          labels: [...doc.querySelectorAll("#flamesvg text")].map(t => t.textContent),
          key: [...doc.querySelectorAll("#flamekey .key")].map(k => k.textContent)};"""


@needs_browser
@sizes
def test_a_shallow_flame_graph_is_as_tall_as_its_tree_and_its_details_fit(tmp_path, size):
    path = write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    got = drive(tmp_path, path, "view=flame", FLAME_LAYOUT, size=size)
    # 3 levels: the graph's box holds the 3 rows and no blank panel under them
    assert got["graph"] == 60 and got["box"] <= got["graph"] + 4
    # the details take the rest of the window, whole, and the page does not scroll
    assert got["info"] >= 180 and got["infoFits"] and got["infoBottom"] <= got["window"]
    assert got["page"] <= got["window"]
    assert ["time (ms)5.682", "share of the whole100%"] == got["rows"]
    # the tree under it, depth first, widest first: the host-to-device copy, backward, then
    # backward's kernels
    assert got["under"][:3] == ["memcpy HtoD (pageable)4.563 ms80%", "backward0.522 ms9.2%",
                                "cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>"
                                "(\u2026)0.287 ms5.1%"]
    if size[1] >= 900:  # all of it; in a smaller window the rows the details hold
        assert "forward0.500 ms8.8%" in got["under"] and "optimizer0.092 ms1.6%" in got["under"]


@needs_browser
@sizes
def test_flame_labels_carry_time_and_share_and_a_legend_names_the_colours(tmp_path, size):
    path = write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    got = drive(tmp_path, path, "view=flame", FLAME_LAYOUT, size=size)
    assert "ROOT \u2014 5.682 ms, 100%" in got["labels"]  # as the details write it
    assert "memcpy HtoD (pageable) \u2014 4.563 ms, 80%" in got["labels"]
    assert got["key"][:4] == ["GPU kernel", "python frame or source line", "scope",
                              "frames too narrow to draw"]
    assert "width: time (ms)" in got["key"]


@needs_browser
@sizes
def test_python_frames_are_labelled_by_function_and_file_not_by_absolute_path(tmp_path, size):
    path = write(tmp_path, os.path.join(DATA, "python_recorded.hatchet"))
    got = drive(tmp_path, path, "view=flame", FLAME_LAYOUT + "", size=size)
    assert not [t for t in got["labels"] if "/" in t]
    assert any(t.startswith("<module> (record_session.py:40)") for t in got["labels"])
    d = data(path)
    i = d["nodes"]["name"].index("<module> (record_session.py:40)")
    assert d["nodes"]["full"][str(i)] == "/work/main/tests/data/record_session.py:40@<module>"


# -- roofline --------------------------------------------------------------------------------

def two_precisions(tmp_path) -> str:
    """An fp16 matmul, an fp32 kernel above nothing but the 16-bit roof's slope, and three
    more small kernels: the top five get names, every dot its roof's colour."""
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops16": 0, "flops32": 0, "bytes": 0},
            "children": [kernel("matmul_fp16", 2e6, flops16=1.2e12, bytes=1e8),
                         kernel("ieee_dot", 1e6, flops32=33.3e9, bytes=1e9),
                         kernel("softmax", 5e5, flops16=4e8, bytes=2e8),
                         kernel("at_the_fp32_roof", 3e6, flops32=0.97 * 66.6e12 * 3e-3,
                                bytes=1e9),
                         kernel("tiny", 1e3, flops32=1e6, bytes=1e5)]}
    path = tmp_path / "two.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    return str(path)


ROOF_DRAWN = """
  const svg = doc.getElementById("roofsvg"), b = svg.getBoundingClientRect();
  const ctx = doc.getElementById("roofdots").getContext("2d"), ratio = win.devicePixelRatio || 1;
  const P = JSON.parse(doc.getElementById("data").textContent).roofline.points;
  const roofs = Object.fromEntries([...svg.querySelectorAll("polyline.roof")].map(p =>
    [p.dataset.kind, p.getAttribute("stroke")]));
  const dots = {};
  for (const name of ["matmul_fp16", "ieee_dot", "softmax", "at_the_fp32_roof", "tiny"]) {
    win.location.hash = "view=roofline&kernel=" + name; await sleep(30);
    const c = doc.querySelector("#roofsvg circle.sel").getBoundingClientRect();
    win.location.hash = "view=roofline"; await sleep(30);
    const px = ctx.getImageData(((c.left + c.right) / 2 - b.left) * ratio, ((c.top + c.bottom) / 2 - b.top) * ratio, 1, 1).data;
    dots[name] = [...px];
  }
  win.location.hash = "view=roofline&kernel=" + __MARK__; await sleep(30);
  const boxes = [...svg.querySelectorAll("text.rooflabel, text.pointlabel")].map(t => {
    const r = t.getBoundingClientRect(); return {text: t.textContent, x0: r.left, x1: r.right, y0: r.top, y1: r.bottom}; });
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const p = boxes[i], q = boxes[j];
    if (p.x0 < q.x1 - 1 && q.x0 < p.x1 - 1 && p.y0 < q.y1 - 1 && q.y0 < p.y1 - 1) overlaps.push([p.text, q.text]);
  }
  return {roofs, dots, overlaps, labels: boxes.map(b => b.text),
          key: [...doc.querySelectorAll("#roofkey .key")].map(k => k.textContent)};"""


def rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


@needs_browser
@sizes
def test_roofline_dots_take_the_colour_of_the_roof_that_judges_them(tmp_path, size):
    path = write(tmp_path, two_precisions(tmp_path))
    got = drive(tmp_path, path, "view=roofline", ROOF_DRAWN.replace("__MARK__", '""'), size=size)
    assert set(got["roofs"]) == {"16-bit tensor", "fp32"}
    assert got["roofs"]["16-bit tensor"] != got["roofs"]["fp32"]
    for name, roof in (("matmul_fp16", "16-bit tensor"), ("softmax", "16-bit tensor"),
                       ("ieee_dot", "fp32"), ("at_the_fp32_roof", "fp32"), ("tiny", "fp32")):
        r, g, b, alpha = got["dots"][name]
        want = rgb(got["roofs"][roof])  # the roof's colour, half transparent
        assert alpha > 0 and all(abs(c - w) <= 8 for c, w in zip((r, g, b), want)), \
            (name, got["dots"][name], want)
    assert sorted(got["key"]) == sorted([
        "16-bit tensor kernels, judged by the 16-bit tensor roof",
        "fp32 kernels, judged by the fp32 roof"])


@needs_browser
@sizes
@pytest.mark.parametrize("mark", ["", "at_the_fp32_roof", "matmul_fp16"])
def test_the_top_kernels_are_named_and_no_label_overlaps_another(tmp_path, size, mark):
    path = write(tmp_path, two_precisions(tmp_path))
    got = drive(tmp_path, path, "view=roofline", ROOF_DRAWN.replace("__MARK__", json.dumps(mark)),
                size=size)
    assert not got["overlaps"], got["overlaps"]
    named = set(got["labels"])
    assert {"matmul_fp16", "ieee_dot", "at_the_fp32_roof"} <= named  # the most time
    assert sum("peak" in t for t in named) == 2  # both roofs' labels drawn


# -- findings --------------------------------------------------------------------------------

@needs_browser
@sizes
def test_findings_come_as_one_card_per_kernel_most_to_gain_first(tmp_path, size):
    path = write(tmp_path, os.path.join(DATA, "diagnose_recorded.hatchet"))
    got = drive(tmp_path, path, "view=findings", """
      return [...doc.querySelectorAll("li.finding")].map(li => ({
        name: li.querySelector(".fhead b").textContent, gain: li.querySelector(".gain").textContent,
        rules: [...li.querySelectorAll("td.rule")].map(td => td.textContent), text: li.textContent}));""",
                size=size)
    names = [c["name"] for c in got]
    assert len(names) == len(set(names))  # a kernel once, however many findings it has
    assert names[:4] == ["scope launch_bound", "scope too_few_programs", "ieee_dot",
                         "strided_copy"]
    assert got[0]["gain"] == "could save up to 73.963 ms"  # its 76 ms wall, 2 ms on the GPU
    assert ("75.729 ms of wall time, 1.765 ms of GPU time (10% of the profile\u2019s)"
            in got[0]["text"])
    assert got[1]["rules"] == ["idle GPU", "launch-bound info", "first launches info"]
    dot = got[2]
    assert sorted(dot["rules"]) == ["far from the roofline", "low occupancy", "no tensor cores",
                                    "stalled line"]
    assert "1.27 TFLOP/s and 39.7 GB/s" in dot["text"]


# -- kernels table ---------------------------------------------------------------------------

@needs_browser
@sizes
def test_the_kernels_table_gives_shares_percentages_and_small_times_whole(tmp_path, size):
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops32": 0, "bytes": 0},
            "children": [kernel("big", 1_234_000, 1, flops32=33.3e9, bytes=1e8),
                         kernel("short", 1_100, 1)]}
    (tmp_path / "k.hatchet").write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    path = write(tmp_path, str(tmp_path / "k.hatchet"))
    got = drive(tmp_path, path, "view=kernels", """
      const heads = [...doc.querySelectorAll("#ktable th")].map(th => th.textContent.replace(/ [\\u25B2\\u25BC]$/, ""));
      return [...doc.querySelectorAll("#ktable tbody tr")].map(tr => Object.fromEntries(
        [...tr.children].map((td, j) => [heads[j], [...td.childNodes].filter(n => n.tagName !== "A")
          .map(n => n.textContent).join("").trim()])));""", size=size)
    rows = {r["kernel"]: r for r in got}
    assert rows["big"]["% of GPU time"] == "99.9" and rows["short"]["% of GPU time"] == "0.1"
    assert rows["short"]["avg_time (us)"] == "1.1" and rows["big"]["avg_time (us)"] == "1,234.0"
    assert rows["big"]["util (%)"] == "40.5"  # 27 TFLOP/s of the 66.6 fp32 peak, in percent
    assert rows["short"]["util (%)"] == ""


# -- only what the profile has ---------------------------------------------------------------

@needs_browser
@sizes
def test_a_cpu_only_profile_opens_on_the_views_it_has(tmp_path, size):
    root = {"frame": {"name": "ROOT", "type": "function"}, "metrics": {},
            "children": [{"frame": {"name": "train_step", "type": "function"},
                          "metrics": {"cpu_time (ns)": 2e6},
                          "children": [{"frame": {"name": "forward", "type": "function"},
                                        "metrics": {"cpu_time (ns)": 1e6}, "children": []}]}]}
    (tmp_path / "cpu.hatchet").write_text(json.dumps([root, {}]))
    path = write(tmp_path, "-m", "cpu_time/ms", str(tmp_path / "cpu.hatchet"))
    for view in ("flame", "kernels", "findings"):
        got = drive(tmp_path, path, f"view={view}", """
          return {tabs: [...doc.querySelectorAll("#tabs button")].map(b => b.textContent),
                  on: doc.querySelector("body > section.on").id,
                  absent: doc.getElementById("absent").textContent,
                  why: doc.getElementById("absent").title};""", size=size)
        assert got["tabs"] == ["Flame graph"] and got["on"] == "flame"
        assert got["absent"] == "not in this profile: kernels, roofline, source, findings, warps"
        assert "profile a run on a GPU" in got["why"] and "-m pcsampling" in got["why"]


# -- source beside the profiled script -------------------------------------------------------

def project(tmp_path, hidden: bool = False):
    """proj/train.py (the script) and proj/kernels/k.py (a kernel's source), profiled with
    -c python and PC sampling into proj/runs/p.hatchet: the sources one folder up."""
    top = tmp_path / (".proj" if hidden else "proj")
    (top / "kernels").mkdir(parents=True)
    (top / "runs").mkdir()
    (top / "train.py").write_text("import kernels.k\nkernels.k.run()\n")
    (top / "kernels" / "k.py").write_text("def add_kernel(x):\n    y = x + 1\n    return y\n")
    line = {"frame": {"name": f"{top}/kernels/k.py:2@add_kernel", "type": "function"},
            "metrics": {"num_samples": 90, "num_stalled_samples": 60,
                        "stalled_long_scoreboard": 60}, "children": []}
    k = kernel("add_kernel", 1e6)
    k["children"] = [line]
    k["metrics"].update({"num_samples": 0, "num_stalled_samples": 0})
    module = {"frame": {"name": f"{top}/train.py:2@<module>", "type": "function"},
              "metrics": {}, "children": [k]}
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "num_samples": 0,
                        "num_stalled_samples": 0, "stalled_long_scoreboard": 0},
            "children": [module]}
    path = top / "runs" / "p.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    return top, str(path)


SOURCE_SHOWN = """
  return {code: [...doc.querySelectorAll(".src td:last-child")].map(td => td.textContent),
          missing: [...doc.querySelectorAll(".missing")].map(m => m.textContent)};"""


@needs_browser
@sizes
def test_the_source_beside_the_profiled_script_is_shown(tmp_path, size, monkeypatch):
    top, profile = project(tmp_path)
    monkeypatch.chdir(top / "runs")  # where the user opens the profile
    path = write(tmp_path, profile)
    got = drive(tmp_path, path, "view=source", SOURCE_SHOWN, size=size)
    assert got["missing"] == [] and "    y = x + 1" in got["code"]


@pytest.mark.parametrize("layout", ["job", "frame"])
def test_a_root_frame_naming_the_script_serves_as_well(tmp_path, monkeypatch, layout):
    """Without python frames (the default context), the script a writer records on the root
    (its `job`; before 2026-11-29 its frame) is the one looked beside."""
    top, profile = project(tmp_path)
    with open(profile) as f:
        tree, devices = json.load(f)
    if layout == "job":
        tree["job"] = {**job_of(tree), "script": str(top / "train.py")}
    else:
        tree["frame"]["script"] = str(top / "train.py")
    tree["children"] = tree["children"][0]["children"]  # the kernel right under ROOT
    with open(profile, "w") as f:
        json.dump([tree, devices], f)
    monkeypatch.chdir(top / "runs")
    (shown,) = data(write(tmp_path, profile))["source"][0]["files"]
    assert shown["missing"] is None and "    y = x + 1" in [ln.get("code") for ln in shown["lines"]]


def test_the_script_folder_is_a_root_only_where_it_holds_the_profile(tmp_path, monkeypatch):
    top, profile = project(tmp_path)
    monkeypatch.chdir(tmp_path)
    script = str(top / "train.py")
    kernel_file = str(top / "kernels" / "k.py")
    here = SourceRoots.default([profile])
    assert here.beside_script(script).read(kernel_file)[0].startswith("def add_kernel")
    # a profile elsewhere naming that script: its folder holds neither the profile nor "."
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(profile, elsewhere / "p.hatchet")
    monkeypatch.chdir(elsewhere)
    other = SourceRoots.default([str(elsewhere / "p.hatchet")])
    assert other.beside_script(script) == other
    assert other.beside_script(script).read(kernel_file)[1].startswith("not shown")
    # not a script: a folder, a file that is not source, /proc, relative or missing paths
    for bad in (str(top), str(top / "runs" / "p.hatchet"), "/proc/self/cwd/x.py", "train.py",
                str(top / "missing.py"), None):
        assert here.beside_script(bad) == here, bad
    # a script in a hidden folder names no root: .proj/ stays unshown
    hidden, hidden_profile = project(tmp_path / "h", hidden=True)
    roots = SourceRoots.default([hidden_profile])
    assert roots.beside_script(str(hidden / "train.py")) == roots


# -- warps -----------------------------------------------------------------------------------

@needs_browser
@sizes
def test_the_warps_of_one_cta_zoom_in_so_short_scopes_are_wide(tmp_path, size):
    from test_html_warps import scoped_profile

    page = write(tmp_path, scoped_profile(tmp_path))
    got = drive(tmp_path, page, "view=warps", """
      const T = JSON.parse(doc.getElementById("data").textContent).warps[0];
      const load = T.scopes.indexOf("kernel > load");
      const i = T.cta.findIndex((c, j) => c === 3 && T.warp[j] === 0 && T.scope[j] === load);
      const end = T.start_ns[i] + T.cycles[i] * 1e6 / T.clock_khz;
      const width = () => win.eval("WARP.geo.X")(end) - win.eval("WARP.geo.X")(T.start_ns[i]);
      const ctas = () => [...doc.querySelectorAll("#warpsvg text.cta")].map(t => t.textContent);
      const all = {width: width(), ctas: ctas()};
      doc.querySelector('#warpsvg text.cta[data-cta="3"]').dispatchEvent(new MouseEvent("click", {bubbles: true}));
      const cta = {width: width(), ctas: ctas(), spans: +doc.getElementById("warpspans").dataset.spans,
                   picked: doc.getElementById("warpcta").value};
      // a click on the load span itself zooms into its time
      const g = win.eval("WARP.geo"), svg = doc.getElementById("warpsvg"), r = svg.getBoundingClientRect();
      const x = (g.X(T.start_ns[i]) + g.X(end)) / 2, y = g.TOP + T.warp[i] * g.LANE + g.BAND + 3;
      svg.dispatchEvent(new MouseEvent("click", {bubbles: true, clientX: r.left + x, clientY: r.top + y}));
      const span = {width: width()};
      doc.querySelector("#warpsvg text.back").dispatchEvent(new MouseEvent("click", {bubbles: true}));
      return {all, cta, span, back: ctas()};""", size=size)
    assert got["all"]["width"] < 6 and len(got["all"]["ctas"]) == 8  # a sliver among 8 CTAs
    assert got["cta"]["ctas"] == ["CTA 3"] and got["cta"]["picked"] == "3"
    assert got["cta"]["spans"] == 16  # 4 warps x 4 scopes
    assert got["span"]["width"] > 0.6 * (size[0] - 200)  # the load's time fills the axis
    assert len(got["back"]) == 8
