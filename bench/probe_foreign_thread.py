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
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import hot_paths  # bench/, beside this script

import proton
from proton.cupti import collector as collector_module

RUNNER = r"""
#include <pthread.h>
#include <stdint.h>
#include <time.h>
typedef void (*callback)(void *, uint32_t, uint32_t, void *);
typedef void (*python)(void);
struct job { callback cb; void *enter, *leave; int n; uint32_t cbid; double seconds;
             python before; };
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static void *run(void *arg) {
    struct job *j = arg;
    if (j->before) j->before(); /* Python once first: the thread may keep a thread state */
    double t0 = now();
    for (int i = 0; i < j->n; i++) {
        j->cb(0, 1, j->cbid, j->enter);
        j->cb(0, 1, j->cbid, j->leave);
    }
    j->seconds = now() - t0;
    return 0;
}
/* n launches' enter and exit callbacks on a new thread; seconds they took */
double on_new_thread(callback cb, void *enter, void *leave, int n, uint32_t cbid) {
    struct job j = {cb, enter, leave, n, cbid, 0, 0};
    pthread_t t;
    pthread_create(&t, 0, run, &j);
    pthread_join(t, 0);
    return j.seconds;
}
/* the same after `before` ran on the new thread */
double on_new_thread_after(callback cb, void *enter, void *leave, int n, uint32_t cbid,
                           python before) {
    struct job j = {cb, enter, leave, n, cbid, 0, before};
    pthread_t t;
    pthread_create(&t, 0, run, &j);
    pthread_join(t, 0);
    return j.seconds;
}
"""
BEFORE = ctypes.CFUNCTYPE(None)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                            ctypes.c_void_p)


def runner() -> ctypes.CDLL:
    work = tempfile.mkdtemp(prefix="proton-probe-")
    src, out = os.path.join(work, "runner.c"), os.path.join(work, "runner.so")
    with open(src, "w") as f:
        f.write(RUNNER)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", out, src,
                    "-lpthread"], check=True)
    lib = ctypes.CDLL(out)
    lib.on_new_thread.restype = ctypes.c_double
    lib.on_new_thread.argtypes = [CALLBACK, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                  ctypes.c_uint32]
    lib.on_new_thread_after.restype = ctypes.c_double
    lib.on_new_thread_after.argtypes = [CALLBACK, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                        ctypes.c_uint32, BEFORE]
    return lib


def launch_callback(keep: bool):
    """hot_paths.launch_callback, built with PROTON_KEEP_THREAD_STATES set to `keep`."""
    os.environ[collector_module.KEEP_STATES_ENV] = "1" if keep else "0"
    return hot_paths.launch_callback()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=20_000)
    args = parser.parse_args()
    lib, n = runner(), args.launches
    proton.start(os.path.join(tempfile.mkdtemp(), "probe"), context="python")
    try:
        for label, keep in (("fresh thread state per call", False),
                            ("thread state kept", True)):
            on_api, cbid, enter, leave, _alive, collector = launch_callback(keep)
            callback = CALLBACK(on_api)
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
