"""The --html report's Warps tab (issue 38): a tree profile keeps each kernel's latest launch
per warp (format.WARP_TIMELINE, a frame key both viewers read past), and the page draws it as
a row per CTA, a lane per warp, spans coloured by scope, with the cycles on hover. The profile
is made as the runtime makes it, from the buffer recorded on an H100 (tests/data/intra)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from proton import mode
from proton.data import document
from proton.data.paths import paths
from proton.format import TIME, COUNT, DEVICE_ID, WARP_TIMELINE
from proton.runtime.instrumentation import Instrumentation, KernelInfo
from proton.viewer import reader
from test_html import BROWSER, H100, data, needs_browser, write
from test_html_views import drive

RECORDED = os.path.join(os.path.dirname(__file__), "data", "intra", "buffer.npz")


def scoped_profile(tmp_path, launches: int = 3) -> str:
    """`launches` launches of the recorded kernel (8 CTAs x 4 warps, kernel > load, compute,
    store) read as one arena, written as a tree profile with its warp timeline."""
    with np.load(RECORDED) as f:
        buf, scratch, warps = f["buffer"], int(f["scratch"]), int(f["num_warps"])
        names = {int(k): v for k, v in json.loads(str(f["names"])).items()}
        parents = {int(k): v for k, v in json.loads(str(f["parents"])).items()}
    inst = Instrumentation(mode.Default(), {0: H100["clock_rate"]})
    info = KernelInfo("scoped", scratch, warps, names, parents)
    kernel = paths.intern(paths.intern(0, "train_step"), "scoped", "kernel0")
    inst._read_kernel(info, np.tile(buf, launches),
                      [(1, i * buf.size, buf.size, kernel, 0, i, i) for i in range(launches)])
    nodes = {kernel: {TIME: 30_000, COUNT: launches, DEVICE_ID: "0"}}
    for (_, node), stats in inst.stats.items():
        nodes[node] = stats.metrics(0)
    path = tmp_path / "scoped.hatchet"
    path.write_text(json.dumps(document.build(nodes, {"0": H100}, timelines=inst.timelines())))
    return str(path)


def test_the_profile_keeps_one_launch_per_kernel_and_the_reader_takes_it_out(tmp_path):
    path = scoped_profile(tmp_path)
    with open(path) as f:
        assert f.read().count(WARP_TIMELINE) == 1  # one kernel, one launch kept
    prof = reader.load(path)
    assert WARP_TIMELINE not in prof.gf.dataframe.columns  # not a column of every frame
    (t,) = prof.timelines
    assert t["path"] == ["train_step", "scoped"] and t["warps"] == 4 and t["device"] == 0
    assert sorted(t["scopes"]) == ["kernel", "kernel > compute", "kernel > load",
                                   "kernel > store"]
    assert len(t["cycles"]) == 8 * 4 * 4 and sorted(set(t["cta"])) == list(range(8))
    # the spans of one warp nest: each scope inside "kernel"
    outer = t["scopes"].index("kernel")
    one = [i for i in range(len(t["cta"])) if t["cta"][i] == 0 and t["warp"][i] == 0]
    end = lambda i: t["start_ns"][i] + t["cycles"][i] * 1e6 / t["clock_khz"]  # noqa: E731
    k = next(i for i in one if t["scope"][i] == outer)
    assert all(t["start_ns"][k] <= t["start_ns"][i] and end(i) <= end(k) + 1 for i in one)
    assert min(t["start_ns"]) == 0.0


def test_triton_viewer_reads_a_profile_with_a_timeline(tmp_path):
    path = scoped_profile(tmp_path)
    theirs = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m",
                             "normalized_cycles", path], capture_output=True, text=True,
                            timeout=300)
    assert theirs.returncode == 0, theirs.stderr
    assert "compute" in theirs.stdout and "warp_timeline" not in theirs.stdout


def test_the_page_carries_the_timeline_only_where_there_is_one(tmp_path):
    d = data(write(tmp_path, scoped_profile(tmp_path)))
    (w,) = d["warps"]
    assert w["kernel"] == "scoped" and w["path"] == "train_step" and len(w["cycles"]) == 128
    other = data(write(tmp_path, os.path.join(os.path.dirname(__file__), "data",
                                              "recorded.hatchet"), name="o.html"))
    assert other["warps"] == []


WARPS_DRAWN = """
  const T = JSON.parse(doc.getElementById("data").textContent).warps[0];
  const labels = [...doc.querySelectorAll("#warpsvg text.cta")].map(t => t.textContent);
  const canvas = doc.getElementById("warpspans"), box = canvas.getBoundingClientRect();
  // hover the middle of the first "kernel" span of CTA 0, warp 0 (band 0 of the first lane)
  const k = T.scopes.indexOf("kernel");
  const i = T.cta.findIndex((c, j) => c === 0 && T.warp[j] === 0 && T.scope[j] === k);
  const svg = doc.getElementById("warpsvg"), r = svg.getBoundingClientRect();
  const t1 = Math.max(...T.start_ns.map((s, j) => s + T.cycles[j] * 1e6 / T.clock_khz));
  const row0 = labels.indexOf("CTA 0");
  const W = +svg.getAttribute("width"), X = v => 110 + v / t1 * (W - 110 - 16);
  const x = (X(T.start_ns[i]) + X(T.start_ns[i] + T.cycles[i] * 1e6 / T.clock_khz)) / 2;
  const ROWH = 4 * (2 * 7 + 2) + 8, y = 24 + row0 * ROWH + 3;
  svg.dispatchEvent(new MouseEvent("mousemove", {clientX: r.left + x, clientY: r.top + y, bubbles: true}));
  const tip = doc.getElementById("tip");
  // a pixel of the canvas inside that span: painted, not background
  const px = canvas.getContext("2d").getImageData(Math.round(x * win.devicePixelRatio),
    Math.round(y * win.devicePixelRatio), 1, 1).data;
  return {tabs: [...doc.querySelectorAll("#tabs button")].map(b => b.textContent),
          shown: doc.getElementById("warps").classList.contains("on"), labels,
          spans: +canvas.dataset.spans, keys: [...doc.querySelectorAll("#warpbar .key")].map(k => k.textContent),
          tip: tip.style.display === "block" ? tip.textContent : "", cycles: T.cycles[i],
          painted: px[3] > 0 && !(px[0] === 255 && px[1] === 255 && px[2] === 255), width: box.width};
