"""hook="triton": name each Triton launch after its kernel (or its launch_metadata "name") and put
the numbers its launch_metadata function returns (flops8/16/32/64, flops, bytes, ...) on that node.

Chains with any other launch hooks through Triton's knobs (add/remove), never replacing them.
"""
from __future__ import annotations

import threading
from numbers import Number

from ..errors import SessionError
from ..paths import OP
from ..metrics import RESERVED
from ..scope import depth, enter_frame, exit_scope, unwind
from ..session import profiler

LAUNCH_METADATA = "__proton_launch_metadata"
"""Kernels that a launch_metadata function launches go under this frame (hidden by the viewers)."""
_NOT_METRICS = {"name", "function", "stream"}


class _State(threading.local):
    busy = False
    """In the hook on this thread: a launch made by launch_metadata is not an op."""
    op_depth = -1
    """Frames open on this thread before the op frame we opened, or -1 when none is open."""


_state = _State()
_installed = False


def _metrics(md: dict) -> dict[str, float]:
    out = {}
    for key, value in md.items():
        if key in _NOT_METRICS or key in RESERVED:
            continue  # a "count" or "time (ns)" of the user's would clash with the kernel's
        if hasattr(value, "item") and not isinstance(value, Number):
            value = value.item()  # a 0-d tensor
        if isinstance(value, Number) and not isinstance(value, bool):
            out[key] = value
    return out


def _enter(metadata) -> None:
    state = _state
    if state.op_depth >= 0:  # the last launch raised before the exit hook ran
        unwind(state.op_depth)
        state.op_depth = -1
    if state.busy or not profiler.sessions:
        return
    state.busy = True
    try:
        if getattr(metadata, "extras", True):  # a launch_metadata function may launch kernels
            enter_frame(LAUNCH_METADATA, {})
            try:
                md = metadata.get()
            finally:
                exit_scope()
        else:
            md = metadata.get()
        name = md.get("name") or metadata.data.get("name", "triton_kernel")
        before = depth()
        enter_frame(name, _metrics(md), kind=OP)
        state.op_depth = before
    finally:
        state.busy = False


def _exit(metadata) -> None:
    state = _state
    if state.op_depth >= 0:
        unwind(state.op_depth)
        state.op_depth = -1


def install() -> None:
    """Add the hooks to Triton's launch hook chains (once)."""
    global _installed
    if _installed:
        return
    try:
        from triton import knobs
    except ImportError:
        raise SessionError("hook='triton' needs Triton (pip install triton); "
                           "or start without hook") from None

    knobs.runtime.launch_enter_hook.add(_enter)
    knobs.runtime.launch_exit_hook.add(_exit)
    _installed = True


def uninstall() -> None:
    global _installed
    if not _installed:
        return
    from triton import knobs

    knobs.runtime.launch_enter_hook.remove(_enter)
    knobs.runtime.launch_exit_hook.remove(_exit)
    _installed = False
