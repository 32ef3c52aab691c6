#!/usr/bin/env bash
# Probe (issue 48): which start of mode="counters" decodes (after bench/gpu_run.sh installed).
cd /tmp
cat > long.py <<'PY'
import torch, time
x = torch.ones(1 << 26, device="cuda")
t = time.time()
while time.time() - t < 1.0:
    torch.mul(x, 2)
torch.cuda.synchronize()
PY
cat > gpt_in.py <<'PY'
import sys, runpy, torch, proton
torch.ones(1, device="cuda")
proton.start("gpt_in", mode="counters")
sys.argv = ["gpt_workload.py", "--steps", "20"]
runpy.run_path("/work/main/tests/gpt_workload.py", run_name="__main__")
proton.finalize()
PY
cat > fork_in.py <<'PY'
import os, torch, time, proton
x = torch.ones(1 << 26, device="cuda")
proton.start("fork_in", mode="counters")
for i in range(3):
    t = time.time()
    while time.time() - t < 0.4:
        torch.mul(x, 2)
    torch.cuda.synchronize()
    if i == 1:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
proton.finalize()
PY
for case in "python3 -P -m proton --counters -n long long.py" "python3 -P gpt_in.py" "python3 -P fork_in.py"; do
  echo "== $case"
  PROTON_DEBUG=1 timeout 100 $case 2>&1 | grep -i "counters" | tail -3
done