"""


@needs_browser
def test_the_warps_tab_draws_a_row_per_cta_and_hover_gives_cycles(tmp_path):
    page = write(tmp_path, scoped_profile(tmp_path))
    got = drive(tmp_path, page, "view=warps", WARPS_DRAWN)
    assert got["tabs"][-1] == "Warps" and got["shown"]
    assert sorted(got["labels"]) == sorted(f"CTA {c}" for c in range(8))
    assert got["spans"] == 128 and got["painted"] and got["width"] >= 640
    assert sorted(got["keys"]) == ["kernel", "kernel > compute", "kernel > load",
                                   "kernel > store"]
    assert got["tip"].startswith("kernel") and f"cycles{got['cycles']:,}" in got["tip"]
    assert "CTA · SM · warp0 · " in got["tip"]


@needs_browser
def test_no_warps_tab_without_kernel_scopes(tmp_path):
    page = write(tmp_path, os.path.join(os.path.dirname(__file__), "data", "recorded.hatchet"))
    got = drive(tmp_path, page, "view=warps", """
      return {tabs: [...doc.querySelectorAll("#tabs button")].map(b => b.dataset.view),
              on: [...doc.querySelectorAll("body > section.on")].map(s => s.id)};""")
    assert "warps" not in got["tabs"] and got["on"] == ["flame"]


@pytest.mark.skipif(not os.environ.get("PROTON_SCREENSHOTS"), reason="PROTON_SCREENSHOTS=1")
def test_screenshot_of_the_warps_tab(tmp_path):
    from test_html import browse

    page = write(tmp_path, os.path.join(os.path.dirname(__file__), "data", "train_warps.hatchet"))
    out = os.path.join(os.path.dirname(__file__), "..", "bench", "screenshots", "warps.png")
    browse(page, "view=warps", screenshot=os.path.abspath(out))
    assert os.path.getsize(out) > 10_000
