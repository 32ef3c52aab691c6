"""context="python": each kernel under the Python call path that launched it.

At the start of every launch call a CUPTI callback (cupti_launches) runs on the launching thread
and asks `launch_path` for the path id of the thread's Python stack; the Attributor finds it under
the launch's correlation id. Frames are named `file:line@function`, as Triton's Proton names them,
so both viewers read the files.

What the path leaves out: the profiler's own frames, everything above the `proton` command's
runner (click, the CLI) and runpy's frames. A `proton.scope` appears right after the frame that
opened it (after the scope before it when that frame has returned).

Cost: the frames of one launch are kept per thread. The next launch walks only the frames that
are new since (usually the launch machinery under the user's loop) and reuses the path outside
the first frame it finds again. A frame found again is the same object, still running, so the
frames outside it are unchanged; generator frames are never reused, since a resumed generator
may have another caller. The kept frames live until the thread's next launch or the session's end.
"""
from __future__ import annotations

import os
import runpy
import sys
import threading
from types import CodeType, FrameType

from .paths import PYTHON, ROOT, paths

_GENERATOR = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


def _own_files() -> frozenset[str]:
    """Source files of the profiler's runtime (proton, proton.hooks, proton.compiler; not the
    bundled examples, which are user code) and runpy's."""
    import proton
    import proton.compiler
    import proton.hooks

    files = {runpy.__file__, "<frozen runpy>"}  # runpy is frozen into Python 3.11+
    for package in (proton, proton.hooks, proton.compiler):
        for folder in package.__path__:
            files.update(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py"))
    return frozenset(files)


SKIPPED: frozenset[str] = frozenset()
"""co_filename of frames left out of paths (set by enable())."""
_runner: CodeType | None = None
"""The `proton` command's runner: nothing outside it is the user's."""


class _Last(threading.local):
    """The frames of this thread's last launch, outermost first, and the path outside each."""

    def __init__(self) -> None:
        self.frames: list[FrameType] = []
        self.outer: list[tuple[int, int]] = []
        """(path id, scopes placed) outside each frame."""
        self.index: dict[int, int] = {}
        """id(frame) -> its position in `frames` (and stale entries, see launch_path)."""
        self.version = -1
        """The thread's scope version when kept: any scope change since makes it stale."""
        _threads.append(self)


_threads: list[_Last] = []
_last = _Last()
_nodes: dict[tuple[int, int, int], tuple[CodeType, int]] = {}
"""(parent path id, id(code), instruction offset) -> (code, path id): a frame's node without
formatting its name again; the code object is kept so its id cannot be reused."""


def enable() -> None:
    """Called when a python-context session starts."""
    global SKIPPED, _runner
    from . import cli

    SKIPPED = _own_files()
    _runner = cli._run.__code__


def reset() -> None:
    """Forget every thread's kept frames (at the session's end: they hold the frames' locals)."""
    for last in _threads:
        last.frames, last.outer, last.index, last.version = [], [], {}, -1


def opener(frame: FrameType | None) -> FrameType | None:
    """The user's frame that opens a scope: the first frame outside the profiler from `frame`."""
    skipped = SKIPPED
    while frame is not None and frame.f_code.co_filename in skipped:
        frame = frame.f_back
    return frame


def _node(parent: int, frame: FrameType) -> int:
    code = frame.f_code
    key = (parent, id(code), frame.f_lasti)
    found = _nodes.get(key)
    if found is not None and found[0] is code:
        return found[1]
    name = f"{code.co_filename}:{frame.f_lineno}@{code.co_name}"
    pid = paths.intern(parent, name, PYTHON)
    _nodes[key] = (code, pid)
    return pid


def launch_path(frame: FrameType | None, scopes: list, version: int) -> int:
    """Path id of the call path ending at `frame` (the innermost) with this thread's open
    `scopes` (scope._Open: name, kind, opener) placed after their openers. `version` is the
    thread's scope version: it changes whenever a scope opens or closes."""
    last = _last
    index = last.index if last.version == version else None
    new: list[FrameType] = []
    at = 0  # how many kept frames stay (those outside the frame found again)
    pid, placed = ROOT, 0
    runner, skipped = _runner, SKIPPED
    while frame is not None:
        code = frame.f_code
        if code is runner:
            break
        if index:
            j = index.get(id(frame))
            if j is not None and j < len(last.frames) and last.frames[j] is frame \
                    and not code.co_flags & _GENERATOR:
                at = j
                pid, placed = last.outer[j]
                new.append(frame)
                break
        if code.co_filename not in skipped:
            new.append(frame)
        frame = frame.f_back
    new.reverse()
    frames, outer = last.frames[:at], last.outer[:at]
    pending = scopes[placed:]
    inner = {id(f) for f in new} if pending else ()
    k = 0
    for frame in new:
        frames.append(frame)
        outer.append((pid, placed + k))
        pid = _node(pid, frame)
        # this frame's scopes, and after them those whose opener is not in the stack below
        while k < len(pending) and (pending[k].opener is frame or
                                    id(pending[k].opener) not in inner):
            s = pending[k]
            pid = paths.intern(pid, s.name, s.kind)
            k += 1
    for s in pending[k:]:  # openers below the innermost frame (cannot happen) or unknown
        pid = paths.intern(pid, s.name, s.kind)
    last.frames, last.outer, last.version = frames, outer, version
    # stale entries (frames since gone) fail the identity check above; rebuild now and then
    if index is None or len(index) > 4 * len(frames) + 64:
        last.index = {id(f): i for i, f in enumerate(frames)}
    else:
        for i in range(at, len(frames)):
            index[id(frames[i])] = i
    return pid
