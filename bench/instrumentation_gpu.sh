#!/usr/bin/env bash
# On the GPU machine (after the wheels and the project are installed on PYTHONPATH): the
# instrumentation backend's gpu tests, fixtures and cost, logs under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PROTON_INTRA_OUT=$OUT/intra
W=tests/intra_workload.py
# smoke runs first, each log kept whatever happens after
python3 $W ours tree "$OUT/smoke_tree" --fixture "$OUT/intra_buffer.npz" > "$OUT/smoke_tree.log" 2>&1; echo "smoke tree rc=$?"
python3 $W ours trace "$OUT/smoke_trace" > "$OUT/smoke_trace.log" 2>&1; echo "smoke trace rc=$?"
python3 $W triton trace "$OUT/triton_trace" --lang triton.profiler.language > "$OUT/triton_trace.log" 2>&1; echo "triton trace rc=$?"
python3 $W triton tree "$OUT/triton_tree" --lang triton.profiler.language > "$OUT/triton_tree.log" 2>&1; echo "triton tree rc=$?"
tail -3 "$OUT"/smoke_tree.log "$OUT"/smoke_trace.log
timeout 200 python3 -P -m pytest -m gpu tests/test_gpu_instrumentation.py -q -p no:cacheprovider -rf 2>&1 | tail -40 | tee "$OUT/gpu_tests.log"
timeout 150 python3 bench/instrumentation_cost.py --launches 3000 --rounds 3 --out "$OUT/bench.jsonl" 2>&1 | tail -14
