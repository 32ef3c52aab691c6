"""Write tests/data/pcsampling.hatchet: a mode="pcsampling" profile as the runtime writes it.

    python tests/data/make_pcsampling.py

Line frames are `/abs/file.py:LINE@FUNCTION`; the file holds SOURCE_DIR in place of the folder
of pc_kernel_source.py, and the tests put the real folder there (build() does it directly).
What it holds:
- matmul_kernel under two scopes (forward, backward), lines of pc_kernel_source.py with line 18
  the hottest, one line in a helper file that is on no machine, and a few unmapped samples
  (under backward with the reason as `no_lines`);
- softmax_kernel, whose one source file is on no machine;
- two kernels with samples but no lines (`no_lines` on their frames);
- memcpy_kernel, timed but never sampled.
"""
from __future__ import annotations

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = "/SOURCE_DIR"
"""Stands for the folder of pc_kernel_source.py in the committed file."""
STALLS = ("branch_resolving", "no_instruction", "short_scoreboard", "wait", "long_scoreboard",
          "tex_throttle", "barrier", "membar", "imc_miss", "mio_throttle", "math_pipe_throttle",
          "drain", "lg_throttle", "misc", "dispatch_stall", "sleeping", "selected")
NO_LINE_INFO = "the cubin has no line info (compile with -lineinfo)"
SOME_PCS = "some of its PCs have no line in the cubin's line info"


def samples(total: int, **stalls: int) -> dict:
    """PC metrics: `total` samples, of which the stalls' sum are stalled."""
    out = {"num_samples": total, "num_stalled_samples": sum(stalls.values())}
    out.update({f"stalled_{reason}": n for reason, n in stalls.items()})
    return out


def node(name: str, metrics: dict, *children: dict, **frame: str) -> dict:
    return {"frame": {"name": name, "type": "function", **frame}, "metrics": metrics,
            "children": list(children)}


def kernel(name: str, ns: int, count: int, pcs: dict | None, *lines: dict, **frame: str) -> dict:
    metrics = {"time (ns)": ns, "count": count, "device_id": "0", "device_type": "CUDA"}
    return node(name, {**metrics, **(pcs or {})}, *lines, **frame)


def build(source_dir: str) -> list:
    """The profile, its matmul lines pointing into `source_dir`."""
    src = f"{source_dir}/pc_kernel_source.py"

    def line(n: int, pcs: dict, file: str = src, function: str = "matmul_kernel") -> dict:
        return node(f"{file}:{n}@{function}", pcs)

    forward = node("forward", {}, kernel(
        "matmul_kernel", 900_000, 10, samples(12, no_instruction=6, wait=4),
        line(18, samples(400, math_pipe_throttle=150, wait=90, selected=60)),
        line(16, samples(120, long_scoreboard=70, lg_throttle=20, wait=10)),
        line(17, samples(110, long_scoreboard=60, wait=30)),
        line(20, samples(30, lg_throttle=15, drain=10)),
        line(9, samples(8, wait=8)),
        line(40, samples(20, barrier=20), file="/gone/helpers.py")),
        kernel("softmax_kernel", 100_000, 10, None,
               line(7, samples(60, long_scoreboard=40, wait=10), "/gone/softmax.py",
                    "softmax_kernel"),
               line(9, samples(20, wait=5), "/gone/softmax.py", "softmax_kernel")))
    backward = node("backward", {}, kernel(
        "matmul_kernel", 700_000, 10, samples(8, no_instruction=8),
        line(18, samples(252, math_pipe_throttle=100, wait=50)),
        line(16, samples(40, long_scoreboard=40)), no_lines=SOME_PCS),
        kernel("void at::native::elementwise_kernel<128, 2>(int, at::native::Op)", 50_000, 10,
               samples(50, wait=20, long_scoreboard=10), no_lines=NO_LINE_INFO),
        kernel("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp)", 30_000, 10,
               samples(25, barrier=15), no_lines=NO_LINE_INFO),
        kernel("memcpy_kernel", 20_000, 10, None))
    inclusive = ["time (ns)", "count", "num_samples", "num_stalled_samples",
                 *(f"stalled_{reason}" for reason in STALLS)]
    root = node("ROOT", {m: 0 for m in inclusive}, forward, backward)
    devices = {"CUDA": {"0": {"arch": "90", "num_sms": 132, "clock_rate": 1980000,
                              "memory_clock_rate": 2619000, "bus_width": 5120}}}
    return [root, devices]


if __name__ == "__main__":
    with open(os.path.join(HERE, "pcsampling.hatchet"), "w") as f:
        json.dump(build(SOURCE_DIR), f, indent=1)
