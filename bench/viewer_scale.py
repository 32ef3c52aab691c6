"""Every view of `proton-viewer` on synthetic profiles of 10,000 and 100,000 frames (1,000,000
with --huge), and the merged view of 256 rank files of 5,000 frames: this tree beside an
earlier one (--baseline, a checkout: `git worktree add /tmp/base main`) in the same run.

    python bench/viewer_scale.py [--baseline /tmp/base] [--sizes 10000,100000] [--huge]
                                 [--repeat 1] [--ranks 256x5000] [--views tree,html,...]
                                 [--out table.md] [--triton]

Each view runs in its own process (`python -c` calling the tree's viewer, its PYTHONPATH the
tree), its output to a file; a row gives each tree's wall seconds (the best of --repeat, the
trees taking turns), its CPU seconds (user + system) and its peak resident memory (VmHWM), and
whether the two trees wrote the same bytes. The table is printed and written to --out.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def synthetic(nodes: int, seed: int = 0) -> list:
    """A tree of scopes (fan-out 10) whose leaves are kernels with time, count and flops."""
    rng = random.Random(seed)
    made = 1
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "flops16": 0}, "children": []}
    level = [root]
    while made < nodes:
        nxt = []
        for parent in level:
            for i in range(10):
                if made >= nodes:
                    break
                node = {"frame": {"name": f"{parent['frame']['name'][:40]}/s{i}", "type": "function"},
                        "metrics": {}, "children": []}
                parent["children"].append(node)
                nxt.append(node)
                made += 1
        level = nxt
    for leaf in level:
        count = rng.randint(1, 100)
        leaf["frame"]["name"] = "kernel_" + leaf["frame"]["name"].replace("/", "_")
        leaf["metrics"] = {"time (ns)": rng.randint(1_000, 10_000_000), "count": count,
                           "flops16": rng.randint(1, 10**12), "device_id": "0",
                           "device_type": "CUDA"}
    return [root, {"CUDA": {"0": {"arch": "90", "num_sms": 132, "clock_rate": 1980000,
                                  "memory_clock_rate": 2619000, "bus_width": 5120}}}]


STALLS = ("stalled_long_scoreboard", "stalled_math_pipe_throttle", "stalled_wait")


def sampled(nodes: int, seed: int = 0) -> list:
    """A PC-sampled profile of about `nodes` frames: synthetic's scopes over a quarter as many
    kernels, eight names among them, each kernel with three source-line frames of samples."""
    doc = synthetic(max(2, nodes // 4), seed)
    rng = random.Random(seed)
    root = doc[0]
    root["metrics"].update({"num_samples": 0, "num_stalled_samples": 0,
                            **{s: 0 for s in STALLS}})
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node["children"])
        if node["children"] or node is root:
            continue
        kernel = f"kernel_{rng.randrange(8)}"
        node["frame"]["name"] = kernel
        for line in (10, 11, 12):
            samples = rng.randint(1, 500)
            node["children"].append({
                "frame": {"name": f"/src/{kernel}.py:{line}@{kernel}", "type": "function"},
                "metrics": {"num_samples": samples, "num_stalled_samples": samples // 2,
                            STALLS[line % 3]: samples // 2}, "children": []})
    return doc


def traces(events: int, folder: str) -> list[str]:
    """Two ranks' Chrome traces of `events` kernel events in all."""
    paths = []
    for rank in (0, 1):
        rng = random.Random(rank)
        evs = [{"name": "process_name", "ph": "M", "pid": "GPU 0", "args": {"name": "GPU 0"}}]
        ts = 0.0
        for i in range(events // 2):
            ts += rng.uniform(1, 20)
            evs.append({"name": f"kernel_{i % 97}", "ph": "X", "cat": "kernel", "pid": "GPU 0",
                        "tid": f"stream {i % 4}", "ts": round(ts, 3),
                        "dur": round(rng.uniform(1, 10), 3), "args": {"call_stack": ["ROOT",
                                                                                      "step"]}})
        path = os.path.join(folder, f"run.rank{rank}.chrome_trace")
        with open(path, "w") as f:
            json.dump({"traceEvents": evs, "displayTimeUnit": "us",
                       "otherData": {"rank": rank, "world_size": 2, "host": "bench",
                                     "pid": 100 + rank, "t0_ns": 10**12 + rank * 1000}}, f)
        paths.append(path)
    return paths


def rank_files(world: int, frames: int, folder: str) -> str:
    """A folder of `world` rank files (bench/merge_ranks.py's real-profile tree)."""
    sys.path.insert(0, HERE)
    from merge_ranks import big_profile, scaled

    ranks = os.path.join(folder, "ranks")
    os.makedirs(ranks)
    doc = big_profile(frames)
    for r in range(world):
        with open(os.path.join(ranks, f"job.rank{r}.hatchet"), "w") as f:
            json.dump(scaled(doc, r, world), f)
    return ranks


PEAK_CODE = """\
import atexit, os, sys
def report():  # at exit: the viewer's main ends the process itself (os._exit)
    t = os.times()
    status = open("/proc/self/status").read()
    print("bench", t.user + t.system, status.split("VmHWM:")[1].split()[0], file=sys.stderr)
atexit.register(report)
from proton.viewer.cli import main
main()
"""

METRICS = "time/ms,tflop16/s"
VIEWS = {  # name -> (the file it reads, its arguments, with {F} the file, {P} the page)
    "tree": ("profile", ["-m", METRICS, "{F}"]),
    "-l": ("profile", ["-l", "{F}"]),
    "-diff": ("profile", ["-m", "time/ms", "{F}", "-diff", "{D}"]),
    "json": ("profile", ["--output", "json", "-m", METRICS, "{F}"]),
    "csv": ("profile", ["--output", "csv", "-m", METRICS, "{F}"]),
    "triton": ("profile", ["--output", "triton", "-m", METRICS, "{F}"]),
    "trace": ("traces", ["--output", "trace", "{F}", "{G}"]),
    "diagnose": ("profile", ["--diagnose", "{F}"]),
    "source": ("sampled", ["--source", "kernel_0", "{F}"]),
    "html": ("profile", ["--html", "{P}", "{F}"]),
}


def run(tree: str, args: list[str], out: str, timeout: float) -> dict:
    """The viewer of `tree` with `args` in a child, stdout to `out`: seconds, CPU, peak MB."""
    env = {**os.environ, "PYTHONPATH": tree, "COLUMNS": "200"}
    with open(out, "wb") as f:
        t0 = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-c", PEAK_CODE, *args], stdout=f,
                                  stderr=subprocess.PIPE, text=True, timeout=timeout, env=env,
                                  cwd=os.path.dirname(out))
        except subprocess.TimeoutExpired:
            return {"error": f"> {timeout:.0f} s"}
        wall = time.perf_counter() - t0
    lines = done.stderr.splitlines()
    mark = [x for x in lines if x.startswith("bench ")]
    if done.returncode != 0 or not mark:
        why = [x for x in lines if not x.startswith("bench ")]
        return {"error": f"exit {done.returncode}: {(why or ['?'])[-1][:80]}"}
    _, cpu, hwm = mark[-1].split()
    return {"wall": wall, "cpu": float(cpu), "mb": int(hwm) / 1024}


