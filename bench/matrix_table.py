"""The real-workload matrix's cells (tests/test_gpu_matrix.py, PROTON_MATRIX_OUT) as a table.
Usage: python bench/matrix_table.py matrix.jsonl"""
from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    print("| cell | x bare step | kernels | expected | s |")
    print("|---|---|---|---|---|")
    for r in rows:
        expected = r.get("expected")
        print(f"| {r['cell']} | {r.get('ratio', '')} | {r.get('kernels', '')} | "
              f"{'' if expected is None else round(expected, 1)} | "
              f"{r.get('wall_s', r.get('took_s', ''))} |")
    for r in rows:
        if r["cell"].endswith("/bare"):
            print(f"{r['cell']}: {r['step_ms']:.2f} ms a step, "
                  f"{r['kernels_per_step']:.1f} kernels a step (torch.profiler)")


if __name__ == "__main__":
    main(sys.argv[1])
