"""Where the python context's time per launch goes, on this machine's CPU (no GPU needed):

    python bench/python_context_cost.py

  * launch_path: the call path of a launch made from a loop through 3 library frames (Triton's
    launch machinery is 3 frames deep), as the launch callback computes it, with and without a
    scope open around the loop;
  * ctypes callback: one C-to-Python call through ctypes (libc's qsort calling a comparator), what
    CUPTI's callback costs before any of our code runs; CUPTI calls it twice per launch.
"""
from __future__ import annotations

import ctypes
import sys
import time

import proton
from proton.context.python import launch_path

N = 200_000
LIBRARY = """
def leaf():
    return launch_path(sys._getframe())
def noop():
    return 0
def run(f):
    return launcher(f)
def launcher(f):
    return f()
def lambda_(f):
    return run(f)
"""


def loop(f, lib) -> float:
    t0 = time.perf_counter()
    for _ in range(N):
        lib(f)
    return (time.perf_counter() - t0) / N * 1e6


def main() -> None:
    ns = {"sys": sys, "launch_path": launch_path}
    exec(compile(LIBRARY, "/usr/lib/python3/site-packages/fake_triton.py", "exec"), ns)
    proton.start("/tmp/python_context_cost", context="python")
    base = min(loop(ns["noop"], ns["lambda_"]) for _ in range(3))
    walk = min(loop(ns["leaf"], ns["lambda_"]) for _ in range(3))
    with proton.scope("loop"):  # as in bench/workloads.py's launch loop
        scoped = min(loop(ns["leaf"], ns["lambda_"]) for _ in range(3))
    proton.finalize()
    libc = ctypes.CDLL(None)
    cmp = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    calls = [0]

    def counting(a, b):
        calls[0] += 1
        return 0

    arr = (ctypes.c_uint32 * N)()
    libc.qsort(arr, N, 4, cmp(counting))
    t0 = time.perf_counter()
    libc.qsort(arr, N, 4, cmp(lambda a, b: 0))
    callback = (time.perf_counter() - t0) / calls[0] * 1e6
    print(f"launch_path: {walk - base:.2f} us, in a scope {scoped - base:.2f} us; "
          f"ctypes callback: {callback:.2f} us")


if __name__ == "__main__":
    main()
