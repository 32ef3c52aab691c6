"""What a CUPTI callback costs on a thread that runs no Python (PyTorch's autograd threads,
NCCL's), on this machine's CPU (no GPU needed):

    python bench/probe_foreign_thread.py [--launches 20000]

A C thread (built here with the machine's compiler) calls the python context's launch
callback as CUPTI would, enter and exit per launch, with no scope open. ctypes gives such a
thread a fresh Python thread state for every call unless one is kept for it
(PROTON_KEEP_THREAD_STATES=1, see CuptiCollector._launch_callback). Microseconds per launch,
best of 3 threads; the same calls from the main thread for reference.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import proton
from proton.cupti import collector as collector_module

from harness import THREAD_CALLBACK, launch_callback, runner  # bench/, beside this script

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=20_000)
    args = parser.parse_args()
    lib, n = runner(), args.launches
    proton.start(os.path.join(tempfile.mkdtemp(), "probe"), context="python")
    try:
        for label, keep in (("fresh thread state per call", False),
                            ("thread state kept", True)):
            on_api, cbid, enter, leave, _alive, collector = launch_callback(keep=keep)
            callback = THREAD_CALLBACK(on_api)
            seconds = min(lib.on_new_thread(callback, enter, leave, n, cbid) for _ in range(3))
            assert not collector.callback_errors, collector.callback_errors
            print(f"no-Python thread, {label}: {seconds / n * 1e6:.2f} us a launch")
        t0 = time.perf_counter()
        for _ in range(n):
            on_api(None, 1, cbid, enter)
            on_api(None, 1, cbid, leave)
        print(f"main thread: {(time.perf_counter() - t0) / n * 1e6:.2f} us a launch")
    finally:
        os.environ.pop(collector_module.KEEP_STATES_ENV, None)
        proton.finalize()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
