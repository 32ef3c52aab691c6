"""torch's CUDA caching allocator as Proton reads it, for the CPU tests (no torch.cuda here):
the counters of torch._C._cuda_memoryStats, the history of torch.cuda.memory
(_record_memory_history with its ring of max_entries, skip_actions and clear_history,
_snapshot's segments and device_traces, _set_memory_metadata's label on each event), and the
caching: a freed block's address is handed out again for the next request of its size, as
torch's allocator does. `FakeCuda().torch` is the module-shaped object runtime/memory.py's
TorchAllocator takes."""
from __future__ import annotations

import sys
from collections import deque
from types import SimpleNamespace

MiB = 1 << 20
GiB = 1 << 30


class FakeCuda:
    def __init__(self, total_memory: int = 140 * GiB, labels: bool = True,
                 can_skip: bool = True) -> None:
        self.total_memory = total_memory
        self.current = self.peak = self.total_alloc = self.total_freed = 0
        self.allocations = self.frees = 0
        self.base = 0x7F00_0000_0000
        self.blocks: list[list] = []
        """[size, active] in address order: one segment from `base`."""
        self.index: dict[int, int] = {}
        """address -> its place in blocks."""
        self.cached: dict[int, list[int]] = {}
        """size -> addresses freed and kept for the next request of that size."""
        self.recording = False
        self.max_entries = 0
        self.skip: set[str] = set()
        self.context: str | None = None
        self.trace: deque = deque()
        self.metadata = ""
        self.time_us = 1_700_000_000_000_000
        memory = SimpleNamespace(_record_memory_history=self.record_memory_history,
                                 _record_memory_history_impl=self.record_memory_history,
                                 _snapshot=self.snapshot)
        if labels:
            memory._set_memory_metadata = self.set_metadata
            memory._get_memory_metadata = lambda: self.metadata
        self.can_skip = can_skip
        cuda = SimpleNamespace(
            is_initialized=lambda: True, current_device=lambda: 0, memory=memory,
            get_device_properties=lambda d: SimpleNamespace(total_memory=self.total_memory))
        c = SimpleNamespace(_cuda_memoryStats=self.stats,
                            _cuda_resetPeakMemoryStats=self.reset_peak,
                            _cuda_isHistoryEnabled=lambda: self.recording)
        self.torch = SimpleNamespace(__version__="2.11.0+fake", cuda=cuda, _C=c)

    # -- the job's side ----------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        size = max(512, -(-nbytes // 512) * 512)
        free = self.cached.get(size)
        if free:
            addr = free.pop()
            self.blocks[self.index[addr]][1] = True
        else:
            addr = self.base + sum(b[0] for b in self.blocks)
            self.index[addr] = len(self.blocks)
            self.blocks.append([size, True])
        self.current += size
        self.total_alloc += size
        self.allocations += 1
        self.peak = max(self.peak, self.current)
        self._event("alloc", addr, size)
        return addr

    def free(self, addr: int) -> None:
        block = self.blocks[self.index[addr]]
        assert block[1], "freed twice"
        block[1] = False
        size = block[0]
        self.current -= size
        self.total_freed += size
        self.frees += 1
        self.cached.setdefault(size, []).append(addr)
        self._event("free_requested", addr, size)
        self._event("free_completed", addr, size)

    def _event(self, action: str, addr: int, size: int) -> None:
        self.time_us += 3
        if not self.recording or action in self.skip:
            return
        frames = [{"filename": "train.py", "line": 1, "name": "step"}] if self.context else []
        self.trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                           "time_us": self.time_us, "frames": frames,
                           "user_metadata": self.metadata})

    # -- torch's functions ---------------------------------------------------------------------
    def stats(self, device: int) -> dict:
        return {"allocated_bytes": {"all": {"current": self.current, "peak": self.peak,
                                            "allocated": self.total_alloc,
                                            "freed": self.total_freed}},
                "allocation": {"all": {"current": self.allocations - self.frees,
                                       "peak": 0, "allocated": self.allocations,
                                       "freed": self.frees}}}

    def reset_peak(self, device: int) -> None:
        self.peak = self.current

    def set_metadata(self, text: str) -> None:
        self.metadata = text

    def record_memory_history(self, enabled: str | None = "all", context: str | None = "all",
                              stacks: str = "all", max_entries: int = sys.maxsize,
                              device=None, clear_history: bool = False,
                              compile_context: bool = False,
                              global_record_annotations: bool = False,
                              skip_actions: list[str] | None = None) -> None:
        if skip_actions and not self.can_skip:
            raise RuntimeError(f"Unknown TraceEntry action: {skip_actions[0]}")
        self.recording = enabled is not None
        if clear_history:
            self.trace.clear()
        if self.recording:
            self.max_entries = max_entries
            self.trace = deque(self.trace, maxlen=min(max_entries, 1 << 24))
            self.skip = set(skip_actions or ())
            self.context = context

    def snapshot(self, device=None) -> dict:
        self._event("snapshot", 0, 0)
        blocks = [{"size": size, "requested_size": size,
                   "state": "active_allocated" if active else "inactive", "frames": []}
                  for size, active in self.blocks]
        segments = [{"device": 0, "address": self.base, "total_size": sum(b[0] for b in
                                                                           self.blocks),
                     "blocks": blocks}] if blocks else []
        return {"segments": segments, "device_traces": [list(self.trace)]}