def measure(trees: dict[str, str], args: list[str], work: str, repeat: int,
            timeout: float) -> tuple[dict, bool | None]:
    """Each tree's best run (by wall time) of `args`, the trees taking turns; whether their
    outputs (stdout, and the page of --html) are the same bytes."""
    best: dict[str, dict] = {}
    outputs: dict[str, list[str]] = {}
    for _ in range(repeat):
        for label, tree in trees.items():
            folder = os.path.join(work, label)
            os.makedirs(folder, exist_ok=True)
            page = os.path.join(folder, "page.html")
            out = os.path.join(folder, "stdout")
            got = run(tree, [a.replace("{P}", page) for a in args], out, timeout)
            prev = best.get(label)
            if prev is None or "wall" in got and ("wall" not in prev or
                                                  got["wall"] < prev["wall"]):
                best[label] = got
            kept = [out] + ([page] if "{P}" in args else [])
            outputs[label] = []
            for path in kept:
                copy = f"{path}.kept"
                if os.path.exists(path):
                    shutil.move(path, copy)
                outputs[label].append(copy)
    same = None
    if len(outputs) == 2:
        a, b = outputs.values()
        same = all(os.path.exists(x) and os.path.exists(y) and filecmp.cmp(x, y, shallow=False)
                   for x, y in zip(a, b))
    return best, same


