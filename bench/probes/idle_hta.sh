#!/usr/bin/env bash
# Our step breakdown against HTA's (bench/probes/idle_hta.py): the DDP job on 2 GPUs under Proton
# and, in another run, under torch.profiler; the rank files, the traces, the runs' logs and
# --diagnose of the rank files packed in $OUT/idle_hta.tgz. Device kind nvidia-h200-x2, carry .whl.
# Then anywhere: python3 -m venv /tmp/hta && /tmp/hta/bin/pip install holistictraceanalysis &&
#   /tmp/hta/bin/python bench/probes/idle_hta.py compare DIR   (DIR: the unpacked tgz)
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; W=/tmp/idle_hta; rm -rf $W; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target /tmp/site . || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PROTON_RANK_FILES=ranks
P=$PWD/bench/probes/idle_hta.py
cd $W
for prof in proton torch; do
  timeout 240 python3 -m torch.distributed.run --nproc-per-node 2 --master-port $((29500 + RANDOM % 500)) \
    $P $prof $W > $prof.log 2>&1; echo "$prof rc=$?"; tail -3 $prof.log
done
proton-viewer --diagnose $W/ddp.rank0.hatchet $W/ddp.rank1.hatchet > ddp.ranks.diagnose.txt 2>&1
head -20 ddp.ranks.diagnose.txt
ls -la $W $W/hta
tar czf $OUT/idle_hta.tgz -C $W .
