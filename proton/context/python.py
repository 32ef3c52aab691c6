"""context="python": each kernel under the Python call path that launched it.

At the start of every launch call a CUPTI callback (cupti/collector.py) runs on the launching
thread and asks `launch_path` for the path id of the thread's Python stack; the Attributor finds it
under the launch's correlation id. Frames are named `file:line@function`, as Triton's Proton names
them, so both viewers read the files.

What the path leaves out: the profiler's own frames, everything above the `proton` command's
runner (click, the CLI) and runpy's frames. A `proton.scope` appears right after the frame that
opened it (once that frame has returned, after its nearest caller still running); while it is
open, that frame's node stays at the line of the `with`, so the scope's metrics share its
node. A launch straight from that frame goes under its current line inside the scope: a
kernel's parent is always the line that launched it (thread_launch_path), as in Triton's files.
A state (proton.state, the launch hook's __proton_launch_metadata) is the last frame of every
path while it is set, after the innermost frame, as in Triton's Proton.

Cost: the frames of one launch are kept per thread. The next launch walks only the frames that
are new since (usually the launch machinery under the user's loop) and reuses the path outside
the first frame it finds again. A frame found again is the same object, still running, so the
frames outside it are unchanged; a generator frame is found again only if its callers are the
frames and lines they were, since a resumed generator may have another caller. The kept frames
(and so their locals) live until the thread's next launch, the session's end or the thread's end.
A walk seen before that stops at a kept frame and keeps only it (nn.Module forwards launching
line after line) is answered in launch_path itself; a new walk changes only the kept frames
inside the one found.

A scope's own path (at its enter) is the launch path at its opener with the new scope after
it, found without a walk in the common cases: opened by the frame that opened the innermost
open scope (the parent's path), by a callee of that frame (the frames in between only), or
with no scope open from the place the thread's last such scope was opened (its Anchor: the
training loop's `step`); otherwise by launch_path.

With the C helper, a launch on a thread running no Python with no scope open (PyTorch's
autograd thread) never reaches this module: the C launch log places it under the main thread's
scope, as thread_launch_path's caller would (cupti/native.c, frameless). Nor does a launch whose
stack the helper has seen: it walks the frames in C (code object and instruction offset of
each, and for each open scope its `token` and the place of the frame that opened it, read as
`Walk` says) and finds the path Python gave that walk before (cupti/native.c, the walk). A
path is a function of exactly that: a frame's node of its code and offset (its line), which
frames are left out of its code (the profiler's file, the runner), and a scope's place of
where its opener is, while that frame runs. Launches the walk cannot key that way come here:
a Triton hook's op, a thread Python did not start with no scope, a scope whose opener
returned or that was opened before the session.
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import runpy
import sys
from types import CodeType, FrameType
from typing import Any

from ..data.paths import PYTHON, ROOT, SCOPE, STATE, paths
from ..format import LIBRARY_FILE, frame_name
from .stack import Open, every_stacks, main_innermost, per_thread

_GENERATOR = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
_USER_CODE = {"examples", "__pycache__"}
"""Folders of the package that hold no profiler code (the bundled examples are user code)."""


def own_files() -> frozenset[str]:
    """Source files of the profiler (every module of proton, proton.hooks and proton.compiler,
    in every subfolder; not the bundled examples) and runpy's."""
    files = {runpy.__file__, "<frozen runpy>"}  # runpy is frozen into Python 3.11+
    for package in ("proton", "proton.hooks", "proton.compiler"):
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for root, dirs, names in os.walk(folder):
                dirs[:] = [d for d in dirs if d not in _USER_CODE]
                files.update(os.path.join(root, n) for n in names if n.endswith(".py"))
    return frozenset(files)


SKIPPED: frozenset[str] = frozenset()
"""co_filename of frames left out of paths (set by enable())."""
_runner: CodeType | None = None
"""The `proton` command's runner: nothing outside it is the user's."""


