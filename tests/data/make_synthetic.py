"""Write the small synthetic profiles the viewer tests use (python-context frame names,
launch-metadata metrics and an H100-like device table).

    python tests/data/make_synthetic.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def kernel(name, ns, count, **metrics):
    return {"frame": {"name": name, "type": "function"}, "children": [],
            "metrics": {"time (ns)": ns, "count": count, "device_id": "0", "device_type": "CUDA",
                        **metrics}}


def frame(name, *children, **metrics):
    return {"frame": {"name": name, "type": "function"}, "metrics": metrics,
            "children": list(children)}


root = frame(
    "ROOT",
    frame("/home/u/model/train.py:40@step",
          frame("/home/u/model/layers.py:12@attention",
                kernel("attn_fwd_128x64", 4_000_000, 10, flops16=1.6e12, bytes=2.0e9),
                kernel("softmax_kernel", 500_000, 10, bytes=1.2e9)),
          frame("/home/u/model/layers.py:30@mlp",
                kernel("matmul_4096x4096x4096", 6_000_000, 20, flops16=3.0e12, bytes=3.0e9),
                kernel("gelu_kernel", 300_000, 20, bytes=8.0e8)),
          tokens=8192),
    frame("/home/u/model/train.py:55@optimizer",
          kernel("adam_kernel", 700_000, 5, bytes=2.0e9)),
    **{"time (ns)": 0, "count": 0, "flops16": 0, "bytes": 0, "tokens": 0})
devices = {"CUDA": {"0": {"arch": "90", "num_sms": 132, "clock_rate": 1980000,
                          "memory_clock_rate": 2619000, "bus_width": 5120}}}
with open(os.path.join(HERE, "synthetic.hatchet"), "w") as f:
    json.dump([root, devices], f, indent=1)
