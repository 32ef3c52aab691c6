"""Fuzz proton-viewer with mutated profiles: every view, JSON and MessagePack, each run bounded.

The recorded fixtures in tests/data (and MessagePack copies of them, a Chrome trace made from
each, and a kernel with a warp timeline) are mutated, structurally (a value replaced by NaN,
Infinity, a huge number, a list nested deep, a bomb of a mangled name, text, a map; keys
dropped, nodes copied) and byte by byte (flips, cuts, inserts), and each file is shown by the
views: tree text, --output triton/json/csv/trace, --html, --diagnose, --source, -diff,
--warps, -l. Job files (tests/data/rs*, a job's own merge) get their ranks entries mutated too
(size, lo, the ranks listed, each frame's n, few and stats; many same-named siblings) and are
shown as the job's tree (its ranks view), as JSON and by --diagnose; a job's rank file,
mutated, is merged with its unmutated rank 0. Every tree file is shown as a tree and as JSON.
A run that prints a traceback or a warning (a library's, with its source line), outlives
TIME_S or needs more than MEMORY_MB is a failure; any other result (a tree, or one `Error:`
line) passes.

Each run is a fork of a process that imported the viewer once (cheap), with its address space
and time capped; the result is written to a JSON lines log. Not a unit test: run it by hand.

Usage:
    python bench/fuzz_viewer.py --files 3000 --seed 1 --out /tmp/fuzz      # then read the summary
(tests/test_fuzz_viewer.py runs a few dozen the same way.)
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import resource
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data")
TIME_S = 30
MEMORY_MB = 3072

VIEWS = {
    "tree": lambda f, o: [f],
    "tree-full": lambda f, o: ["--names", "full", "-m", "time/ms,count,avg_time/us", f],
    "list": lambda f, o: ["-l", f],
    "triton": lambda f, o: ["--output", "triton", "-m", "time/ms", f],
    "json": lambda f, o: ["--output", "json", "--print-sorted", f],
    "csv": lambda f, o: ["--output", "csv", "-m", "time/ms,util", f],
    "html": lambda f, o: ["--html", os.path.join(o, "r.html"), f],
    "diagnose": lambda f, o: ["--diagnose", f],
    "source": lambda f, o: ["--source", "kernel", f],
    "diff": lambda f, o: ["-diff", f, os.path.join(DATA, "recorded.hatchet"), "-m", "time/ms"],
    "diff-rev": lambda f, o: ["-diff", os.path.join(DATA, "recorded.hatchet"), f],
    "warps": lambda f, o: ["--warps", f],
}
TRACE_VIEWS = {"trace": lambda f, o: ["--output", "trace", f]}
ALWAYS = ("tree", "json")
"""The views every tree file gets (the others: a random sample of --views - 2)."""
JOB_VIEWS = ("tree", "json", "diagnose")
"""A job file's: its ranks view as a tree, as JSON, and the job's rules."""
RANKS_VIEWS = {"ranks": lambda f, o: [f.replace(".rank1.", ".rank0."), f],
               "ranks-json": lambda f, o: ["--output", "json", f.replace(".rank1.", ".rank0."),
                                           f]}
"""A mutated rank 1 merged with its job's rank 0."""
WARNING = re.compile(r"^\S.*:\d+: \w*Warning: ", re.MULTILINE)
"""A warning as Python prints it: `file:line: SomeWarning: text`."""

NASTY = [float("nan"), float("inf"), -float("inf"), 1e308, -1e308, 5e-324, 0, -1, 2 ** 63,
         2 ** 64 + 1, -2 ** 63 - 1, 10 ** 300, True, False, None, "", "x", "1e999", "NaN",
         "\u202e\x1b[31m", "\ud800", "a" * 5000, [], {}, [1, 2, 3], [[[]]], {"a": 1},
         {"name": "x"}, 1.5, 3, 2 ** 31, "_Z1fv", "ROOT", "/proc/self/environ:1@k"]


