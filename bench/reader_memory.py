"""What a profile of each kind costs the viewer in memory, against docs/safety.md's bound.

Each kind is a file built to cost the most per byte in one way (frames with nothing in them,
as JSON or MessagePack, flat or nested; a metric per frame; vectors; lists and maps the tree
never uses; a job file's statistics; ranks a job file claims), plus realistic profiles that
must read. Each is shown by `proton-viewer -d 1` in a child process: its peak resident memory
(VmHWM) less a one-frame profile's, over the file's size, and whether it was read or refused
in one line (reader.memory_cost says which).

Usage:
    python bench/reader_memory.py [--mb 22] [--kinds flat,flat-msgpack,...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

PEAK_CODE = """\
import atexit, sys
def report():  # at exit: the viewer's main ends the process itself (os._exit)
    status = open("/proc/self/status").read()
    print("hwm_kb", status.split("VmHWM:")[1].split()[0], file=sys.stderr)
atexit.register(report)
from proton.viewer.cli import main
main()
"""


def _root(children_text: str, root_metrics: str = '"time (ns)":0') -> str:
    return ('[{"frame":{"name":"ROOT","type":"function"},"metrics":{' + root_metrics
            + '},"children":[' + children_text + ']},{}]')


def flat(n: int) -> str:
    """Frames with a name and nothing else (the issue's 22 bytes a frame)."""
    return _root(",".join(['{"frame":{"name":""}}'] * n))


def chain(n: int) -> str:
    """Nested frames with nothing else: each the only child of the one before (at most the
    ~499,000 levels the viewer reads)."""
    n = min(n, 400_000)
    return _root('{"frame":{"name":"a"},"children":[' * n + "]}" * n)


def one_metric(n: int) -> str:
    """Frames with one small time each (a cell a frame)."""
    return _root(",".join('{"frame":{"name":"k"},"metrics":{"time (ns)":%d}}' % (i % 100)
                          for i in range(n)))


def many_metrics(n: int) -> str:
    """Few frames, each with its own metric names: a cell on every frame per name."""
    per = 64
    frames = max(1, n // 600)
    return _root(",".join('{"frame":{"name":"k"},"metrics":{%s}}' % ",".join(
        '"m%d":1' % (f * per + j) for j in range(per)) for f in range(frames)))


def frame_keys(n: int) -> str:
    """Frames with 20 keys besides their name (each a few bytes; hatchet keeps a sorted copy)."""
    keys = ",".join('"k%d":%d' % (j, j) for j in range(20))
    return _root(",".join(['{"frame":{"name":"",%s}}' % keys] * max(1, n // 7)))


def float_values(n: int) -> str:
    """Frames with 20 metrics each, every value a float of its own."""
    root = ",".join('"m%d":0' % j for j in range(20)) + ',"time (ns)":0' 
    return _root(",".join('{"frame":{"name":""},"metrics":{"time (ns)":1,%s}}' % ",".join(
        '"m%d":%d.5' % (j, i) for j in range(20)) for i in range(max(1, n // 14))), root)


def vectors(n: int) -> str:
    """Frames with a 256-element vector metric each."""
    vec = "[" + ",".join(["1"] * 256) + "]"
    return _root(",".join('{"frame":{"name":"k"},"metrics":{"time (ns)":1,"v":%s}}' % vec
                          for _ in range(max(1, n // 24))))


def empty_maps(n: int) -> str:
    """A frame value of empty maps: lists and maps the tree never uses."""
    return _root('{"frame":{"name":"k","x":[' + ",".join(["{}"] * (n * 7)) + "]}}")


def short_texts(n: int) -> str:
    """A frame value of two-letter strings (the most a string costs per byte)."""
    return _root('{"frame":{"name":"k","x":[' + ",".join(['"ab"'] * (n * 4)) + "]}}")


def job(n: int) -> str:
    """A job file's kernels: small frames, each with its statistics of two metrics."""
    stat = '"ranks":{"n":2,"few":[0,1],"stats":{"time (ns)":[3,1,2,1,2,0],"count":[2,1,1,0,2,0]}}'
    kids = ",".join('{"frame":{"name":"k"},"metrics":{"time (ns)":3,"count":2},%s}' % stat
                    for _ in range(max(1, n // 6)))
    return ('[{"frame":{"name":"ROOT","type":"function"},"metrics":{"time (ns)":0,"count":0},'
            '"children":[' + kids + '],"ranks":{"n":2,"few":[0,1],"size":2,"lo":0,'
            '"ranks":[0,1],"stats":{}}},{}]')


def job_floats(n: int) -> str:
    """A job file's kernels, each with float statistics of ten metrics."""
    kids = ",".join('{"frame":{"name":"k"},"metrics":{"time (ns)":3},"ranks":{"n":2,"few":[0,1],'
                    '"stats":{%s}}}' % ",".join('"m%d":[%d.5,1.5,2.5,1,2,0]' % (j, i)
                                                for j in range(10)) for i in range(max(1, n // 17)))
    return ('[{"frame":{"name":"ROOT","type":"function"},"metrics":{"time (ns)":0},"children":['
            + kids + '],"ranks":{"n":2,"few":[0,1],"size":2,"lo":0,"ranks":[0,1],"stats":{}}},{}]')


def job_stats(n: int) -> str:
    """A job file whose frames carry statistics of metrics no frame has (a cell each)."""
    kids = ",".join('{"frame":{"name":"k"},"ranks":{"stats":{%s}}}' % ",".join(
        '"m%d":[1,1,1,0,1,0]' % (i * 8 + j) for j in range(8)) for i in range(max(1, n // 200)))
    return ('[{"frame":{"name":"ROOT","type":"function"},"metrics":{},"children":[' + kids
            + '],"ranks":{"size":1,"lo":0}},{}]')


def job_ranks(n: int) -> str:
    """A job file of one frame that says it merged many ranks without listing them."""
    return ('[{"frame":{"name":"ROOT","type":"function"},"metrics":{"time (ns)":0},"children":'
            '[],"ranks":{"n":1,"size":%d,"lo":0}},{}]' % (n * 20))


def realistic(n: int) -> str:
    """bench/viewer_scale.py's synthetic profile: scopes (fan-out 10) over kernels."""
    from viewer_scale import synthetic

    return json.dumps(synthetic(max(1, n // 9)))


KINDS = {"flat": flat, "chain": chain, "one-metric": one_metric, "many-metrics": many_metrics,
         "frame-keys": frame_keys, "float-values": float_values, "vectors": vectors,
         "empty-maps": empty_maps, "short-texts": short_texts, "job": job,
         "job-floats": job_floats, "job-stats": job_stats, "job-ranks": job_ranks,
         "realistic": realistic}
"""Kind -> a function of n (about one frame per 22 bytes of flat) giving the JSON text."""


def write(kind: str, mb: float, folder: str, msgpack: bool) -> str:
    """The file of `kind` of about `mb` MB (JSON, or its MessagePack)."""
    sys.path.insert(0, HERE)
    from proton.format_msgpack import packb
    from proton.viewer import deep

    text = KINDS[kind](int(mb * 1e6 / 22))
    path = os.path.join(folder, kind + (".hatchet_msgpack" if msgpack else ".hatchet"))
    if msgpack:
        with open(path, "wb") as f:
            f.write(packb(deep.call(json.loads, text)))
    else:
        with open(path, "w") as f:
            f.write(text)
    return path


def estimate(path: str) -> float:
    """reader's estimate of what showing `path` costs (MB): COSTS over what it holds."""
    from proton.viewer import deep, reader

    found: list[float] = []
    judge = reader._too_costly

    def spy(name, size, counts, **kw):
        found.append(sum(n * reader.COSTS[what] for what, n in counts.items()))
        return judge(name, size, counts, **kw)

    reader._too_costly = spy
    try:
        deep.call(reader.parse, path)
    except reader.ViewerError:
        pass
    finally:
        reader._too_costly = judge
    return max(found, default=0) / 2**20


def peak(*args: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """proton-viewer ARGS in a child: the run, its peak resident MiB (VmHWM: the child's own,
    where ru_maxrss would carry the forking parent's across exec) and seconds."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PEAK_CODE, *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": ROOT})
    seconds = time.monotonic() - start
    line = [x for x in done.stderr.splitlines() if x.startswith("hwm_kb")][-1]
    return done, int(line.split()[1]) / 1024, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=22.0)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--args", default="-d 1", help="the view (default: -d 1)")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="reader-memory-") as folder:
        one = os.path.join(folder, "one.hatchet")
        with open(one, "w") as f:
            f.write(_root(""))
        _, base, _ = peak(*opts.args.split(), one)
        print(f"base {base:.0f} MB (a one-frame profile); {opts.args}")
        print(f"{'kind':22s} {'MB':>6s} {'peak MB':>8s} {'x size':>7s} {'model':>6s} {'s':>6s}"
              "  result")
        for kind in opts.kinds.split(","):
            for msgpack in (False, True):
                path = write(kind, opts.mb, folder, msgpack)
                mb = os.path.getsize(path) / 1e6
                done, top, seconds = peak(*opts.args.split(), path)
                model = estimate(path)
                err = [x for x in done.stderr.splitlines() if not x.startswith("hwm_kb")]
                result = "read" if done.returncode == 0 else (err[-1][:90] if err else "?")
                label = kind + (" (msgpack)" if msgpack else "")
                print(f"{label:22s} {mb:6.1f} {top - base:8.0f} {(top - base) / mb:7.1f} "
                      f"{model:6.0f} {seconds:6.1f}  {result}", flush=True)
                os.unlink(path)


if __name__ == "__main__":
    main()
