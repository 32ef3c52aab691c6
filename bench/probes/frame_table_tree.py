"""What issue 62's frame table would buy: the tree view of a profile drawn from arrays (each
frame's parent, name and metric columns) without hatchet's GraphFrame, beside proton-viewer's
tree of the same file, each in a process of its own, wall and CPU seconds.

    python bench/probes/frame_table_tree.py PROFILE.hatchet [--repeat 3]

A probe, not the viewer: it reads a checked file (no bounds, no vectors, no notes), sums
`time (ns)` over subtrees, sorts each frame's children by it and writes `time (ms)` and the
guides as the viewer's tree does. Its rows are compared with the viewer's `-m time/ms` rows
(the same text, or the first that differs) so the figure is for the same work.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

PROBE = r'''
import json, sys
import numpy as np

def main(path):
    with open(path) as f:
        root = json.load(f)[0]
    names, parents, own = [], [], []
    stack = [(root, -1)]
    while stack:  # pre-order, children in file order
        node, parent = stack.pop()
        names.append(node["frame"]["name"])
        parents.append(parent)
        own.append(node["metrics"].get("time (ns)", np.nan))
        at = len(names) - 1
        stack.extend((child, at) for child in reversed(node["children"]))
    parent = np.array(parents)
    inc = np.array(own, dtype=float)
    has = ~np.isnan(inc)
    inc[~has] = -0.0
    for i in range(len(inc) - 1, 0, -1):  # children after parents: sum backwards
        p = parent[i]
        inc[p] += inc[i]
        has[p] |= has[i]
    inc[~has] = np.nan
    kids = [[] for _ in names]
    for i in range(1, len(names)):
        kids[parent[i]].append(i)
    key = np.where(np.isnan(inc), np.inf, -inc)
    ms = inc * 1e-6  # as the viewer scales time/ms
    cells = [format(v, ",.3f") if v == v else "" for v in ms.tolist()]
    width = max(len("time (ms)"), max(map(len, cells)))
    out = ["time (ms)".rjust(width) + "  name"]
    stack = [(0, "", None)]
    while stack:
        i, above, last = stack.pop()
        guide = "" if last is None else above + ("└─ " if last else "├─ ")
        out.append(cells[i].rjust(width) + "  " + guide + names[i])
        below = "" if last is None else above + ("   " if last else "│  ")
        order = sorted(kids[i], key=key.__getitem__)
        if order:
            stack.append((order[-1], below, True))
            stack.extend((k, below, False) for k in reversed(order[:-1]))
    sys.stdout.write("\n".join(out) + "\n")

main(sys.argv[1])
'''


def run(argv: list[str], out: str) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of `argv` in a child, its stdout to `out`."""
    before = os.times()
    start = time.perf_counter()
    with open(out, "w") as f:
        subprocess.run(argv, stdout=f, stderr=subprocess.DEVNULL, check=True,
                       env={**os.environ, "COLUMNS": "200"})
    wall = time.perf_counter() - start
    after = os.times()
    return wall, (after.children_user - before.children_user
                  + after.children_system - before.children_system)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    probe = [sys.executable, "-c", PROBE, args.profile]
    viewer = [sys.executable, "-c", "from proton.viewer.cli import main; main()",
              "-m", "time/ms", args.profile]
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeat):
        for name, argv in (("frame table", probe), ("proton-viewer", viewer)):
            got = run(argv, f"/tmp/frame_table_{name.replace(' ', '_')}.txt")
            best[name] = min(best.get(name, got), got)
    for name, (wall, cpu) in best.items():
        print(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU (best of {args.repeat})")
    mine = open("/tmp/frame_table_frame_table.txt").read().splitlines()
    theirs = [line for line in open("/tmp/frame_table_proton-viewer.txt").read().splitlines()
              if not line.startswith("note:")]
    same = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
    print("rows: the same text" if same is None and len(mine) == len(theirs) else
          f"rows differ from line {same}: {mine[same]!r} / {theirs[same]!r}" if same is not None
          else f"rows: {len(mine)} against the viewer's {len(theirs)}")


if __name__ == "__main__":
    main()
