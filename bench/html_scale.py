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
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"]
    rows = []
    for view in ("flame", "kernels", "roofline"):
        t0 = time.perf_counter()
        run = subprocess.run([*flags, "--dump-dom", f"file://{page}#view={view}"],
                             capture_output=True, text=True, timeout=600)
        dom_s = time.perf_counter() - t0
        assert 'data-ready="1"' in run.stdout and "data-error" not in run.stdout, \
            run.stderr[-500:]
        ready_ms = int(re.search(r'data-ready-ms="(\d+)"', run.stdout)[1])
        t0 = time.perf_counter()
        subprocess.run([*flags, f"--screenshot={os.path.join(work, view + '.png')}",
                        f"file://{page}#view={view}"], capture_output=True, timeout=600,
                       check=True)
        rows.append((view, dom_s, time.perf_counter() - t0, ready_ms / 1e3))
    blank = os.path.join(work, "blank.html")
    with open(blank, "w") as f:
        f.write('<html><body data-ready="1"></body></html>')
    t0 = time.perf_counter()
    subprocess.run([*flags, f"--screenshot={os.path.join(work, 'blank.png')}",
                    f"file://{blank}"], capture_output=True, timeout=120)
    empty = time.perf_counter() - t0
    size = os.path.getsize(page) / 1e6
    print(f"{args.nodes:,} frames, {kernels:,} kernels (roofline dots); page {size:.1f} MB, "
          f"written in {write_s:.1f} s; Chromium on an empty page: {empty:.1f} s")
    print("| view | Chromium, DOM dumped s | Chromium, screenshot s | page: navigation to drawn s |")
    print("|---|---|---|---|")
    for view, dom_s, shot_s, ready_s in rows:
        print(f"| {view} | {dom_s:.1f} | {shot_s:.1f} | {ready_s:.2f} |")


if __name__ == "__main__":
    main()
