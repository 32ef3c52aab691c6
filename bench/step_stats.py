"""The statistics and tables of bench/step_cost.py (issue 37): each mode against CUPTI's floor,
with the host's noise kept out of the comparison, and a verdict against the issue's targets.

A worker process runs rounds of short phases (bare, floor, shadow, ...), every mode once a
round in a rotating order, so the host's slow drift inside a process hits every mode alike. A
mode is compared with its reference (the floor; the floor itself with bare) inside each
process: the median of all the mode's steps in the process over the median of all the
reference's ("pooled"), and, as a cross-check, the median of the per-round ratios of the two
phases' medians ("paired"). The estimate is the median over processes of the pooled ratio; its
interval a two-stage bootstrap (processes, then rounds inside each, a round's phases kept
together so the pairing holds). Target met: the interval's top is at or under the target;
missed: its bottom is over it; otherwise not resolved.

Three measures: the step's wall time, the main thread's CPU seconds a step (time.thread_time),
and that CPU in units of the host's Python call measured around each phase (host_speed: the
host runs a whole process's Python at one of two speeds about 2x apart, and drifts inside one).

Reads the result lines step_cost.py writes (one a process); also the older layout (bare, P,
bare, Q, ... with one median a phase: session 7's files), taken as one value a phase.
"""
from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass, field

TARGETS = {"shadow": 1.03, "hook": 1.05, "python": 1.15}
"""Issue 37: each mode's step time and main-thread CPU a step over the floor's, at most."""
BARE, FLOOR = "none", "floor"
METRICS = ("step", "cpu", "norm")
"""step: wall ms a step; cpu: the main thread's CPU ms a step; norm: that CPU in thousands of
the host's Python calls (ms * 1e3 / ns a call)."""
ORDER = ("none", "floor", "subscribed", "cb-runtime", "cb-driver", "cb-launch", "shadow-kernels",
         "shadow-no-copies", "shadow-no-waits", "shadow-no-idle", "shadow", "hook", "python",
         "triton", "cb-all")
NOT_JUDGED = ("cb-all",)
"""Run once, last, in one process (the census): no rounds to pair, no interval."""
LEVEL = 0.90
"""The bootstrap interval's coverage: 5th to 95th percentile."""


@dataclass(slots=True)
class Process:
    """One worker process's phases, by mode and round."""

    index: int
    """Its place in the run (the results file's line)."""
    values: dict[str, dict[str, dict[int, list[list[float]]]]] = field(default_factory=dict)
    """metric -> mode -> round -> each phase's per-step values (a round may hold several
    phases of a mode in the older layout)."""
    threads: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    """mode -> each phase's CPU ms a step by thread (main, autograd, other)."""
    phases: dict[str, list[dict]] = field(default_factory=dict)
    """mode -> its phases as recorded (scope cost, callbacks, census)."""
    speeds: list[float] = field(default_factory=list)
    """ns a Python call, every reading of the process."""
    errors: list[dict] = field(default_factory=list)
    """{mode, round, error} for each profiler that failed; its later phases were skipped."""

    def rounds(self) -> list[int]:
        """The rounds that hold a judged mode's phase (not the census's round of its own)."""
        return sorted({r for mode, by_round in self.values.get("step", {}).items()
                       if mode not in NOT_JUDGED for r in by_round})

    def has(self, mode: str, metric: str = "step") -> bool:
        return bool(self.values.get(metric, {}).get(mode))


def processes_from(results: list[dict]) -> list[Process]:
    """Process records from the result lines (either layout)."""
    out = []
    for i, result in enumerate(results):
        proc = Process(i)
        proc.errors = list(result.get("errors", []))
        phases = result.get("phases", [])
        legacy = phases and "mode" not in phases[0]
        for ph in (_from_legacy(phases) if legacy else phases):
            add_phase(proc, ph)
        out.append(proc)
    return out


