"""Triton's Proton tutorials run under Triton's and ours: do they give the same tree?

Usage: python bench/tutorial_compare.py TRITON_DIR OURS_DIR NAME [NAME...]

Each NAME is a file both runs wrote (NAME.hatchet: the call tree; NAME.chrome_trace: the
events). A tree is compared as its set of call paths (frame names from ROOT down, with the
run's own folders, the parent of each DIR, taken out of python frames) and each path's kernel count (a launch configuration in a name, the autotuner's pick, left
out), and where paths differ, whether each kernel sits under the same parent (a
python-context tree's launch line); a trace as its
events' (name, category) counts. One line per file: `same`, or what differs.
Counts of launches that depend on timing (do_bench's repetitions) or chance (the dynamic net's
random depth) can differ between two runs of one implementation too, so they are shown, not
judged; the paths are judged.
"""
from __future__ import annotations

import collections
import json
import pathlib
import re
import sys


CONFIG = re.compile(r"<(\w+):[^>]*>")
"""A launch configuration in a kernel's name (matmul_<grid:64x1x1>_<warps:4>...): what the
autotuner picked, which differs from run to run."""


def tree_paths(data: list, folder: str) -> dict[tuple[str, ...], float]:
    """call path -> its kernels' count, from a .hatchet file's JSON."""
    out: dict[tuple[str, ...], float] = {}
    stack = [((), data[0])]
    while stack:
        trail, node = stack.pop()
        for child in node.get("children", []):
            name = CONFIG.sub(r"<\1:*>", child["frame"]["name"].replace(folder, "<run>"))
            path = trail + (name,)
            out[path] = out.get(path, 0) + child.get("metrics", {}).get("count", 0)
            stack.append((path, child))
    return out


def kernel_sites(paths: dict[tuple[str, ...], float]) -> set[tuple[str, str]]:
    """(parent frame, kernel) of every node with kernels: the line that launched each kernel,
    in a python-context tree."""
    return {(p[-2] if len(p) > 1 else "ROOT", p[-1]) for p, count in paths.items() if count}


def trace_events(data: dict | list) -> collections.Counter:
    events = data["traceEvents"] if isinstance(data, dict) else data
    return collections.Counter((e.get("name"), e.get("cat")) for e in events if e.get("ph") != "M")


def compare(triton_dir: pathlib.Path, ours_dir: pathlib.Path, name: str) -> str:
    a, b = triton_dir / name, ours_dir / name
    missing = [str(p) for p in (a, b) if not p.exists()]
    if missing:
        return f"{name}: not written: {', '.join(missing)}"
    ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
    if name.endswith(".hatchet"):
        pa, pb = tree_paths(ja, str(triton_dir.parent)), tree_paths(jb, str(ours_dir.parent))
        only_a, only_b = sorted(set(pa) - set(pb)), sorted(set(pb) - set(pa))
        counts = sum(pa.values()), sum(pb.values())
        head = f"{name}: {len(pa)} paths under Triton's, {len(pb)} under ours; kernels {counts[0]:g} vs {counts[1]:g}"
        if not only_a and not only_b:
            return head + ": same paths"
        if kernel_sites(pa) == kernel_sites(pb):
            head += ": every kernel under the same launch line, paths differ"
        lines = [head + f": {len(only_a)} paths only Triton's, {len(only_b)} only ours"]
        lines += ["    triton only: " + " > ".join(p) for p in only_a[:8]]
        lines += ["    ours only:   " + " > ".join(p) for p in only_b[:8]]
        return "\n".join(lines)
    ea, eb = trace_events(ja), trace_events(jb)
    head = f"{name}: {sum(ea.values())} events under Triton's, {sum(eb.values())} under ours"
    if ea == eb:
        return head + ": same events"
    diff = [(k, ea.get(k, 0), eb.get(k, 0)) for k in sorted(set(ea) | set(eb), key=str)
            if ea.get(k, 0) != eb.get(k, 0)]
    return "\n".join([head + ": differ"] + [f"    {k}: {x} vs {y}" for k, x, y in diff[:12]])


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    triton_dir, ours_dir = pathlib.Path(argv[0]), pathlib.Path(argv[1])
    for name in argv[2:]:
        print(compare(triton_dir, ours_dir, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
