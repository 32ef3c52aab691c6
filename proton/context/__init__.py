"""Contexts: where in the call tree a scope or a kernel launch goes.

A context is chosen once per session (`make`); both kinds offer the same interface:
    name           "shadow" or "python"
    in_callback    True: the collector attributes each launch in a CUPTI launch callback
                   (calling launch_path); False: by the path ids scopes push
    scope_path(parent, top) -> path id of a frame being opened (`top`, a stack.Open, not
                   yet on the thread's stack) under `parent`, the path of the frame it
                   opens inside
    launch_path(frame) -> path id of a launch made at `frame` on this thread (None: a thread
                   with no Python frames and no scope open); a plain function, it runs per launch
    start(), end() when the first session with it starts and the last one ends

stack.py holds each thread's open frames; frames.py opens and closes them and tells the runtime.
"""
from __future__ import annotations


def depth(session: int | None = 0) -> int | None:
    """How many scopes are open on the calling thread (Triton's `proton.context.depth`): 0
    outside any, one more per open scope (states do not count); None while no session is live.
    Unlike Triton's, scopes opened before `session` started count too: ours are the thread's.

    Usage:
        with proton.scope("step"):
            assert proton.context.depth(sid) == 1

    Raises:
        SessionError: `session` is not a live session's id.
    """
    from . import frames, stack

    if not frames.recording():
        return None
    frames.check_session(session)
    return stack.scope_depth()


def make(name: str):
    """The context called `name` ("shadow" or "python"; options.CONTEXTS)."""
    if name == "python":
        from .python import PythonContext

        return PythonContext()
    from .shadow import ShadowContext

    return ShadowContext()
