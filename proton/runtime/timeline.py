"""The main thread's innermost scope over time, for launches made on helper threads (and on
the main thread in scopes it opened before a capture started CUPTI from another thread).

PyTorch's autograd engine runs backward on a thread of its own with no scope open: its launches
go under the scope the main thread was in when they were made. With the C launch log the
collector reads the main thread's scope at each launch and this timeline stays empty (no
timestamp per scope change); without it (PROTON_NATIVE=0, no compiler, exact PC sampling,
PROTON_RECORD_CUPTI) the collector notes each change here (its `moved`) and the timeline places
the launches that come as CUPTI records.
"""
from __future__ import annotations

import bisect
import threading

from ..data.paths import ROOT

CAP = 262_144
"""Scope changes kept (a few MB)."""
TRIM_EVERY = 65_536
HORIZON_NS = 300_000_000_000
"""Launch records come within minutes at most: older changes may be forgotten."""


class MainTimeline:
    """(timestamp, path id) each time the main thread's innermost scope changed, in CUPTI's
    clock. The main thread appends; CUPTI's thread searches (`unscoped`). Trimming replaces the
    list rather than cutting it, so a search in progress on the old list stays valid."""

    def __init__(self, main_thread: int | None = None) -> None:
        self.main_thread = main_thread or threading.main_thread().ident
        self.entries: list[tuple[int, int]] = []
        self._trim_at = TRIM_EVERY

    def note(self, ts: int, path: int) -> None:
        """The main thread's innermost scope is `path` from `ts` on."""
        entries = self.entries
        entries.append((ts, path))
        if len(entries) > self._trim_at:
            self.forget_before(ts - HORIZON_NS, keep=CAP - TRIM_EVERY)
            # not again before TRIM_EVERY more changes: a busy loop of scopes pays one bisect
            # per TRIM_EVERY of them, and the timeline never holds more than the cap
            self._trim_at = len(self.entries) + TRIM_EVERY

    def forget_before(self, ts: int, keep: int | None = None) -> None:
        """Drop entries older than `ts` (keeping the one current at `ts`) and all but the last
        `keep`."""
        entries = self.entries
        i = bisect.bisect_right(entries, ts, key=lambda e: e[0]) - 1
        if keep is not None:
            i = max(i, len(entries) - keep)
        if i > 0:
            self.entries = entries[i:]

    def unscoped(self, thread_id: int, ts: int) -> int:
        """Where a launch made at `ts` by `thread_id` with no scope open goes (attribution's
        Unscoped; CUPTI's thread id is the low 32 bits of threading.get_ident()). The main
        thread itself gets here with no scope pushed: ROOT, or, when a capture started CUPTI
        from another thread, the scope it was in then (noted at the start)."""
        entries = self.entries
        i = bisect.bisect_right(entries, ts, key=lambda e: e[0]) - 1
        return entries[i][1] if i >= 0 else ROOT

    def clear(self) -> None:
        self.entries = []  # a new list: CUPTI's thread may be reading the old
        self._trim_at = TRIM_EVERY
