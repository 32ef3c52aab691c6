#!/usr/bin/env bash
# Probe: the in-process gpu test files one pytest process each (after bench/gpu_run.sh installed
# the project), so a CUDA error one leaves behind shows in that file alone. Logs in $OUT.
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for f in ${FILES:-test_gpu_hook test_gpu_memory test_gpu_python test_gpu_waits test_gpu_copies}; do
  timeout 150 python3 -P -m pytest -m gpu -q -p no:cacheprovider -rf \
    $(for x in ${f//+/ }; do echo tests/$x.py; done) > "$OUT/$f.log" 2>&1
  echo "== $f: $(tail -1 "$OUT/$f.log")"
  grep -E "^FAILED|^ERROR|^E  .*(Error|assert)" "$OUT/$f.log" | head -8
done
