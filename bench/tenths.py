"""Whether a profiler's cost grows along a long run: each tenth of the 1M-launch runs that
bench/workloads.py's scale and scale_paired record, profiled over bare.

    python bench/tenths.py RESULTS.jsonl

scale_paired: each process's profiled tenths over the mean of its two bare runs' same tenth.
scale (separate processes): each process's tenths over the median bare process's.
Then, where the runs recorded the host's speed around each tenth (hostspeed.host_speed), each
profiler's us a launch over only the tenths the host ran fast at both ends, and over the rest:
the host's own process-to-process swing (bench/probes/bimodal.py) taken out of the comparison;
and over every tenth, a launch's time in units of the host's Python call around it (the
launch loop is mostly Python, so it slows with the host: this uses all tenths, not the few
fast ones)."""
import json
import statistics
import sys


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    bare = [r["tenths_s"] for r in rows if r["workload"] == "scale" and r["profiler"] == "none"]
    base = [statistics.median(t) for t in zip(*bare)] if bare else None
    print("| workload | profiler | x bare | tenths, x bare | launching thread: kcycles, "
          "k instructions a launch | other threads' CPU us a launch |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        tenths = r.get("tenths_s")
        if not tenths:
            continue
        if r["workload"] == "scale_paired":
            before, profiled, after = tenths
            ref = [(a + b) / 2 for a, b in zip(before, after)]
            total = r["value"]
        elif base is not None:
            profiled, ref = tenths, base
            total = sum(profiled) / sum(ref)
        else:
            continue
        ratios = " ".join(f"{p / b:.2f}" for p, b in zip(profiled, ref))
        print(f"| {r['workload']} | {r['profiler']} | {total:.3f} | {ratios} | "
              f"{_work(r)} |")
    by_speed(rows)


def by_speed(rows: list[dict], fast_within: float = 1.2) -> None:
    """Median us a launch per profiler over the tenths whose host speed at both ends was
    within fast_within of the fastest seen in the file ("fast"), and over the others; the
    fast tenths' 25th-75th percentiles are each profiler's spread with the host's swing out."""
    runs = []  # (profiler, tenths, speeds, launches a tenth)
    for r in rows:
        if not r.get("speeds_ns"):
            continue
        n = r.get("launches", 10**6) / 10
        if r["workload"] == "scale_paired":
            for i, (t, sp) in enumerate(zip(r["tenths_s"], r["speeds_ns"])):
                runs.append(("none" if i != 1 else r["profiler"], t, sp, n))
        else:
            runs.append((r["profiler"], r["tenths_s"], r["speeds_ns"], n))
    if not runs:
        return
    fastest = min(min(sp) for _, _, sp, _ in runs)
    pools: dict = {}
    scaled: dict = {}  # every tenth's launch over the host's Python call around it
    for profiler, tenths, speeds, n in runs:
        for i, t in enumerate(tenths):
            fast = max(speeds[i], speeds[i + 1]) <= fastest * fast_within
            pools.setdefault(profiler, ([], []))[0 if fast else 1].append(t / n * 1e6)
            scaled.setdefault(profiler, []).append(t / n * 1e9 / ((speeds[i] + speeds[i + 1]) / 2))
    bare = pools.get("none", ([], []))
    print(f"\nhost speed: fastest {fastest:.1f} ns a Python call; fast = both ends within "
          f"{fast_within}x of it\n")
    print("| profiler | fast tenths | us a launch, fast (x bare's) | other tenths | "
          "us a launch, other (x bare's) | fast, 25th-75th percentile | all tenths: a launch in "
          "Python calls (x bare's) |")
    print("|---|---|---|---|---|---|---|")
    per_call = statistics.median(scaled["none"]) if "none" in scaled else None
    for profiler, (fast, slow) in pools.items():
        cells = []
        for mine, ref in ((fast, bare[0]), (slow, bare[1])):
            m = statistics.median(mine) if mine else None
            x = f" ({m / statistics.median(ref):.3f})" if m and ref else ""
            cells += [str(len(mine)), f"{m:.2f}{x}" if m else ""]
        if len(fast) >= 2:
            q1, _, q3 = statistics.quantiles(fast, n=4)
            cells.append(f"{q1:.2f}-{q3:.2f} ({q3 - q1:.2f})")
        else:
            cells.append("")
        m = statistics.median(scaled[profiler])
        cells.append(f"{m:.1f}" + (f" ({m / per_call:.3f})" if per_call else ""))
        print(f"| {profiler} | {' | '.join(cells)} |")


def _work(r: dict) -> str:
    """Per launch: the launching thread's kcycles and k instructions (host counters, each
    run of a paired process), and the other threads' CPU us in the profiled run."""
    cpu = r.get("cpu_s")
    if not cpu:
        return " | "
    runs = cpu if isinstance(cpu, list) else [cpu]
    n = r.get("launches", 10**6)
    counted = " / ".join(f"{c['main_cycles'] / n / 1e3:.1f}, {c['main_instructions'] / n / 1e3:.1f}"
                         for c in runs if "main_cycles" in c) or "no counters"
    other = (runs[1] if len(runs) == 3 else runs[0])["other"] / n * 1e6
    return f"{counted} | {other:.2f}"


if __name__ == "__main__":
    main(sys.argv[1])
