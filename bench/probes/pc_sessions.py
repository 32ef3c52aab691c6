"""Which instruction-sampling sessions get samples for a kernel, by when its module loaded:
before any CUPTI, between two sessions, inside the session, or before CUPTI but sampled in a
later session. Prints each session's samples per kernel node.

    python bench/probes/pc_sessions.py pcsampling    (on a GPU, with the project installed)
"""
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests"))  # tests/kernels.py
import torch, proton
from kernels import hot_kernel
os.environ["PROTON_DEBUG"] = "1"
x = torch.zeros(1 << 20, device="cuda")
def hot(it): hot_kernel[(1024,)](x, x.numel(), ITERS=it, BLOCK=1024)
def samples(path):
    doc = json.load(open(path + ".hatchet"))
    out = {}
    def walk(n, pre):
        name = n["frame"]["name"]
        s = n["metrics"].get("num_samples", 0)
        if s: out[pre + name] = s
        for c in n["children"]: walk(c, pre + name[:20] + "/")
    walk(doc[0], "")
    return out
hot(100); torch.cuda.synchronize()          # k100 loaded before any CUPTI
def session(tag, *its):
    proton.start("/tmp/" + tag, mode=sys.argv[1])
    for it in its:
        for _ in range(3): hot(it)
    proton.finalize()
    print(tag, its, samples("/tmp/" + tag), flush=True)
session("s1", 100)            # loaded before any CUPTI
hot(300); torch.cuda.synchronize()
session("s2", 300)            # loaded between sessions
session("s3", 500)            # loaded in the session
session("s4", 100)            # loaded before any CUPTI, a later session
