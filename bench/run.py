"""Run the benchmarks, each workload x profiler in its own process, and print one table.

    python bench/run.py [--only launch,gpu,model,accuracy,scale,pcsampling] [--rounds 3]
                        [--results F.jsonl]
Results are appended to --results (JSON lines) and the table is made from everything in it, so
runs split over several calls still print one table. Markdown, for bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import date

HERE = os.path.dirname(os.path.abspath(__file__))
# (workload, profiler, extra args); rounds repeat the timed ones, interleaved
LAUNCH = [("none", []), ("cupti", []), ("listen", []), ("proton", []), ("triton", []),
          ("proton", ["--hook", "triton"]),
          ("triton", ["--hook", "triton"]), ("proton", ["--hook", "triton:config=BLOCK"]),
          ("proton", ["--context", "python"]), ("triton", ["--context", "python"])]
PYTHON = [("proton", ["--context", "python"]), ("triton", ["--context", "python"])]
# Triton's PC sampling serialises every launch (~135x slower): it times 5 launches per repeat
PCSAMPLING = [(profiler, [*extra, *kernel])
              for kernel in ([], ["--kernel", "trig"])  # the 4096^3 matmul, compute-bound sin/cos
              for profiler, extra in (
                  ("none", []), ("proton", ["--mode", "pcsampling"]),
                  ("proton", ["--mode", "pcsampling:serialize=1"]),
                  ("triton", ["--mode", "pcsampling", "--launches", "5"]))]
PLAN = {
    "launch": LAUNCH,
    # the launch loop bare and profiled in turn inside each process: what each profiler adds
    "paired": [m for m in LAUNCH if m[0] in ("cupti", "proton", "triton")
               and m != ("proton", ["--hook", "triton:config=BLOCK"])],
    "gpu": [("none", []), ("proton", []), ("triton", [])],
    "model": [("none", []), ("proton", []), ("triton", []), *PYTHON],
    "accuracy": [("proton", []), ("triton", []), ("torch", [])],
    "scale": [("none", []), ("cupti", []), ("proton", []), ("triton", [])],
    # bare, profiled and bare again inside each process: the ratio without the processes'
    # noise; 500k launches (the ratio of 1M, in half the time: a buffer holds ~40k launches)
    "scale_paired": [(m, ["--scopes", "500"]) for m in ("cupti", "proton", "triton")],
    "pcsampling": PCSAMPLING,
    # the model step bare, profiled and bare again inside each process
    "model_paired": [(m, ["--steps", "30"]) for m in ("cupti", "proton", "triton")],
}
TIMED = {"launch", "paired", "gpu", "model", "pcsampling", "scale", "scale_paired",
         "model_paired"}


def pinned(cpus: str):
    """A preexec_fn that runs the child on `cpus` ("4,6"), or None: a launch loop moved
    between cores by the scheduler varied by 3 us a launch from process to process."""
    if not cpus:
        return None
    chosen = {int(c) for c in cpus.split(",")}
    return lambda: os.sched_setaffinity(0, chosen)


def run_one(workload: str, profiler: str, extra: list[str], timeout: int = 600,
            cpus: str = "") -> dict | None:
    cmd = [sys.executable, os.path.join(HERE, "workloads.py"), workload, profiler, *extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=pinned(cpus))
    except subprocess.TimeoutExpired:
        print(f"{workload} {profiler} {extra}: over {timeout} s", file=sys.stderr)
        return None
    if proc.returncode != 0:
        print(f"{workload} {profiler} {extra}: failed\n{proc.stderr[-1500:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def key(r: dict) -> str:
    name = r["profiler"]
    if r.get("hook"):
        name += " hook=" + r["hook"]
    if r.get("context", "shadow") != "shadow":
        name += " context=" + r["context"]
    if r.get("mode"):
        name += " mode=" + r["mode"]
    if r.get("kernel", "matmul") != "matmul":
        name += " kernel=" + r["kernel"]
    return name


def table(results: list[dict]) -> str:
    by: dict[tuple, list[dict]] = {}
    for r in results:
        by.setdefault((r["workload"], key(r)), []).append(r)

    def best(workload, mode, field="value"):
        rs = by.get((workload, mode))
        return min(r[field] for r in rs) if rs else None

    def med(workload, mode, field="median"):
        rs = [r[field] for r in by.get((workload, mode), ()) if field in r]  # older: fewer
        return statistics.median(rs) if rs else None

    def rounds(workload, mode, field="value"):
        """The median over processes (rounds) of each one's value: what the goals judge."""
        return med(workload, mode, field)

    def spread(workload, mode, field="value") -> tuple[float, float] | None:
        rs = by.get((workload, mode))
        return (min(r[field] for r in rs), max(r[field] for r in rs)) if rs else None

    rows = ["| workload | measure | bare | ours | Triton's Proton | ours / bare | Triton / bare "
            "| goal | met |", "|---|---|---|---|---|---|---|---|---|"]

    def row(workload, measure, bare, ours, theirs, goal="", met=""):
        if bare is None and ours is None and theirs is None:
            return  # not measured in these results
        ratio = lambda a: _f(a / bare, 3) if a is not None and bare else ""  # noqa: E731
        rows.append(f"| {workload} | {measure} | {_f(bare)} | {_f(ours)} | {_f(theirs)} | "
                    f"{ratio(ours)} | {ratio(theirs)} | {goal} | {met} |")

    def spread_row(title, measure, workload, modes, field="value", goal=False):
        """Each mode's lowest-highest over its processes; with `goal`, ours no wider than
        Triton's (judged from 3 processes of each on)."""
        got = [spread(workload, m, field) if m else None for m in modes]
        if not any(got):
            return
        text = ["" if g is None else f"{_f(g[0])}-{_f(g[1])} ({len(by[workload, m])})"
                for g, m in zip(got, modes)]
        ok = None
        if goal and None not in got[1:] and min(len(by[workload, m]) for m in modes[1:]) >= 3:
            ok = got[1][1] - got[1][0] <= got[2][1] - got[2][0]
        wanted = "no wider than Triton's" if goal else ""
        rows.append(f"| {title} | {measure}, lowest-highest (processes) | {text[0]} | "
                    f"{text[1]} | {text[2]} | | | {wanted} | {yes(ok)} |")

    def yes(ok):
        return "" if ok is None else ("yes" if ok else "no")

    launch_modes = (
        ("shadow", "proton", "triton", "added <= 0.6x Triton's and <= floor + 0.5 us", 0.6),
        ("+ triton hook", "proton hook=triton", "triton hook=triton",
         "added <= 0.8x Triton's", 0.8),
        ("+ hook config names", "proton hook=triton:config=BLOCK", None, "", None),
        ("python context", "proton context=python", "triton context=python",
         "added <= 0.8x Triton's", 0.8))
    def meets(ours, theirs, floor, goal, limit) -> bool | None:
        """Launch goals on the time each adds a launch: ours at most `limit` x Triton's and,
        when the goal names it, within 0.5 us of CUPTI's floor."""
        if limit is None or None in (ours, theirs):
            return None
        ok = ours <= limit * theirs
        if "floor" in goal and floor is not None:
            ok = ok and ours <= floor + 0.5
        return ok

    for stat, pick in (("best", best), ("median of processes' bests", rounds)):
        b, floor = pick("launch", "none"), pick("launch", "cupti")
        judge = pick is rounds  # the goals read the median of the rounds
        row("launch-bound, CUPTI kernel activity only (floor)", f"us/launch ({stat})", b, floor,
            None)
        for label, ours_mode, their_mode, goal, limit in launch_modes:
            o, t = pick("launch", ours_mode), pick("launch", their_mode) if their_mode else None
            ok = None
            if judge and None not in (o, t, b):
                ok = meets(o - b, t - b, floor - b if floor is not None else None, goal, limit)
            row(f"launch-bound, {label}", f"us/launch ({stat})", b, o, t,
                goal if judge else "", yes(ok))
        o = pick("launch", "listen")
        row("launch-bound, open to captures, idle", f"us/launch ({stat})", b, o, None,
            "none measurable" if judge else "",
            yes(o <= b * 1.03) if judge and None not in (o, b) else "")
    for label, ours_mode, their_mode, *_ in launch_modes:
        spread_row(f"launch-bound, {label}", "us/launch (best)", "launch",
                   ("none", ours_mode, their_mode))
    # paired: the added time measured inside each process (bare and profiled in turn); the
    # goals judged on these when they were taken, since processes differ more than profilers
    floor = rounds("paired", "cupti")
    if floor is not None:
        rows.append(f"| launch-bound, paired in process | us/launch added, CUPTI kernel "
                    f"activity only (floor) | | {_f(floor)} | | | | | |")
    for label, ours_mode, their_mode, goal, limit in launch_modes:
        o, t = rounds("paired", ours_mode), rounds("paired", their_mode) if their_mode else None
        if o is None:
            continue
        ok = meets(o, t, floor, goal, limit)
        rows.append(f"| launch-bound, paired in process, {label} | us/launch added (median "
                    f"of processes' medians) | | {_f(o)} | {_f(t)} | | | {goal} | {yes(ok)} |")
        spread_row(f"launch-bound, paired in process, {label}", "us/launch added", "paired",
                   (None, ours_mode, their_mode))
    for name, measure in (("triton_mm", "Triton 4096^3 fp16 matmul"),
                          ("torch_mm", "torch 4096^3 fp16 matmul")):
        b, o, t = (best("gpu", m, name) for m in ("none", "proton", "triton"))
        ok = None if None in (b, o) else o / b - 1 < 0.02
        row("GPU-bound", f"{measure}, ms (best)", b, o, t, "< 2% over bare", yes(ok))
    b, o, t = (best("model", m) for m in ("none", "proton", "triton"))
    ok = None if None in (b, o) else o / b - 1 < 0.02
    row("model step", "GPT-style train step, ms (best)", b, o, t, "< 2% over bare", yes(ok))
    b, o, t = (med("model", m) for m in ("none", "proton", "triton"))
    row("model step", "GPT-style train step, ms (median)", b, o, t)
    spread_row("model step", "GPT-style train step, ms (best)", "model",
               ("none", "proton", "triton"), goal=True)
    for stat, pick in (("best", best), ("median", med)):
        b, o, t = (pick("model", m) for m in ("none", "proton context=python",
                                                "triton context=python"))
        row("model step, python context", f"GPT-style train step, ms ({stat})", b, o, t)
    spread_row("model step, python context", "GPT-style train step, ms (best)", "model",
               ("none", "proton context=python", "triton context=python"), goal=True)
    acc = {m: by.get(("accuracy", m), [None])[0] for m in ("proton", "triton", "torch")}

    def err(r, field, ref):
        return None if r is None or ref is None else abs(r[field] / ref - 1) * 100

    def accuracy_row(measure, o, t):
        if o is None and t is None:
            return
        rows.append(f"| accuracy | {measure}, error % | | {_f(o)} | {_f(t)} | | | <= 1% | "
                    f"{yes(None if o is None else o <= 1)} |")

    accuracy_row("matmul kernel time vs CUDA events",
                 *(err(acc[m], "profile_ns", acc[m] and acc[m]["events_ns"])
                   for m in ("proton", "triton")))
    ref = acc["torch"] and acc["torch"]["model_kernel_ns"]
    accuracy_row("10 model steps' kernel time vs torch.profiler",
                 *(err(acc[m], "model_kernel_ns", ref) for m in ("proton", "triton")))
    if any(by.get(("scale", m)) for m in ("none", "proton", "triton")):
        scale = "scale, 1M launches in 1000 scopes"
        growth = {m: spread("scale", m) for m in ("none", "proton", "triton")}
        worst = {m: g and g[1] for m, g in growth.items()}
        rows.append(f"| {scale} | peak RSS growth, MB (largest) | {_f(worst['none'])} "
                    f"| {_f(worst['proton'])} | {_f(worst['triton'])} | | | < 100 MB | "
                    f"{yes(None if worst['proton'] is None else worst['proton'] < 100)} |")
        b, o, t = (rounds("scale", m, "run_s") for m in ("none", "proton", "triton"))
        ok = None if None in (b, o) else o <= 1.15 * b and (t is None or o < t)
        row(scale, "run time, s (median of processes)", b, o, t,
            "<= 1.15x bare, below Triton's", yes(ok))
        spread_row(scale, "run time, s", "scale", ("none", "proton", "triton"), "run_s",
                   goal=True)
        floor = rounds("scale", "cupti", "run_s")
        if floor is not None:  # what CUPTI's kernel activity alone costs on this run
            rows.append(f"| {scale} | run time, s, CUPTI kernel activity only (floor) | "
                        f"{_f(b)} | {_f(floor)} | | {_f(floor / b if b else None, 3)} | | | |")
        for field, label in (("file_mb", "file size, MB"), ("start_s", "start, s"),
                             ("finalize_s", "finalize, s")):
            v = {m: rounds("scale", m, field) for m in ("proton", "triton")}
            rows.append(f"| {scale} | {label} (median) | | {_f(v['proton'])} | "
                        f"{_f(v['triton'])} | | | | |")
    if any(by.get(("scale_paired", m)) for m in ("cupti", "proton", "triton")):
        # each process's profiled run over its bare runs: the ratio goal 2 bounds
        n = by[next(k for k in by if k[0] == "scale_paired")][0].get("launches", 10**6)
        title = f"scale, {n / 1e6:g}M launches in {n // 1000} scopes, paired in process"
        f, o, t = (rounds("scale_paired", m) for m in ("cupti", "proton", "triton"))
        ok = None if o is None else o <= 1.15 and (t is None or o < t)
        rows.append(f"| {title} | run time, x bare (median of processes) | | {_f(o, 3)} | "
                    f"{_f(t, 3)} | | | <= 1.15x bare, below Triton's | {yes(ok)} |")
        rows.append(f"| {title} | run time, x bare, CUPTI kernel activity only (floor) | | "
                    f"{_f(f, 3)} | | | | | |")
        spread_row(title, "run time, x bare", "scale_paired", (None, "proton", "triton"))
    if any(by.get(("model_paired", m)) for m in ("cupti", "proton", "triton")):
        title = "model step, paired in process"
        f, o, t = (rounds("model_paired", m) for m in ("cupti", "proton", "triton"))
        rows.append(f"| {title} | median step, x bare (median of processes) | {_f(f, 3)} "
                    f"(CUPTI floor) | {_f(o, 3)} | {_f(t, 3)} | | | | |")
        spread_row(title, "median step, x bare", "model_paired", (None, "proton", "triton"),
                   goal=True)
    # PC sampling: ms per launch, the launches each mode timed, the samples in its profile
    for kernel, title in (("", "matmul 4096^3"), (" kernel=trig", "sin/cos loop")):
        bare, theirs = "none" + kernel, "triton mode=pcsampling" + kernel
        ours_modes = ("proton mode=pcsampling" + kernel,
                      "proton mode=pcsampling:serialize=1" + kernel)
        runs = {m: by.get(("pcsampling", m), []) for m in (bare, *ours_modes, theirs)}
        pc_rows = ((f"pcsampling {title}", ours_modes[0], "ours <= 1.1x bare", 1.1),
                   (f"pcsampling {title}, exact (serialize=1)", ours_modes[1],
                    "ours <= 10x bare", 10))
        for workload, ours, goal, limit in pc_rows if any(runs.values()) else ():
            for stat, pick in (("best", best), ("median", med)):
                b, o, t = (pick("pcsampling", m) for m in (bare, ours, theirs))
                ok = None if None in (b, o) else o / b <= limit
                row(workload, f"ms/launch ({stat})", b, o, t, goal, yes(ok))
            rows.append(f"| {workload} | launches timed (processes) | "
                        + " | ".join(_launches(runs[m]) for m in (bare, ours, theirs))
                        + " | | | | |")
            newest = {m: runs[m][-1] if runs[m] else None for m in (ours, theirs)}
            ok = None if newest[ours] is None else (
                newest[ours].get("line_samples", 0) >= 0.9 * newest[ours].get("num_samples", 0) > 0
                and all(r.get("same_output") for r in runs[ours]))
            rows.append(f"| {workload} | samples: all / on source lines (lines), newest | | "
                        f"{_samples(newest[ours])} | {_samples(newest[theirs])} | | | "
                        f">= 90% on lines, same output | {yes(ok)} |")
    return "\n".join(rows)


