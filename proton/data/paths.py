"""Interned call paths shared by every session of the process.

A path is (parent id, frame name, frame kind); id 0 is the root. Scopes, kernels and (later)
python frames all become path ids, so the hot paths carry one integer instead of a stack, and each
session aggregates metrics by path id.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ..format import FRAME_TYPE, ROOT_NAME

ROOT = 0
SCOPE = FRAME_TYPE  # the frame type written to the file for scopes (hatchet's default)
KERNEL = "kernel"
STATE = "state"
OP = "op"
"""A Triton op opened by the launch hook: its kernel's metrics go on this frame itself."""
PYTHON = "python"
"""A python frame, `file:line@function` (context="python")."""
OWN = "own"
"""The profiler's own GPU work (reading its metric ring): counted on no session's node."""
LINE = "line"
"""A kernel's source line, `file:line@function`, under its kernel (mode="pcsampling")."""


@dataclass(slots=True, frozen=True)
class Frame:
    """One node of the call-path tree."""

    parent: int
    """Path id of the parent frame (-1 for the root)."""
    name: str
    kind: str
    """SCOPE, STATE, OP, PYTHON or KERNEL."""


class PathTable:
    """Append-only table of frames; `intern` is safe to call from any thread."""

    def __init__(self) -> None:
        self.frames: list[Frame] = [Frame(-1, ROOT_NAME, SCOPE)]
        self._ids: dict[tuple[int, str, str], int] = {}
        self._lock = threading.Lock()

    def intern(self, parent: int, name: str, kind: str = SCOPE) -> int:
        key = (parent, name, kind)
        pid = self._ids.get(key)
        if pid is not None:
            return pid
        with self._lock:
            pid = self._ids.get(key)
            if pid is None:
                pid = len(self.frames)
                self.frames.append(Frame(parent, name, kind))
                self._ids[key] = pid
            return pid

    def graft(self, parent: int, pid: int, under: str) -> int:
        """A copy of `pid`'s path (its frames from the root's child down) below a frame named
        `under` below `parent`; the copy's id."""
        return self.below(self.intern(parent, under), pid)

    def below(self, parent: int, pid: int) -> int:
        """A copy of `pid`'s path (its frames from the root's child down) below `parent`."""
        chain = []
        while pid > ROOT:
            frame = self.frames[pid]
            chain.append(frame)
            pid = frame.parent
        node = parent
        for frame in reversed(chain):
            node = self.intern(node, frame.name, frame.kind)
        return node

    def names(self, pid: int) -> list[str]:
        """Frame names from the root's child down to `pid`."""
        out = []
        while pid > ROOT:
            frame = self.frames[pid]
            out.append(frame.name)
            pid = frame.parent
        return out[::-1]


paths = PathTable()


def _new_lock_in_child() -> None:
    """A thread that was interning when the process forked left the lock held in the child,
    where that thread does not exist."""
    paths._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_new_lock_in_child)
