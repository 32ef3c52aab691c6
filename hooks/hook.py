"""The hook interface, in the shape of Triton's Proton (`triton.profiler.hooks.hook`): a hook
is told of each kernel load and each launch's enter and exit while one of its sessions is
active. Scripts and Triton's own tests reach these names; `HookManager` is the registry of
which hooks serve which session, and what it puts on Triton's hook chains.

Per launch it costs what the hooks cost: with one hook active (hook="triton" alone), Triton's
chains call that hook's own functions, no dispatch in between; with several, HookManager's,
which call each in priority order. With none active nothing of ours is on the chains. Ours go
first on Triton's chains (so they run before, and exit after, any other launch hook: the
instrumentation backend's reads the op); other hooks (the user's, another tool's) stay in order.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable


class Hook:
    """One kind of launch hook. `priority`: higher runs its enter first and its exit last."""

    priority: int = 0

    def init_handle(self, module: Any, function: Any, name: str, metadata_group: dict[str, str],
                    hash: str) -> None:
        """A compiled kernel was loaded (Triton's kernel_load_end_hook)."""

    def destroy_handle(self, module: Any, function: Any, name: str,
                       metadata_group: dict[str, str], hash: str) -> None:
        """A loaded kernel is unloaded (Triton 3.9's kernel_unload_hook; never under 3.6,
        which has none)."""

    def enter(self, metadata: Any) -> None:
        """Before a launch; `metadata` is Triton's lazy launch-metadata dict."""

    def exit(self, metadata: Any) -> None:
        """After a launch."""

    def activate(self) -> None:
        """The first active session using this hook became active."""

    def deactivate(self) -> None:
        """No active session uses this hook any more."""


class HookManager:
    """Which hooks serve which session (Triton's registry, its names and behaviour).

    Usage:
        HookManager.register(LaunchHook(), sid)    # proton.start(hook="triton") does this
        HookManager.deactivate(sid)                # proton.deactivate(sid)
        HookManager.unregister(sid)                # proton.finalize(sid)
    """

    active_hooks: list[Hook] = []
    """The hooks some active session uses, highest priority first."""
    session_hooks: dict[int, dict[Hook, bool]] = {}
    """Session id -> {hook: whether the session is active}."""
    _chained: tuple[Callable, ...] | None = None
    """(load, enter, exit, unload) as they stand on Triton's chains, while a hook is active."""
    _lock = threading.RLock()
    """Sessions start and end on any thread (a capture's phase thread)."""

    @staticmethod
    def init_handle(module: Any, function: Any, name: str, metadata_group: dict[str, str],
                    hash: str) -> None:
        for hook in HookManager.active_hooks:
            hook.init_handle(module, function, name, metadata_group, hash)

    @staticmethod
    def destroy_handle(module: Any, function: Any, name: str, metadata_group: dict[str, str],
                       hash: str) -> None:
        for hook in reversed(HookManager.active_hooks):  # loaded first, unloaded last
            hook.destroy_handle(module, function, name, metadata_group, hash)

    @staticmethod
    def enter(metadata: Any) -> None:
        for hook in HookManager.active_hooks:
            hook.enter(metadata)

    @staticmethod
    def exit(metadata: Any) -> None:
        for hook in reversed(HookManager.active_hooks):  # first in, last out
            hook.exit(metadata)

    @staticmethod
    def register(hook: Hook, session: int) -> None:
        """`session` uses `hook` and is active."""
        with HookManager._lock:
            HookManager.session_hooks.setdefault(session, {})[hook] = True
            HookManager._use(hook)
            HookManager._chain()

    @staticmethod
    def unregister(session: int | None = None) -> None:
        """`session` (every session when None) ended: its hooks no other active session uses
        are deactivated."""
        with HookManager._lock:
            if session is None:
                for hook in HookManager.active_hooks:
                    hook.deactivate()
                HookManager.active_hooks.clear()
                HookManager.session_hooks.clear()
            elif session in HookManager.session_hooks:
                for hook, active in HookManager.session_hooks.pop(session).items():
                    if active:
                        HookManager._release(hook)
            HookManager._chain()

    @staticmethod
    def activate(session: int | None = None) -> None:
        """`session` (every registered session when None) is active again."""
        with HookManager._lock:
            for sid in HookManager._sessions(session):
                hooks = HookManager.session_hooks[sid]
                for hook in hooks:
                    hooks[hook] = True
                    HookManager._use(hook)
            HookManager._chain()

    @staticmethod
    def deactivate(session: int | None = None) -> None:
        """`session` (every registered session when None) is paused: its hooks no other
        active session uses are deactivated."""
        with HookManager._lock:
            for sid in HookManager._sessions(session):
                hooks = HookManager.session_hooks[sid]
                for hook, active in hooks.items():
                    if active:
                        hooks[hook] = False
                        HookManager._release(hook)
            HookManager._chain()

    # -- internals --------------------------------------------------------------------------
    @staticmethod
    def _sessions(session: int | None) -> list[int]:
        if session is None:
            return list(HookManager.session_hooks)
        return [session] if session in HookManager.session_hooks else []

    @staticmethod
    def _use(hook: Hook) -> None:
        if hook not in HookManager.active_hooks:
            hook.activate()
            HookManager.active_hooks.append(hook)
            HookManager.active_hooks.sort(key=lambda h: h.priority, reverse=True)

    @staticmethod
    def _release(hook: Hook) -> None:
        """Deactivate `hook` unless another session still uses it actively."""
        if hook in HookManager.active_hooks and not any(
                hooks.get(hook) for hooks in HookManager.session_hooks.values()):
            hook.deactivate()
            HookManager.active_hooks.remove(hook)

    @staticmethod
    def _chain() -> None:
        """Put on Triton's chains what runs the active hooks now (see the module's doc)."""
        hooks = HookManager.active_hooks
        if not hooks:
            wanted = None
        elif len(hooks) == 1:
            hook = hooks[0]
            wanted = (hook.init_handle, hook.enter, hook.exit, hook.destroy_handle)
        else:
            wanted = (HookManager.init_handle, HookManager.enter, HookManager.exit,
                      HookManager.destroy_handle)
        if wanted == HookManager._chained:
            return
        try:
            from triton import knobs
        except ImportError:  # no Triton: no launches to hook
            return
        chains = (knobs.runtime.kernel_load_end_hook, knobs.runtime.launch_enter_hook,
                  knobs.runtime.launch_exit_hook,
                  getattr(knobs.runtime, "kernel_unload_hook", None))  # 3.9's; 3.6 has none
        for chain, old, new in zip(chains, HookManager._chained or (None,) * 4,
                                   wanted or (None,) * 4):
            if chain is None:
                continue
            if old is not None:
                chain.remove(old)
            if new is not None:
                chain.add(new)
                # first on the chain (last on the exit chain, which Triton runs reversed): the
                # launch's op exists before any other enter hook runs, backend="instrumentation"'s
                # included, which reads where the launch goes, as Triton's priorities order them
                chain.calls.insert(0, chain.calls.pop(chain.calls.index(new)))
        HookManager._chained = wanted


def _after_fork_in_child() -> None:
    """A forked child drops its parent's sessions (runtime/profiler.py): their hooks leave
    Triton's chains there, and a lock another thread held at the fork is made anew."""
    HookManager._lock = threading.RLock()
    HookManager.unregister()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