def bomb_name(levels: int) -> str:
    """A mangled name whose demangled text doubles with each level (tests/test_viewer_bombs)."""
    def sub(i: int) -> str:
        digits, out = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", ""
        while True:
            out, i = digits[i % 36] + out, i // 36
            if i == 0:
                return f"S{out}_"
    parts, prev, nxt = ["1A"], 0, 1
    for _ in range(levels):
        parts.append(f"1BI{sub(prev)}{sub(prev)}E")
        prev, nxt = nxt + 1, nxt + 2
    return "_Z1fI" + "".join(parts) + "Evv"


def nested(levels: int, leaf=0):
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def nasty(rng: random.Random):
    pick = rng.random()
    if pick < 0.06:
        return bomb_name(rng.choice([20, 27, 30]))
    if pick < 0.09:
        return nested(rng.choice([100, 3000, 200_000]))
    if pick < 0.12:
        return [rng.choice([1, 1.5, float("nan")])] * rng.choice([255, 256, 257, 5000])
    return copy.deepcopy(rng.choice(NASTY))


def nodes_of(root) -> list:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            out.append(node)
            kids = node.get("children")
            if isinstance(kids, list):
                stack.extend(kids)
    return out


def timeline(rng: random.Random) -> dict:
    n = rng.choice([1, 4, 64])
    return {"device": 0, "clock_khz": 1_755_000, "warps": 2, "scopes": ["k", "k > a"],
            "sm": [i % 3 for i in range(n)], "cta": [i % 5 for i in range(n)],
            "warp": [i % 2 for i in range(n)], "scope": [i % 2 for i in range(n)],
            "start_ns": [float(i) for i in range(n)], "cycles": [100 + i for i in range(n)]}


def mutate_value(rng: random.Random, obj) -> None:
    """Replace, drop or add one value somewhere in a dict or list inside `obj`."""
    containers, stack = [], [obj]
    while stack and len(containers) < 20000:
        c = stack.pop()
        if isinstance(c, (dict, list)):
            containers.append(c)
            stack.extend(c.values() if isinstance(c, dict) else c)
    c = rng.choice(containers)
    if isinstance(c, dict):
        if c and rng.random() < 0.8:
            key = rng.choice(list(c))
            if rng.random() < 0.2:
                del c[key]
            else:
                c[key] = nasty(rng)
        else:
            c[rng.choice(["frame", "metrics", "children", "name", "count", "time (ns)",
                          "device_id", "warp_timeline", "rank", "world_size", "t0_ns", "pid",
                          "x (inc)", "node", "stalled_x"])] = nasty(rng)
    elif c:
        i = rng.randrange(len(c))
        c[i] = nasty(rng) if rng.random() < 0.7 else copy.deepcopy(c[rng.randrange(len(c))])


def mutate_tree(rng: random.Random, doc) -> None:
    nodes = nodes_of(doc[0]) if isinstance(doc, list) and doc else []
    for _ in range(rng.choice([1, 1, 2, 3, 6])):
        r = rng.random()
        if nodes and r < 0.3:  # a metric
            node = rng.choice(nodes)
            m = node.get("metrics")
            if isinstance(m, dict):
                key = rng.choice(list(m) or ["time (ns)"]) if rng.random() < 0.7 else rng.choice(
                    ["count", "time (ns)", "num_samples", "flops16", "bytes", "grid_blocks",
                     "block_threads", "registers_per_thread", "shared_memory_bytes",
                     "warp_events", "warp_cycles_min", "warp_cycles_median", "warp_cycles_max",
                     "cycles", "normalized_cycles", "stalled_barrier", "device_id", "v"])
                m[key] = nasty(rng)
        elif nodes and r < 0.45:  # a name
            frame = rng.choice(nodes).get("frame")
            if isinstance(frame, dict):
                frame["name"] = nasty(rng) if rng.random() < 0.5 else rng.choice(
                    [bomb_name(28), "kernel", "a.py:99999999999999999999@k", "/etc/passwd:1@k",
                     "x" * 100_000, "ROOT", "__proton_launch_metadata"])
        elif nodes and r < 0.55:  # a timeline
            frame = rng.choice(nodes).get("frame")
            if isinstance(frame, dict):
                t = timeline(rng)
                if rng.random() < 0.7:
                    mutate_value(rng, t)
                frame["warp_timeline"] = json.dumps(t, allow_nan=True)
        elif nodes and r < 0.62:  # copy a subtree under another node
            a, b = rng.choice(nodes), rng.choice(nodes)
            if isinstance(b.get("children"), list) and a is not b:
                b["children"].append(copy.deepcopy(a) if len(nodes) < 5000 else a.get("frame"))
        elif r < 0.7 and isinstance(doc, list) and len(doc) > 1:  # the device table
            mutate_value(rng, doc[1]) if isinstance(doc[1], (dict, list)) else None
        else:
            mutate_value(rng, doc)


