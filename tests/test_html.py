"""`proton-viewer --html`: the page opened by headless Chromium and checked through the DOM it
rendered (flame graph rects and widths, zoom, search, the kernels table's sort, roofline dots,
source heat, merged ranks) with no script error."""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer

DATA = os.path.join(os.path.dirname(__file__), "data")
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no headless Chromium: `apt-get install chromium` (.ci/run does)")


def write(tmp_path, *args: str, name: str = "r.html") -> str:
    path = str(tmp_path / name)
    result = CliRunner().invoke(viewer, ["--html", path, *args])
    assert result.exit_code == 0, result.output
    return path


def browse(path: str, fragment: str = "", screenshot: str | None = None) -> str:
    """The DOM after the page's scripts ran; fails on any script error."""
    shot = [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    run = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", "--window-size=1400,900",
                          "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0",
                          *shot, f"file://{path}#{fragment}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Uncaught" not in run.stderr, run.stderr[-2000:]
    if screenshot:
        return ""
    dom = run.stdout
    assert 'data-ready="1"' in dom and "data-error" not in dom, dom[:500]
    return dom


def rects(dom: str) -> list[dict]:
    return [{"id": int(m[1]), "x": float(m[2]), "w": float(m[3]), "match": bool(m[4])}
            for m in re.finditer(r'<rect data-id="(\d+)" x="([\d.]+)" y="\d+" width="([\d.]+)"'
                                 r'[^>]*?( class="match")?></rect>', dom)]


def data(path: str) -> dict:
    with open(path) as f:
        text = f.read()
    body = text[text.index('id="data">') + len('id="data">'):]
    return json.loads(body[: body.index("</script>")].replace("<\\/", "</"))


def node(d: dict, name: str) -> int:
    return d["nodes"]["name"].index(name)


def points(d: dict) -> dict:
    """The roofline's points by their kernel's name."""
    p = d["roofline"]["points"]
    return {d["nodes"]["name"][p["i"][k]] if p["i"][k] >= 0 else p["name"][str(k)]:
            {"x": p["x"][k], "y": p["y"][k], "frac": p["frac"][k],
             "roof": p["kinds"][p["roof"][k]]} for k in range(len(p["x"]))}


@needs_browser
def test_flame_graph_has_a_rect_per_frame_with_widths_by_time(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    d = data(path)
    dom = browse(path)
    got = {r["id"]: r for r in rects(dom)}
    value = d["nodes"]["value"]
    root = got[0]["w"]
    # a frame 1 px wide or more has its rect; the narrower ones (here 3 of backward's, the
    # host-to-device copy taking 80% of the width) are summed in one "more" rect
    narrow = {i for i, v in enumerate(value) if root * v / value[0] < 1}
    assert set(got) == set(range(len(value))) - narrow and len(narrow) == 3
    more = re.findall(r'<rect class="more" data-more="(\d+)" data-n="(\d+)" x="[\d.]+" y="\d+" '
                      r'width="([\d.]+)"', dom)
    assert [(int(i), int(n)) for i, n, _ in more] == [(node(d, "backward"), 3)]
    assert float(more[0][2]) == pytest.approx(root * sum(value[i] for i in narrow) / value[0],
                                              abs=0.01)
    for name in ("backward", "forward", "optimizer", "memcpy HtoD (pageable)"):
        i = node(d, name)
        assert got[i]["w"] / root == pytest.approx(value[i] / value[0], rel=0.01)
    assert d["columns"] == ["time (ms)", "gpu_idle/%"]  # the recording has the GPU's idle time


@needs_browser
def test_zoom_and_search(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    d = data(path)
    forward = node(d, "forward")
    zoomed = rects(browse(path, f"zoom={forward}"))
    names, parents = d["nodes"]["name"], d["nodes"]["parent"]
    # ROOT stays on top (its ancestor), forward spans the width, then its children
    assert [r["id"] for r in zoomed[:2]] == [0, forward]
    assert zoomed[0]["x"] == zoomed[1]["x"] == 0 and zoomed[0]["w"] == zoomed[1]["w"]
    assert {r["id"] for r in zoomed} == {0, forward, *(i for i, p in enumerate(parents)
                                                       if p == forward)}
    found = [r["id"] for r in rects(browse(path, "search=gemm")) if r["match"]]
    assert sorted(found) == sorted(i for i, n in enumerate(names) if re.search("gemm", n, re.I))
    assert found


@needs_browser
def test_the_kernels_table_sorts(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    for order in ("asc", "desc"):
        dom = browse(path, f"view=kernels&sort=time (ms):{order}")
        rows = table_rows(dom)
        # the copies and sets are rows beside the kernels, counted apart
        assert "15 kernels, 3 copies or sets" in dom
        times = [float(row[2].replace(",", "")) for row in rows]
        with open(os.path.join(DATA, "example_gpu.hatchet")) as f:
            want = f.read().count('"device_id"')  # one per kernel, copy or set node in the file
        assert len(times) == want == 18 and times == sorted(times, reverse=order == "desc")
        assert {r[0] for r in rows if r[0].startswith(("memcpy", "memset"))} == {
            "memcpy HtoD (pageable)", "memcpy DtoD", "memset"}
    assert '<th data-col="4" class="">count</th>' in dom


def table_rows(dom: str) -> list[list[str]]:
    """The kernels table's cells as text (the name cell without its links)."""
    table = dom[dom.index('id="ktable"'):]
    table = table[: table.index("</table>")]
    out = []
    for row in table.split("<tr")[2:]:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        out.append([html.unescape(re.sub(r"<a .*?</a>|<[^>]+>", "", c)).strip() for c in cells])
    return out


H100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 5120}


def kernel(name: str, ns: float, count: int = 1, **metrics) -> dict:
    """A kernel frame on GPU 0: `ns` of time over `count` launches, and `metrics`."""
    return {"frame": {"name": name, "type": "function"},
            "metrics": {"time (ns)": ns, "count": count, "device_id": "0", "device_type": "CUDA",
                        **metrics}, "children": []}


def kernels_with_flops(tmp_path) -> str:
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops16": 0, "bytes": 0},
            "children": [kernel("matmul", 2e6, flops16=1.2e12, bytes=1e8),
                         kernel("copy", 1e6, flops16=1e6, bytes=3e9),
                         kernel("softmax", 5e5, flops16=4e8, bytes=2e8)]}
    path = tmp_path / "flops.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    return str(path)


@needs_browser
def test_the_roofline_has_a_dot_per_kernel_under_the_roofs(tmp_path):
    path = write(tmp_path, kernels_with_flops(tmp_path))
    dom = browse(path, "view=roofline")
    assert '<canvas id="roofdots" width="' in dom and 'data-dots="3"' in dom
    chart = dom[dom.index('<svg id="roofsvg"'):]
    chart = chart[: chart.index("</svg>")]
    assert len(re.findall(r'<polyline class="roof"', chart)) == 1
    got = points(data(path))
    assert got["matmul"]["y"] == pytest.approx(1.2e12 / 2e-3)
    assert got["copy"]["x"] == pytest.approx(1e6 / 3e9)
    assert 0 < got["copy"]["frac"] <= 1 and 0 < got["matmul"]["frac"] <= 1


@needs_browser
def test_source_heat_of_a_sampled_kernel(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "pcsampling.hatchet"))
    dom = browse(path, "view=source")
    assert "<h3>matmul_kernel</h3>" in dom
    cells = re.search(r'<td class="s"[^>]*>652</td><td class="p"[^>]*>65.2%</td><td class="r"'
                      r'[^>]*>math_pipe_throttle 64%, wait 36%</td><td class="n"[^>]*>18</td>', dom)
    assert cells


@needs_browser
def test_merged_ranks_show_their_spread(tmp_path):
    files = []
    for rank, ns in ((0, 1e6), (1, 3e6)):
        root = {"frame": {"name": "ROOT", "type": "function", "rank": rank, "world_size": 2},
                "metrics": {"time (ns)": 0, "count": 0},
                "children": [{"frame": {"name": "mm", "type": "function"},
                              "metrics": {"time (ns)": ns, "count": 1, "device_id": str(rank),
                                          "device_type": "CUDA"}, "children": []}]}
        files.append(tmp_path / f"j.rank{rank}.hatchet")
        files[-1].write_text(json.dumps([root, {}]))
    path = write(tmp_path, *map(str, files))
    d = data(path)
    assert "time (ms) max/mean" in d["columns"]
    metric = d["nodes"]["metrics"][d["columns"].index("time (ms) max/mean")]
    assert metric[node(d, "mm")] == pytest.approx(1.5)
    assert d["kernels"]["columns"][-1] == "max/mean over ranks"
    assert "2 ranks merged" in d["summary"]
    browse(path)


def source_here(tmp_path) -> str:
    """pcsampling.hatchet with its SOURCE_DIR lines pointing at tests/data (the code is here)."""
    with open(os.path.join(DATA, "pcsampling.hatchet")) as f:
        text = f.read().replace("/SOURCE_DIR", DATA)
    path = tmp_path / "pc.hatchet"
    path.write_text(text)
    return str(path)


def diagnose_here(tmp_path) -> str:
    """diagnose_recorded.hatchet with its source lines pointing at this checkout (recorded
    on the GPU machine under /work/main and /tmp/site)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(DATA, "diagnose_recorded.hatchet")) as f:
        text = f.read().replace("/work/main/", here + "/").replace("/tmp/site/", here + "/")
    path = tmp_path / "diagnose_recorded.hatchet"
    path.write_text(text)
    return str(path)


@needs_browser
def test_screenshots_of_each_view(tmp_path):
    """For a person to look at: PNGs of every view at 1400x900, of the recorded training
    step (tests/data/train_gpu.hatchet; its --counters twin's kernels table) and the diagnose
    fixture (PROTON_SCREENSHOTS=DIR keeps them: bench/screenshots for the README)."""
    out = os.environ.get("PROTON_SCREENSHOTS") or str(tmp_path)
    os.makedirs(out, exist_ok=True)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pages = {"train": write(tmp_path, os.path.join(DATA, "train_gpu.hatchet"), name="t.html"),
             "counters": write(tmp_path, os.path.join(DATA, "train_counters.hatchet"), name="c.html"),
             "diagnose": write(tmp_path, "--source-root", here, diagnose_here(tmp_path),
                               name="d.html")}
    for view, page, more in (("flame", "train", ""), ("kernels", "counters", ""),
                             ("roofline", "diagnose", ""), ("source", "diagnose", ""),
                             ("findings", "diagnose", "")):
        shot = os.path.join(out, f"{view}.png")
        browse(pages[page], f"view={view}{more}", screenshot=shot)
        assert os.path.getsize(shot) > 5000


def test_the_page_is_one_file_with_nothing_from_the_network(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    with open(path) as f:
        text = f.read()
    assert not re.search(r'(src|href)="(https?:)?//', text) and "@import" not in text
    assert "cdn" not in text.lower()


def test_html_errors_are_one_line(tmp_path):
    result = CliRunner().invoke(viewer, ["--html", str(tmp_path / "no" / "such" / "x.html"),
                                         os.path.join(DATA, "example_gpu.hatchet")])
    assert result.exit_code == 2 and "cannot write" in result.output


@pytest.mark.parametrize("name", ["a.hatchet", "a.json"])
def test_a_report_never_overwrites_the_profile_given_as_its_name(tmp_path, name):
    """Issue 60, item 2: `--html a.hatchet b.hatchet` took a.hatchet as the page and made it
    HTML. A profile's name, or any file there that is not a page, is refused in one line."""
    profile = tmp_path / name
    shutil.copy(os.path.join(DATA, "recorded.hatchet"), profile)
    before = profile.read_bytes()
    result = CliRunner().invoke(viewer, ["--html", str(profile),
                                         os.path.join(DATA, "diagnose_recorded.hatchet")])
    assert result.exit_code == 2 and result.stderr.startswith("Error: --html "), result.output
    assert "report.html" in result.stderr and len(result.stderr.splitlines()) == 1
    assert profile.read_bytes() == before and os.listdir(tmp_path) == [name]


def test_html_with_only_a_profile_says_the_profile_is_missing(tmp_path):
    profile = tmp_path / "run1.hatchet"
    shutil.copy(os.path.join(DATA, "recorded.hatchet"), profile)
    before = profile.read_bytes()
    result = CliRunner().invoke(viewer, ["--html", str(profile)])
    assert result.exit_code == 2 and result.stderr == (
        f"Error: no profile given: --html takes the page's name, then the profiles (--html "
        f"REPORT.html FILE.hatchet), and took {str(profile)!r} as the page; e.g. --html "
        f"report.html {profile}\n")
    assert profile.read_bytes() == before
    plain = CliRunner().invoke(viewer, [])
    assert plain.exit_code == 2 and "Missing argument 'FILE.hatchet...'" in plain.stderr


def test_a_page_written_before_is_replaced(tmp_path):
    page = write(tmp_path, os.path.join(DATA, "recorded.hatchet"))
    write(tmp_path, os.path.join(DATA, "example_gpu.hatchet"))
    with open(page) as f:
        assert "<title>Proton: example_gpu.hatchet" in f.read()


@needs_browser
def test_a_table_of_many_kernels_shows_the_first_500_and_says_so(tmp_path):
    kernels = [{"frame": {"name": f"k{i}", "type": "function"},
                "metrics": {"time (ns)": 1000 + i, "count": 1, "device_id": "0",
                            "device_type": "CUDA"}, "children": []} for i in range(1200)]
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0}, "children": kernels}
    (tmp_path / "many.hatchet").write_text(json.dumps([root, {}]))
    path = write(tmp_path, str(tmp_path / "many.hatchet"))
    dom = browse(path, "view=kernels")
    assert "the first 500 of 1,200 kernels" in dom and len(table_rows(dom)) == 500
    assert table_rows(dom)[0][0] == "k1199"  # slowest first
    found = browse(path, "view=kernels&search=^k11")  # k11, k110-k119, k1100-k1199
    assert "111 kernels" in found and len(table_rows(found)) == 111


