"""Exact counters per scope (mode="counters:scopes=A,B"): CUPTI's range profiler counts every
kernel of the device between a listed scope's enter and exit on the main thread.

One nesting level is collected (CUPTI would replay the work once per level): a listed scope
opened inside another listed one is counted within the outer one. Ranges are pushed and
popped by frames.open_frame/close_frame through `enter`/`exit`.
"""
from __future__ import annotations

from typing import Sequence

from .. import format as fmt
from .counters import FLOPS_PER_TENSOR_CYCLE

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
           "sm__pipe_tensor_cycles_active.sum", "gpu__time_duration.sum",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
           "sm__cycles_active.avg.pct_of_peak_sustained_elapsed")
"""One pass with the range profiler on GA10x, AD10x, GH100 and GB100."""


class ScopeRanges:
    """The range profiler on the device the job uses, pushing a range per listed scope."""

    def __init__(self, lib_path: str, device: int, names: Sequence[str]) -> None:
        from .gpu import context_keeper, current_context, enter_context
        from .perfworks import Cupti, RangeProfiler

        self.names = frozenset(names)
        restore = context_keeper()
        try:
            enter_context(device)
            self.profiler = RangeProfiler(Cupti(lib_path), current_context(), device, METRICS)
        finally:
            restore()
        self.chip = self.profiler.chip
        self._open: list[str] = []
        self._paths: dict[str, int] = {}
        self._pushes: dict[str, int] = {}
        """Ranges pushed per name: CUPTI keeps one range per name and sums its pushes into
        it (seen on an H200: 3 pushes of one scope gave 1 range)."""
        self.errors = 0

    def scope_enter(self, top) -> None:
        """A main-thread frame opened (context/frames.ScopeListener)."""
        if top.name in self.names:
            self.enter(top.name, top.path)

    def scope_exit(self, top) -> None:
        self.exit(top.name)

    def enter(self, name: str, path: int) -> None:
        """A listed scope opened on the main thread (path: its node)."""
        self._open.append(name)
        if len(self._open) == 1:
            key = str(path)
            self._paths[key] = path
            try:
                self.profiler.push(key)
                self._pushes[key] = self._pushes.get(key, 0) + 1
            except Exception:  # a scope's enter must not raise: counted, said at the end
                self.errors += 1
                self._open.pop()

    def exit(self, name: str) -> None:
        if not self._open or self._open[-1] != name:
            return
        self._open.pop()
        if not self._open:
            try:
                self.profiler.pop()
            except Exception:
                self.errors += 1

    def finish(self) -> dict[int, dict[str, float]]:
        """Stop and read: {scope path: its EXACT metrics} (kernels still running are waited
        for by CUPTI's stop)."""
        while self._open:  # a scope left open at the end: its range closes here
            self.exit(self._open[-1])
        try:
            self.profiler.stop()
            ranges = self.profiler.ranges()
        finally:
            self.profiler.close()
        out: dict[int, list[float]] = {}
        for key, values in ranges:
            path = self._paths.get(key.rsplit("/", 1)[-1])
            if path is None:
                continue
            total = out.setdefault(path, [0.0] * 8)
            dram_r, dram_w, l2, tensor_cycles, ns, tensor, issue, sm = values
            pushes = float(self._pushes.get(key.rsplit("/", 1)[-1], 1))
            for i, v in enumerate((dram_r + dram_w, l2, tensor_cycles, ns, tensor * ns,
                                   issue * ns, sm * ns, pushes)):
                total[i] += v
        per_cycle = FLOPS_PER_TENSOR_CYCLE.get(self.chip)
        metrics = {}
        for path, (dram, l2, cycles, ns, tensor, issue, sm, n) in out.items():
            m = {"dram_bytes": dram, "l2_bytes": l2, "gpu_ns": ns, "ranges": n,
                 "tensor_active": tensor / ns if ns else 0.0,
                 "issue_active": issue / ns if ns else 0.0, "sm_active": sm / ns if ns else 0.0}
            if per_cycle is not None:
                m["tensor_flops"] = cycles * per_cycle
            metrics[path] = {fmt.EXACT + k + fmt.EXCLUSIVE: v for k, v in m.items()}
        return metrics

    @property
    def dropped(self) -> int:
        return self.profiler.dropped
