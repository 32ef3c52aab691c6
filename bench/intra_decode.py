"""What reading kernel scope buffers costs on the CPU (backend="instrumentation"), per launch:
the buffer recorded on an H100 (tests/data/intra/buffer.npz: 8 CTAs x 4 warps, 4 scopes, 256
records a launch) replayed as LAUNCHES launches side by side in one arena, read as
Instrumentation.read reads a filled arena (decoded, then summed per kernel node and scope),
in C and in numpy (PROTON_NATIVE=0). No GPU: the sync and the copy are not in it.

Usage: python bench/intra_decode.py [--launches 2000] [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from proton import mode
from proton.data.paths import paths
from proton.runtime import intra_native
from proton.runtime.instrumentation import Instrumentation, KernelInfo

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "intra", "buffer.npz")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with np.load(FIXTURE) as f:
        buf, scratch, warps = f["buffer"], int(f["scratch"]), int(f["num_warps"])
        names = {int(k): v for k, v in json.loads(str(f["names"])).items()}
        parents = {int(k): v for k, v in json.loads(str(f["parents"])).items()}
    host = np.tile(buf, a.launches)
    info = KernelInfo("k", scratch, warps, names, parents)
    kernel = paths.intern(0, "k", "kernel0")
    launches = [(1, i * buf.size, buf.size, kernel, 0, i, i) for i in range(a.launches)]
    print(f"{a.launches} launches of {buf.size // scratch} CTAs x {warps} warps, median of "
          f"{a.repeat}; us per launch")
    print(f"{'':8}{'decode':>8}{'read':>8}{'+spans':>8}")
    for label, env in (("C", "1"), ("numpy", "0")):
        os.environ["PROTON_NATIVE"] = env
        intra_native.HELPER.built.clear()
        intra_native.helper()  # built (or not) before timing
        dec, read, spans = [], [], []
        for _ in range(a.repeat):
            t = time.perf_counter()
            intra_native.decode_launches(host, np.arange(a.launches) * buf.size,
                                         np.full(a.launches, buf.size), scratch, warps)
            dec.append(time.perf_counter() - t)
            for keep, out in ((False, read), (True, spans)):
                inst = Instrumentation(mode.Default(), {0: 1_980_000})
                inst.keep_spans = keep
                t = time.perf_counter()
                inst._read_kernel(info, host, launches)
                out.append(time.perf_counter() - t)
        per = [statistics.median(x) / a.launches * 1e6 for x in (dec, read, spans)]
        print(f"{label:8}" + "".join(f"{v:8.2f}" for v in per))


if __name__ == "__main__":
    main()
