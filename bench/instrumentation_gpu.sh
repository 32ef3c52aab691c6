#!/usr/bin/env bash
# On the GPU machine (after the wheels and the project are installed on PYTHONPATH): the
# instrumentation backend's gpu tests, a recorded buffer for the CPU tests and the cost per
# launch against Triton's Proton. Few files under $OUT: logs, the fixture, two profiles.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" "$OUT/runs"
export PROTON_INTRA_OUT=$OUT/runs
W=tests/intra_workload.py
T=$(mktemp -d)
{ python3 $W ours trace "$OUT/ours_trace" --fixture "$OUT/intra_buffer.npz"; echo "rc=$?";
  python3 $W triton tree "$OUT/triton_tree" --lang triton.profiler.language; echo "rc=$?";
  python3 $W ours tree "$T/loop" --loop 2000; echo "rc=$?"; } > "$OUT/runs/smoke.log" 2>&1
tail -5 "$OUT/runs/smoke.log"
timeout 200 python3 -P -m pytest -m gpu tests/test_gpu_instrumentation.py -q -p no:cacheprovider -rf > "$OUT/runs/gpu_tests.log" 2>&1
tail -5 "$OUT/runs/gpu_tests.log"
timeout 150 python3 bench/instrumentation_cost.py --launches 3000 --rounds 3 --out "$OUT/runs/bench.jsonl" 2>&1 | tail -6
