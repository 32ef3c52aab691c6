"""Triton's `triton.profiler.hooks.launch`: the launch hook as an object (`LaunchHook`), the
state a launch_metadata function runs under (kernels it launches are counted there, never under
the kernel's op) and the latest launch's id. The per-launch work is hooks/triton_hook.py's."""
from __future__ import annotations

from ..format import LAUNCH_METADATA
from . import triton_hook
from .hook import Hook

COMPUTE_METADATA_SCOPE_NAME = LAUNCH_METADATA
"""'__proton_launch_metadata', as in Triton's files: the state a launch_metadata function runs
under, so the kernels it launches sit right under it."""
id = triton_hook.launch_id
"""ContextVar: the id of this thread's latest launch the hook counted (Triton's name)."""


class LaunchHook(Hook):
    """hook="triton" as an object: one per process, as in Triton's Proton; configured with
    include/exclude regexes over kernel names, start() takes it as the
    "triton:include=...:exclude=..." it stands for. Its enter and exit are triton_hook's own
    functions, so Triton's chain calls them with nothing in between.

    Usage:
        hook = LaunchHook()
        hook.configure(include="matmul.*")
        proton.start("run", hook=hook)     # as hook="triton:include=matmul.*"
    """

    priority = 100
    """Above every other hook: its op is the launch's node before they run."""
    _instance: LaunchHook | None = None
    _include_pattern: str | None = None
    _exclude_pattern: str | None = None

    def __new__(cls) -> LaunchHook:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def configure(self, *, include: str | None = None, exclude: str | None = None) -> None:
        """Which kernels (by name, `re.search`) the hook names; the others stay plain kernels."""
        self._include_pattern, self._exclude_pattern = include, exclude

    enter = staticmethod(triton_hook._enter)
    exit = staticmethod(triton_hook._exit)
