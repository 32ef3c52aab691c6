"""torch's CUDA caching allocator per scope (proton.start(memory=True), `proton --memory`).

At each enter and exit of a scope on the main thread (context/frames.py calls `enter` and
`exit` while the tracker listens, frames.listeners) the allocator's counters are read once: bytes
allocated now, the peak since the last reset, the running totals of bytes allocated and freed, and the
running count of allocations. A scope's `mem_alloc_bytes` and `mem_freed_bytes` are the totals'
growth while it was open, its `mem_live_bytes` what was allocated at its exit, its
`mem_peak_bytes` the highest allocation while it was open. The peak is read around torch's peak
counter, reset at every enter and exit: each open scope keeps the highest value seen so far in
it, a child's peak is folded into its parent's at the child's exit, and a parent's into its own
before a child's enter resets the counter, so no peak is lost to a nesting. A user's own
`max_memory_allocated()` then reads the peak since Proton's last reset, not since theirs (not
restored).

What a scope keeps (the leak rule's figure) needs each allocation's identity, which counters
have not: another scope's tensors grow the live bytes at a scope's exit too, and a tensor one
scope allocates may be freed by another later. So torch's allocator history is recorded as well
(`torch.cuda.memory._record_memory_history(context=None)`: an event per allocation, no stacks),
and each allocation is labelled with the main thread's innermost open scope entry through
torch's memory metadata (`_set_memory_metadata("proton:PATH.K")`, the K-th entry of that scope,
set at every enter and exit; torch 2.10+). The history is read in batches (every DRAIN
allocations, then cleared, when Proton turned it on) into `Owners`: which entry made each block
still allocated, checked against the snapshot's blocks, so frees need not be recorded. When a
phase is written, `MemoryTracker.judge` says per scope what its entries after the first kept.
A job that records its own history keeps it: Proton then neither changes its settings, nor
clears it, nor turns it off, and reads it when a phase is written (see docs/memory.md).

Which reads: torch._C._cuda_memoryStats (the nested dict torch.cuda.memory_stats flattens;
one C call) and torch._C._cuda_resetPeakMemoryStats, else torch.cuda's public functions.
Cost: two reads and two resets per scope entry, tens of microseconds (torch builds a dict of
~100 counters per read; see docs/memory.md for the numbers measured), two labels per entry
and the history's events, so it is a switch of its own, off by default: never on the launch
path, but a step of 20 scopes pays it 40 times.

What is measured: the device current at the first read after CUDA started (a job on one GPU
per process); the main thread's scopes (autograd's backward thread allocates while the main
thread waits in backward(), inside the main thread's open scopes, which count it in the
counters; torch's labels are the thread's own, so its allocations are nobody's in what scopes
keep). torch is looked for in sys.modules at each enter until the job has imported it
(`proton --memory` starts before the script imports torch): Proton never imports it.

Threads: enter, exit and the batched reads run on the main thread; `judge` on the thread that
writes a phase (under `lock`, as the reads).
"""
from __future__ import annotations

import inspect
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..data.paths import SCOPE


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
    allocations: int = 0
    """Allocations made since the process started (a running count)."""


NOTHING = Reading(0, 0, 0, 0)
"""Before CUDA starts, the allocator holds nothing."""

_LABEL = re.compile(r"proton:(\d+)\.(\d+)")
"""The memory metadata of an allocation made in a scope entry, "proton:PATH.K": the scope's
path id, and which of its entries (0: the first)."""
DRAIN = 8192
"""Allocations between two reads of a history Proton turned on (torch builds a dict per event
read; each read clears what it took, so each event is read once)."""
MAX_ENTRIES = 4 * DRAIN
"""Its ring when Proton turns the history on: a read's allocations and, where torch cannot
skip them, the frees and segment events among them (~150 bytes of host memory an event)."""
SKIP = ("free_requested", "free_completed", "segment_alloc", "segment_free", "snapshot")
"""What it asks torch not to record (skip_actions, torch 2.10+): only allocations are read."""


class NoHistory(Exception):
    """The allocator's history cannot label allocations here (said once, at the end)."""


