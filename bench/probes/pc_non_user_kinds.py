"""Which work does CUPTI count as non-user in PC sampling? One kind of work per fresh process
under a pcsampling session: large memsets (torch.zero_ of a fresh buffer goes to a fill
kernel; cudaMemsetAsync is the driver's), bf16 matmuls (cuBLAS), and fills. Prints CUPTI's
totals (PROTON_DEBUG). Usage (GPU machine): python bench/probes/pc_non_user_kinds.py"""
from __future__ import annotations

import os
import re
import subprocess
import sys

CHILD = r"""
import os, torch, ctypes, proton
kind = os.environ["KIND"]
a = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
m = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
cudart = ctypes.CDLL("libcudart.so.13") if kind == "memset" else None
torch.cuda.synchronize()
proton.start("/tmp/pcnk", mode="pcsampling")
for _ in range(200):
    if kind == "memset":
        cudart.cudaMemsetAsync(ctypes.c_void_p(a.data_ptr()), 0, ctypes.c_size_t(a.numel()),
                               ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    elif kind == "matmul":
        m @ m
    else:
        a.fill_(1)
torch.cuda.synchronize()
proton.finalize()
"""


def main() -> None:
    for kind in ("memset", "matmul", "fill"):
        env = {**os.environ, "KIND": kind, "PROTON_DEBUG": "1"}
        done = subprocess.run([sys.executable, "-P", "-c", CHILD], env=env, capture_output=True,
                              text=True, timeout=200)
        said = re.findall(r"PC sampling: \d+ samples.*", done.stderr)
        print(f"{kind}: rc {done.returncode}; " + " | ".join(s[:200] for s in said))
        if done.returncode:
            print(done.stderr[-1500:])


if __name__ == "__main__":
    main()
