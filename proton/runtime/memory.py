"""torch's CUDA caching allocator per scope (proton.start(memory=True), `proton --memory`).

At each enter and exit of a scope on the main thread (context/frames.py calls `enter` and
`exit` while `frames.memory` is set) the allocator's counters are read once: bytes allocated
now, the peak since the last reset, and the running totals of bytes allocated and freed. A
scope's `mem_alloc_bytes` and `mem_freed_bytes` are the totals' growth while it was open, its
`mem_live_bytes` what was allocated at its exit, its `mem_peak_bytes` the highest allocation
while it was open. The peak is read around torch's peak counter, reset at every enter and
exit: each open scope keeps the highest value seen so far in it, a child's peak is folded into
its parent's at the child's exit, and a parent's into its own before a child's enter resets
the counter, so no peak is lost to a nesting. A user's own `max_memory_allocated()` then reads
the peak since Proton's last reset, not since theirs (not restored).

Which reads: torch._C._cuda_memoryStats (the nested dict torch.cuda.memory_stats flattens;
one C call) and torch._C._cuda_resetPeakMemoryStats, else torch.cuda's public functions.
Cost: two reads and two resets per scope entry, tens of microseconds (torch builds a dict of
~100 counters per read; see docs/memory.md for the numbers measured on the H100), so it is a
switch of its own, off by default: never on the launch path, but a step of 20 scopes pays it
40 times.

What is measured: the device current at the first read after CUDA started (a job on one GPU
per process); the main thread's scopes (autograd's backward thread allocates while the main
thread waits in backward(), inside the main thread's open scopes, which count it). torch is
looked for in sys.modules at each enter until the job has imported it (`proton --memory`
starts before the script imports torch): Proton never imports it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Protocol


@dataclass(slots=True)
class Reading:
    """The allocator's counters at one moment (bytes)."""

    allocated: int
    """Allocated now."""
    peak: int
    """The most allocated at once since the peak was last reset."""
    total_alloc: int
    """Allocated since the process started (a running total)."""
    total_freed: int
    """Freed since the process started (a running total)."""


NOTHING = Reading(0, 0, 0, 0)
"""Before CUDA starts, the allocator holds nothing."""


class Source(Protocol):
    """Where readings come from (torch's allocator; a stand-in in tests)."""

    def read(self) -> Reading: ...

    def reset_peak(self) -> None: ...


@dataclass(slots=True)
class Measured:
    """One entry of a scope, from its enter to its exit."""

    alloc: int
    freed: int
    peak: int
    live: int


@dataclass(slots=True)
class _Entry:
    path: int
    frame: Any
    """The frame (context/stack.Open) whose exit closes it."""
    alloc0: int
    freed0: int
    peak: int
    """The highest allocation seen in it so far (its closed children's included)."""


class PeakStack:
    """The open scopes' readings, nested so that each scope's peak covers its children's.

    Usage:
        stack = PeakStack(source)
        stack.enter(path, frame); ...; path, measured = stack.exit(frame)
    """

    def __init__(self, source: Source) -> None:
        self.source = source
        self.open: list[_Entry] = []

    def enter(self, path: int, frame: Any) -> None:
        r = self.source.read()
        if self.open:  # the parent's peak so far, before the reset hides it
            top = self.open[-1]
            top.peak = max(top.peak, r.peak)
        self.source.reset_peak()
        self.open.append(_Entry(path, frame, r.total_alloc, r.total_freed, r.allocated))

    def exit(self, frame: Any) -> tuple[int, Measured] | None:
        """The entry `frame` closes (None for a frame entered before measuring began)."""
        opened = self.open
        at = len(opened) - 1
        while at >= 0 and opened[at].frame is not frame:
            at -= 1
        if at < 0:
            return None
        r = self.source.read()
        while len(opened) > at + 1:  # entries above it never closed (a fork, a bug): fold
            above = opened.pop()
            opened[-1].peak = max(opened[-1].peak, above.peak)
        e = opened.pop()
        peak = max(e.peak, r.peak, r.allocated)
        if opened:
            opened[-1].peak = max(opened[-1].peak, peak)
        self.source.reset_peak()
        return e.path, Measured(max(0, r.total_alloc - e.alloc0),
                                max(0, r.total_freed - e.freed0), peak, r.allocated)

    def clear(self) -> None:
        self.open.clear()


class TorchAllocator:
    """Readings of torch's CUDA caching allocator on one device (see the module docstring)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.device: int | None = None
        """Chosen at the first read after CUDA started."""
        c = torch._C
        stats = getattr(c, "_cuda_memoryStats", None)
        reset = getattr(c, "_cuda_resetPeakMemoryStats", None)
        if stats is not None and reset is not None:
            self._stats, self._reset, self._nested = stats, reset, True
        else:  # a torch without the private bindings: the public functions, flat keys
            self._stats, self._reset = torch.cuda.memory_stats, torch.cuda.reset_peak_memory_stats
            self._nested = False

    def read(self) -> Reading:
        if self.device is None:
            if not self.torch.cuda.is_initialized():
                return NOTHING
            self.device = self.torch.cuda.current_device()
        if self._nested:
            s = self._stats(self.device)["allocated_bytes"]["all"]
            return Reading(s["current"], s["peak"], s["allocated"], s["freed"])
        s = self._stats(self.device)
        return Reading(s.get("allocated_bytes.all.current", 0),
                       s.get("allocated_bytes.all.peak", 0),
                       s.get("allocated_bytes.all.allocated", 0),
                       s.get("allocated_bytes.all.freed", 0))

    def reset_peak(self) -> None:
        if self.device is not None:
            self._reset(self.device)


class MemoryTracker:
    """What context/frames.py calls at the main thread's scope enters and exits (as
    `frames.memory`); each measured entry goes to `sink(path, measured)`."""

    def __init__(self, sink: Callable[[int, Measured], None],
                 source: Source | None = None) -> None:
        self.sink = sink
        self.stack: PeakStack | None = PeakStack(source) if source is not None else None
        self.failed: str | None = None
        """Why reading the allocator stopped (said once, at the end)."""

    @property
    def measuring(self) -> bool:
        return self.stack is not None

    def enter(self, path: int, frame: Any) -> None:
        stack = self.stack
        if stack is None:
            torch = sys.modules.get("torch")
            if torch is None or self.failed is not None:
                return
            try:
                stack = self.stack = PeakStack(TorchAllocator(torch))
            except Exception as exc:  # a torch without CUDA: said at the end
                self.failed = f"{type(exc).__name__}: {exc}"
                return
        try:
            stack.enter(path, frame)
        except Exception as exc:  # a failing read must never break the user's scope
            self._stop(exc)

    def exit(self, frame: Any) -> None:
        stack = self.stack
        if stack is None or not stack.open:
            return
        try:
            got = stack.exit(frame)
        except Exception as exc:
            self._stop(exc)
            return
        if got is not None:
            self.sink(*got)

    def _stop(self, exc: BaseException) -> None:
        self.failed = f"{type(exc).__name__}: {exc}"
        self.stack = None
