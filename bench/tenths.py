"""Whether a profiler's cost grows along a long run: each tenth of the 1M-launch runs that
bench/workloads.py's scale and scale_paired record, profiled over bare.

    python bench/tenths.py RESULTS.jsonl

scale_paired: each process's profiled tenths over the mean of its two bare runs' same tenth.
scale (separate processes): each process's tenths over the median bare process's."""
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
