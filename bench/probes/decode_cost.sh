#!/usr/bin/env bash
# Probe (issue 48): what reading PM samples costs, C reader against Python's, on a 2 s copy loop
# (after bench/gpu_run.sh installed the project; the debug line says samples and decode time).
cat > /tmp/decode_cost.py <<'PY'
import time, torch, proton
x = torch.ones(1 << 26, device="cuda"); y = torch.empty_like(x)
torch.mul(x, 2, out=y); torch.cuda.synchronize()
proton.start("/tmp/decode_cost", mode="counters")
t = time.time()
while time.time() - t < 2.0:
    torch.mul(x, 2, out=y)
torch.cuda.synchronize()
proton.finalize()
PY
for native in 1 0; do
  echo "PROTON_NATIVE=$native"
  PROTON_NATIVE=$native PROTON_DEBUG=1 python3 -P /tmp/decode_cost.py 2>&1 | grep "counters:" | head -2
done
