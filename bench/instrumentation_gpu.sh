#!/usr/bin/env bash
# On the GPU machine (after the wheels and the project are installed on PYTHONPATH): the
# instrumentation backend's gpu tests and its cost per launch against Triton's Proton, under
# the machine's triton (3.6.0) and, with TRITON39_SITE=DIR (a folder holding triton 3.9.0, as
# ../shared/peer-tests/triton-proton-3.9/t39_unpack.py makes one), under 3.9.0 too: its gpu
# tests run again with DIR first on PYTHONPATH, and the cost rounds take both in turn
# (TRITON39_ENV: the export lines t39_unpack.py printed, default /tmp/t39env.sh as
# bench/gpu_run.sh's PEER39 writes them: the ptxas 3.9 compiles sm90 with).
# SMOKE=1 also runs the workload once (and saves a recorded buffer for the CPU tests).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/runs"
if [ -n "${TRITON39_SITE:-}" ] && [ -f "${TRITON39_ENV:-/tmp/t39env.sh}" ]; then
  . "${TRITON39_ENV:-/tmp/t39env.sh}"
fi
export PROTON_INTRA_OUT=$OUT/runs
if [ -n "${SMOKE:-}" ]; then
  python3 tests/intra_workload.py ours tree "$OUT/ours_tree" --fixture "$OUT/intra_buffer.npz" \
    > "$OUT/runs/smoke.log" 2>&1; echo "smoke rc=$?"
fi
timeout ${TEST_TIMEOUT:-300} python3 -P -m pytest -m gpu tests/test_gpu_instrumentation.py -q \
  -p no:cacheprovider -rf > "$OUT/runs/gpu_tests.log" 2>&1
tail -6 "$OUT/runs/gpu_tests.log"
if [ -n "${TRITON39_SITE:-}" ]; then
  PYTHONPATH=$TRITON39_SITE${PYTHONPATH:+:$PYTHONPATH} TRITON_DEFAULT_FP_FUSION=1 \
    timeout ${TEST_TIMEOUT:-300} python3 -P -m pytest -m gpu tests/test_gpu_instrumentation.py \
    -q -p no:cacheprovider -rf > "$OUT/runs/gpu_tests39.log" 2>&1
  echo "== under triton 3.9.0"; tail -6 "$OUT/runs/gpu_tests39.log"
fi
python3 bench/intra_decode.py --launches 2000 --repeat 3 2>&1 | tail -3  # the CPU side alone
ROUNDS=${ROUNDS:-3}  # each round: bare, Triton's Proton, ours, each its own process (~30 s)
sites=""; tritons=1
[ -n "${TRITON39_SITE:-}" ] && sites="--triton-site $TRITON39_SITE" && tritons=2
timeout ${BENCH_TIMEOUT:-$((ROUNDS * 100 * tritons))} \
  python3 bench/instrumentation_cost.py --launches ${LAUNCHES:-2000} --rounds $ROUNDS $sites \
  --out "$OUT/runs/bench.jsonl" 2>&1 | grep -v '^{' 
