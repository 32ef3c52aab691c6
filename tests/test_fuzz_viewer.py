"""A few seconds of bench/fuzz_viewer.py (its big run is by hand): mutated fixtures, job files
and rank files shown by the viewer in capped forks, with no traceback, warning, hang or
memory error (issue 59: the fuzz's last word on job files)."""
from __future__ import annotations

import os
import random
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
SECONDS = 3.0
"""How long the runs may take in all (each file's views run to the end)."""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="runs each view in a fork")
def test_a_short_fuzz_of_trees_job_files_and_ranks_finds_nothing(tmp_path):
    sys.path.insert(0, BENCH)
    try:
        import fuzz_viewer
    finally:
        sys.path.remove(BENCH)
    from proton.viewer import deep

    made = deep.call(fuzz_viewer.make_files, 40, 59, str(tmp_path))
    assert {kind for _, kind in made} >= {"tree", "job", "ranks"}
    rng = random.Random(1)
    start, runs, bad = time.monotonic(), 0, []
    seen: dict[str, int] = {}
    for path, kind in sorted(made, key=lambda m: sum(k == m[1] for _, k in made[:made.index(
            m)])):  # each kind's first file, then each kind's second, ...
        if time.monotonic() - start > SECONDS and len(seen) >= 3:
            break
        seen[kind] = seen.get(kind, 0) + 1
        for view in fuzz_viewer.views_of(kind, rng, 0):
            got = fuzz_viewer.run_one(fuzz_viewer.view_args(view, path, str(tmp_path)),
                                      str(tmp_path))
            runs += 1
            if got["status"] != "ok":
                bad.append(f"{got['status']} {view} {path}: {got['text'][-500:]}")
    assert runs >= 6 and bad == [], "\n".join(bad)
