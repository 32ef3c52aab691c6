"""How long a 100,000-node profile takes as an HTML report: writing the page, and a headless
Chromium loading it until the flame graph, the kernels table and the roofline are drawn (its
own start included; a browser that is already open starts faster). Every kernel carries flops
and bytes, so the roofline has a dot per kernel (90,000 with --nodes 101111).

    python bench/html_scale.py [--nodes 100000]

Each view: Chromium's wall time to dump the DOM and to take a screenshot (which waits for the
paint), and the page's own time from navigation to drawn (`data-ready-ms`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from viewer_scale import synthetic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    args = ap.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    work = tempfile.mkdtemp(prefix="proton-html-")
    profile, page = os.path.join(work, "big.hatchet"), os.path.join(work, "big.html")
    tree = synthetic(args.nodes)
    stack, kernels = [tree[0]], 0
    while stack:  # bytes for every kernel: a roofline dot each
        node = stack.pop()
        stack += node["children"]
        if "flops16" in node["metrics"] and node is not tree[0]:
            node["metrics"]["bytes"] = node["metrics"]["flops16"] // 8 + 1
            kernels += 1
    tree[0]["metrics"]["bytes"] = 0
    with open(profile, "w") as f:
        json.dump(tree, f)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "proton.viewer.cli", "--html", page, profile],
                   check=True, capture_output=True)
    write_s = time.perf_counter() - t0
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
             "--allow-file-access-from-files"]
    rows = []
    for view in ("flame", "kernels", "roofline"):
        t0 = time.perf_counter()
        run = subprocess.run([*flags, "--dump-dom", f"file://{page}#view={view}"],
                             capture_output=True, text=True, timeout=600)
        dom_s = time.perf_counter() - t0
        assert 'data-ready="1"' in run.stdout and "data-error" not in run.stdout, \
            run.stderr[-500:]
        ready_ms = int(re.search(r'data-ready-ms="(\d+)"', run.stdout)[1])
        rows.append((view, dom_s, ready_ms / 1e3, redraw(flags, work, page, view)))
    blank = os.path.join(work, "blank.html")
    with open(blank, "w") as f:
        f.write('<html><body data-ready="1"></body></html>')
    t0 = time.perf_counter()
    subprocess.run([*flags, "--dump-dom", f"file://{blank}"], capture_output=True, timeout=120)
    empty = time.perf_counter() - t0
    size = os.path.getsize(page) / 1e6
    print(f"{args.nodes:,} frames, {kernels:,} kernels (roofline dots); page {size:.1f} MB, "
          f"written in {write_s:.1f} s; Chromium on an empty page: {empty:.1f} s")
    print("| view | Chromium, opened to DOM dumped s | page: navigation to drawn s "
          "| the view drawn again, laid out and rasterised s |")
    print("|---|---|---|---|")
    for view, dom_s, ready_s, again_s in rows:
        print(f"| {view} | {dom_s:.1f} | {ready_s:.2f} | {again_s:.2f} |")


HARNESS = """<html><body><iframe id="f" width="1400" height="900"></iframe><pre id="out"></pre>
<script>
const f = document.getElementById("f");
f.onload = () => {  // synchronous: done before this page's own load, so before the DOM dump
  const d = f.contentDocument, tab = v => d.querySelector('nav button[data-view="' + v + '"]');
  tab(VIEW === "flame" ? "kernels" : "flame").click();
  const t0 = performance.now();
  tab(VIEW).click();
  d.body.offsetHeight;  // layout
  d.getElementById("roofdots").getContext("2d").getImageData(0, 0, 1, 1);  // the canvas drawn
  document.getElementById("out").textContent = performance.now() - t0;
};
f.src = SRC;
</script></body></html>"""


def redraw(flags: list[str], work: str, page: str, view: str) -> float:
    """Seconds to switch to `view` in an open page: drawn, laid out, its canvas rasterised
    (the paint of SVG is not in it)."""
    harness = os.path.join(work, "harness.html")
    with open(harness, "w") as f:
        f.write(HARNESS.replace("VIEW", json.dumps(view))
                .replace("SRC", json.dumps(f"file://{page}")))
    run = subprocess.run([*flags, "--dump-dom", f"file://{harness}"], capture_output=True,
                         text=True, timeout=600)
    return float(re.search(r'<pre id="out">([\d.]+)</pre>', run.stdout)[1]) / 1e3

if __name__ == "__main__":
    main()
