#!/usr/bin/env bash
# Triton's Proton tutorials (../shared/peer-tests/triton-proton/tutorials, carried in .peer/) on
# the GPU machine, under Triton's Proton unchanged and under ours with the import swap alone
# (the suite's adapt.sh), each in its own folders; then bench/tutorial_compare.py says whether
# both wrote the same trees and traces. Usage: bash bench/peer_tutorials.sh [SUITE_DIR]
# Writes under /tmp/tut; prints one line per file compared.
set -u
suite=${1:-$PWD/.peer/triton-proton}
bench=$(cd "$(dirname "$0")" && pwd)
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
T=/tmp/tut; rm -rf "$T"; mkdir -p "$T"
run() {  # run IMPL VARIANT SCRIPT ARGS...: in $T/IMPL/VARIANT, logs in $T/IMPL/VARIANT/log
  local impl=$1 variant=$2 script=$3; shift 3
  local d=$T/$impl/$variant; mkdir -p "$d"
  (cd "$d" && timeout 300 python3 "$T/$impl/src/$script" "$@" > log 2>&1; echo "rc=$?" >> log)
  printf '%-7s %-14s %s\n' "$impl" "$variant" "$(tail -1 "$d/log")"
}
for impl in triton ours; do
  mkdir -p "$T/$impl" && cp -r "$suite/tutorials" "$T/$impl/src"
  if [ "$impl" = ours ]; then "$suite/adapt.sh" "$T/$impl/src" && "$suite/adapt.sh" "$T/$impl/src/intra_kernel"; fi
  run $impl dn_shadow dynamic-net.py --profile
  run $impl dn_python dynamic-net.py --profile --context python
  run $impl matmul matmul.py --profile
  run $impl dsl_trace intra_kernel/example_dsl.py
  run $impl dsl_measure intra_kernel/example_dsl.py --op-measure
  # example_override: dump the kernel's TTGIR, insert proton.record ops, run with the override
  d=$T/$impl/override; mkdir -p "$d"
  (cd "$d" && TRITON_ALWAYS_COMPILE=1 TRITON_KERNEL_DUMP=1 TRITON_DUMP_DIR=$d/ttgir_dump \
     timeout 300 python3 "$T/$impl/src/intra_kernel/example_override.py" > dump.log 2>&1
   find ttgir_dump -type f ! -name '*.ttgir' -delete
   python3 "$T/$impl/src/intra_kernel/insert_proton_records" > insert.log 2>&1
   rm -f add.chrome_trace
   TRITON_ALWAYS_COMPILE=1 TRITON_KERNEL_OVERRIDE=1 TRITON_OVERRIDE_DIR=$d/ttgir_dump \
     timeout 300 python3 "$T/$impl/src/intra_kernel/example_override.py" > log 2>&1; echo "rc=$?" >> log)
  printf '%-7s %-14s %s\n' "$impl" override "$(tail -1 "$d/log")"
done
echo "== tutorials: Triton's Proton against ours (import swap alone)"
for pair in dn_shadow:dynamic_net.hatchet dn_python:dynamic_net.hatchet matmul:matmul.hatchet \
            dsl_trace:vector-add.chrome_trace dsl_trace:gemm.chrome_trace \
            dsl_measure:vector-add.hatchet dsl_measure:gemm.hatchet override:add.chrome_trace; do
  v=${pair%%:*} f=${pair#*:}
  printf '%-12s ' "$v"
  python3 "$bench/tutorial_compare.py" "$T/triton/$v" "$T/ours/$v" "$f"
done
