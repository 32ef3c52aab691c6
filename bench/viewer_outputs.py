"""What every view of `proton-viewer` writes, saved, so a refactor can show it changed nothing.

    python bench/viewer_outputs.py save DIR [--sizes 10000,100000] [--jobs 2]
    python bench/viewer_outputs.py compare DIR [--sizes ...]     # exit 1 on any difference

Runs each view (tree, -l, -diff, --output json/csv/triton, --diagnose, --html, --source) of
bench/viewer_scale.py's synthetic profiles and of every tests/data/*.hatchet in its own process
(this tree on PYTHONPATH, COLUMNS=200) and keeps its stdout, stderr, exit status and page.
`compare` runs them again and names each view whose bytes differ from the saved ones.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from viewer_scale import sampled, synthetic  # noqa: E402

M = "time/ms,tflop16/s"


def cases(files: str, sizes: list[int]) -> dict[str, list[str]]:
    """name -> the viewer's arguments ({P}: the page's path)."""
    os.makedirs(files, exist_ok=True)
    out: dict[str, list[str]] = {}
    for n in sizes:
        paths = {}
        for kind, make in (("p", lambda: synthetic(n)), ("o", lambda: synthetic(n, 1)),
                           ("s", lambda: sampled(n))):
            paths[kind] = os.path.join(files, f"{kind}{n}.hatchet")
            if not os.path.exists(paths[kind]):
                with open(paths[kind], "w") as f:
                    json.dump(make(), f)
        p = paths["p"]
        out.update({
            f"{n}.tree": ["-m", M, p], f"{n}.default": [p], f"{n}.l": ["-l", p],
            f"{n}.diff": ["-m", "time/ms", p, "-diff", paths["o"]],
            f"{n}.json": ["--output", "json", "-m", M, p],
            f"{n}.csv": ["--output", "csv", "-m", M, p],
            f"{n}.triton": ["--output", "triton", "-m", M, p],
            f"{n}.sorted": ["-m", M, "--print-sorted", "-d", "3", p],
            f"{n}.diagnose": ["--diagnose", p], f"{n}.html": ["--html", "{P}", p],
            f"{n}.source": ["--source", "kernel_0", paths["s"]],
            f"{n}.stree": [paths["s"]],
        })
    data = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "*.hatchet")))
    for i, path in enumerate(data):
        name = os.path.basename(path)[:-len(".hatchet")]
        other = data[(i + 1) % len(data)]
        out.update({
            f"{name}.tree": [path], f"{name}.l": ["-l", path],
            f"{name}.all": ["-m", "time/ms,avg_time/us,count,time/%", path],
            f"{name}.diff": [path, "-diff", other], f"{name}.self": [path, "-diff", path],
            f"{name}.json": ["--output", "json", path], f"{name}.csv": ["--output", "csv", path],
            f"{name}.triton": ["--output", "triton", "-m", "time/ms", path],
            f"{name}.diagnose": ["--diagnose", path],
            f"{name}.djson": ["--diagnose", "--output", "json", path],
            f"{name}.html": ["--html", "{P}", path],
            f"{name}.raw": ["--names", "raw", "-f", "full", "--no-collapse-libraries", path],
        })
    return out


def run(name: str, args: list[str], folder: str) -> bytes:
    """One view's stdout, stderr, exit status and page, as one blob."""
    page = os.path.join(folder, f"{name}.page.html")
    env = {**os.environ, "PYTHONPATH": ROOT, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "proton.viewer.cli",
                           *[a.replace("{P}", page) for a in args]],
                          capture_output=True, env=env, cwd=folder, timeout=600)
    blob = (b"rc %d\n--- stdout\n" % done.returncode + done.stdout + b"\n--- stderr\n"
            + done.stderr.replace(folder.encode(), b"<DIR>"))
    if os.path.exists(page):
        with open(page, "rb") as f:
            blob += b"\n--- page\n" + f.read()
        os.remove(page)
    return blob


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("save", "compare"))
    ap.add_argument("dir")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="a substring: only the cases that hold it")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    saved = os.path.abspath(args.dir)
    work = os.path.join(saved, "work")
    os.makedirs(work, exist_ok=True)
    todo = {k: v for k, v in cases(os.path.join(saved, "files"), sizes).items()
            if args.only in k}

    def one(item):
        name, argv = item
        return name, run(name, argv, work)

    differ = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for name, blob in pool.map(one, sorted(todo.items())):
            path = os.path.join(saved, name + ".out")
            if args.action == "save":
                with open(path, "wb") as f:
                    f.write(blob)
            else:
                with open(path, "rb") as f:
                    if f.read() != blob:
                        differ.append(name)
                        with open(path + ".new", "wb") as g:
                            g.write(blob)
                        print("DIFFERS", name, flush=True)
    print(f"{len(todo)} views, {len(differ)} differ" + (f": {' '.join(differ)}" if differ else ""))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
