"""mode="counters" as a part: PM sampling of every GPU in use (cupti/counters.py), its samples
split over the kernels as their records come and refitted when a session is written; with
counters:scopes=A,B, CUPTI's range profiler around the listed scopes (cupti/scope_ranges.py,
a scope listener) instead.

One mode for the live sessions, as in Triton's Proton: the sampler is started once, by the
first counters session, and stopped by the last. The router hands it each buffer's kernels
(KernelRouter.listener, CUPTI's thread); its sums come back on the counters' thread (`add`).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ...data.paths import paths
from ...errors import SessionError
from ...report import debug, warn
from .base import MODE_REFUSED, Part, mode_text, session_mode

if TYPE_CHECKING:
    from ...cupti.counters import CounterSampler
    from ...cupti.scope_ranges import ScopeRanges
    from ...options import CounterOptions, SessionOptions
    from ..session import Session


class CountersPart(Part):
    """Hardware counters on each kernel (or each listed scope) of the counters sessions."""

    name = "counters"

    def __init__(self, profiler) -> None:
        super().__init__(profiler)
        self.sampler: CounterSampler | None = None
        """cupti.counters.CounterSampler while a mode="counters" session is live."""
        self.ranges: ScopeRanges | None = None
        """cupti.scope_ranges.ScopeRanges while a counters:scopes=... session is live: the
        main thread's listed scopes push and pop its ranges (the part's scope listener)."""

    def wants(self, opts: SessionOptions) -> bool:
        return opts.counters is not None

    def check(self, opts: SessionOptions, live: list[Session]) -> None:
        for s in live:
            if s.parts.get(self.name) != opts.counters:
                raise SessionError(
                    f"{MODE_REFUSED}: session {s.id} runs with mode={session_mode(s)}, this "
                    f"one asks for mode={mode_text(opts.pc, opts.counters)}; finalize the live "
                    "sessions first")

    def attach(self, session: Session, opts: SessionOptions) -> None:
        session.parts[self.name] = opts.counters
        self._start(opts.counters)

    def _start(self, options: CounterOptions | None) -> None:
        """PM sampling on every GPU for mode="counters" (once for the live sessions). Where
        counters cannot be read, one line says why and the session goes on with kernel
        times."""
        if self.sampler is not None or self.ranges is not None:
            return
        collector = self.profiler.collector
        if collector is None or options is None:  # no GPU: said once, scopes get CPU time
            return
        if options.scopes:
            self._start_scope_ranges(options.scopes)
            return
        from ...cupti import gpu
        from ...cupti.buffers import loaded_libcupti
        from ...cupti.counters import CounterSampler
        from ...cupti.perfworks import CountersError

        try:
            self.sampler = CounterSampler(loaded_libcupti() or "libcupti.so",
                                          gpu.devices_in_use(), options.interval, self.add)
        except (CountersError, OSError) as exc:
            _refused("hardware counters", exc, " (if another profiler holds them: stop Nsight "
                     "Compute, Nsight Systems GPU metrics or DCGM profiling)")
            return
        self.profiler.router.listener = self.sampler

    def _start_scope_ranges(self, names) -> None:
        """CUPTI's range profiler for counters:scopes=A,B."""
        from ...cupti import gpu
        from ...cupti.buffers import loaded_libcupti
        from ...cupti.perfworks import CountersError
        from ...cupti.scope_ranges import ScopeRanges

        try:
            self.ranges = self.listener = ScopeRanges(loaded_libcupti() or "libcupti.so",
                                                      gpu.devices_in_use()[0], names)
        except (CountersError, OSError, IndexError) as exc:
            _refused("the scopes' counters", exc)

    def add(self, finished: list) -> None:
        """Kernels' counter sums (cupti.counters): on their node, in each counters session
        that was active at the launch (the counters' thread)."""
        sessions = [s for s in list(self.profiler.sessions.values()) if s.parts.get(self.name)]
        for node, launch, _, metrics in finished:
            for s in sessions:
                if s.active_at(launch):
                    s.add(node, metrics, fold=False)

    def finish(self, session: Session, last: bool, devices: dict) -> None:
        self._finish_scope_ranges(session, last)
        self._refit(session, last)

    def _finish_scope_ranges(self, session: Session, last: bool) -> None:
        """The last counters session ends: the listed scopes' exact counts on their nodes."""
        ranges = self.ranges
        if ranges is None or not last:
            return
        self.ranges = self.listener = None
        self.profiler.parts.listen()
        try:
            found = ranges.finish()
        except Exception as exc:
            warn(f"counters: the scopes' counts could not be read ({exc}); the profile keeps "
                 "its kernel times")
            return
        for path, metrics in found.items():
            session.add(path, metrics)
        missing = sorted(ranges.names - {p.name for p in (paths.frames[x] for x in found)})
        if missing:
            warn(f"counters: no GPU work was counted in scope {', '.join(map(repr, missing))} "
                 "(not entered on the main thread, or nothing ran in it)")
        if ranges.dropped or ranges.errors:
            warn(f"counters: {ranges.dropped + ranges.errors} scope ranges were lost "
                 "(over 4,096 in one session)")

    def _refit(self, session: Session, last: bool) -> None:
        """The session's kernels' counters from rates fitted over every sample (see
        cupti.counters.Rates), in place of the time split's; the last counters session to
        end stops sampling first."""
        sampler = self.sampler
        if sampler is None:
            return
        if last and not self._finish_sampler(sampler):
            return
        from ...cupti.counters import refit

        try:
            t0 = time.monotonic()
            rates, chips = sampler.fitted()
            with session.lock:
                changed = refit(session.nodes, rates, chips)
            debug(f"counters: {changed} kernel nodes refitted in {time.monotonic() - t0:.2f} s")
        except Exception as exc:  # the time split is still worth having
            warn(f"counters: the per-kernel fit failed ({exc}); kernels keep the time split")

    def _finish_sampler(self, sampler: CounterSampler) -> bool:
        """The last counters session ends: stop sampling, join the rest, say what it cost."""
        self.sampler = self.profiler.router.listener = None
        try:
            sampler.finish()
        except Exception as exc:  # the time profile is still worth having
            warn(f"counters could not be read at the end ({exc}); the profile keeps its "
                 "kernel times")
            return False
        late = sum(j.late_ns for j in sampler.joins.values())
        debug(f"counters: {sampler.samples} samples every {sampler.interval_us} us on GPUs "
              f"{sampler.devices}, decoded in "
              f"{sampler.decode_s:.2f} s; kernels: {sampler.kernels_in} in, "
              f"{sampler.kernels_out} joined, {sampler.unsampled} on no sampled GPU; "
              f"{late / 1e6:.3f} ms of kernel time came late; paused for {sampler.forks} forks")
        if sampler.unsampled:
            warn(f"counters: {sampler.unsampled} kernels ran on a GPU not in use when the "
                 f"session started (sampled: GPU {', '.join(map(str, sampler.devices))}); "
                 "start the session after the job has touched every GPU it uses")
        if sampler.lost:
            warn(f"counters: the GPU's sample buffer overflowed {sampler.lost} times and "
                 "samples were lost; sample less often (mode='counters:interval=US' with a "
                 "larger US)")
        return True

    def after_fork_in_child(self) -> None:
        self.ranges = self.listener = None  # the parent's range profiler (the sampler pauses)


def _refused(what: str, exc: BaseException, hint: str = "") -> None:
    """One line: why `what` cannot be read here (the fix, by CUPTI's error code), and that
    the session goes on with kernel times."""
    from ...cupti.perfworks import WHY

    why = WHY.get(getattr(exc, "code", 0)) or f"{exc}{hint}"
    warn(f"mode='counters': {what} cannot be read here: {why}; the session goes on with "
         "kernel times")
