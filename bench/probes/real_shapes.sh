#!/usr/bin/env bash
# Issue 57's jobs in real shapes on the GPU machine (device kind nvidia-h200-x4 for the 4-rank
# jobs; carry .whl): each job's profile, its --diagnose and its independent measures, packed in
# $OUT/real_shapes.tgz.  Usage: bash bench/probes/real_shapes.sh [loop pcs counters ddp]
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; W=/tmp/rs; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target /tmp/site . || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
P=$PWD/bench/probes/real_shapes.py
GPUS=$(nvidia-smi -L | wc -l)
jobs=${*:-loop pcs counters ddp}
cd $W
show() {  # file label
  proton-viewer --diagnose "$1" > "$2.diagnose.txt" 2>&1
  proton-viewer -m time/ms "$1" > "$2.tree.txt" 2>&1
}
for j in $jobs; do
  case $j in
  loop|pcs|counters)
    timeout 180 python3 $P $j $j > $j.log 2>&1; echo "$j rc=$?"; show $j.hatchet $j ;;
  ddp)
    # name host_slow_ms batch_x world slow_rank job
    for cfg in "ddp2_host 20 1.0 2 1 ddp" "ddp4_host5 3 1.0 4 3 ddp" "ddp4_gpu5 0 1.05 4 3 ddp" "ddp4_balanced 0 1.0 4 3 ddp" \
               "fsdp4_host5 3 1.0 4 2 fsdp" "fsdp4_balanced 0 1.0 4 2 fsdp"; do
      set -- $cfg; name=$1; ms=$2; bx=$3; world=$4; slow=$5; kind=$6
      [ "$GPUS" -lt "$world" ] && { echo "$name: needs $world GPUs"; continue; }
      timeout 180 python3 -m torch.distributed.run --nproc-per-node $world --master-port $((29500 + RANDOM % 500)) \
        -m proton -n $name $P $kind $slow $ms $bx > $name.log 2>&1; echo "$name rc=$?"
      show $name.hatchet $name
      for r in $(seq 0 $((world - 1))); do proton-viewer -m time/ms $name.rank$r.hatchet > $name.rank$r.tree.txt 2>&1; done
      proton-viewer --diagnose $name.rank*.hatchet > $name.ranks.diagnose.txt 2>&1
    done ;;
  esac
done
ls -la $W
tar czf $OUT/real_shapes.tgz -C $W .
for f in $W/*.diagnose.txt; do echo "== $f"; head -40 $f; done
