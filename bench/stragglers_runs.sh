#!/usr/bin/env bash
# Stragglers named over many runs (issue 57, item 4): bench/stragglers_runs.py on the GPU machine
# (device kind nvidia-h200-x4, or -x8 for the 8-rank configurations; carry .whl). Prints each
# run and the table "runs named / runs tried, false alarms"; per-run measures, the logs and the
# job files in $OUT/stragglers*. 10 runs of the six default configurations: ~5 min.
# Usage: bash bench/stragglers_runs.sh [--runs 10] [--share 0.05] [--configs ddp-host@4,...]
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target /tmp/site . || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
rm -f "$OUT/stragglers_runs.jsonl"
python3 bench/stragglers_runs.py --out "$OUT" "$@" 2>&1 | tee "$OUT/stragglers_runs.txt"
(cd "$OUT" && tar czf stragglers.tgz stragglers && rm -rf stragglers)
