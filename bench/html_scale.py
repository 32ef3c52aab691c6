"""How long a 100,000-node profile takes as an HTML report: writing the page, and a headless
Chromium loading it until the flame graph and table are drawn (its own start included; a
browser that is already open starts faster).

    python bench/html_scale.py [--nodes 100000]
"""
from __future__ import annotations

import argparse
import json
import os
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
    with open(profile, "w") as f:
        json.dump(synthetic(args.nodes), f)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "proton.viewer.cli", "--html", page, profile],
                   check=True, capture_output=True)
    write_s = time.perf_counter() - t0
    timings = []
    for fragment in ("", "view=kernels"):
        t0 = time.perf_counter()
        run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                              "--window-size=1400,900", "--dump-dom",
                              f"file://{page}#{fragment}"], capture_output=True, text=True,
                             timeout=600)
        timings.append(time.perf_counter() - t0)
        assert 'data-ready="1"' in run.stdout, run.stderr[-500:]
    blank = os.path.join(work, "blank.html")
    with open(blank, "w") as f:
        f.write('<html><body data-ready="1"></body></html>')
    t0 = time.perf_counter()
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                    f"file://{blank}"], capture_output=True, timeout=120)
    empty = time.perf_counter() - t0
    size = os.path.getsize(page) / 1e6
    print("| nodes | page MB | write the page s | Chromium: flame graph s | kernels table s "
          "| Chromium on an empty page s |")
    print("|---|---|---|---|---|---|")
    print(f"| {args.nodes:,} | {size:.1f} | {write_s:.1f} | {timings[0]:.1f} | {timings[1]:.1f} "
          f"| {empty:.1f} |")


if __name__ == "__main__":
    main()
