"""The hook interface, in the shape of Triton's Proton (`triton.profiler.hooks.hook`): a hook
is told of each kernel load and each launch's enter and exit while one of its sessions is
active. Scripts and Triton's own tests reach these names; the registry of which hooks serve
which session is `HookManager`."""
from __future__ import annotations

from typing import Any


class Hook:
    """One kind of launch hook. `priority`: higher runs its enter first and its exit last."""

    priority: int = 0

    def init_handle(self, module: Any, function: Any, name: str, metadata_group: dict[str, str],
                    hash: str) -> None:
        """A compiled kernel was loaded (Triton's kernel_load_end_hook)."""

    def enter(self, metadata: Any) -> None:
        """Before a launch; `metadata` is Triton's lazy launch-metadata dict."""

    def exit(self, metadata: Any) -> None:
        """After a launch."""

    def activate(self) -> None:
        """The first active session using this hook became active."""

    def deactivate(self) -> None:
        """No active session uses this hook any more."""
