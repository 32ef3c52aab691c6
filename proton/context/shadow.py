"""context="shadow": kernels under the scopes open on the launching thread (Triton's default)."""
from __future__ import annotations

from types import FrameType

from ..data.paths import ROOT, paths
from .stack import Open, per_thread


class ShadowContext:
    """A scope's node is its name under the thread's innermost open frame; a launch goes under
    the innermost open frame. The collector learns it with no Python per launch: each scope
    pushes its path id as a CUPTI external correlation id."""

    name = "shadow"
    in_callback = False
    """Launches are attributed by the ids scopes push, not in a CUPTI launch callback."""

    def scope_path(self, parent: int, top: Open) -> int:
        return paths.intern(parent, top.name, top.kind)

    @staticmethod
    def launch_path(frame: FrameType | None) -> int:
        st = per_thread.stacks
        path = st.op_path
        if path is not None:
            return path
        opened = st.open
        return opened[-1].path if opened else ROOT

    def start(self) -> None:
        pass

    def end(self) -> None:
        pass