def _from_legacy(phases: list[dict]) -> list[dict]:
    """bare, P, bare, Q, ... (each with its median only) as phases of rounds: a bare phase
    belongs to the round of the profiled phase before it (the first to round 0)."""
    out, current = [], 0
    for ph in phases:
        mode = ph["profiler"]
        if mode != BARE:
            current = ph.get("round", 0)
        out.append({**ph, "mode": mode, "round": current, "step_ms": [ph["step_ms"]],
                    "cpu_ms": [ph["cpu_ms"]]})
    return out


def add_phase(proc: Process, ph: dict) -> None:
    """File one phase of the new layout under its mode and round."""
    mode, rnd = ph["mode"], ph["round"]
    speed = ph.get("speed_ns")
    per_call = (speed[0] + speed[1]) / 2 if speed else None
    series = {"step": ph["step_ms"], "cpu": ph["cpu_ms"],
              "norm": [c * 1e3 / per_call for c in ph["cpu_ms"]] if per_call else None}
    for metric, vals in series.items():
        if vals:
            proc.values.setdefault(metric, {}).setdefault(mode, {}).setdefault(rnd, []) \
                .append(list(vals))
    if "threads_ms" in ph:
        proc.threads.setdefault(mode, []).append(ph["threads_ms"])
    proc.phases.setdefault(mode, []).append(ph)
    if speed:
        proc.speeds.extend(speed)


def load(path: str) -> list[Process]:
    with open(path) as f:
        return processes_from([json.loads(line) for line in f if line.strip()])


# -- the comparisons ------------------------------------------------------------------------
def _pooled(by_round: dict[int, list[list[float]]], rounds: list[int]) -> float | None:
    vals = [v for r in rounds for phase in by_round.get(r, ()) for v in phase]
    return statistics.median(vals) if vals else None


def pooled_ratio(proc: Process, mode: str, ref: str, metric: str,
                 rounds: list[int] | None = None) -> float | None:
    """The median of all the mode's steps in these rounds (default: all) over the reference's;
    None when either has none."""
    table = proc.values.get(metric, {})
    if mode not in table or ref not in table:
        return None
    rounds = sorted(set(table[mode]) | set(table[ref])) if rounds is None else rounds
    a, b = _pooled(table[mode], rounds), _pooled(table[ref], rounds)
    return a / b if a is not None and b else None


def paired_ratios(proc: Process, mode: str, ref: str, metric: str) -> list[float]:
    """For each round with both: the median of the mode's steps over the reference's."""
    table = proc.values.get(metric, {})
    mine, theirs = table.get(mode, {}), table.get(ref, {})
    out = []
    for r in sorted(set(mine) & set(theirs)):
        a, b = _pooled(mine, [r]), _pooled(theirs, [r])
        if a is not None and b:
            out.append(a / b)
    return out


def estimate(procs: list[Process], mode: str, ref: str, metric: str) -> float | None:
    """Median over the processes that ran both of the pooled ratio. Where none ran both (e.g.
    Triton's processes without the floor) the ratio goes through bare: the mode's over bare in
    its processes, over the reference's over bare in theirs."""
    direct = [x for p in procs if (x := pooled_ratio(p, mode, ref, metric)) is not None]
    if direct:
        return statistics.median(direct)
    return _through_bare(procs, mode, ref, metric)


def _through_bare(procs: list[Process], mode: str, ref: str, metric: str) -> float | None:
    if BARE in (mode, ref):
        return None
    a = [x for p in procs if (x := pooled_ratio(p, mode, BARE, metric)) is not None]
    b = [x for p in procs if (x := pooled_ratio(p, ref, BARE, metric)) is not None]
    return statistics.median(a) / statistics.median(b) if a and b else None


def direct(procs: list[Process], mode: str, ref: str, metric: str = "step") -> bool:
    """Whether some process ran both (else estimate() goes through bare)."""
    return any(p.has(mode, metric) and p.has(ref, metric) for p in procs)


