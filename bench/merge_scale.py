"""A job's profile at 1,024 and 4,096 ranks (issue 49): the viewer's merge of rank files against
the combine step of an in-job tree reduction, time and peak memory of each.

* files: P rank files written (bench/merge_ranks.py's tree, kernel times scaled per rank), then
  `ranks.read` + `ranks.merge` in a child process, its peak RSS from getrusage.
* reduction: the COMPUTE of the job's log2(P)-round reduction only (no process group, no
  messages): rank_merge.leaf of the tree once, each rank's partial made from it with its values
  scaled, combined with rank_merge.combine in one process as a binary counter over the ranks
  (the rounds' pairing: rank i takes i + 2^k's partial in round k), so at most log2(P) partials
  are alive; in the job each rank holds two at a time (its partial and the one it receives).
  `rank 0's` is rank 0's combines: one per round. Also checked: the sums equal rank_merge.reduce
  over the same values as a frames x ranks matrix (how the viewer merges files).

Usage: python bench/merge_scale.py [--ranks 1024,4096] [--frames 200,5000]
                                   [--files 256x200,1024x200,4096x200,256x5000,1024x5000]
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



# -- the reduction's combine step ---------------------------------------------------------------
def rank_partial(base, rank: int, world: int):
    """Rank `rank`'s partial: the base tree's leaf with its times scaled as merge_ranks does
    (integers) and its float metrics by a rank-dependent factor (so the order of the sums shows)."""
    import copy

    import numpy as np

    from proton import rank_merge

    part = copy.copy(base)
    rng = np.random.default_rng(rank)
    part.lo = rank
    part.paths, part.frames, part.facts = list(base.paths), list(base.frames), list(base.facts)
    part.clash = [set() for _ in base.paths]
    part.few = [[rank]] * len(base.paths)
    part.members = [rank]
    part.index = dict(base.index)
    part.stats, part.own = {}, {}
    for metric, st in base.stats.items():
        v = st[rank_merge.SUM] * (1 + rank / world) * rng.uniform(0.95, 1.05, size=len(st[0]))
        if metric in base.ints:
            v = np.round(v)
        r = np.full(len(v), rank, dtype=np.int64)
        part.stats[metric] = [v, v.copy(), v.copy(), r, st[rank_merge.N].copy(), r.copy()]
    for metric, (total, has) in base.own.items():
        part.own[metric] = [total.copy(), has.copy()]
    return part


def reduce_ranks(world: int, frames: int, check: bool) -> dict:
    """Every rank's partial (rank_merge, as the job makes them) combined with rank_merge.combine
    in the job's order (a binary counter: rank i takes i + 2^k's partial in round k); time of
    the combines, rank 0's path, the partials alive at most, and (check) that the sums equal
    rank_merge.reduce over the same values as a frames x ranks matrix (the viewer's way)."""
    import pickle

    from proton import rank_merge

    base = rank_merge.leaf(big_profile(frames)[0], 0)
    stack: list[tuple[int, object]] = []
    combine_s, path_s, alive, made_s = 0.0, 0.0, 0, 0.0
    metric = "time (ns)"
    for rank in range(world):
        t = time.perf_counter()
        part = (0, rank_partial(base, rank, world))
        made_s += time.perf_counter() - t
        while stack and stack[-1][0] == part[0]:
            level, left = stack.pop()
            t = time.perf_counter()
            part = (level + 1, rank_merge.combine(left, part[1]))
            took = time.perf_counter() - t
            combine_s += took
            if rank == 2 ** (level + 1) - 1:  # rank 0 takes this partial: its round level
                path_s += took
        stack.append(part)
        alive = max(alive, len(stack) + 1)
    assert len(stack) == 1, "a power-of-two world"
    out = stack[0][1]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the check's matrix
    result = {"rss_mb": rss, "combine_s": combine_s, "path_s": path_s, "make_s": made_s, "alive": alive,
              "summary_mb": len(pickle.dumps(base)) / 1e6, "rounds": int(np.log2(world)),
              "frames": len(base.paths)}
    if check:  # each rank's values made again (the same seeds): not held during the reduction
        matrix = np.column_stack([rank_partial(base, rank, world).stats[metric][rank_merge.SUM]
                                  for rank in range(world)])
        labels = np.arange(world)
        viewer = rank_merge.reduce(rank_merge.leaves(matrix, labels))
        result["same_as_viewer"] = all(
            np.array_equal(a, b) for a, b in zip(out.stats[metric], viewer))
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
    ap.add_argument("--files", default="256x200,1024x200,4096x200,256x5000,1024x5000",
                    help="RANKSxFRAMES of each file merge")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--reduce-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return merge_files_child(args.child)
    if args.reduce_child:
        world, frames = map(int, args.reduce_child.split(","))
        out = reduce_ranks(world, frames, check=True)
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
            print(f"| reduction compute only (rank_merge.combine) | {world:,} | "
                  f"{got['frames']:,} | "
                  f"- | all {world - 1:,} combines {got['combine_s']:.2f}; rank 0's "
                  f"{got['rounds']} {got['path_s'] * 1e3:.1f} ms | "
                  f"{got['rss_mb'] - numpy_base:,.0f} ({got['alive']} partials alive) | "
                  f"2 partials of {got['summary_mb']:.2f} MB (pickled); the same digits as "
                  f"the viewer's frames x ranks reduction: "
                  f"{'yes' if got['same_as_viewer'] else 'NO'} |", flush=True)
    return None


if __name__ == "__main__":
    main()
