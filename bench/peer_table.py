"""Triton's own Proton tests against ours: the short table from the peer runner's compare.txt.

Usage: python bench/peer_table.py COMPARE_TXT [DIFFERENCES]

COMPARE_TXT is what ../shared/peer-tests/triton-proton/compare.py printed (run_gpu.sh and
run_cpu.sh write it as results_*/compare.txt). Each test Triton passes and ours does not is
either a documented difference (bench/peer_differences.txt: `module.py::test  reason`, the same
list docs/compatibility.md's table gives) or a failure to fix; both are listed, with the
reason for the first.
"""
from __future__ import annotations

import ast
import pathlib
import re
import sys

DIFFERENCES = pathlib.Path(__file__).with_name("peer_differences.txt")


def read_differences(path: pathlib.Path) -> dict[str, str]:
    """test id -> why we differ, from lines `module.py::test[param]  reason` (# comments)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            test, _, reason = line.partition(" ")
            out[test] = reason.strip()
    return out


def read_compare(text: str) -> tuple[dict[str, dict[str, int]], list[str]]:
    """The per-run outcome counts and the tests passed by the first run and not the second."""
    counts, lost, in_lost = {}, [], False
    for line in text.splitlines():
        m = re.match(r"^(\S+) (\{.*\})$", line)
        if m:
            counts[m.group(1)] = ast.literal_eval(m.group(2))
            continue
        if line.startswith("passed under "):  # only the first run's passes the others lost
            in_lost = bool(counts) and line.startswith(f"passed under {next(iter(counts))},")
            continue
        if in_lost and line.startswith("    "):  # 3.9's runner adds " (how it ended)"
            lost.append(line.strip().split(" (")[0])
    return counts, lost


def table(compare: str, differences: dict[str, str]) -> str:
    counts, lost = read_compare(compare)
    runs = list(counts)
    if len(runs) < 2:
        return "peer suite: no comparison (did the runner reach compare.py?)"
    base, ours = runs[0], runs[-1]
    passed = counts[base].get("passed", 0)
    documented = [t for t in lost if t in differences]
    open_ = [t for t in lost if t not in differences]
    lines = [
        f"peer suite: {base} passed {passed}; {ours} passed {passed - len(lost)} of those, "
        f"{len(documented)} documented differences, {len(open_)} failing",
        f"  {base} {counts[base]}",
        f"  {ours} {counts[ours]}",
    ]
    lines += [f"  difference  {t}: {differences[t]}" for t in documented]
    lines += [f"  FAILING     {t}" for t in open_]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    compare = pathlib.Path(argv[0])
    if not compare.exists():
        print(f"peer suite: {compare} not found (the runner did not finish; see peer.log)")
        return 1
    diffs = read_differences(pathlib.Path(argv[1]) if len(argv) > 1 else DIFFERENCES)
    print(table(compare.read_text(), diffs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
