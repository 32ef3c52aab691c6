"""Where CUPTI's thread spends its time per launch, on this machine's CPU (no GPU needed):

    python bench/buffer_costs.py [--launches 100000] [--scopes 1000] [--repeats 5]

A buffer laid out as CUPTI fills it (per launch: an external-correlation record, a driver API
record, a kernel record, with cupti-python's own record layouts) is taken through each step of
the collector's buffer callback:
  * walk: the records' offsets, by a ctypes call per record (Python) or the C helper in one
    call. The stand-in for cuptiActivityGetNextRecord is a C function built here that steps by
    each kind's record size; CUPTI's own function costs the same either way;
  * read: the fields with numpy (collector.read_records without the join);
  * join + route: the Attributor joins by correlation id and the KernelRouter sums per node;
  * walk + read in C: the helper reads the fields as it walks (the python context's way);
  * walk + read + join in C: and joins them, summed per path (the shadow context's way): the
    router gets a buffer's sums.
Nanoseconds per launch, best of the repeats. These run on CUPTI's thread holding the GIL (the
C calls excepted), so the launching thread waits for them.

    python bench/buffer_costs.py --launches 40000 --buffers 60

instead gives the peak RSS growth of that many buffers more through the default path, on a
thread of their own as CUPTI's (every third a seventh as full): what a long run's buffers
leave resident.

    python bench/buffer_costs.py --launches 40000 --contention 6

instead gives what the buffer work on CUPTI's thread costs the launching thread (the GIL they
share): a stand-in launch loop (Python, then a C call with the GIL released, as Triton's
launcher calls the driver) hands a buffer to a thread every --launches iterations; in turns
of that many phases the thread works each buffer through the default path or drops it.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import resource
import subprocess
import tempfile
import threading
import time

import numpy as np
from cupti import cupti

from proton.cupti import native
from proton.cupti.collector import CuptiCollector
from proton.cupti.pipeline import walk
from proton.cupti.settings import CollectorSettings
from proton.data.paths import ROOT, SCOPE, paths
from proton.runtime.router import KernelRouter
from proton.runtime.session import Session

FAKE_NEXT = r"""
#include <stddef.h>
#include <stdint.h>
#include <time.h>
static size_t sizes[64];
void fake_sizes(int kind, size_t size) { sizes[kind] = size; }
/* cuptiActivityGetNextRecord's contract over records whose size follows from their kind */
int fake_next(uint8_t *buffer, size_t valid, void **record) {
    uint8_t *at = *record ? (uint8_t *)*record + sizes[*(uint32_t *)*record] : buffer;
    if (at >= buffer + valid) return 14;
    *record = at;
    return 0;
}
/* a launch call's time in the driver, the GIL released (ctypes.CDLL) */
void spin(long ns) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}
"""


def fake_library() -> ctypes.CDLL:
    work = tempfile.mkdtemp(prefix="proton-bench-")
    src, out = os.path.join(work, "fake.c"), os.path.join(work, "fake.so")
    with open(src, "w") as f:
        f.write(FAKE_NEXT)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", out, src],
                   check=True)
    return ctypes.CDLL(out)


def buffer(collector: CuptiCollector, launches: int, scopes: list[int], name: bytes):
    """The records of `launches` launches, as bytes, with their kinds' sizes."""
    K = cupti.ActivityKind
    ext = np.zeros(launches, dtype=cupti.activity_external_correlation_dtype)
    api = np.zeros(launches, dtype=cupti.activity_api_dtype)
    kern = np.zeros(launches, dtype=cupti.activity_kernel10_dtype)
    corr = np.arange(1, launches + 1)
    ext["kind"], ext["correlation_id"] = int(K.EXTERNAL_CORRELATION), corr
    ext["external_kind"] = collector._custom
    ext["external_id"] = np.array(scopes, dtype=np.uint64)[np.arange(launches) % len(scopes)]
    launch = next(c for c, n in collector._driver_cbids.items() if n == "cuLaunchKernel")
    api["kind"], api["cbid"], api["correlation_id"] = int(K.DRIVER), launch, corr
    api["start"] = corr * 1000
    kern["kind"], kern["correlation_id"], kern["name"] = int(K.CONCURRENT_KERNEL), corr, \
        ctypes.addressof(name)
    kern["start"], kern["end"] = corr * 1000 + 500, corr * 1000 + 900
    rows = np.empty(launches, dtype=[("e", ext.dtype), ("a", api.dtype), ("k", kern.dtype)])
    rows["e"], rows["a"], rows["k"] = ext, api, kern
    sizes = {int(K.EXTERNAL_CORRELATION): ext.dtype.itemsize, int(K.DRIVER): api.dtype.itemsize,
             int(K.CONCURRENT_KERNEL): kern.dtype.itemsize}
    return rows.tobytes(), sizes


