"""context="shadow": kernels under the scopes open on the launching thread (Triton's default)."""
from __future__ import annotations

from types import FrameType

from ..data.paths import paths
from .stack import Open, main_innermost, per_thread


class ShadowContext:
    """A scope's node is its name under the thread's innermost open frame; a launch goes under
    the innermost open frame (the main thread's, on a thread with none open). The collector
    learns it with no Python per launch: each scope pushes its path id (on the C helper's
    stack, or as a CUPTI external correlation id without it)."""

    name = "shadow"
    in_callback = False
    """Launches are attributed by the ids scopes push, not in a CUPTI launch callback."""
    walk = None
    """No launch callback: nothing for the C helper to walk (python.Walk)."""

    @staticmethod
    def scope_path(parent: int, top: Open) -> int:
        return paths.intern(parent, top.name, top.kind)

    @staticmethod
    def launch_path(frame: FrameType | None) -> int:
        st = per_thread.stacks
        path = st.op_path
        if path is not None:
            return path
        opened = st.open
        # a thread with no frame open (autograd's) launches where the main thread is, as
        # the collector logs its launches: a hook's op on it goes there too
        return opened[-1].path if opened else main_innermost()

    def start(self) -> None:
        pass

    def end(self) -> None:
        pass
