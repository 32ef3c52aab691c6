"""Instruction (PC) samples of one kernel, summed per source line over all its call paths.

A `mode="pcsampling"` profile puts `num_samples`, `num_stalled_samples` and `stalled_<reason>`
on each kernel node (samples mapped to no line) and on its children named
`/abs/file.py:LINE@FUNCTION` (one per source line). A kernel whose lines could not be read
keeps every sample on its own node, and its frame says why under `no_lines`.

Derive, then render: this module returns data; source_view.py draws it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd

from ..format import (COPY_FRAME, COUNT, DEVICE_TYPE, NO_LINES, NUM_SAMPLES, NUM_STALLED,
                      STALLED_PREFIX, TIME)
from .errors import ViewerError, listing
from .graph import frame_keys, nodes
from .names import cut_of, readable, same_name
from .reader import Profile
from .select import python_frame
from .source_roots import SourceRoots

MAX_LINE_DIGITS = 9
"""A line number of more digits is no source line (and Python reads at most 4,300)."""
ISSUING = "selected"
"""The sampling reason of a warp that issued: CUPTI lists it among the stall reasons and
counts it in num_stalled_samples; here it is counted as issuing."""


@dataclass(slots=True)
class Samples:
    """PC samples of one place (a kernel, or one of its source lines)."""

    samples: float = 0.0
    """Every sample, issued or not."""
    stalled: float = 0.0
    """Samples with a stall reason; the reasons below sum to it."""
    stalls: dict[str, float] = field(default_factory=dict)
    """Reason (without `stalled_`) -> samples."""

    def add(self, other: Samples) -> None:
        self.samples += other.samples
        self.stalled += other.stalled
        for reason, n in other.stalls.items():
            self.stalls[reason] = self.stalls.get(reason, 0.0) + n

    def top_stalls(self, n: int) -> list[tuple[str, float]]:
        """Up to `n` reasons, most samples first, each with its share of the stalled samples."""
        if not self.stalled:
            return []
        ranked = sorted(((r, v) for r, v in self.stalls.items() if v > 0),
                        key=lambda rv: (-rv[1], rv[0]))
        return [(r, v / self.stalled) for r, v in ranked[:n]]


@dataclass(slots=True)
class LineSamples:
    """The samples of one source line, over every call path of the kernel."""

    file: str
    line: int
    function: str
    """The function the frame names (the kernel's, for Triton kernels)."""
    counts: Samples


@dataclass(slots=True)
class KernelSamples:
    """One kernel's samples: totals, per line, and what could not be mapped to a line."""

    name: str
    paths: int
    """Call paths (tree nodes) the kernel ran under; their samples are summed."""
    total: Samples
    """All samples, the unmapped ones included."""
    unmapped: float
    """Samples on the kernel nodes themselves (no source line)."""
    lines: list[LineSamples]
    """By (file, line), most samples first."""
    no_lines: list[str]
    """Why some call paths have no line children (their frames' `no_lines`)."""
    carried: dict[str, str] = field(default_factory=dict)
    """The text the profile carries of the files its lines name (Profile.sources)."""


class _Columns:
    """The sample metrics of a profile as dicts keyed by hatchet node (own values)."""

    def __init__(self, prof: Profile) -> None:
        df = prof.gf.dataframe
        names = [c for c in df.columns
                 if c in (NUM_SAMPLES, NUM_STALLED) or c.startswith(STALLED_PREFIX)]
        names = [c for c in names if not c.endswith(" (inc)")]
        self.values = {c: pd.to_numeric(df[c], errors="coerce").to_dict() for c in names}

    def of(self, node) -> Samples | None:
        """The node's samples; None when it carries no `num_samples`."""
        own = self.values.get(NUM_SAMPLES, {}).get(node)
        if own is None or math.isnan(own):
            return None
        stalls = {}
        for column, values in self.values.items():
            v = values.get(node)
            if column.startswith(STALLED_PREFIX) and v is not None and not math.isnan(v) and v:
                stalls[column[len(STALLED_PREFIX):]] = v
        stalled = self.values.get(NUM_STALLED, {}).get(node)
        if stalled is None or math.isnan(stalled):
            stalled = sum(stalls.values())
        # "selected" is the warp issuing an instruction, not a stall (as Nsight Compute counts)
        stalled -= stalls.pop(ISSUING, 0.0)
        return Samples(own, stalled, stalls)


def kernel_nodes(prof: Profile, columns: _Columns | None = None) -> list:
    """Every kernel node of the profile: those with `device_type` or PC samples, that are no
    `file:line@function` frame, nor a copy or set (which runs no instructions to sample)."""
    columns = columns or _Columns(prof)
    df = prof.gf.dataframe
    device = df[DEVICE_TYPE].dropna().to_dict() if DEVICE_TYPE in df else {}
    out = []
    for node in prof.gf.graph.traverse():
        name = node.frame.get("name", "")
        if python_frame(name) or COPY_FRAME.match(name) or node in prof.gf.graph.roots:
            continue
        if node in device or columns.of(node) is not None:
            out.append(node)
    return out


def find_kernel(prof: Profile, pattern: str, style: str = "folded") -> KernelSamples:
    """The samples of the kernel `pattern` names: exactly (as the file has it, as any `--names`
    style shows it, or as `c++filt` prints it; names.same_name), else as a regex searched in
    its raw and demangled names.
    Errors list kernel names as `style` shows them.

    Raises ViewerError when no kernel or several distinct kernels match, or the kernel has no
    PC samples (saying why).

    Usage:
        prof = load("run.hatchet")
        k = find_kernel(prof, "matmul")
        print(k.total.samples, k.lines[0].line)
    """
    columns = _Columns(prof)
    kernels = kernel_nodes(prof, columns)
    raw = sorted({n.frame.get("name", "") for n in kernels})
    # a name as shown (or as c++filt prints it) is taken literally, before any regex reading
    matched = [pattern] if pattern in raw else [n for n in raw if same_name(pattern, n)]
    matched = matched or [n for n in raw if cut_of(pattern, n)]
    if not matched:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ViewerError(f"--source {pattern!r} is neither a kernel's name nor a valid "
                              f"regular expression: {exc}") from None
        matched = [n for n in raw if regex.search(n) or regex.search(readable(n, "full"))]
    shown = [readable(n, style) for n in matched or raw]
    if not matched and COPY_FRAME.match(pattern):
        raise ViewerError(f"{pattern!r} is a copy or set, not a kernel: PC sampling samples "
                          f"kernels' instructions only; kernels in this profile: "
                          f"{listing(shown)}")
    if not matched:
        raise ViewerError(f"no kernel named or matching {pattern!r}; kernels in this "
                          f"profile: {listing(shown)}")
    if len(matched) > 1:
        raise ViewerError(f"--source {pattern!r} matches {len(matched)} kernels: "
                          f"{listing(shown)}; give one exact name or a narrower regex")
    name = matched[0]
    nodes = [n for n in kernels if n.frame.get("name", "") == name]
    found = _collect(columns, nodes, name)
    if found is None:
        raise ViewerError(_why_unsampled(prof, columns, kernels, nodes, readable(name, style)))
    found.carried = {ls.file: prof.sources[ls.file] for ls in found.lines
                     if ls.file in prof.sources}
    return found


CUPTI_GAVE_NONE = ("so CUPTI gave none for it (a module loaded after an earlier profiling "
                   "session of the process ended gets none: start one session before its "
                   "first launch)")


def _why_unsampled(prof: Profile, columns: _Columns, kernels: list, nodes: list,
                   name: str) -> str:
    """One line: why a kernel has no PC samples. The profile has none at all, or the kernel
    ran too briefly for the sampler, or CUPTI gave none for it."""
    if not columns.values:
        return (f"the profile has no PC samples (kernel {name!r} included); profile with "
                "`proton -m pcsampling` to sample its instructions")
    sampled = {n.frame.get("name", "") for n in kernels if _collect(columns, [n], "")}
    head = f"kernel {name!r} has no PC samples"
    if not sampled:
        return f"{head}, nor has any kernel of this sampled profile, {CUPTI_GAVE_NONE}"
    head += f", though {len(sampled)} other kernel{'s' * (len(sampled) != 1)} here have them"
    df = prof.gf.dataframe
    if TIME not in df:
        return head
    time = pd.to_numeric(df[TIME], errors="coerce").fillna(0)
    ns = float(sum(time[n] for n in nodes))
    least = min(sum(time[n] for n in kernels if n.frame.get("name", "") == k) for k in sampled)
    launches = float(pd.to_numeric(df[COUNT], errors="coerce").fillna(0)[nodes].sum()) \
        if COUNT in df else None
    launches = int(launches) if launches is not None and math.isfinite(launches) else None
    ran = (f"its {launches:,} launch{'es' * (launches != 1)} ran" if launches is not None
           else "it ran") + f" {ns / 1e6:,.3f} ms in all"
    if ns < least:
        return (f"{head}: {ran}, less than any sampled kernel here (the least, "
                f"{least / 1e6:,.3f} ms): too little for the sampler, which samples each SM "
                "once every 2**N cycles; sample more often (-m pcsampling:interval=N, N under "
                "the default 10) or run it longer")
    return f"{head}: {ran}, no less than a sampled kernel here, {CUPTI_GAVE_NONE}"


def _collect(columns: _Columns, nodes: list, name: str) -> KernelSamples | None:
    """The samples of `nodes`, the call paths of kernel `name`; None when none has any."""
    total, unmapped = Samples(), 0.0
    by_line: dict[tuple[str, int], LineSamples] = {}
    reasons: list[str] = []
    sampled = False
    for node in nodes:
        own = columns.of(node)
        if own is not None:
            sampled = True
            total.add(own)
            unmapped += own.samples
        reason = node.frame.get(NO_LINES)
        if reason and reason not in reasons:
            reasons.append(reason)
        for child in node.children:
            m = python_frame(child.frame.get("name", ""))
            counts = columns.of(child) if m else None
            if m is None or counts is None:
                continue
            sampled = True
            total.add(counts)
            if len(m["line"]) > MAX_LINE_DIGITS:  # no file has that line: not mapped
                unmapped += counts.samples
                continue
            key = (m["file"], int(m["line"]))
            if key not in by_line:
                by_line[key] = LineSamples(key[0], key[1], m["function"], Samples())
            by_line[key].counts.add(counts)
    if not sampled:
        return None
    lines = sorted(by_line.values(), key=lambda ls: (-ls.counts.samples, ls.file, ls.line))
    return KernelSamples(name, len(nodes), total, unmapped, lines, reasons)


@dataclass(slots=True)
class SourceFile:
    """The sampled lines of one file, with its text when this machine has it."""

    path: str
    samples: float
    lines: dict[int, LineSamples]
    text: str | None
    """None when the file is not shown (see `why`)."""
    why: str | None = None
    """Why the text is not shown, in one line (not on this machine; outside the source roots)."""
    read_from: str | None = None
    """Where the text came from: CARRIED (the profile), else the file read on this machine."""


CARRIED = "the profile"
"""SourceFile.read_from for text the profile carries (the code that ran)."""


def source_files(kernel: KernelSamples, roots: SourceRoots) -> list[SourceFile]:
    """The kernel's files, their text the one the profile carries (the code that ran), else
    read only under `roots`: the one that defines the kernel's function first, then by
    samples.

    (With inlined helpers from other files, the hottest file need not be the kernel's own.)"""
    by_file: dict[str, SourceFile] = {}
    for ls in kernel.lines:
        sf = by_file.setdefault(ls.file, SourceFile(ls.file, 0.0, {}, None))
        sf.samples += ls.counts.samples
        sf.lines[ls.line] = ls
    functions = {ls.function for ls in kernel.lines}
    for sf in by_file.values():
        carried = kernel.carried.get(sf.path)
        sf.text, sf.why, sf.read_from = (carried, None, CARRIED) if carried is not None \
            else roots.find(sf.path)
    defines = {sf.path for sf in by_file.values() if sf.text is not None and any(
        re.search(rf"^\s*(async\s+)?def\s+{re.escape(f)}\s*\(", sf.text, re.M)
        for f in functions)}
    return sorted(by_file.values(), key=lambda sf: (sf.path not in defines, -sf.samples, sf.path))


def no_lines_notes(prof: Profile) -> list[tuple[str, bool, list[str]]]:
    """(reason, some lines mapped, the distinct kernels' names as the file has them) for
    kernels with samples that have no source line, in the order the tree first meets them.
    `some lines mapped`: the kernel also has line children (only part of its samples lack a
    line)."""
    if NO_LINES not in frame_keys(prof.gf.graph) \
            or not any(n.frame.attrs.get(NO_LINES) for n in nodes(prof.gf.graph)):
        return []  # most profiles: no sample columns to read, no sorted walk
    marked = [n for n in prof.gf.graph.traverse() if n.frame.get(NO_LINES)]
    columns = _Columns(prof)
    kernels: dict[tuple[str, bool], dict[str, None]] = {}
    for node in marked:
        counts = columns.of(node)
        if counts is not None and counts.samples > 0:
            partial = any(python_frame(c.frame.get("name", "")) for c in node.children)
            kernels.setdefault((node.frame.get(NO_LINES), partial), {})[
                node.frame.get("name", "")] = None
    return [(reason, partial, list(names)) for (reason, partial), names in kernels.items()]

