"""`proton.bench.do_bench`: kernel time of a function, measured by the profiler rather than by
CUDA events around the call (as Triton's `triton.testing.do_bench_proton`), so short kernels are
not drowned in launch overhead. Only kernels count: not copies, not synchronisation.

Usage:
    from proton.bench import do_bench
    ms = do_bench(lambda: matmul(a, b))                    # mean kernel ms per call
    p20, p50, p80 = do_bench(fn, quantiles=[0.2, 0.5, 0.8])
"""
from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import uuid
from typing import Callable, Sequence, cast

from .errors import ProtonError
from .format import CHILDREN_KEY, FRAME_KEY, METRICS_KEY, NAME_KEY, TIME
from .options import parse_options
from .runtime.profiler import profiler

RETURN_MODES = ("min", "max", "mean", "median", "all")


def do_bench(fn: Callable[[], object], warmup: float = 25, rep: float = 100,
             grad_to_none: Sequence | None = None, quantiles: Sequence[float] | None = None,
             return_mode: str = "mean"):
    """Run `fn` for about `warmup` ms, then about `rep` ms, each call in its own scope, and
    return its kernel time in ms: `return_mode` over the calls ("min", "max", "mean",
    "median", or "all" for the list), or the `quantiles` asked for.

    Raises:
        ProtonError: no GPU, or a profiler session could not start.
    """
    if return_mode not in RETURN_MODES:
        raise ProtonError(f"return_mode={return_mode!r} is not one of {', '.join(RETURN_MODES)}")
    import torch

    if not torch.cuda.is_available():
        raise ProtonError("do_bench measures GPU kernels: no CUDA GPU is available here")
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = start.elapsed_time(end) / 5
    warm = max(1, int(warmup / estimate)) if estimate > 0 else 1000
    repeat = max(1, int(rep / estimate)) if estimate > 0 else 1000
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    prefix = f"proton.bench.{uuid.uuid4().hex}."
    folder = tempfile.mkdtemp(prefix="proton-bench-")
    # a session of its own: it never joins the `proton` command's (nor writes where it does)
    sid = profiler.start(parse_options(os.path.join(folder, "bench")))
    try:
        from .scopes import scope

        for i in range(repeat):
            for x in grad_to_none or ():
                x.grad = None
            with scope(f"{prefix}{i:08d}"):
                fn()
        torch.cuda.synchronize()
        profiler.deactivate(sid, flushing=True)
        times = scope_times(cast(list, profiler.phase_data(sid, 0)), prefix)  # a tree's
    finally:
        profiler.finalize(sid)
        shutil.rmtree(folder, ignore_errors=True)
    return summarize(times, quantiles, return_mode)


def scope_times(doc: list, prefix: str) -> list[float]:
    """Kernel ms under each top-level scope named `prefix...`, in call order."""
    out = []
    for child in sorted(doc[0][CHILDREN_KEY], key=lambda c: c[FRAME_KEY][NAME_KEY]):
        if child[FRAME_KEY][NAME_KEY].startswith(prefix):
            ns, stack = 0.0, [child]
            while stack:
                node = stack.pop()
                ns += node[METRICS_KEY].get(TIME, 0) or 0
                stack.extend(node[CHILDREN_KEY])
            out.append(ns / 1e6)
    return out


def summarize(times: list[float], quantiles: Sequence[float] | None, return_mode: str):
    if not times:
        raise ProtonError("do_bench recorded no kernel: does the function launch any?")
    if quantiles is not None:
        ordered = sorted(times)
        picked = [_quantile(ordered, q) for q in quantiles]
        return picked[0] if len(picked) == 1 else picked
    if return_mode == "all":
        return times
    pick: dict[str, Callable[[list[float]], float]] = {
        "min": min, "max": max, "mean": statistics.fmean, "median": statistics.median}
    return pick[return_mode](times)


def _quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (torch.quantile's default)."""
    at = q * (len(ordered) - 1)
    lo, hi = math.floor(at), math.ceil(at)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (at - lo)
