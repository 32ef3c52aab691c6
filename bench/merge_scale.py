"""A job's profile at 1,024 and 4,096 ranks (issue 49): the viewer's merge of rank files against
the combine step of an in-job tree reduction, time and peak memory of each.

* files: P rank files written (bench/merge_ranks.py's tree, kernel times scaled per rank), then
  `ranks.read` + `ranks.merge` in a child process, its peak RSS from getrusage.
* reduction: the COMPUTE of a log2(P)-round pairwise reduction only (no process group, no
  messages, no tree walk): each rank's summary is per frame (a call-path key, int64) and metric
  its sum, min, max, the rank of the max and how many ranks have it; two summaries combine by the
  union of their keys. Simulated in one process as a binary counter over the ranks (the same
  pairing as the rounds: rank i takes i + 2^k's partial in round k), so at most log2(P) partials
  are alive; in the job each rank holds two summaries at a time (its partial and the one it
  receives). `critical path` is rank 0's combines: one per round. Also checked: the pairwise sums
  against the viewer's rank-order sums (float addition is not associative: integer ns are exact,
  float metrics may differ in the last bits).

Usage: python bench/merge_scale.py [--ranks 1024,4096] [--frames 200,5000]
                                   [--files 256x200,1024x200,4096x200,1024x5000]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from merge_ranks import big_profile, count, scaled  # noqa: E402

METRICS = ("time (ns)", "count", "flops16", "cpu_time (ns)")


# -- the reduction's combine step ---------------------------------------------------------------
def summary(keys: np.ndarray, values: np.ndarray, rank: int) -> dict:
    """One rank's summary: its frames' keys (sorted) and per frame and metric sum, min, max,
    max rank, count."""
    order = np.argsort(keys)
    v = values[order]
    return {"keys": keys[order], "sum": v.copy(), "min": v.copy(), "max": v.copy(),
            "arg": np.full(v.shape, rank, dtype=np.int32),
            "n": np.ones(v.shape, dtype=np.int32)}


def combine(a: dict, b: dict) -> dict:
    """a's ranks all below b's: the union of their frames, each statistic combined (a tie in
    max keeps a's rank: the lowest, as np.argmax over the ranks in order does)."""
    keys = np.union1d(a["keys"], b["keys"])
    ia, ib = np.searchsorted(keys, a["keys"]), np.searchsorted(keys, b["keys"])
    shape = (len(keys), a["sum"].shape[1])
    out = {"keys": keys, "sum": np.zeros(shape), "min": np.full(shape, np.inf),
           "max": np.full(shape, -np.inf), "arg": np.full(shape, -1, dtype=np.int32),
           "n": np.zeros(shape, dtype=np.int32)}
    for side, at in ((a, ia), (b, ib)):
        out["sum"][at] += side["sum"]
        out["n"][at] += side["n"]
        out["min"][at] = np.minimum(out["min"][at], side["min"])
        higher = side["max"] > out["max"][at]
        out["max"][at] = np.where(higher, side["max"], out["max"][at])
        out["arg"][at] = np.where(higher, side["arg"], out["arg"][at])
    return out


def rank_values(base: np.ndarray, rank: int, world: int) -> np.ndarray:
    rng = np.random.default_rng(rank)
    v = base * (1 + rank / world) * rng.uniform(0.95, 1.05, size=base.shape)
    v[:, :2] = np.round(v[:, :2])  # time (ns) and count: integers, as the writer records them
    return v


def reduce_ranks(world: int, frames: int, check: bool) -> dict:
    """Every rank's summary made and combined pairwise; time of the combines, rank 0's path,
    the partials alive at most, and (check) the pairwise sum against the rank-order sum."""
    rng = np.random.default_rng(0)
    keys = rng.choice(2**62, size=frames, replace=False).astype(np.int64)
    base = rng.uniform(1e3, 1e6, size=(frames, len(METRICS)))
    combine(summary(keys, base, 0), summary(keys, base, 1))  # numpy's first calls: not timed
    stack: list[tuple[int, dict]] = []  # (level, partial): a binary counter over the ranks
    combine_s, path_s, alive, made_s = 0.0, 0.0, 0, 0.0
    ordered = np.zeros_like(base) if check else None
    for rank in range(world):
        t = time.perf_counter()
        values = rank_values(base, rank, world)
        part = (0, summary(keys, values, rank))
        made_s += time.perf_counter() - t
        if ordered is not None:
            ordered += values[np.argsort(keys)]
        while stack and stack[-1][0] == part[0]:
            level, left = stack.pop()
            t = time.perf_counter()
            part = (level + 1, combine(left, part[1]))
            took = time.perf_counter() - t
            combine_s += took
            if rank == 2 ** (level + 1) - 1:  # rank 0 takes this partial: its round level
                path_s += took
        stack.append(part)
        alive = max(alive, len(stack) + 1)
    assert len(stack) == 1, "a power-of-two world"
    out = stack[0][1]
    one = sum(x.nbytes for x in summary(keys, base, 0).values())
    result = {"combine_s": combine_s, "path_s": path_s, "make_s": made_s, "alive": alive,
              "summary_mb": one / 1e6, "rounds": int(np.log2(world))}
    if ordered is not None:
        diff = np.abs(out["sum"] - ordered) / np.maximum(np.abs(ordered), 1e-300)
        result["max_rel_diff"] = [float(diff[:, j].max()) for j in range(len(METRICS))]
        result["time_exact"] = bool((out["sum"][:, :2] == ordered[:, :2]).all())
        assert (out["n"] == world).all() and (out["arg"] >= 0).all()
    return result


# -- the viewer's merge of files ----------------------------------------------------------------
def merge_files_child(folder: str) -> None:
    """Run in a child: read and merge the folder's files; print time and peak RSS."""
    from proton.viewer import ranks

    t0 = time.perf_counter()
    found, union, _ = ranks.read(ranks.expand([folder]))
    t1 = time.perf_counter()
    ranks.merge(found, union)
    t2 = time.perf_counter()
    print(json.dumps({"read_s": t1 - t0, "merge_s": t2 - t1,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def baseline_rss() -> float:
    """Peak RSS of a child that imports the viewer's merge and does nothing."""
    code = ("import resource, proton.viewer.ranks, hatchet; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout)


def merge_files(world: int, frames: int) -> dict:
    folder = tempfile.mkdtemp(prefix="proton-scale-")
    try:
        doc = big_profile(frames)
        for r in range(world):
            with open(os.path.join(folder, f"job.rank{r}.hatchet"), "w") as f:
                json.dump(scaled(doc, r, world), f)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        done = subprocess.run([sys.executable, __file__, "--child", folder],
                              capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"merge failed: {done.stderr.strip()[-500:]}")
        out = json.loads(done.stdout.strip().splitlines()[-1])
        out.update(mb=size / 1e6, frames=count(doc[0]))
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def reduce_child(world: int, frames: int) -> dict:
    """The reduction in a child too, so its peak RSS is its own."""
    done = subprocess.run([sys.executable, __file__, "--reduce-child", f"{world},{frames}"],
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"reduction failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1024,4096")
    ap.add_argument("--frames", default="200,5000")
    ap.add_argument("--files", default="256x200,1024x200,4096x200,1024x5000",
                    help="RANKSxFRAMES of each file merge")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--reduce-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return merge_files_child(args.child)
    if args.reduce_child:
        world, frames = map(int, args.reduce_child.split(","))
        out = reduce_ranks(world, frames, check=True)
        out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out))
        return None
    base = baseline_rss()
    numpy_base = float(subprocess.run(
        [sys.executable, "-c", "import resource, numpy; "
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"],
        capture_output=True, text=True, check=True).stdout)
    print(f"baseline peak RSS: viewer imported {base:.0f} MB, numpy alone {numpy_base:.0f} MB")
    print("| approach | ranks | frames | MB of files | time s | peak RSS over baseline MB | "
          "per rank |")
    print("|---|---|---|---|---|---|---|")
    for size in args.files.split(","):
        world, frames = map(int, size.split("x"))
        got = merge_files(world, frames)
        print(f"| files: read + merge (child) | {world:,} | {got['frames']:,} | "
              f"{got['mb']:.0f} | {got['read_s'] + got['merge_s']:.2f} (read "
              f"{got['read_s']:.2f}, merge {got['merge_s']:.2f}) | "
              f"{got['rss_mb'] - base:,.0f} | all on one machine |", flush=True)
    for frames in map(int, args.frames.split(",")):
        for world in map(int, args.ranks.split(",")):
            got = reduce_child(world, frames)
            print(f"| reduction compute only, {len(METRICS)} metrics | {world:,} | {frames:,} | "
                  f"- | all {world - 1:,} combines {got['combine_s']:.2f}; rank 0's "
                  f"{got['rounds']} {got['path_s'] * 1e3:.1f} ms | "
                  f"{got['rss_mb'] - numpy_base:,.0f} ({got['alive']} partials alive) | "
                  f"2 summaries of {got['summary_mb']:.2f} MB; pairwise sums against rank "
                  f"order: time and count {'equal' if got['time_exact'] else 'DIFFER'}, "
                  f"float metrics within {max(got['max_rel_diff'][2:]):.1e} |", flush=True)
    return None


if __name__ == "__main__":
    main()
