"""Which samples does CUPTI count as non-user (no PC records), and when? Runs the GPT job's
step under a pcsampling session in fresh processes: started before any CUDA work, after
warm-up, after warm-up with eager module loading, and with torch.compile. Prints CUPTI's
totals (PROTON_DEBUG) per variant. Usage (GPU machine): python bench/probes/pc_non_user.py"""
from __future__ import annotations

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = r"""
import os, sys, torch
sys.path.insert(0, os.path.join(%(root)r, "tests"))
import proton, gpt_workload as g
early = os.environ["VARIANT"].startswith("early")
if early:
    proton.start("/tmp/pcnu", mode="pcsampling")
model = g.GPT().cuda()
if "compile" in os.environ["VARIANT"]:
    model = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
def step():
    x = torch.randint(0, g.VOCAB, (g.BATCH, g.SEQ), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1).float(), x.flatten())
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(3):
    step()
torch.cuda.synchronize()
if not early:
    proton.start("/tmp/pcnu", mode="pcsampling")
for _ in range(30):
    step()
torch.cuda.synchronize()
proton.finalize()
"""


def main() -> None:
    root = os.path.dirname(os.path.dirname(HERE))
    for variant, extra in (("early", {}), ("late", {}), ("late-eager", {"CUDA_MODULE_LOADING": "EAGER"}),
                           ("early-eager", {"CUDA_MODULE_LOADING": "EAGER"}), ("late-compile", {})):
        env = {**os.environ, "VARIANT": variant, "PROTON_DEBUG": "1", **extra}
        done = subprocess.run([sys.executable, "-P", "-c", CHILD % {"root": root}], env=env,
                              capture_output=True, text=True, timeout=300)
        said = re.findall(r"PC sampling: .*", done.stderr)
        print(f"{variant}: rc {done.returncode}; " + " | ".join(s[:300] for s in said))
        if done.returncode:
            print(done.stderr[-2000:])


if __name__ == "__main__":
    main()
