"""Record a real session's CUPTI records for the replay tests (run on the GPU machine).

    PROTON_RECORD_CUPTI=tests/data/cupti_records.json python tests/data/record_session.py
writes the records and the profile the same run wrote (tests/data/recorded.hatchet);
    python tests/data/record_session.py triton
runs the same workload under Triton's own Proton (tests/data/triton_recorded.hatchet);
    python tests/data/record_session.py python|triton-python
the same with context="python" (python_recorded.hatchet, triton_python_recorded.hatchet).
"""
import os
import sys
import threading

import torch
import triton
import triton.language as tl

MODE = (sys.argv[1:] or [""])[0]
if MODE.startswith("triton"):
    import triton.profiler as proton
else:
    import proton
NAME = {"": "recorded", "triton": "triton_recorded", "python": "python_recorded",
        "triton-python": "triton_python_recorded"}[MODE]
CONTEXT = "python" if MODE.endswith("python") else "shadow"


@triton.jit
def scale_kernel(x, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) * 2)


x = torch.randn(4096, device="cuda")
a = torch.randn(512, 512, device="cuda")
scale_kernel[(4,)](x, BLOCK=1024)
torch.cuda.synchronize()
sid = proton.start(os.path.join(os.path.dirname(os.path.abspath(__file__)), NAME),
                   context=CONTEXT)
with proton.scope("step"):
    with proton.scope("triton"):
        for _ in range(20):
            scale_kernel[(4,)](x, BLOCK=1024)
    with proton.scope("torch"):
        for _ in range(5):
            torch.softmax(a @ a, dim=-1)
    proton.deactivate(sid)
    for _ in range(3):
        scale_kernel[(4,)](x, BLOCK=1024)
    proton.activate(sid)


def worker():
    with proton.scope("worker"):
        for _ in range(10):
            scale_kernel[(4,)](x, BLOCK=1024)


t = threading.Thread(target=worker)
t.start()
t.join()
scale_kernel[(4,)](x, BLOCK=1024)  # no scope: the root
proton.finalize()