def bootstrap(procs: list[Process], mode: str, ref: str, metric: str, *, reps: int = 1000,
              seed: int = 0, level: float = LEVEL) -> tuple[float, float] | None:
    """The estimate's interval: resample the processes, then each one's rounds (with
    replacement), `reps` times; the (1-level)/2 and (1+level)/2 quantiles. None with fewer
    than 2 usable replicates."""
    rng = random.Random(seed)
    through = not direct(procs, mode, ref, metric)
    groups = ([[p for p in procs if p.has(mode, metric) and p.has(BARE, metric)],
               [p for p in procs if p.has(ref, metric) and p.has(BARE, metric)]] if through
              else [[p for p in procs if p.has(mode, metric) and p.has(ref, metric)]])
    if not all(groups):
        return None
    pairs = [(mode, BARE), (ref, BARE)] if through else [(mode, ref)]
    stats = []
    for _ in range(reps):
        meds = []
        for group, (a, b) in zip(groups, pairs):
            ratios = []
            for _ in group:
                p = group[rng.randrange(len(group))]
                rounds = p.rounds()
                pick = [rounds[rng.randrange(len(rounds))] for _ in rounds]
                x = pooled_ratio(p, a, b, metric, pick)
                if x is not None:
                    ratios.append(x)
            if not ratios:
                break
            meds.append(statistics.median(ratios))
        else:
            stats.append(meds[0] / meds[1] if through else meds[0])
    if len(stats) < 2:
        return None
    stats.sort()
    lo = stats[int((1 - level) / 2 * (len(stats) - 1))]
    hi = stats[int(round((1 + level) / 2 * (len(stats) - 1)))]
    return lo, hi


def verdict(interval: tuple[float, float] | None, target: float | None) -> str:
    """met: the whole interval at or under the target; missed: all of it over; else not
    resolved (and '-' where there is no target or no interval)."""
    if target is None or interval is None:
        return "-"
    lo, hi = interval
    return "met" if hi <= target else "missed" if lo > target else "not resolved"


def reference(mode: str) -> str:
    return BARE if mode == FLOOR else FLOOR


def modes_of(procs: list[Process]) -> list[str]:
    seen = {m for p in procs for m in p.values.get("step", {})}
    return [m for m in ORDER if m in seen] + sorted(seen - set(ORDER))


@dataclass(slots=True)
class Row:
    """One mode over its reference, each measure: the estimate, its interval, the verdict."""

    mode: str
    ref: str
    target: float | None
    through_bare: bool
    """No process ran both: the ratio is taken through bare (see estimate())."""
    cells: dict[str, tuple[float | None, tuple[float, float] | None, str]]
    """metric -> (estimate, interval, verdict)."""


def rows(procs: list[Process], *, reps: int = 1000) -> list[Row]:
    """The verdict table's rows: every judged mode but bare, over its reference."""
    out = []
    for mode in modes_of(procs):
        if mode == BARE or mode in NOT_JUDGED:
            continue
        ref, target = reference(mode), TARGETS.get(mode)
        cells = {}
        for metric in METRICS:
            est = estimate(procs, mode, ref, metric)
            iv = bootstrap(procs, mode, ref, metric, reps=reps) if est is not None else None
            cells[metric] = (est, iv, verdict(iv, target))
        out.append(Row(mode, ref, target, not direct(procs, mode, ref), cells))
    return out


# -- the tables -----------------------------------------------------------------------------
def _cell(est: float | None, iv: tuple[float, float] | None) -> str:
    if est is None:
        return "-"
    return f"{est:.3f} [{iv[0]:.3f}-{iv[1]:.3f}]" if iv else f"{est:.3f}"


def verdict_table(procs: list[Process], *, reps: int = 1000) -> list[str]:
    lines = ["| mode (over) | target | step | main CPU | main CPU in host Python calls | "
             "verdict: step, main CPU, host calls |", "|---|---|---|---|---|---|"]
    for row in rows(procs, reps=reps):
        over = row.ref if row.ref != BARE else "bare"
        mark = ", through bare" if row.through_bare else ""
        target = f"{row.target:.2f}" if row.target else "-"
        cells = [_cell(row.cells[m][0], row.cells[m][1]) for m in METRICS]
        verdicts = ", ".join(row.cells[m][2] for m in METRICS)
        lines.append(f"| {row.mode} ({over}{mark}) | {target} | {' | '.join(cells)} | "
                     f"{verdicts} |")
    lines.append(f"(median over processes of each process's pooled-step ratio [{LEVEL:.0%} "
                 "bootstrap interval over processes and rounds]; met: the interval at or under "
                 "the target; missed: all of it over; else not resolved)")
    return lines


