"""The host's speed now: ns a trivial Python call takes. On the H100 VM it is about 26 ns in
some processes and 42-50 in others (bench/probes/bimodal.py), and host-bound work follows it,
which is more than any profiler costs; the benchmarks record it around what they time."""
import time


def host_speed(calls: int = 20_000, reps: int = 3) -> float:
    """ns a trivial Python call takes now, best of `reps`."""
    f, best = len, float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            f("abc")
        best = min(best, time.perf_counter() - t0)
    return best / calls * 1e9
