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
    print("| workload | profiler | x bare | tenths, x bare |")
    print("|---|---|---|---|")
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
        print(f"| {r['workload']} | {r['profiler']} | {total:.3f} | {ratios} |")


if __name__ == "__main__":
    main(sys.argv[1])
