"""Each thread's open frames (scopes, states, and the op of a launch in progress): plain data.

frames.py opens and closes them; the contexts read them to find a launch's path.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from types import FrameType
from typing import Any

from ..data.paths import ROOT, STATE


@dataclass(slots=True)
class Open:
    """A frame entered on this thread and not yet exited."""

    path: int
    name: str
    kind: str
    start_ns: int
    """time.time_ns() at entry when it may be CPU-timed (see frames.enter_frame), else 0."""
    cpu_timed: bool
    """Opened as a cpu_timed_scope: timed even while a collector runs."""
    pushed_by: Any
    """The collector that pushed this frame's CUPTI external correlation id, if one did; it
    pops it again even after it stopped collecting, so CUPTI's stack never drifts."""
    opener: FrameType | None = None
    """The user's Python frame that opened it (recorded for context="python" only)..."""
    opened_at: tuple[int, int] | None = None
    """... and where: (instruction offset, line)..."""
    token: int = -1
    """... and a number naming (name, kind, opened_at), never another's (the C helper's walk
    keys a launch's stack with it)."""
    timed_by: Any = None
    """The scope listener (frames.ScopeListener) that timed its entry on the main thread, if
    one did: its exit is timed by the same one, never by one that began after it."""
    span: Any = None
    """frames.Span: its entry as a trace session records it (a scope's, while one is live)."""


class Stacks:
    """One thread's frames: `per_thread.stacks`."""

    __slots__ = ("open", "version", "op", "op_path", "kept", "anchor", "thread", "foreign",
                 "main", "__weakref__")

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.main = self.thread == _MAIN
        """The main thread's (its scope changes tell the collector where other threads'
        launches go)."""
        self.foreign = isinstance(threading.current_thread(), threading._DummyThread)
        """A thread Python did not start (autograd's engine thread calling back into Python)."""
        self.open: list[Open] = []
        self.version = 0
        """Counts frame changes on this thread (the python context keeps paths until it changes)."""
        self.op: Any = None
        """The collector that pushed a launch's op id (Triton hook), until the launch's exit."""
        self.op_path: int | None = None
        """The op path of the launch in progress (the hook named it), for the launch callbacks."""
        self.kept: Any = None
        """context="python": this thread's python.Kept frames..."""
        self.anchor: Any = None
        """... and its python.Anchor (where its last outermost scope was opened)."""


class _PerThread(threading.local):
    def __init__(self) -> None:
        global main_stacks
        self.stacks = Stacks()
        if threading.get_ident() == _MAIN:
            main_stacks = self.stacks
        with _every_lock:
            _every.add(self.stacks)


_MAIN = threading.main_thread().ident
main_stacks: Stacks | None = None
"""The main thread's Stacks, once it has used them: a capture started from another thread,
and a thread with no frame open, read where the main thread is."""


_every: weakref.WeakSet[Stacks] = weakref.WeakSet()
"""Every live thread's Stacks (a thread's goes with it)."""
_every_lock = threading.Lock()

per_thread = _PerThread()
"""`per_thread.stacks`: this thread's Stacks. One thread-local look-up, then plain slots: a
look-up costs about 40 ns, a slot 10 (the hot paths read several fields per launch)."""


def depth() -> int:
    """How many frames are open on this thread."""
    return len(per_thread.stacks.open)


def scope_depth() -> int:
    """How many scopes are open on this thread (states left out: they name no level)."""
    return sum(1 for top in per_thread.stacks.open if top.kind != STATE)


def main_innermost() -> int:
    """The main thread's innermost open frame (ROOT if none), read from any thread: where a
    thread with no frame open of its own (PyTorch's autograd thread) launches."""
    main = main_stacks
    opened = main.open if main is not None else None
    return opened[-1].path if opened else ROOT


def every_stacks() -> list[Stacks]:
    """Every live thread's Stacks, the calling thread's included (made now if it had none)."""
    mine = per_thread.stacks
    with _every_lock:
        return [mine, *(st for st in _every if st is not mine)]


def every_open() -> list[tuple[int, list[Open]]]:
    """Each live thread's open frames, outermost first, with its thread id, read from any
    thread (a copy: the thread may change them meanwhile)."""
    with _every_lock:
        stacks = list(_every)
    return [(st.thread, list(st.open)) for st in stacks]


def after_fork_in_child() -> None:
    """In a forked child: the calling thread is the only one left (and the main thread), and
    a lock another thread held at the fork stays held in the child: make a new one."""
    global _MAIN, main_stacks, _every, _every_lock
    _every, _every_lock = weakref.WeakSet(), threading.Lock()
    _MAIN = threading.get_ident()
    main_stacks = per_thread.stacks  # made now (and registered) if this thread had none
    main_stacks.main = True
    _every.add(main_stacks)