@needs_browser
def test_the_findings_of_diagnose(tmp_path):
    path = write(tmp_path, os.path.join(DATA, "pcsampling.hatchet"))
    dom = browse(path, "view=findings")
    body = dom[dom.index('id="findbody"'):]
    body = body[: body.index("</section>")]
    # a card per kernel, each naming its findings once
    assert body.count('<li class="finding') == len(data(path)["findings"]["groups"]) == 2
    assert "stalled line" in body and "math pipe is busy" in body


@needs_browser
def test_names_that_look_like_html_cannot_break_the_page(tmp_path):
    nasty = "<!--<script>alert(1)</script>& __DATA__"
    root = {"frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 0},
            "children": [{"frame": {"name": nasty, "type": "function"},
                          "metrics": {"time (ns)": 5, "count": 1, "device_id": "0",
                                      "device_type": "CUDA"}, "children": []}]}
    (tmp_path / "__DATA__.hatchet").write_text(json.dumps([root, {}]))
    path = write(tmp_path, str(tmp_path / "__DATA__.hatchet"))
    dom = browse(path, "search=50%")  # a stray % in the link too
    assert data(path)["nodes"]["name"][1] == nasty
    assert len(rects(dom)) == 2


def test_the_roofline_draws_a_roof_per_precision_and_the_table_every_flop_width(tmp_path):
    """An fp16 matmul and an fp32 kernel on one H100: each dot under its own precision's roof,
    and the kernels table with both widths' rates (the fp32 kernel's is not blank)."""
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops16": 0, "flops32": 0, "bytes": 0},
            "children": [kernel("matmul", 2e6, flops16=1.2e12, bytes=1e8),
                         kernel("ieee_dot", 1e6, flops32=33.3e9, bytes=1e9)]}
    (tmp_path / "widths.hatchet").write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    d = data(write(tmp_path, str(tmp_path / "widths.hatchet")))
    labels = sorted(r["label"] for r in d["roofline"]["roofs"])
    assert labels == ["GPU 0 (sm90): 16-bit tensor peak 988.2 TFLOP/s, 3,352 GB/s",
                      "GPU 0 (sm90): fp32 peak 66.6 TFLOP/s, 3,352 GB/s"]
    dot = points(d)["ieee_dot"]
    assert dot["roof"] == "fp32" and dot["frac"] == pytest.approx(33.3e12 / 66.6e12, rel=0.01)
    columns = d["kernels"]["columns"]
    assert {"tflop16/s", "tflop32/s"} <= set(columns)
    row = next(r for r in d["kernels"]["rows"] if d["nodes"]["name"][r[0][0]] == "ieee_dot")
    assert row[columns.index("tflop32/s")] == pytest.approx(33.3)
    assert row[columns.index("util (%)")] == pytest.approx(50, rel=0.01)  # of the fp32 peak


def test_cpu_only_rank_files_make_a_page(tmp_path):
    """`RANK=R WORLD_SIZE=2 proton -n ddp main.py` on a machine without a GPU: scopes with CPU
    time, no kernels; the kernels table has no per-rank time column to ask for."""
    files = []
    for rank in (0, 1):
        root = {"frame": {"name": "ROOT", "type": "function", "rank": rank, "world_size": 2},
                "metrics": {}, "children": [{"frame": {"name": "step", "type": "function"},
                                             "metrics": {"cpu_time (ns)": 1e6 * (rank + 1)},
                                             "children": []}]}
        files.append(str(tmp_path / f"ddp.rank{rank}.hatchet"))
        with open(files[-1], "w") as f:
            json.dump([root, {}], f)
    d = data(write(tmp_path, "-m", "cpu_time/ms", *files))
    assert d["columns"][0] == "cpu_time (ms)" and "2 ranks merged" in d["summary"]
    step = d["nodes"]["name"].index("step")
    assert d["nodes"]["metrics"][0][step] == pytest.approx(3.0)
    assert d["kernels"]["rows"] == []
