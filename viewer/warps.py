"""proton-viewer --warps: kernel scopes (backend="instrumentation") across warps.

One row per scope under its kernel: the warp events it sums over, cycles per event (min,
median, max over warps and CTAs), the mean per warp (normalized_cycles) and the imbalance,
max / median: 1.0 when every warp spends the same, 2.0 when the slowest warp takes twice
the typical one (load imbalance, or a warp-specialised role doing more).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..format import (CHILDREN_KEY, CYCLES, FRAME_KEY, METRICS_KEY, NAME_KEY, NORMALIZED_CYCLES,
                      WARP_CYCLES, WARP_EVENTS)
from .errors import ViewerError


@dataclass(frozen=True, slots=True)
class ScopeRow:
    path: str
    """kernel > scope > ..., from the kernel down."""
    events: int
    low: float
    median: float
    high: float
    cycles: float
    normalized: float

    @property
    def imbalance(self) -> float:
        return self.high / self.median if self.median else 0.0


def rows(root: dict) -> list[ScopeRow]:
    """Every node that carries warp statistics, in the tree's order (iterative: any depth)."""
    out: list[ScopeRow] = []
    # (node, its name with its kernel's and scopes' above it, whether it is below a kernel)
    stack: list[tuple[dict, tuple[str, ...], bool]] = [
        (child, (), False) for child in reversed(root.get(CHILDREN_KEY, []))]
    while stack:
        node, names, below_kernel = stack.pop()
        m = node.get(METRICS_KEY, {})
        name = node[FRAME_KEY][NAME_KEY]
        is_scope = bool(m.get(WARP_EVENTS)) and all(k in m for k in WARP_CYCLES)
        kept = (*names, name) if (is_scope or below_kernel) else (name,)
        if is_scope:
            _check_numbers(name, m)
            low, median, high = (float(m[k]) for k in WARP_CYCLES)
            out.append(ScopeRow(" > ".join(kept), int(m[WARP_EVENTS]), low, median, high,
                                float(m.get(CYCLES, 0)), float(m.get(NORMALIZED_CYCLES, 0))))
        for child in reversed(node.get(CHILDREN_KEY, [])):
            stack.append((child, kept, is_scope or below_kernel))
    return out


def _check_numbers(name: str, m: dict) -> None:
    """A scope's warp statistics are finite numbers (a file from elsewhere may say anything)."""
    for key in (WARP_EVENTS, *WARP_CYCLES, CYCLES, NORMALIZED_CYCLES):
        v = m.get(key, 0)
        if type(v) not in (int, float) or not math.isfinite(v):
            raise ViewerError(f"scope {name!r} has {key} = {str(v)[:40]!r}, not a finite "
                              "number; the profile is damaged (record it again)")


def render(found: list[ScopeRow]) -> str:
    if not found:
        raise ViewerError("the profile has no kernel scopes; record them with "
                          "proton.start(..., backend='instrumentation') and proton.language "
                          "scopes in the kernel")
    head = ("scope", "warp events", "min", "median", "max", "per warp", "imbalance")
    table = [head] + [(r.path, f"{r.events:,}", f"{r.low:,.0f}", f"{r.median:,.0f}",
                       f"{r.high:,.0f}", f"{r.normalized:,.0f}", f"{r.imbalance:.2f}x")
                      for r in found]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i])
                       for i, cell in enumerate(row)) for row in table]
    lines.insert(1, "-" * len(lines[0]))
    note = ("cycles per warp event (one warp's pass through the scope); per warp: all its "
            "cycles / (warps x CTAs), per launch, as Triton's normalized_cycles; "
            "imbalance: max / median")
    return "\n".join(lines) + "\n" + note + "\n"