@dataclass(slots=True)
class Trace:
    """One read of the allocator's history."""

    events: list[dict]
    """torch's trace entries, oldest first: {"action", "addr", "size", "time_us",
    "user_metadata", ...}."""
    live: set[int]
    """The addresses of the blocks allocated at the read."""
    complete: bool = True
    """False when events may have been dropped before or after these (the ring wrapped, or an
    allocation came between the read and its clearing)."""
    allocations: int | None = None
    """The allocator's count of allocations made, just before the read (a job's own history
    is checked against it: fewer allocations in it than made means it dropped some)."""


class History(Protocol):
    """torch's allocator history (TorchHistory; a replay in tests)."""

    device_bytes: int | None
    """The device's memory."""
    saved: str
    """The thread's memory metadata before Proton's labels (restored at the end)."""
    mine: bool
    """Turned on by Proton: read in batches and cleared after each read (else the job's own:
    read when a phase is judged, all it holds)."""

    def label(self, text: str) -> None:
        """Label the calling thread's allocations from now on."""

    def recording(self) -> bool:
        """Whether it still records (the job may turn it off)."""

    def read(self) -> Trace:
        """The events it holds (Proton's own: since the last read, which clears them)."""

    def close(self) -> None:
        """Restore the label; turn off a history Proton turned on."""


class Source(Protocol):
    """Where readings come from (torch's allocator; a stand-in in tests). A source may also
    offer `history() -> History | None` (None: not yet, CUDA has not started; raises
    NoHistory where it never can)."""

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
class Kept:
    """What a scope's judged entries kept (MemoryTracker.judge)."""

    bytes: int
    """Of its own allocations, still allocated when judged."""
    entries: int
    """Judged entries that left at least one allocation allocated."""
    judged: int
    """Its entries judged: after its first, closed since the last judgment, while recorded."""


@dataclass(slots=True)
class _Entry:
    path: int
    frame: Any
    """The frame (context/stack.Open) whose exit closes it."""
    alloc0: int
    freed0: int
    peak: int
    """The highest allocation seen in it so far (its closed children's included)."""
    label: str = ""
    """Its allocations' label (_LABEL), while the history is recorded."""


class PeakStack:
    """The open scopes' readings, nested so that each scope's peak covers its children's.

    Usage:
        stack = PeakStack(source)
        stack.enter(path, frame); ...; path, measured = stack.exit(frame)
    """

    def __init__(self, source: Source) -> None:
        self.source = source
        self.open: list[_Entry] = []
        self.last: Reading = NOTHING
        """The latest reading."""

    def enter(self, path: int, frame: Any) -> None:
        r = self.last = self.source.read()
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
        r = self.last = self.source.read()
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
            s = self._stats(self.device)
            b, n = s["allocated_bytes"]["all"], s["allocation"]["all"]
            return Reading(b["current"], b["peak"], b["allocated"], b["freed"], n["allocated"])
        s = self._stats(self.device)
        return Reading(s.get("allocated_bytes.all.current", 0),
                       s.get("allocated_bytes.all.peak", 0),
                       s.get("allocated_bytes.all.allocated", 0),
                       s.get("allocated_bytes.all.freed", 0),
                       s.get("allocation.all.allocated", 0))

    def reset_peak(self) -> None:
        if self.device is not None:
            self._reset(self.device)

    def history(self) -> TorchHistory | None:
        """The device's allocator history, labelled (None until CUDA started)."""
        if self.device is None:
            return None
        return TorchHistory(self.torch, self.device, lambda: self.read().allocations)