def best(f, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=100_000)
    ap.add_argument("--scopes", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--buffers", type=int, default=0,
                    help="instead of the timings: peak RSS growth over this many buffers "
                         "through the default path (walk, read and join in C, route)")
    ap.add_argument("--contention", type=int, default=0,
                    help="instead of the timings: the launching thread's cost of the buffer "
                         "work, in this many phases with and without it in turn")
    ap.add_argument("--python-us", type=float, default=8.0,
                    help="--contention: the stand-in launch's Python time")
    ap.add_argument("--driver-us", type=float, default=4.0,
                    help="--contention: its C call's time, the GIL released")
    args = ap.parse_args()
    scopes = [paths.intern(ROOT, f"s{i}", SCOPE) for i in range(args.scopes)]
    name = ctypes.create_string_buffer(b"tiny_kernel")
    sessions: dict = {}
    router = KernelRouter(sessions)
    # Python's pipeline
    collector = CuptiCollector(CollectorSettings(router.on_kernels, native=False))
    data, sizes = buffer(collector, args.launches, scopes, name)
    raw = (ctypes.c_uint64 * (len(data) // 8 + 1))()
    ctypes.memmove(raw, data, len(data))
    address, valid = ctypes.addressof(raw), len(data)
    fake = fake_library()
    for kind, size in sizes.items():
        fake.fake_sizes(kind, size)
    step = ctypes.PyDLL(fake._name).fake_next  # as buffers.py binds CUPTI's
    step.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    step.restype = ctypes.c_int
    offsets = np.array(walk(step, address, valid), dtype=np.int64)  # as the C walk gave them
    c_walk = native.Columns(native.helper(), step, [])  # walks, reads no kind: the walk alone
    assert c_walk(address, valid)[1] == len(offsets)
    view = np.frombuffer((ctypes.c_char * valid).from_address(address), dtype=np.uint8)
    holder = type("Raw", (), {"next_record": step, "on_buffer": None})()  # keeps `raw` alive

    def read_only():
        collector.attributor.add_columns = lambda *a: None
        collector.pipeline.read_records(view, offsets)
        del collector.attributor.add_columns

    def read_join_route_with(read):
        sessions.clear()
        s = Session(1, "b", "/dev/null", "shadow", "tree", None)
        s.intervals.append([0, -1])
        sessions[1] = s
        read()

    def read_join_route():
        read_join_route_with(lambda: collector.pipeline.read_records(view, offsets))

    per = 1e9 / args.launches
    rows = [("walk, Python (a ctypes call per record)", best(lambda: walk(step, address, valid),
                                                            args.repeats)),
            ("walk, C helper (one call, GIL released)", best(lambda: c_walk(address, valid),
                                                           args.repeats)),
            ("read fields (numpy)", best(read_only, args.repeats)),
            ("read + join + route", best(read_join_route, args.repeats))]
    rows.append(("join + route (by difference)", rows[3][1] - rows[2][1]))
    # C reads, the Attributor joins
    read_in_c = CuptiCollector(CollectorSettings(router.on_kernels, native=True))
    read_in_c.pipeline.attach(holder)

    def c_read_only():
        read_in_c.attributor.add_columns = lambda *a: None
        read_in_c.pipeline.read(address, valid)
        del read_in_c.attributor.add_columns

    def c_read_join_route():
        read_join_route_with(lambda: read_in_c.pipeline.read(address, valid))

    rows.append(("walk + read fields in C", best(c_read_only, args.repeats)))
    rows.append(("walk + read in C, join + route (python context)",
                 best(c_read_join_route, args.repeats)))
    joined = CuptiCollector(CollectorSettings(router.on_kernels, groups=router.on_groups,
                                              native=True))
    joined.pipeline.attach(holder)
    assert joined.pipeline.join is not None

    def c_join():
        joined.shaper.groups = lambda *a: None
        joined.pipeline.read(address, valid)
        joined.shaper.groups = router.on_groups

    if args.buffers:  # what a long run's buffers leave resident (glibc keeps freed blocks)
        read_join_route_with(lambda: None)
        joined.pipeline.read(address, valid)  # the first buffer's own allocations aside
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        small, _ = buffer(collector, args.launches // 7, scopes, name)
        small_raw = (ctypes.c_uint64 * (len(small) // 8 + 1))()
        ctypes.memmove(small_raw, small, len(small))

        def buffers():  # on another thread, as CUPTI's; full and partly filled buffers
            for i in range(args.buffers):
                if i % 3:
                    joined.pipeline.read(address, valid)
                else:
                    joined.pipeline.read(ctypes.addressof(small_raw), len(small))

        worker = threading.Thread(target=buffers)
        worker.start()
        worker.join()
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
        print(f"peak RSS growth over {args.buffers} more buffers of {args.launches:,} launches: "
              f"{grown:.1f} MB")
        return
    if args.contention:
        contention(args, fake, lambda: read_join_route_with(
            lambda: joined.pipeline.read(address, valid)))
        return
    rows.append(("walk + read + join in C", best(c_join, args.repeats)))
    rows.append(("walk + read + join in C, route (shadow context, the default)",
                 best(lambda: read_join_route_with(lambda: joined.pipeline.read(address, valid)),
                      args.repeats)))
    print(f"| step ({args.launches:,} launches, 3 records each, {args.scopes} scopes) "
          "| ns per launch |")
    print("|---|---|")
    for label, seconds in rows:
        print(f"| {label} | {seconds * per:,.0f} |")


def contention(args, fake: ctypes.CDLL, work) -> None:
    """The stand-in launch loop's time per launch while another thread works each buffer
    (`work`) or drops it, in turns; each phase is 4 buffers' worth of launches."""
    import queue

    driver = fake.spin  # CDLL: the GIL released, as around the driver's launch call
    driver.argtypes, driver.restype = [ctypes.c_long], None
    driver_ns = int(args.driver_us * 1000)
    python_end = args.python_us * 1e-6
    handed: queue.Queue = queue.Queue()
    working = [False]

    def cupti_thread():
        while handed.get() is not None:
            if working[0]:
                work()

    def launch():  # Python for python_us (arguments, the launcher's checks), then the driver
        end = time.perf_counter() + python_end
        while time.perf_counter() < end:
            pass
        driver(driver_ns)

    thread = threading.Thread(target=cupti_thread)
    thread.start()
    per: dict[bool, list[float]] = {False: [], True: []}
    for phase in range(2 * args.contention):
        working[0] = with_work = phase % 2 == 1
        t0 = time.perf_counter()
        for _ in range(4):
            for _ in range(args.launches):
                launch()
            handed.put(1)  # a full buffer, as CUPTI hands it over
        per[with_work].append((time.perf_counter() - t0) / (4 * args.launches) * 1e6)
    handed.put(None)
    thread.join()
    bare, worked = (sorted(per[k])[len(per[k]) // 2] for k in (False, True))
    print(f"| launching thread, us a launch (median of {args.contention} phases) | buffers "
          f"dropped | buffers worked (default path) | added |")
    print("|---|---|---|---|")
    print(f"| {args.python_us:g} us Python + {args.driver_us:g} us driver, a buffer every "
          f"{args.launches:,} launches | {bare:.3f} | {worked:.3f} | {worked - bare:+.3f} |")


if __name__ == "__main__":
    main()
