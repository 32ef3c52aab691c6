"""PC samples, from CUPTI's drained columns to metrics on kernel and source-line nodes.

No CUPTI here (tests replay drained samples into it). Samples are counted per
(path, cubin CRC, function, PC offset, stall reason) while the session runs: a bounded table,
since a program has finitely many PCs. At finalize each PC gets its source line, and counts go to
the kernel nodes of the session:
  * exact mode (serialize=1) knows the launch's path: its samples go to that kernel node;
  * continuous mode knows only the function: its samples are split over the function's kernel
    nodes in proportion to the GPU time each spent running it (largest remainder, so every
    count stays a whole number and each node's stall metrics still sum to its stalled samples).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..format import NUM_SAMPLES, NUM_STALLED, STALLED_PREFIX

CUPTI_STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
_TRITON_SPELLING = {"no_instructions": "no_instruction"}
"""Where Triton's Proton names a reason other than CUPTI's suffix (its files and ours must match)."""

# lines(crc, function name, pc offset) -> (file, line), or a sentence saying why there is none
Lines = Callable[[int, str, int], "tuple[str, int] | str"]
# kernel_nodes(path or None, function name) -> [(kernel node id, weight)]; None: every path
KernelNodes = Callable[["int | None", str], "list[tuple[int, float]]"]


def metric_name(reason: str) -> tuple[str, bool]:
    """CUPTI's reason name -> (metric name as Triton's Proton writes it, a _not_issued variant).

    'smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued' -> ('stalled_long_scoreboard', True)
    """
    short = reason.removeprefix(CUPTI_STALL_PREFIX)
    not_issued = short.endswith("_not_issued")
    short = short.removesuffix("_not_issued")
    return STALLED_PREFIX + _TRITON_SPELLING.get(short, short), not_issued


@dataclass(slots=True)
class Attributed:
    """Samples of one (kernel node, source line) with their counts per stall reason."""

    kernel: int
    line: tuple[str, int] | None
    """(file, line); None when the PC has no line (then `why` says why)."""
    function: str
    counts: dict[int, int]
    """CUPTI stall reason index -> samples."""
    why: str = ""


class SampleTable:
    """Samples counted while a session runs."""

    def __init__(self, reasons: dict[int, str]) -> None:
        """reasons: CUPTI's stall reason index -> its name (the configured ones)."""
        self.columns = {index: metric_name(name) for index, name in reasons.items()}
        self.metric_names = sorted({name for name, _ in self.columns.values()})
        self.counts: dict[tuple[int | None, int, int, int, int], int] = {}
        """(path or None, crc, function index, pc offset, reason index) -> samples."""
        self.functions: dict[tuple[int, int], str] = {}
        """(crc, function index) -> function name."""

    def add(self, drained: Iterable, path: int | None = None) -> None:
        """Count drained samples (cupti_pcsampling.Drained); `path` is the launch's call path
        in exact mode, None in continuous mode."""
        counts = self.counts
        for d in drained:
            self.functions.update(d.names)
            for key in zip(d.crc.tolist(), d.function.tolist(), d.offset.tolist(),
                           d.reason.tolist(), d.samples.tolist()):
                full = (path, *key[:4])
                counts[full] = counts.get(full, 0) + key[4]

    @property
    def samples(self) -> int:
        return sum(self.counts.values())

    def since(self, base: dict | None) -> "SampleTable":
        """The samples counted after the counts were `base` (a copy of `counts` taken then):
        a session that started beside a sampling one takes only its own stretch."""
        if not base:
            return self
        out = SampleTable({})
        out.columns, out.metric_names, out.functions = self.columns, self.metric_names, \
            self.functions
        out.counts = {k: n - base.get(k, 0) for k, n in self.counts.items()
                      if n > base.get(k, 0)}
        return out

    def attribute(self, lines: Lines, kernel_nodes: KernelNodes) -> list[Attributed]:
        """Every sample on its kernel node and source line."""
        by_line: dict[tuple, dict[int, int]] = {}
        why: dict[tuple, str] = {}
        resolved: dict[tuple[int, str, int], tuple[str, int] | str] = {}
        for (path, crc, index, offset, reason), n in self.counts.items():
            function = self.functions.get((crc, index), "<unknown>")
            pc = (crc, function, offset)
            line = resolved.get(pc)
            if line is None:
                line = resolved[pc] = lines(crc, function, offset)
            key: tuple
            if isinstance(line, str):
                key = (path, function, None)
                why.setdefault(key, line)
            else:
                key = (path, function, line)
            group = by_line.setdefault(key, {})
            group[reason] = group.get(reason, 0) + n
        out = []
        for (path, function, line), counts in by_line.items():
            nodes = kernel_nodes(path, function)
            shares: list[dict[int, int]] = [dict() for _ in nodes]
            for reason, n in counts.items():
                for share, part in zip(shares, split(n, [w for _, w in nodes])):
                    if part:
                        share[reason] = part
            for (kernel, _), share in zip(nodes, shares):
                if share:
                    out.append(Attributed(kernel, line, function, share,
                                          why.get((path, function, line), "")))
        return out

    def metrics(self, counts: dict[int, int]) -> dict[str, int]:
        """num_samples, num_stalled_samples and every stalled_<reason> (0 included, so every
        PC node has the same columns) for one group's counts."""
        out = dict.fromkeys([NUM_SAMPLES, NUM_STALLED, *self.metric_names], 0)
        for reason, n in counts.items():
            name, not_issued = self.columns.get(reason, ("stalled_unknown", False))
            out[NUM_SAMPLES] += n
            if not not_issued:  # as Triton's Proton: a sample, but not a stalled one
                out[NUM_STALLED] += n
                out[name] = out.get(name, 0) + n
        return out


def split(n: int, weights: list[float]) -> list[int]:
    """n split in proportion to weights, in whole numbers that sum to n (largest remainder)."""
    if len(weights) == 1:
        return [n]
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(weights), float(len(weights))
    exact = [n * w / total for w in weights]
    out = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: out[i] - exact[i])
    for i in by_remainder[: n - sum(out)]:
        out[i] += 1
    return out