class TorchHistory:
    """torch's allocator history on one device, its allocations labelled per scope entry.

    Turned on by Proton (mine) unless the job records its own: then its settings, its ring and
    its on/off stay the job's, and it is read only when a phase is judged. Proton's own: every
    action but allocations skipped where torch can, no stacks, a ring of MAX_ENTRIES, read
    every DRAIN allocations and cleared after each read."""

    def __init__(self, torch: Any, device: int, allocations: Callable[[], int]) -> None:
        mem = torch.cuda.memory
        try:  # the binding itself where there is one: it is called at every enter and exit
            self._set = getattr(torch._C, "_cuda_setMemoryMetadata", None) or \
                mem._set_memory_metadata
            get, self._snapshot = mem._get_memory_metadata, mem._snapshot
        except AttributeError:
            raise NoHistory(f"torch {getattr(torch, '__version__', '?')} cannot label "
                            "allocations (torch.cuda.memory._set_memory_metadata: torch "
                            "2.10+)") from None
        record = getattr(mem, "_record_memory_history_impl", mem._record_memory_history)
        params = inspect.signature(record).parameters
        if "context" not in params or "max_entries" not in params:
            raise NoHistory("torch's _record_memory_history takes no context= or "
                            "max_entries= here") from None
        self._record, self._params = record, params
        self.device = device
        self._allocations = allocations
        self.saved: str = get()
        self.device_bytes: int | None = None
        try:
            self.device_bytes = int(torch.cuda.get_device_properties(device).total_memory)
        except Exception:  # noqa: BLE001 - a figure to project against, not needed
            pass
        enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
        if enabled is not None:
            theirs = bool(enabled())
        else:  # an older torch cannot say: a history holding events is taken as the job's
            theirs = bool(self._events(self._snapshot()))
        self._enabled = enabled
        self.mine = not theirs
        self.skipping = False
        if self.mine:
            self._turn_on(clear=True)

    def _turn_on(self, clear: bool) -> None:
        kw = {"context": None, "stacks": "python", "max_entries": MAX_ENTRIES,
              "clear_history": clear, "skip_actions": list(SKIP)}
        kw = {k: v for k, v in kw.items() if k in self._params}
        try:
            self._record("all", **kw)
        except (RuntimeError, TypeError, ValueError):
            if "skip_actions" not in kw:
                raise
            del kw["skip_actions"]  # a torch that knows fewer actions: all recorded
            self._record("all", **kw)
        self.skipping = "skip_actions" in kw

    def label(self, text: str) -> None:
        self._set(text)

    def _events(self, snap: dict) -> list[dict]:
        traces = snap.get("device_traces") or []
        return list(traces[self.device]) if self.device < len(traces) else []

    def recording(self) -> bool:
        return self._enabled is None or bool(self._enabled())

    def read(self) -> Trace:
        before = self._allocations()
        snap = self._snapshot()
        events = self._events(snap)
        complete = True
        if self.mine and self._foreign(events):
            self.mine = False  # the job turned its own history on since: it is theirs now
        if self.mine and self.recording():
            self._turn_on(clear=True)
            # none made between the read and the clearing, and the ring did not wrap
            complete = self._allocations() == before and len(events) < MAX_ENTRIES
        live: set[int] = set()
        for seg in snap.get("segments") or []:
            if seg.get("device", self.device) != self.device:
                continue
            at = seg["address"]
            for block in seg["blocks"]:  # its address where given, else its segment's plus
                at = block.get("address", at)  # the sizes of the blocks before it
                if block["state"] == "active_allocated":
                    live.add(at)
                at += block["size"]
        return Trace(events, live, complete, before)

    def _foreign(self, events: list[dict]) -> bool:
        """Events of settings other than Proton's: the job re-enabled the history itself."""
        if len(events) > MAX_ENTRIES:
            return True
        for e in events:
            if e.get("frames") or (self.skipping and e.get("action") not in ("alloc", "oom")):
                return True
        return False

    def close(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._set(self.saved)  # the labels are the main thread's own
        if self.mine and (self._enabled is None or self._enabled()):
            kw = {"clear_history": True} if "clear_history" in self._params else {}
            self._record(None, **kw)


class Owners:
    """Which scope entry made each block still allocated, from the history's events (pure:
    tests replay events). Only allocations are read: whether a block is still allocated is
    told by the read's blocks (Trace.live)."""

    def __init__(self) -> None:
        self.owner: dict[int, tuple[int, int, int]] = {}
        """Address -> (scope path, its entry (0: the first), bytes), labelled allocations."""
        self.last: tuple | None = None
        """The last allocation taken (addr, size, time_us): a re-read starts after it."""

    def take(self, trace: Trace) -> tuple[bool, int]:
        """Take the events after the last one taken; whether none may be missing, and how
        many allocations were taken."""
        events, start = trace.events, 0
        complete = trace.complete
        if self.last is not None:
            start = self._after_last(events)
            complete = complete and start >= 0
            if start < 0:  # the last one taken was dropped: the ring wrapped past it
                start = 0
        owner = self.owner
        taken = 0
        for e in events[start:]:
            if e.get("action") != "alloc":
                continue
            taken += 1
            addr = e["addr"]
            m = _LABEL.match(e.get("user_metadata") or "")
            if m:
                owner[addr] = (int(m[1]), int(m[2]), int(e["size"]))
            else:
                owner.pop(addr, None)  # another thread's, or made outside scopes
            self.last = (addr, e["size"], e.get("time_us"))
        live = trace.live
        self.owner = {a: o for a, o in owner.items() if a in live}
        return complete, taken

    def skip_to(self, events: list[dict]) -> None:
        """Start after the newest of `events` (those before Proton's labels)."""
        for e in reversed(events):
            if e.get("action") == "alloc":
                self.last = (e["addr"], e["size"], e.get("time_us"))
                return

    def restart(self) -> None:
        """The history was cleared: the next read holds only new events."""
        self.last = None

    def _after_last(self, events: list[dict]) -> int:
        last = self.last
        for i in range(len(events) - 1, -1, -1):
            e = events[i]
            if e.get("action") == "alloc" and (e["addr"], e["size"], e.get("time_us")) == last:
                return i + 1
        return -1


class MemoryTracker:
    """What context/frames.py calls at the main thread's scope enters and exits (as
    a scope listener, frames.listeners); each measured entry goes to `sink(path, measured)`."""

    def __init__(self, sink: Callable[[int, Measured], None],
                 source: Source | None = None) -> None:
        self.sink = sink
        self.stack: PeakStack | None = PeakStack(source) if source is not None else None
        self.failed: str | None = None
        """Why reading the allocator stopped (said once, at the end)."""
        self.history: History | None = None
        self.no_history: str | None = None
        """Why what scopes keep is not (or no longer) judged (said once, at the end)."""
        self.owners = Owners()
        self.entered: dict[int, int] = {}
        """Scope path -> its entries begun (the next one's K)."""
        self.closed: dict[int, int] = {}
        """Scope path -> its entries closed."""
        self.floor: dict[int, int] = {}
        """Entries begun before the history was recorded whole: never judged."""
        self.ceiling: dict[int, int] | None = None
        """Entries closed when the history stopped: none after them is judged."""
        self.device_bytes: int | None = None
        self.gaps = 0
        """Reads that found events missing (entries begun before them are not judged)."""
        self._made: int | None = None
        """The allocations made at the last read of a job's own history."""
        self._read_at = 0
        """The allocation count at the last read of the history."""
        self.lock = threading.Lock()

    @property
    def measuring(self) -> bool:
        return self.stack is not None

    def scope_enter(self, top: Any) -> None:
        """A main-thread frame opened (context/frames.ScopeListener): a scope's is read."""
        if top.kind == SCOPE:
            self.enter(top.path, top)

    def scope_exit(self, top: Any) -> None:
        self.exit(top)

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
            return
        k = self.entered.get(path, 0)
        self.entered[path] = k + 1
        history = self.history
        if history is None and self.no_history is None:
            history = self._start_history(stack)
        if history is not None:
            label = stack.open[-1].label = f"proton:{path}.{k}"
            try:
                history.label(label)
            except Exception as exc:  # noqa: BLE001 - what scopes keep is then not judged
                self._lose_history(f"{type(exc).__name__}: {exc}")

    def exit(self, frame: Any) -> None:
        stack = self.stack
        if stack is None or not stack.open:
            return
        try:
            got = stack.exit(frame)
        except Exception as exc:
            self._stop(exc)
            return
        if got is None:
            return
        path = got[0]
        history = self.history
        if history is not None:
            try:
                if not history.recording():  # the job turned it off: judged until here
                    self._read()
                    self._lose_history("the job turned torch's allocator history off")
                else:
                    history.label(stack.open[-1].label if stack.open and stack.open[-1].label
                                  else history.saved)
                    if history.mine and stack.last.allocations - self._read_at >= DRAIN:
                        self._read()
            except Exception as exc:  # noqa: BLE001
                self._lose_history(f"{type(exc).__name__}: {exc}")
        self.closed[path] = self.closed.get(path, 0) + 1
        if self.history is None and self.no_history is None:
            self._start_history(stack)
        self.sink(*got)

    def _start_history(self, stack: PeakStack) -> History | None:
        """The allocator's history, once the source can give it (CUDA started)."""
        make = getattr(stack.source, "history", None)
        if make is None:
            self.no_history = "the allocator's readings come with no history"
            return None
        try:
            history = make()
        except NoHistory as exc:
            self.no_history = str(exc)
            return None
        except Exception as exc:  # noqa: BLE001 - the counters go on without it
            self.no_history = f"{type(exc).__name__}: {exc}"
            return None
        if history is None:
            return None
        if not history.mine:  # the job's own: what it held before is no scope's
            try:
                trace = history.read()
            except Exception as exc:  # noqa: BLE001
                self.no_history = f"{type(exc).__name__}: {exc}"
                return None
            self.owners.skip_to(trace.events)
            self._made = trace.allocations
        self.history, self.device_bytes = history, history.device_bytes
        self.floor = dict(self.entered)  # begun unlabelled: their allocations were not seen
        self._read_at = stack.last.allocations
        return history

    def _read(self) -> None:
        history = self.history
        if history is None:
            return
        with self.lock:
            self._read_at = self.stack.last.allocations if self.stack is not None else 0
            trace = history.read()
            complete, taken = self.owners.take(trace)
            made = trace.allocations
            if not history.mine and made is not None and self._made is not None:
                complete = complete and taken >= made - self._made
            self._made = made
            if not complete:
                self.floor = dict(self.entered)  # events missing: judge only what begins now
                self.gaps += 1
            if history.mine:
                self.owners.restart()  # it was cleared

    def judge(self, marks: dict[int, int]) -> dict[int, Kept]:
        """What each scope's entries after its first, closed since `marks` (its closed counts
        at the last judgment, updated here), keep now, from the history. Empty when the
        history was never recorded."""
        history = self.history
        if history is not None:
            try:
                recording = history.recording()
                self._read()
                if not recording:
                    self._lose_history("the job turned torch's allocator history off")
            except Exception as exc:  # noqa: BLE001
                self._lose_history(f"{type(exc).__name__}: {exc}")
        with self.lock:
            if self.history is None and self.ceiling is None:
                return {}
            upto = dict(self.ceiling if self.ceiling is not None else self.closed)
            lows = {path: max(1, marks.get(path, 0), self.floor.get(path, 0)) for path in upto}
            kept: dict[int, tuple[list[int], set[int]]] = {}
            for path, k, size in self.owners.owner.values():
                if lows.get(path, 1) <= k < upto.get(path, 0):
                    nbytes, ks = kept.setdefault(path, ([0], set()))
                    nbytes[0] += size
                    ks.add(k)
            out = {}
            for path, hi in upto.items():
                if hi > lows[path]:
                    nbytes, ks = kept.get(path, ([0], set()))
                    out[path] = Kept(nbytes[0], len(ks), hi - lows[path])
            marks.update(upto)
            return out

    def _lose_history(self, why: str) -> None:
        """The history can no longer be read: entries closed after now are not judged."""
        if self.ceiling is None:
            self.ceiling = dict(self.closed)
        self.no_history = self.no_history or why
        history, self.history = self.history, None
        if history is not None:
            try:
                history.close()
            except Exception:  # noqa: BLE001 - best effort
                pass

    def close(self) -> None:
        """The last memory session ended: restore the label, turn off Proton's history."""
        history, self.history = self.history, None
        if history is not None:
            try:
                history.close()
            except Exception as exc:  # noqa: BLE001 - best effort at the end
                self.no_history = self.no_history or f"{type(exc).__name__}: {exc}"

    def _stop(self, exc: BaseException) -> None:
        self.failed = f"{type(exc).__name__}: {exc}"
        self.stack = None
        self.close()
