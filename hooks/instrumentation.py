"""Triton's `triton.profiler.hooks.instrumentation.InstrumentationHook`, for scripts and tests
that reach it (a minimal stand-in: start(backend="instrumentation") does the work, in
runtime/instrumentation.py, and registers no hook here)."""
from __future__ import annotations

from typing import Any

from .hook import Hook


class InstrumentationHook(Hook):
    """backend="instrumentation" as Triton names its hook: below LaunchHook (priority 0), its
    launch methods do nothing, so registering one with HookManager changes no launch.

    Usage:
        HookManager.register(InstrumentationHook(""), sid)
    """

    priority: int = 0

    def __init__(self, mode: Any = None) -> None:
        """`mode`: as start(mode=...) takes it with backend="instrumentation"."""
        self.mode = mode
