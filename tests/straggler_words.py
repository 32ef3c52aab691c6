"""A straggler finding's words read back (--diagnose's evidence: viewer/diagnose.py's _late),
for the tests and bench/stragglers_runs.py."""
from __future__ import annotations

import re

LATE = re.compile(r"rank (\d+) arrives last at the collectives of scope (\S+) \((\d+) steps\): "
                  r".* waiting for it; rank \1 is slow on the (host|GPU)")
HOST = re.compile(r"it spends \+([\d.]+) ms a step over the others in scope (\S+) \((.*?)\)"
                  r".*: costs ([\d.]+) ms a step")
GPU = re.compile(r"its kernels in scope (\S+) take (?:\+([\d.]+) ms a step over|no more than) "
                 r"the others'.*: costs ([\d.]+) to ([\d.]+) ms a step")


def read(evidence: str) -> dict | None:
    """rank, step, steps, cause, scope, excess_ms (host time or kernel time there), cost_ms
    (a GPU-slow rank's: the least) and high_ms (a GPU-slow rank's most); None for other words."""
    late = LATE.search(evidence)
    if late is None:
        return None
    out = {"rank": int(late[1]), "step": late[2], "steps": int(late[3]), "cause": late[4]}
    host, gpu = HOST.search(evidence), GPU.search(evidence)
    if late[4] == "host" and host:
        out.update(scope=host[2], excess_ms=float(host[1]), what=host[3],
                   cost_ms=float(host[4]))
    elif late[4] == "GPU" and gpu:
        out.update(scope=gpu[1], excess_ms=float(gpu[2] or 0.0), cost_ms=float(gpu[3]),
                   high_ms=float(gpu[4]))
    return out
