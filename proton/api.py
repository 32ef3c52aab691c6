"""The session API of triton.profiler: start, activate, deactivate, finalize, profile.

The front door: options are parsed here (options.py) and the launch hook is installed and
removed here, around the runtime's sessions.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable

from . import settings
from .errors import SessionError
from .hooks.hook import Hook, HookManager
from .options import parse_options
from .report import warn
from .runtime.profiler import profiler


def start(name: str | None = None, *, context: str = "shadow", data: str = "tree",
          backend: str | None = None, mode: Any = None,
          hook: str | Hook | None = None, memory: bool = False) -> int | None:
    """Start (or resume) a profiling session and return its id (None when disabled).

    Usage:
        sid = proton.start("run1", hook="triton")
        ...
        proton.finalize()          # writes run1.hatchet

    Args:
        name: output file name without extension (default "proton"); a live session of the same
            name is resumed instead.
        context: "shadow" (scopes) or "python" (each kernel under the Python call path that
            launched it, with the open scopes at the frames that opened them).
        data: "tree" (aggregated call tree) or "trace".
        backend: None or "cupti"; "instrumentation": kernels compiled from now on record
            their proton.language scopes (Triton 3.6.0 or 3.9.0).
        mode: None for kernel times; "pcsampling[:interval=N][:serialize=1]" to also sample
            instructions per kernel source line (see `proton run --help`). With
            backend="instrumentation": "default[:buffer_size=BYTES]", "mma", or a
            proton.mode object.
        hook: None or "triton" (Triton launch hook: op names and launch metadata), with options:
            "triton:config" appends grid, warps, stages, shared memory to op names,
            "triton:config=BLOCK_M,BLOCK_N" also these constexprs ("=*": all),
            "triton:include=REGEX" / ":exclude=REGEX" choose the kernels the hook names;
            or a hook object: a LaunchHook (as "triton"), or a proton.hooks.Hook subclass of
            your own, told of each kernel load, launch and unload while the session is active.
        memory: True records torch's CUDA caching allocator per scope (mem_alloc_bytes,
            mem_freed_bytes, mem_peak_bytes, mem_live_bytes; tens of microseconds per scope
            entry: docs/memory.md).

    Under the `proton` command the script's own start() joins the command's session and
    resumes it (see `command_sessions`).

    Raises:
        SessionError: an option is not accepted, or cannot run beside the live sessions.
        ProfilerConflictError: another profiler holds CUPTI in this process.
    """
    if profiler.command_line and profiler.sessions:
        return _join_command()
    if disabled():
        return None  # TRITON_PROTON_DISABLE: every call does nothing, as in Triton's Proton
    settings.check()  # a bad PROTON_* setting is said now (its default used), not when read
    own_hook = _own_hook(hook)
    opts = parse_options(name, context=context, data=data, backend=backend, mode=mode,
                         hook=None if own_hook else hook, memory=memory)
    sid = profiler.live(opts.name)
    if sid is not None:
        activate(sid)
        return sid
    if opts.hook is not None:  # before the session exists: a failure leaves nothing started
        from .hooks import triton_hook

        triton_hook.configure(opts.hook, opts.hook_spec or "triton")
    try:
        sid = profiler.start(opts)
    except BaseException:
        _reset_unused_hook()
        raise
    if opts.hook is not None:
        from .hooks.launch import LaunchHook

        HookManager.register(LaunchHook(), sid)
    if own_hook is not None:
        HookManager.register(own_hook, sid)
    return sid


def _own_hook(hook: object) -> Hook | None:
    """A Hook of the user's (Triton 3.9 takes any hook object): told of the session's loads and
    launches as Triton tells it. A LaunchHook stands for hook="triton" (options.hook_spec)."""
    if not isinstance(hook, Hook):
        return None
    from .hooks.launch import LaunchHook

    return None if isinstance(hook, LaunchHook) else hook


def command_sessions() -> list[int]:
    """Under the `proton` command, the sessions the script's own start/activate/deactivate/
    finalize calls act on: the command's, which they pause and resume as they would the
    script's own session, and which the command writes when the script ends. A `proton
    capture`'s session is the capture's: its window is the capturer's, not the script's."""
    return [sid for sid, s in list(profiler.sessions.items()) if not s.keep_others]


def _join_command() -> int | None:
    """start() under the command: the command's session, resumed (None while only a capture
    records)."""
    mine = command_sessions()
    if mine:
        activate(mine[0])
    return mine[0] if mine else None


def _named(session: int | None) -> list[int | None]:
    """The sessions a call names: `session`; for None under the command, the command's
    sessions (a capture's only by its id, as the capture pauses its own)."""
    if session is None and profiler.command_line:
        return list(command_sessions())
    return [session]


def activate(session: int | None = None) -> None:
    """Record again into `session` (every live session when None)."""
    if disabled() and not profiler.sessions:
        return
    for sid in _named(session):
        profiler.activate(sid)
        HookManager.activate(sid)


DISABLE_ENV = ("TRITON_PROTON_DISABLE", "PROTON_DISABLE")
"""Set (not "0"): start() starts nothing and returns None, and every other call does nothing."""


def disabled() -> bool:
    return any(os.environ.get(name, "0") not in ("", "0") for name in DISABLE_ENV)


def deactivate(session: int | None = None, flushing: bool = False) -> None:
    """Stop recording into `session` (every live session when None) until activate();
    `flushing`: also wait until every kernel launched so far has come in (proton.data.get
    then sees it all)."""
    if disabled() and not profiler.sessions:
        return
    for sid in _named(session):
        profiler.deactivate(sid, flushing=flushing)
        HookManager.deactivate(sid)  # no launch pays for a hook while its sessions are paused


def finalize(session: int | None = None, output_format: str = "") -> None:
    """Flush every kernel record, write the session's file and close it (all sessions when None);
    one line on stderr says where (`proton: wrote /abs/path/run1.hatchet`).

    Under the `proton` command it pauses the command's session instead (as deactivate()): the
    command writes it when the script ends, and a later start() resumes it.

    Args:
        output_format: "" or "hatchet" (the only format for data="tree").
    """
    if profiler.command_line:
        if session is None or session in profiler.sessions:  # finalize twice: a no-op
            deactivate(session)  # profiling stops here; the command writes at exit
        return
    for path in write_profiles(session, output_format):
        warn(f"wrote {path}")


def write_profiles(session: int | None = None, output_format: str = "") -> list[str]:
    """finalize() that returns the files written, also under the `proton` command (which calls
    it when the script ends)."""
    try:
        return profiler.finalize(session, output_format)
    finally:
        _hooks_ended(session)


def discard(session: int) -> None:
    """Close `session` without writing its file (a capture abandoned before it began)."""
    try:
        profiler.discard(session)
    finally:
        _hooks_ended(session)


def _hooks_ended(session: int | None) -> None:
    """`session` (every one when None) ended: its hooks let go, and the launch hook's options
    with them once no live session uses it."""
    for sid in list(HookManager.session_hooks) if session is None else [session]:
        if sid not in profiler.sessions:  # closed (also when its file could not be written)
            HookManager.unregister(sid)
    _reset_unused_hook()


def _reset_unused_hook() -> None:
    if not any(s.hook for s in profiler.sessions.values()):
        from .hooks import triton_hook

        triton_hook.reset()


def profile(func: Callable | None = None, *, name: str | None = None, context: str = "shadow",
            data: str = "tree", backend: str | None = None, mode: str | None = None,
            hook: str | Hook | None = None) -> Callable:
    """Decorator: profile each call of the function into session `name` (as in Triton, the
    session is deactivated after each call and written by finalize() or at exit; under the
    `proton` command, each call resumes and pauses the command's session).

    Usage:
        @proton.profile(name="train")
        def train(): ...
    """
    parse_options(name, context=context, data=data, backend=backend, mode=mode,
                  hook=hook)  # a bad option raises here, at the decorator, not at a call
    if func is None:
        return functools.partial(profile, name=name, context=context, data=data,
                                 backend=backend, mode=mode, hook=hook)
    if not callable(func):
        raise SessionError(f"proton.profile decorates a function, not {func!r}; use "
                           "@proton.profile or @proton.profile(name=...)")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        sid = start(name, context=context, data=data, backend=backend, mode=mode, hook=hook)
        try:
            return func(*args, **kwargs)
        finally:
            deactivate(sid)

    return wrapper