def _launches(runs: list[dict]) -> str:
    """Launches timed over all processes of a mode, and how many processes."""
    if not runs:
        return ""
    return f"{sum(r['launches'] * r['repeats'] for r in runs):,} ({len(runs)})"


def _samples(r: dict | None) -> str:
    if r is None or "num_samples" not in r:
        return ""
    return f"{r['num_samples']:,.0f} / {r['line_samples']:,.0f} ({r['lines']})"


def _f(v, digits: int = 2) -> str:
    return "" if v is None else f"{v:,.{digits}f}"


def header() -> str:
    try:
        import torch
        import triton

        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
        versions = f"torch {torch.__version__}, triton {triton.__version__}"
    except ImportError:
        gpu, versions = "?", "?"
    return f"{date.today()}, {gpu}, {versions}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(PLAN))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="",
                        help="only these modes, ';'-separated as printed, e.g. "
                             "'none;proton --context python;triton --context python'")
    parser.add_argument("--results", default=os.environ.get("BENCH_RESULTS", "bench.jsonl"))
    parser.add_argument("--table-only", action="store_true",
                        help="print the table of the results file, run nothing")
    parser.add_argument("--cpus", default=os.environ.get("BENCH_CPUS", ""),
                        help="run each measured process on these CPUs only, e.g. '4,6' "
                             "(two cores: the launching thread and CUPTI's)")
    args = parser.parse_args()
    chosen = [] if args.table_only else [w for w in args.only.split(",") if w]
    unknown = [w for w in chosen if w not in PLAN]
    if unknown:
        parser.error(f"unknown workload {', '.join(unknown)}; choose from {', '.join(PLAN)}")
    if chosen:  # the C helper's first-use build (a second or two) is not a run's cost
        subprocess.run([sys.executable, "-c", "from proton.cupti import native; native.helper()"],
                       check=False)
    for workload in chosen:
        rounds = args.rounds if workload in TIMED else 1
        plan = PLAN[workload]
        for i in range(rounds):  # interleave modes so drift hits all alike, and rotate
            # their order each round so none always runs after the same one
            for profiler, extra in plan[i % len(plan):] + plan[:i % len(plan)]:
                label = " ".join([profiler, *extra])
                if args.modes and label not in args.modes.split(";"):
                    continue
                res = run_one(workload, profiler, extra, cpus=args.cpus)
                if res:
                    with open(args.results, "a") as f:
                        f.write(json.dumps(res) + "\n")
                print(f"  {workload} {profiler} {' '.join(extra)} round {i + 1}: "
                      f"{res and {k: v for k, v in res.items() if isinstance(v, float)}}",
                      file=sys.stderr, flush=True)
    results = []
    if os.path.exists(args.results):  # absent when every run failed
        with open(args.results) as f:
            results = [json.loads(line) for line in f if line.strip()]
    if chosen:
        print(f"\n{header()}\n")
    print(table(results))


if __name__ == "__main__":
    main()
