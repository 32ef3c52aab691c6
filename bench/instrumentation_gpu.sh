#!/usr/bin/env bash
# On the GPU machine (after the wheels and the project are installed on PYTHONPATH): the
# instrumentation backend's gpu tests and its cost per launch against Triton's Proton.
# SMOKE=1 also runs the workload once (and saves a recorded buffer for the CPU tests).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/runs"
export PROTON_INTRA_OUT=$OUT/runs
if [ -n "${SMOKE:-}" ]; then
  python3 tests/intra_workload.py ours tree "$OUT/ours_tree" --fixture "$OUT/intra_buffer.npz" \
    > "$OUT/runs/smoke.log" 2>&1; echo "smoke rc=$?"
fi
timeout ${TEST_TIMEOUT:-150} python3 -P -m pytest -m gpu tests/test_gpu_instrumentation.py -q \
  -p no:cacheprovider -rf > "$OUT/runs/gpu_tests.log" 2>&1
tail -6 "$OUT/runs/gpu_tests.log"
python3 bench/intra_decode.py --launches 2000 --repeat 3 2>&1 | tail -3  # the CPU side alone
ROUNDS=${ROUNDS:-3}  # each round: bare, Triton's Proton, ours, each its own process (~30 s)
timeout ${BENCH_TIMEOUT:-$((ROUNDS * 100))} python3 bench/instrumentation_cost.py \
  --launches ${LAUNCHES:-2000} --rounds $ROUNDS --out "$OUT/runs/bench.jsonl" 2>&1 | tail -9