def detail_table(procs: list[Process]) -> list[str]:
    """Per mode: processes and phases, x bare, ms and host calls a step, the per-round paired
    ratio's spread over the floor, and what it adds a step by thread over the floor."""
    med = statistics.median
    lines = ["| mode | processes (phases, steps) | step x bare | step ms | main CPU ms a step | "
             "main CPU, k host calls a step | paired rounds over the floor: step, main CPU | "
             "added ms a step over the floor: main, autograd, other |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in modes_of(procs):
        mine = [p for p in procs if p.has(mode)]
        phases = sum(len(_phases(p, "step", mode)) for p in mine)
        steps = sum(len(ph) for p in mine for ph in _phases(p, "step", mode))
        xbare = estimate(procs, mode, BARE, "step") if mode != BARE else None
        level = {m: [med([v for ph in _phases(p, m, mode) for v in ph])
                     for p in mine if p.has(mode, m)] for m in METRICS}
        cells = [f"{med(level[m]):.2f}" if level[m] else "-" for m in METRICS]
        paired = "-"
        if mode not in (FLOOR, BARE):
            both = [_paired(mine, mode, m) for m in ("step", "cpu")]
            if both[0]:
                paired = ", ".join(c for c in both if c)
        added = _added(procs, mode)
        lines.append(f"| {mode} | {len(mine)} ({phases}, {steps}) | "
                     f"{'-' if xbare is None else f'{xbare:.3f}'} | {' | '.join(cells)} | "
                     f"{paired} | {added} |")
    lines.append("(step x bare: median over processes of pooled steps; ms and host calls: median "
                 "over processes of each one's pooled median; paired: the median over processes "
                 "of each one's median round ratio [quartiles of every round's])")
    return lines


def _phases(p: Process, metric: str, mode: str) -> list[list[float]]:
    return [ph for phases in p.values[metric][mode].values() for ph in phases]


def _added(procs: list[Process], mode: str) -> str:
    """Median over processes of the mode's mean CPU ms a step by thread minus the floor's."""
    if mode in (FLOOR, BARE):
        return "-"
    diffs = {k: [] for k in ("main", "autograd", "other")}
    for p in procs:
        if p.threads.get(mode) and p.threads.get(FLOOR):
            for k in diffs:
                a = statistics.fmean(t[k] for t in p.threads[mode])
                b = statistics.fmean(t[k] for t in p.threads[FLOOR])
                diffs[k].append(a - b)
    if not diffs["main"]:
        return "-"
    return ", ".join(f"{statistics.median(v):+.3f}" for v in diffs.values())


def _paired(procs: list[Process], mode: str, metric: str) -> str:
    """The median over processes of each one's median round ratio over the floor, and the
    quartiles of every round's ratio."""
    each = [r for p in procs if (r := paired_ratios(p, mode, FLOOR, metric))]
    if not each:
        return ""
    mid = statistics.median(statistics.median(r) for r in each)
    every = [x for r in each for x in r]
    if len(every) < 4:
        return f"{mid:.3f}"
    q1, _, q3 = statistics.quantiles(every, n=4)
    return f"{mid:.3f} [{q1:.2f}-{q3:.2f}]"


def host_line(procs: list[Process]) -> list[str]:
    """The host's speed: ns a Python call over every reading, and each process's median."""
    speeds = [s for p in procs for s in p.speeds]
    if not speeds:
        return []
    each = " ".join(f"{statistics.median(p.speeds):.0f}" for p in procs if p.speeds)
    return [f"Host speed, ns a Python call: median {statistics.median(speeds):.1f}, range "
            f"{min(speeds):.1f}-{max(speeds):.1f} over {len(speeds)} readings; by process: "
            f"{each}"]


def error_lines(procs: list[Process]) -> list[str]:
    """Each profiler that failed, and each process that ended early."""
    out = []
    for p in procs:
        for e in p.errors:
            where = f" in round {e['round']}" if "round" in e else ""
            out.append(f"process {p.index + 1}: {e.get('mode', '?')} failed{where}: "
                       f"{e.get('error', '')[:300]}")
    return out


def scope_line(procs: list[Process]) -> list[str]:
    """What a scope's enter and exit cost each mode with its session live."""
    costs = {}
    for mode in modes_of(procs):
        us = [ph["scope_us"] for p in procs for ph in p.phases.get(mode, []) if "scope_us" in ph]
        if us:
            costs[mode] = statistics.median(us)
    if not costs:
        return []
    return ["Scope enter+exit, us (x4 a step): " +
            ", ".join(f"{m} {us:.2f}" for m, us in costs.items())]


def census(procs: list[Process]) -> list[str]:
    """Calls per step by API (cb-all's counts, one process), and those that reach the
    callbacks each of our modes enables."""
    phases = {m: [ph for p in procs for ph in p.phases.get(m, [])] for m in modes_of(procs)}
    counted = next((ph for ph in phases.get("cb-all", []) if "calls" in ph), None)
    if counted is None:
        return []
    names, n = cbid_names(), counted["steps_counted"]
    calls = counted["calls"]
    per_step = {k: v / n for k, v in calls["calls"].items()}
    top = sorted(per_step.items(), key=lambda kv: -kv[1])
    out = ["", f"CUDA API calls a step (cb-all, one process): {sum(per_step.values()):.0f} "
           f"of {len(per_step)} kinds; " +
           ", ".join(f"{names.get(k, k)} {v:.0f}" for k, v in top[:25])]
    nested = sorted(calls.get("nested", {}).items(), key=lambda kv: -kv[1])
    same = calls.get("same_corr", {})
    if nested:
        out.append("driver calls inside runtime calls a step (with the runtime call's "
                   "correlation id): " +
                   ", ".join(f"{names.get(k, k)} {v / n:.0f} ({same.get(k, 0) / n:.0f})"
                             for k, v in nested[:8]))
    for mode in ("shadow", "hook", "python"):
        enabled = next((ph["enabled"] for ph in phases.get(mode, []) if ph.get("enabled")),
                       None)
        if enabled is not None:
            hit = {k: per_step.get(k, 0) for k in enabled}
            out.append(f"{mode}: {len(enabled)} callbacks enabled, called "
                       f"{sum(hit.values()):.0f} times a step: " +
                       ", ".join(f"{names.get(k, k)} {v:.0f}" for k, v in
                                 sorted(hit.items(), key=lambda kv: -kv[1]) if v))
    return out


def cbid_names() -> dict[str, str]:
    """'domain/cbid' -> the API's name, where cupti-python is installed."""
    try:
        from cupti import cupti

        from proton.cupti.subscriber import cupti_enum
    except ImportError:
        return {}
    out = {}
    for domain, names in ((1, ("driver_api_trace_cbid", "DriverApiTraceCbid")),
                          (2, ("runtime_api_trace_cbid", "RuntimeApiTraceCbid"))):
        for name, member in cupti_enum(cupti, *names).__members__.items():
            out.setdefault(f"{domain}/{int(member)}", name)
    return out


def table(procs: list[Process], *, reps: int = 1000) -> str:
    """The verdicts, the detail, the host's speed, scope costs, the census, what failed."""
    if not any(p.values for p in procs):
        return "no phases recorded" + "".join("\n" + e for e in error_lines(procs))
    lines = verdict_table(procs, reps=reps) + [""] + detail_table(procs) + [""]
    lines += host_line(procs) + scope_line(procs) + census(procs)
    errors = error_lines(procs)
    if errors:
        lines += ["", "Failures (the other modes' results stand):", *errors]
    return "\n".join(lines)