def cell(got: dict) -> str:
    if "error" in got:
        return got["error"]
    return f"{got['wall']:.2f} | {got['cpu']:.2f} | {got['mb']:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="frames of each profile")
    ap.add_argument("--huge", action="store_true", help="also 1,000,000 frames (slow)")
    ap.add_argument("--baseline", help="an earlier checkout to run beside this tree")
    ap.add_argument("--views", default=",".join(VIEWS), help="of " + ",".join(VIEWS))
    ap.add_argument("--ranks", default="256x5000", help="RANKSxFRAMES of the merged view "
                    "('' for none)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each; the best is shown")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=None, help="the table is written here too (markdown)")
    ap.add_argument("--triton", action="store_true", help="also Triton's viewer's tree")
    args = ap.parse_args()
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = os.path.abspath(args.baseline)
    sizes = [int(s) for s in args.sizes.split(",") if s] + ([1_000_000] if args.huge else [])
    views = [v for v in args.views.split(",") if v]
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        sys.exit(f"unknown view {unknown[0]!r}; choose from {','.join(VIEWS)}")
    work = tempfile.mkdtemp(prefix="viewer-scale-")
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    load = os.getloadavg()
    say(f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at "
        f"the start; Python {sys.version.split()[0]}; best of {args.repeat}; "
        + "; ".join(f"{k}: {_describe(v)}" for k, v in trees.items()))
    heads = " | ".join(f"{k} s | CPU s | peak MB" for k in trees)
    say(f"| view | frames | file MB | {heads} |" + (" same output |" if len(trees) == 2 else ""))
    say("|---|---|---|" + "---|---|---|" * len(trees) + ("---|" if len(trees) == 2 else ""))
    try:
        for n in sizes:
            files = _files(n, views, work)
            for view in views:
                kind, template = VIEWS[view]
                main_file, *others = files[kind]
                argv = [a.replace("{F}", main_file).replace("{D}", files.get("other", [""])[0])
                        .replace("{G}", others[0] if others else "") for a in template]
                best, same = measure(trees, argv, os.path.join(work, "out"), args.repeat,
                                     args.timeout)
                mb = sum(os.path.getsize(p) for p in files[kind]) / 1e6
                say(f"| {view} | {n:,} | {mb:.1f} | "
                    + " | ".join(cell(best[k]) for k in trees) + " |"
                    + ({True: " yes |", False: " NO |", None: " - |"}[same]
                       if len(trees) == 2 else ""))
            if args.triton:
                _triton(files["profile"][0], args.timeout, say)
            shutil.rmtree(os.path.join(work, "files"), ignore_errors=True)
        if args.ranks:
            world, frames = map(int, args.ranks.split("x"))
            folder = rank_files(world, frames, os.path.join(work, "files"))
            mb = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) / 1e6
            best, same = measure(trees, ["-m", "time/ms", folder], os.path.join(work, "out"),
                                 args.repeat, args.timeout)
            say(f"| merged ranks, {world} x {frames:,} | {world * frames:,} | {mb:.1f} | "
                + " | ".join(cell(best[k]) for k in trees) + " |"
                + ({True: " yes |", False: " NO |", None: " - |"}[same]
                   if len(trees) == 2 else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    say(f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    if args.out:  # not by default: a run from the checkout's root would leave a file there
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


def _describe(tree: str) -> str:
    head = subprocess.run(["git", "-C", tree, "log", "-1", "--format=%h"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", tree, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{tree} at {head or '?'}{' (changed)' if dirty else ''}"


def _files(n: int, views: list[str], work: str) -> dict[str, list[str]]:
    """The files the views read, made for `n` frames."""
    folder = os.path.join(work, "files")
    os.makedirs(folder, exist_ok=True)
    kinds = {VIEWS[v][0] for v in views} | ({"other"} if "-diff" in views else set())
    out: dict[str, list[str]] = {}
    for kind, make in (("profile", lambda: synthetic(n)), ("other", lambda: synthetic(n, 1)),
                       ("sampled", lambda: sampled(n))):
        if kind in kinds:
            path = os.path.join(folder, f"{kind}.hatchet")
            with open(path, "w") as f:
                json.dump(make(), f)
            out[kind] = [path]
    if "traces" in kinds:
        out["traces"] = traces(n, folder)
    return out


def _triton(path: str, timeout: float, say) -> None:
    try:
        import triton.profiler.viewer  # noqa: F401
    except ImportError:
        say("triton is not installed: no row for its viewer")
        return
    t0 = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m", METRICS, path],
                       capture_output=True, timeout=timeout)
        say(f"Triton's viewer, tree: {time.perf_counter() - t0:.2f} s")
    except subprocess.TimeoutExpired:
        say(f"Triton's viewer, tree: > {timeout:.0f} s (stopped)")


if __name__ == "__main__":
    main()
