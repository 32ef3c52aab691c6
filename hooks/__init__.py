"""Launch hooks, under Triton's names (`triton.profiler.hooks`): `LaunchHook` (hook="triton" as
an object, `hooks/launch.py`), `HookManager` and `Hook` (`hooks/hook.py`), and
`InstrumentationHook` (backend="instrumentation", `hooks/instrumentation.py`). Each loads on
first use: importing this package loads none of them."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hook import Hook, HookManager
    from .instrumentation import InstrumentationHook
    from .launch import LaunchHook

_WHERE = {"LaunchHook": "launch", "HookManager": "hook", "Hook": "hook",
          "InstrumentationHook": "instrumentation"}
"""Name -> the module of this package that defines it."""

__all__ = ["LaunchHook", "HookManager", "Hook", "InstrumentationHook"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