class Kept:
    """The frames of a thread's last launch that may still run at its next one (outermost
    first), the path outside each, and that launch's walk. Hangs off the thread's stacks
    (stack.per_thread.stacks.kept)."""

    __slots__ = ("frames", "outer", "lastis", "index", "version", "key", "at", "pid", "fast",
                 "generation")

    def __init__(self) -> None:
        self.frames: list[FrameType] = []
        self.outer: list[tuple[int, int]] = []
        """(path id, scopes placed) outside each frame."""
        self.lastis: list[int] = []
        """Each frame's instruction offset when kept (a generator's caller must be at the same
        one for the generator to be found again)."""
        self.index: dict[FrameType, int] = {}
        """frame -> its position in `frames` (frames hash by identity)."""
        self.version = -1
        """The thread's scope version when kept: any scope change since makes it stale."""
        self.key: list = []
        """The last walk: id(code) and instruction offset of each frame walked, innermost
        first..."""
        self.at = -1
        """... the position in `frames` where it stopped, and its path id..."""
        self.pid = ROOT
        self.fast = False
        """... and whether the same walk again has the same path (no open scope in it was
        opened by a frame other than the one it stopped at)."""
        self.generation = _generation

    def let_go(self, n: int) -> None:
        """Keep only the first `n` frames: those past them are of calls since returned, and
        holding them would hold their locals."""
        kept = self.frames
        if len(kept) > n:
            for f in kept[n:]:
                del self.index[f]
            del kept[n:], self.outer[n:], self.lastis[n:]


_generation = 0
"""Bumped at each session's end: every thread's Kept is dropped at its next launch."""
_NONE: dict = {}
_TOP = (ROOT, 0)
_walks: dict[tuple, tuple[int, list, int]] = {}
"""(id(code) and offset of each walked frame innermost first, the path state outside the walk,
the scopes not placed yet) -> (path id, path state outside each walked frame, how many to keep)."""
_codes: set[CodeType] = set()
"""Every code object in a _walks key, kept alive so that its id is never another's."""
_tokens: dict[tuple, int] = {}
"""(name, kind, opened_at) of a scope -> its token (Open.token)."""
_next_token = itertools.count()
"""Tokens are never given twice, across sessions: a scope left open keeps its own."""
_nodes: dict[tuple[int, int, int], tuple[CodeType, int]] = {}
"""(parent path id, id(code), instruction offset) -> (code, path id): a frame's node without
formatting its name again; the code object is kept so its id cannot be reused."""


def set_runner(code: CodeType | None) -> None:
    """The `proton` command's function that runs the user's script: frames outside it (the
    command itself, click) are left out of every path."""
    global _runner
    _runner = code


def opener(frame: FrameType | None) -> tuple[FrameType | None, tuple[int, int] | None]:
    """The user's frame that opens a scope (the first frame outside the profiler from `frame`)
    and where in it: (instruction offset, line)."""
    skipped = SKIPPED
    while frame is not None and frame.f_code.co_filename in skipped:
        frame = frame.f_back
    return frame, (frame.f_lasti, frame.f_lineno) if frame is not None else None


def _node(parent: int, frame: FrameType, at: tuple[int, int] | None) -> int:
    """The node of `frame` under `parent`: at its current line, or at `at` (instruction offset,
    line) where it opened a scope that is still open."""
    code = frame.f_code
    lasti = frame.f_lasti if at is None else at[0]
    key = (parent, id(code), lasti)
    found = _nodes.get(key)
    if found is not None and found[0] is code:
        return found[1]
    line = frame.f_lineno if at is None else at[1]
    pid = paths.intern(parent, frame_name(code.co_filename, line, code.co_name), PYTHON)
    _nodes[key] = (code, pid)
    return pid


def launch_path(frame: FrameType | None) -> int | None:
    """Path id of the call path ending at `frame` (the innermost) with the thread's open scopes
    (stack.per_thread.stacks: `open`, each with name, kind, opener, opened_at; `version`, which
    changes whenever a scope opens or closes) placed after the frames that opened them. The op the
    Triton hook opened for this launch, if any, is the path; None when there is neither a frame
    nor an open scope (a thread with no Python, such as PyTorch's autograd thread).

    The walk stops at the first frame kept from the last launch. If it met the same code at the
    same offsets as the last walk, the path is the last one (a loop launching from one place).
    Otherwise the walk's key, its code ids and offsets, finds the path with no formatting or
    interning unless it was never seen. Per frame the loop does only what the key needs: which
    frames are left out is decided once per key, in _build."""
    st = per_thread.stacks
    if st.op_path is not None:  # the Triton hook named this launch already
        return st.op_path
    if frame is None and not st.open:
        return None
    last = st.kept
    if last is None or last.generation != _generation:
        last = st.kept = Kept()
    version = st.version
    valid = last.version == version
    get = last.index.get if valid else _NONE.get
    key: list = []
    add = key.append
    at, start = -1, frame
    while frame is not None:
        j = get(frame)
        code = frame.f_code
        add(id(code))  # code ids stay unique: every code of a remembered walk is kept alive
        add(frame.f_lasti)
        if j is not None and (not code.co_flags & _GENERATOR or _same_callers(last, j)):
            at = j
            break
        frame = frame.f_back
    if at >= 0 and last.fast and at == last.at and valid and key == last.key:
        last.let_go(at + 1)
        return last.pid
    if at >= 0 and valid:
        # a walk seen before that keeps only the frame it stopped at, with no scope after
        # that frame (nn.Module forwards launching from line after line): _slow_path's result
        # without its bookkeeping
        state = last.outer[at]
        if state[1] >= len(st.open):
            found = _walks.get((*key, *state))
            if found is not None and found[2] == 1:
                last.let_go(at + 1)
                last.key, last.at, last.pid, last.fast = key, at, found[0], True
                return found[0]
    return _slow_path(last, start, key, at, st.open, version)


