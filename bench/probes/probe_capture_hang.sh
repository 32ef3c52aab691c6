#!/usr/bin/env bash
# Probe (issue: never hang the job): a torch loop under `proton --listen`, captured with
# instruction sampling; if the capture gets no reply, dump every thread's Python stack
# (faulthandler, SIGUSR1) and native stack (cuda-gdb attach) to $OUT. Usage on the GPU
# machine, after bench/gpu_run.sh's install lines: bash bench/probes/probe_capture_hang.sh [MODE...]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cat > /tmp/loop.py <<'PY'
import faulthandler, signal, sys, time, torch, proton
faulthandler.register(signal.SIGUSR1, all_threads=True)
a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
for step in range(100000):
    with proton.scope("train"):
        with proton.scope("fwd"):
            b = a @ a
        with proton.scope("opt"):
            a.add_(b, alpha=1e-6)
    proton.step()
    torch.cuda.synchronize()
    time.sleep(0.005)
    if step % 200 == 0:
        print("step", step, flush=True)
PY
cd /tmp
for how in "${@:---steps 3 -m pcsampling}"; do
  tag=$(echo "$how" | tr -c 'a-z0-9' '_')
  python3 -m proton --listen /tmp/loop.py > "$OUT/loop_$tag.log" 2>&1 &
  pid=$!
  sleep 10
  timeout 45 python3 -m proton capture $pid $how -n cap_$tag > "$OUT/capture_$tag.log" 2>&1
  echo "== $how: capture rc=$?"; cat "$OUT/capture_$tag.log"
  sleep 2
  tail -2 "$OUT/loop_$tag.log"
  kill -USR1 $pid; sleep 1
  timeout 60 cuda-gdb -p $pid -batch -ex "info threads" -ex "thread apply all bt 30" \
    > "$OUT/bt_$tag.txt" 2>&1
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  grep -c . "$OUT/bt_$tag.txt"
done