def mutate_job(rng: random.Random, doc) -> None:
    """Mutate a job file's ranks entries: the root's size, lo and ranks; a frame's n, few and
    stats (a value, a list's length); entries dropped; many same-named siblings."""
    nodes = [n for n in nodes_of(doc[0]) if isinstance(n.get("ranks"), dict)]
    if not nodes:
        return mutate_tree(rng, doc)
    for _ in range(rng.choice([1, 1, 2, 4])):
        r = rng.random()
        node = rng.choice(nodes)
        entry = node.get("ranks")
        if not isinstance(entry, dict):  # dropped by an earlier mutation
            continue
        if r < 0.2:  # the root's
            top = doc[0].get("ranks")
            if isinstance(top, dict):
                top[rng.choice(["size", "lo", "ranks", "size"])] = rng.choice(
                    [nasty(rng), 0, -5, 1, 2 ** 31, 2 ** 63, 5 * 10 ** 7, [0, 1], list(range(9))])
        elif r < 0.45:
            entry[rng.choice(["n", "few", "stats", "own"])] = rng.choice(
                [nasty(rng), 0, -1, 10 ** 9, [0, 0, 0, 0, 0], {"time (ns)": 1}])
        elif r < 0.7 and isinstance(entry.get("stats"), dict) and entry["stats"]:
            metric = rng.choice(list(entry["stats"]))
            values = entry["stats"][metric]
            if isinstance(values, list) and values and rng.random() < 0.7:
                values[rng.randrange(len(values))] = nasty(rng)
            else:
                entry["stats"][metric] = rng.choice([nasty(rng), [1, 2], [1] * 7, []])
        elif r < 0.8:
            del node["ranks"]
        elif r < 0.9:  # same-named siblings
            kids = node.get("children")
            if isinstance(kids, list) and kids:
                kid = rng.choice(kids)
                kids += [copy.deepcopy(kid) for _ in range(rng.choice([2, 50, 2000]))]
        else:
            mutate_tree(rng, doc)


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.choice([1, 2, 8, 32])):
        if not data:
            break
        r, i = rng.random(), rng.randrange(len(data))
        if r < 0.5:
            data[i] = rng.randrange(256)
        elif r < 0.7:
            del data[i:i + rng.randrange(1, 64)]
        elif r < 0.85:
            data[i:i] = bytes(rng.choice([b"[", b"{", b"\x91", b"\xdd\xff\xff\xff\xff",
                                          b"\xc1", b"1e999", b"NaN", b"\x00"]))
        else:
            del data[i:]
    return bytes(data)


def trace_of(doc, rng: random.Random) -> dict:
    """A Chrome trace with the fixture's kernels as events, for --output trace."""
    events = []
    for i, node in enumerate(nodes_of(doc[0])[:200]):
        name = node.get("frame", {}).get("name", "?")
        events.append({"name": name, "ph": "X", "ts": float(i), "dur": 1.0, "pid": "GPU 0",
                       "tid": 0, "args": {"i": i}})
    return {"traceEvents": events, "displayTimeUnit": "us",
            "otherData": {"rank": 0, "world_size": 2, "t0_ns": 1000 + rng.randrange(10)}}