def _same_callers(last: Kept, j: int) -> bool:
    """Whether the kept generator (or coroutine) frame at j still has the callers it had when
    kept: a generator may be resumed from another frame, or from another line of the same."""
    kept, lastis = last.frames, last.lastis
    while j > 0 and kept[j].f_code.co_flags & _GENERATOR:
        caller = kept[j].f_back
        if caller is not kept[j - 1] or caller.f_lasti != lastis[j - 1]:
            return False
        j -= 1
    return j > 0 or not kept[0].f_code.co_flags & _GENERATOR


def _slow_path(last: Kept, start: FrameType | None, key: list, at: int, scopes: list,
               version: int) -> int:
    """launch_path for a walk unlike the last one: find or build its path, keep its frames."""
    state = last.outer[at] if at >= 0 else _TOP
    n = len(key) // 2  # frames walked
    pending = scopes[state[1]:]
    frames: Any = None
    if not pending:
        places = []
    elif at >= 0 and all(s.opener is last.frames[at] and s.kind != STATE for s in pending):
        places = [0] * len(pending)  # all opened by the frame the walk stopped at
    else:
        frames = _frames(start, n)[::-1]  # outermost first
        places = _places(pending, frames)
        if at >= 0 and -1 in places:
            # a scope whose opener is outside this walk (it returned, or the scope was opened
            # before the session): where it goes depends on the whole stack
            key, at, state, pending = _walk_all(start), -1, _TOP, scopes
            frames = _frames(start, len(key) // 2)[::-1]
            places = _places(pending, frames)
    walk = (*key, *state)
    if pending:
        walk += (tuple((s.name, s.kind, s.opened_at, p) for s, p in zip(pending, places)),)
    found = _walks.get(walk)
    if found is None:
        frames = frames or _frames(start, n)[::-1]
        found = _walks[walk] = _build(state, frames, pending, places)
        _codes.update(f.f_code for f in frames)
    pid, outers, keep = found
    kept = last.frames
    if at < 0 or keep > 1:
        frames = frames or _frames(start, n)[::-1]
    if at < 0:
        last.frames = kept = frames[:keep]
        last.outer = outers[:keep]
        last.lastis = [f.f_lasti for f in kept]
        last.index = {f: i for i, f in enumerate(kept)}
    elif keep > 1 and kept[at:at + keep] != frames[:keep]:  # frames compare by identity
        # the frames outside the one found stay, with their places: only those inside change
        last.let_go(at + 1)
        new = frames[1:keep]
        last.index.update((f, i) for i, f in enumerate(new, at + 1))
        kept += new
        last.outer += outers[1:keep]
        last.lastis += [f.f_lasti for f in new]
    else:
        last.let_go(at + keep)
    last.version, last.key, last.at, last.pid = version, key, at, pid
    # the same walk again gives the same path unless a scope here was placed by the identity of
    # a frame that will be new next time (only the frame it stopped at stays the same)
    last.fast = at >= 0 and all(p == 0 and s.opener is kept[at]
                                for s, p in zip(pending, places))
    return pid


def _walk_all(frame: FrameType | None) -> list:
    """The key of every frame from `frame` out to the top of the stack."""
    key: list = []
    while frame is not None:
        key += (id(frame.f_code), frame.f_lasti)
        frame = frame.f_back
    return key


def _places(pending: list, frames: list[FrameType]) -> list[int]:
    """Where each pending scope goes: after frames[i] (outermost first), i being its opener's
    place or, once the opener returned, that of the nearest caller of it still running; -1
    when none is in `frames`. Never before the scope opened ahead of it. A state goes after
    the innermost frame, as in Triton's Proton (the last frame of every path while set)."""
    if not pending:
        return []
    where = {id(f): i for i, f in enumerate(frames)}
    places, floor = [], -1
    for s in pending:
        if s.kind == STATE:
            places.append(len(frames) - 1)
            continue
        frame, place = s.opener, -1
        while frame is not None:
            place = where.get(id(frame), -1)
            if place >= 0:
                break
            frame = frame.f_back
        floor = max(floor, place)
        places.append(floor)
    return places


def _frames(frame: Any, n: int) -> list[FrameType]:
    """`frame` and the n - 1 frames outside it, innermost first (there are that many)."""
    out = []
    for _ in range(n):
        out.append(frame)
        frame = frame.f_back
    return out


def _build(state: tuple[int, int], frames: list[FrameType], pending: list,
           places: list[int]) -> tuple:
    """The path of `frames` (outermost first) under `state` (path id, scopes placed), with the
    `pending` scopes after frames[places[k]] (-1: before the first). The profiler's frames are
    left out, and so is everything outside the `proton` command's runner.

    Frames are kept for the next launch down to the innermost one in the user's code: the
    launch machinery below it (torch, Triton) is new at every launch, and keeping it would
    keep its locals alive."""
    pid, placed = state
    codes = [f.f_code for f in frames]
    first = codes.index(_runner) + 1 if _runner in codes else 0
    outers, keep, k = [], 0, 0
    while k < len(pending) and places[k] < 0:
        pid = paths.intern(pid, pending[k].name, pending[k].kind)
        k += 1
    for i, frame in enumerate(frames):
        outers.append((pid, placed + k))
        code = codes[i]
        if i >= first and code.co_filename not in SKIPPED:
            # a frame that opened a scope stays at the scope's line while it is open, so the
            # scope's own metrics share its node
            opened = k < len(pending) and pending[k].opener is frame
            pid = _node(pid, frame, pending[k].opened_at if opened else None)
            if not LIBRARY_FILE.search(code.co_filename):
                keep = i + 1
        while k < len(pending) and places[k] == i:
            pid = paths.intern(pid, pending[k].name, pending[k].kind)
            k += 1
    return pid, outers, max(keep, 1)


_below_main: dict[tuple[int, int], int] = {}
"""(main thread's frame, a thread's own path) -> that path below the main thread's frame."""


def thread_launch_path(frame: FrameType | None) -> int | None:
    """launch_path, with the Python frames of a thread Python did not start and that has no
    scope of its own (autograd's thread running a custom Function's backward, which replays a
    CUDA graph from Python) placed below the main thread's innermost frame, where this
    context's frameless launches from that thread go. A thread the program started keeps its
    own call path."""
    pid: Any = launch_path(frame)  # an int while a frame is open
    st = per_thread.stacks
    if st.open and st.op_path is None and paths.frames[pid].kind == SCOPE:
        return _launch_line(pid, frame)  # pid: a scope (so no foreign thread's path)
    if pid is None or not st.foreign or st.open or st.op_path is not None:
        return pid
    main = main_innermost()
    if main == ROOT:
        return pid
    key = (main, pid)
    path = _below_main.get(key)
    if path is None:
        path = _below_main[key] = paths.below(main, pid)
    return path


def _launch_line(pid: int, frame: FrameType | None) -> int:
    """A launch straight from the frame a scope sits after (its opener) goes under that frame's
    line inside the scope, so a kernel's parent is always the line that launched it (as in
    Triton's files). `pid`: the scope's path; `frame`: the launching frame."""
    skipped = SKIPPED
    while frame is not None and frame.f_code.co_filename in skipped:
        if frame.f_code is _runner:  # launched by the `proton` command itself
            return pid
        frame = frame.f_back
    return pid if frame is None else _node(pid, frame, None)


class Anchor:
    """Where a thread's last scope opened with no scope open was opened (context="python"):
    the opener's code and instruction offset, its caller frame and the caller's offset, and
    the path there. A scope opened again at the same place from the same running caller has
    the same path outside it, with no walk: the training loop's `step` scope, and a
    `train_step()` function's, called from the loop. Hangs off the thread's stacks
    (stack.per_thread.stacks.anchor); it keeps that caller frame (the loop's, running anyway)
    until the thread's next such scope or the session's end."""

    __slots__ = ("code", "lasti", "caller", "caller_lasti", "pid", "generation")

    def __init__(self, frame: FrameType, pid: int) -> None:
        caller = frame.f_back
        self.code, self.lasti, self.caller = frame.f_code, frame.f_lasti, caller
        self.caller_lasti = caller.f_lasti if caller is not None else -1
        self.pid, self.generation = pid, _generation

    def holds(self, frame: FrameType) -> bool:
        """Whether a scope opened now by `frame` has this path outside it."""
        caller = frame.f_back
        return (frame.f_code is self.code and frame.f_lasti == self.lasti
                and caller is self.caller and self.generation == _generation
                and (caller is None or caller.f_lasti == self.caller_lasti))


def _before_scope(frame: FrameType | None) -> int:
    """The path a scope opened by `frame` goes under: launch_path(frame) with the thread's
    open scopes, found without a walk where the innermost open scope was opened by the same
    frame (its path: the frames and scopes outside are those it had), or where no scope is
    open and the thread's Anchor holds. Where that scope's opener is a caller further out,
    only the frames in between are walked."""
    st = per_thread.stacks
    opened = st.open
    if frame is None:
        pid = launch_path(frame)
        return ROOT if pid is None else pid
    if opened:
        parent = opened[-1]
        outer = parent.opener
        # a generator may have moved since (resumed by another caller): walk
        if outer is not None and not outer.f_code.co_flags & _GENERATOR:
            if outer is frame:  # nested in one function: the node stays at the first line
                return parent.path
            found = _below_opener(frame, outer, parent.path)
            if found is not None:
                return found
        pid = launch_path(frame)
        return ROOT if pid is None else pid
    anchor = st.anchor
    if anchor is not None and anchor.holds(frame):
        return anchor.pid
    pid = launch_path(frame)
    pid = ROOT if pid is None else pid
    caller = frame.f_back
    if caller is None or not caller.f_code.co_flags & _GENERATOR:
        st.anchor = Anchor(frame, pid)
    return pid


def _below_opener(frame: FrameType | None, outer: FrameType, pid: int) -> int | None:
    """The path at `frame` (its node included) when `outer`, the opener of the innermost
    open scope (whose path is `pid`), is one of its callers: the frames in between get their
    nodes below it, at their current lines (none of them opened a scope still open). None
    when `outer` is not on the way out (it returned) or the `proton` command's runner is."""
    inner = []
    while frame is not outer:
        if frame is None or frame.f_code is _runner:
            return None
        inner.append(frame)
        frame = frame.f_back
    skipped = SKIPPED
    for f in reversed(inner):
        if f.f_code.co_filename not in skipped:
            pid = _node(pid, f, None)
    return pid


class Walk:
    """What the C helper's walk reads of a thread (cupti/native.c, in its WO_ order): the
    thread-local whose `stacks` (stack.Stacks) it reads, and the attribute names: of Stacks
    (op_path, version, foreign, open, kept: let go at a launch found, as the next launch here
    would) and of Open (opener, token)."""

    threads = per_thread
    names = ("stacks", "op_path", "version", "foreign", "open", "opener", "token", "kept")


class PythonContext:
    """context="python": a launch goes under the Python call path that made it, and a scope
    after the frame that opened it. The collector attributes each launch in a CUPTI launch
    callback that calls `launch_path`."""

    name = "python"
    in_callback = True
    walk = Walk()

    def start(self) -> None:
        global SKIPPED
        SKIPPED = own_files()

    def end(self) -> None:
        """Forget every live thread's kept frames and anchor now (they hold frames and so
        their locals: a thread now idle would keep them until its next launch or scope), and
        every walk seen."""
        global _generation
        _generation += 1
        for st in every_stacks():
            st.kept = st.anchor = None  # a launch in progress there holds its own reference
        _walks.clear()
        _codes.clear()
        _nodes.clear()
        _tokens.clear()
        _below_main.clear()

    @staticmethod
    def scope_path(parent: int, top: Open) -> int:
        """The node of a scope being opened (`top`, not yet on the thread's stack): after the
        user's frame that opens it (the first frame outside the profiler), which `top`
        remembers; and its `token` (name, kind and opener's place) for the C helper's walk."""
        top.opener, top.opened_at = at = opener(sys._getframe(1))
        what = (top.name, top.kind, at[1] if at is not None else None)
        token = _tokens.get(what)
        if token is None:
            token = _tokens[what] = next(_next_token)
        top.token = token
        return paths.intern(_before_scope(top.opener), top.name, top.kind)

    launch_path = staticmethod(thread_launch_path)
    """Called by the launch callback at every launch: a plain function, no bound method."""
