"""Launch hooks. `LaunchHook` is Triton's newer Proton's hook object (`hook=LaunchHook()`,
configured with include/exclude regexes over kernel names); start() takes it as the
`hook="triton:include=...:exclude=..."` it stands for. `InstrumentationHook` (loaded on first
use) is Triton's name for backend="instrumentation": its host-buffer switch."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .instrumentation import InstrumentationHook


def __getattr__(name: str) -> Any:
    if name == "InstrumentationHook":
        from .instrumentation import InstrumentationHook

        return InstrumentationHook
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LaunchHook:
    """Triton's launch hook as an object: one per process, as in Triton's Proton.

    Usage:
        hook = LaunchHook()
        hook.configure(include="matmul.*")
        proton.start("run", hook=hook)     # as hook="triton:include=matmul.*"
    """

    _instance: LaunchHook | None = None

    def __new__(cls) -> LaunchHook:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._include_pattern = cls._instance._exclude_pattern = None
        return cls._instance

    def configure(self, *, include: str | None = None, exclude: str | None = None) -> None:
        self._include_pattern, self._exclude_pattern = include, exclude