def seeds() -> dict[str, list]:
    """The fixtures by kind: "tree" (single profiles), "job" (a job's own merged file), "rank"
    ((rank 0's document, another rank's) of one job)."""
    from proton.format import RANK_FILE

    out: dict[str, list] = {"tree": [], "job": [], "rank": []}
    for folder in (DATA, *(os.path.join(DATA, d) for d in ("rs", "rs4", "real"))):
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".hatchet"):
                continue
            with open(os.path.join(folder, name)) as f:
                doc = json.load(f)
            if isinstance(doc[0].get("ranks"), dict):
                out["job"].append(doc)
            elif RANK_FILE.search(name) and ".rank0." not in name:
                with open(os.path.join(folder, RANK_FILE.sub(".rank0.hatchet", name))) as f:
                    out["rank"].append((json.load(f), doc))
            else:
                out["tree"].append(doc)
    return out


def make_files(n: int, seed: int, out: str) -> list[tuple[str, str]]:
    """(path, kind) of n mutated files under out/files: kind is "tree", "job", "ranks" (a
    mutated rank 1 beside its rank 0) or "trace"."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    from proton.format_msgpack import packb

    rng = random.Random(seed)
    found = seeds()
    os.makedirs(os.path.join(out, "files"), exist_ok=True)
    made = []
    for k in range(n):
        form = rng.choices(["json", "msgpack", "trace", "bytes", "msgbytes", "job", "ranks"],
                           [0.3, 0.12, 0.06, 0.1, 0.05, 0.27, 0.1])[0]
        if form == "ranks":
            first, doc = copy.deepcopy(rng.choice(found["rank"]))
            mutate_tree(rng, doc)
            path = os.path.join(out, "files", f"r{k}.rank1.hatchet")
            with open(path.replace(".rank1.", ".rank0."), "w") as f:
                json.dump(first, f)
            with open(path, "wb") as f:
                f.write(_json_bytes(doc))
            made.append((path, "ranks"))
            continue
        if form == "job":
            doc = copy.deepcopy(rng.choice(found["job"]))
            mutate_job(rng, doc)
            packed = rng.random() < 0.3
            path = os.path.join(out, "files", f"j{k}.hatchet" + ("_msgpack" if packed else ""))
            with open(path, "wb") as f:
                f.write(_packed(packb, doc) if packed else _json_bytes(doc))
            made.append((path, "job"))
            continue
        doc = copy.deepcopy(rng.choice(found["tree"]))
        if form == "trace":
            doc = trace_of(doc, rng)
            mutate_value(rng, doc)
            path = os.path.join(out, "files", f"f{k}.rank0.chrome_trace")
            with open(path, "w") as f:
                f.write(json.dumps(doc, allow_nan=True))
            made.append((path, "trace"))
            continue
        mutate_tree(rng, doc)
        if form in ("msgpack", "msgbytes"):
            data = _packed(packb, doc)
            path = os.path.join(out, "files", f"f{k}.hatchet_msgpack")
        else:
            data = _json_bytes(doc)
            path = os.path.join(out, "files", f"f{k}.hatchet")
        if form in ("bytes", "msgbytes"):
            data = mutate_bytes(rng, data)
        with open(path, "wb") as f:
            f.write(data)
        made.append((path, "tree"))
    return made


def _json_bytes(doc) -> bytes:
    try:
        return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        return b"[]"


def _packed(packb, doc) -> bytes:
    try:
        return packb(doc)
    except ValueError:
        return packb([{"frame": {"name": "ROOT"}, "metrics": {}, "children": []}, {}])


def run_one(args: list[str], work: str) -> dict:
    """proton-viewer ARGS in a forked child with capped memory and time."""
    from click.testing import CliRunner
    from proton.viewer.cli import viewer

    read, write = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        status = "error"
        text = ""
        try:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_MB << 20, MEMORY_MB << 20))
            signal.alarm(TIME_S)
            os.chdir(work)
            result = CliRunner().invoke(viewer, args, catch_exceptions=True)
            out = result.output
            exc = result.exception
            if isinstance(exc, MemoryError):
                status = "memory"
            elif exc is not None and not isinstance(exc, SystemExit):
                import traceback
                status = "traceback"
                text = "".join(traceback.format_exception(exc))[-3000:]
            elif "Traceback" in out:
                status, text = "traceback", out[-3000:]
            elif WARNING.search(out):
                status, text = "warning", out[-3000:]
            elif result.exit_code not in (0, 2):
                status, text = f"exit {result.exit_code}", out[-1000:]
            elif result.exit_code == 2 and not any(  # several ranks: a line per bad file
                    line.startswith("Error: ") for line in out.splitlines()):
                status, text = "not one line", out[-1000:]
            else:
                status = "ok"
        except BaseException as exc:  # noqa: BLE001
            status, text = type(exc).__name__, repr(exc)[:1000]
        os.write(write, json.dumps({"status": status, "text": text}).encode()[:60000])
        os._exit(0)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, code = os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    try:
        got = json.loads(b"".join(chunks))
    except ValueError:
        sig = os.WTERMSIG(code) if os.WIFSIGNALED(code) else None
        got = {"status": "hang" if sig == signal.SIGALRM else f"died ({sig or code})",
               "text": ""}
    got["seconds"] = round(seconds, 2)
    return got


def views_of(kind: str, rng: random.Random, extra: int) -> list[str]:
    """The views a file of `kind` is shown by: ALWAYS and `extra` others for a tree file."""
    if kind == "trace":
        return ["trace"]
    if kind == "job":
        return list(JOB_VIEWS)
    if kind == "ranks":
        return list(RANKS_VIEWS)
    return [*ALWAYS, *rng.sample([v for v in VIEWS if v not in ALWAYS], max(0, extra))]


def view_args(view: str, path: str, work: str) -> list[str]:
    return {**VIEWS, **TRACE_VIEWS, **RANKS_VIEWS}[view](path, work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--views", type=int, default=4, help="views per tree file (tree, json and "
                    "a random sample of the others)")
    ap.add_argument("--out", default="/tmp/proton-fuzz")
    ap.add_argument("--shard", default="0/1", help="K/N: this process runs every N-th file")
    opts = ap.parse_args()
    shard, shards = map(int, opts.shard.split("/"))
    sys.path.insert(0, os.path.join(HERE, ".."))
    from proton.viewer import deep

    made = deep.call(make_files, opts.files, opts.seed, opts.out)  # values nested 200,000 deep
    import proton.viewer.cli  # noqa: F401 - imported once, before the forks
    import hatchet  # noqa: F401
    rng = random.Random(opts.seed * 7 + 1)
    work = os.path.join(opts.out, f"work{shard}")
    os.makedirs(work, exist_ok=True)
    log = open(os.path.join(opts.out, f"log{shard}.jsonl"), "w")
    counts: dict[str, int] = {}
    files = 0
    for k, (path, kind) in enumerate(made):
        if k % shards != shard:
            continue
        files += 1
        for view in views_of(kind, rng, opts.views - len(ALWAYS)):
            got = run_one(view_args(view, path, work), work)
            counts[got["status"]] = counts.get(got["status"], 0) + 1
            if got["status"] != "ok":
                print(f"{got['status']:10s} {view:10s} {path} {got['text'][-300:]!r}",
                      flush=True)
            log.write(json.dumps({"file": path, "kind": kind, "view": view, **got}) + "\n")
    log.close()
    print("summary", json.dumps({"files": files, "runs": sum(counts.values()), **counts}),
          flush=True)


if __name__ == "__main__":
    main()
