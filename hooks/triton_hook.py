"""hook="triton": name each Triton launch after its kernel (or its launch_metadata "name") and put
the numbers its launch_metadata function returns (flops8/16/32/64, flops, bytes, ...) on that node.

Options after the name, `triton:OPTION[:OPTION...]`:
  config            append the launch configuration to op names:
                    matmul_kernel_<grid:16x16x1>_<warps:4>_<stages:3>_<shared:65536>
  config=A,B        ... and these constexprs (`config=*`: all of them), e.g. _<BLOCK_M:128>
  include=REGEX     only kernels whose name contains a match become ops (others stay plain
  exclude=REGEX     kernels with their CUPTI name; their launch_metadata is not run)

`_enter` and `_exit` are the launch hook's work (hooks/launch.py's LaunchHook, which
hooks/hook.py's HookManager puts on Triton's chains while a session with hook="triton" is
active); `configure` sets the options first. Talks to the runtime through runtime/ops.py only.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
from contextvars import ContextVar
from types import FrameType

from .. import triton_version
from ..data.metrics import RESERVED, DeviceTensor, metric_value
from ..errors import ScopeError, SessionError
from ..format import COUNT, LAUNCH_METADATA
from ..options import HookOptions
from ..runtime import ops

_NOT_METRICS = {"name", "function", "stream"}


class _State(threading.local):
    busy = False
    """In the hook on this thread: a launch made by launch_metadata is not an op."""


_state = _State()
launch_id: ContextVar[int | None] = ContextVar("id", default=None)
"""The latest counted launch's id on this thread (Triton's `hooks.launch.id`): a new one for
every launch the hook names, never given twice in the process."""
_set_id, _next_id = launch_id.set, itertools.count().__next__  # bound once: per launch
_configured = False
"""Options were set by a session still live (its hook's options until `reset`)."""
_options = HookOptions()


def _metrics(md: dict) -> dict[str, float | list | DeviceTensor]:
    out = {}
    for key, value in md.items():
        if key in _NOT_METRICS or key in RESERVED or key == COUNT:
            continue  # a "count" or "time (ns)" of the user's would clash with the kernel's
        try:  # a GPU tensor is kept, never read: a launch inside a graph capture stays legal
            out[key] = metric_value(key, value)
        except ScopeError:
            continue  # launch_metadata may return names, shapes and other non-metrics
    return out


def _enter(metadata) -> None:
    """Per launch, so lean: the op is not a scope on the thread's stack, only its path id pushed
    as CUPTI's external correlation id for the one launch between the enter and exit hooks."""
    state = _state
    ops.exit_op()  # the last launch raised before the exit hook ran
    if state.busy:
        return
    data = metadata.data
    opts = _options
    if opts.include is not None or opts.exclude is not None:
        kernel = data.get("name", "")
        if (opts.include is not None and not opts.include.search(kernel)) or \
                (opts.exclude is not None and opts.exclude.search(kernel)):
            return
    extras = getattr(metadata, "extras", True)  # a launch_metadata function: it may launch
    if (extras or opts.config) and not ops.collecting():  # work for a launch nobody counts
        return
    values = None
    if extras:
        state.busy = True
        try:
            with ops.frame(*metadata_frames(data.get("name"))):  # Triton's state
                md = metadata.get()
        finally:
            state.busy = False
        name = md.get("name") or data.get("name", "triton_kernel")
        values = _metrics(md)
    else:
        name = data.get("name", "triton_kernel")
    if opts.config:
        name = _config_name(name, data.get("function"), opts.constexprs)
    # the runtime annotates metric maps as float, yet they carry lists and DeviceValues too
    # (session.add folds them); no cast: this runs at every launch
    if ops.enter_op(name, values, data.get("name")) is not None:  # type: ignore[arg-type]
        _set_id(_next_id())


def _exit(metadata) -> None:
    ops.exit_op()


def metadata_frames(kernel: str | None) -> tuple[str, ...]:
    """The states a launch_metadata function runs under, which its own kernels sit right
    under, as the installed Triton's Proton places them: LAUNCH_METADATA (Triton 3.6), then
    the launched kernel's name as a second state (newer: `__proton_launch_metadata` ->
    `<kernel>`, so each kernel's metadata work is told apart)."""
    if kernel and triton_version.after_3_6():
        return (LAUNCH_METADATA, kernel)
    return (LAUNCH_METADATA,)


_names: dict[tuple, str] = {}
"""(name, function, grid) -> the configured name: built once per launch shape."""


def _config_name(name: str, function, constexprs: tuple[str, ...] | None) -> str:
    grid, launcher = _launch_grid()
    key = (name, function, grid)
    found = _names.get(key)
    if found is not None:
        return found
    from ..compiler.kernels import from_compiled, kernels

    info = kernels.get(function) if function is not None else None
    if info is None:  # loaded before the table knew of it
        compiled = _compiled_kernel(launcher)
        info = from_compiled(compiled) if compiled is not None else None
        if info is not None:
            kernels.add(info)
    parts = [name]
    if grid is not None:
        parts.append("<grid:{}x{}x{}>".format(*grid))
    if info is not None:
        parts += [f"<warps:{info.num_warps}>", f"<stages:{info.num_stages}>",
                  f"<shared:{info.shared}>"]
        if tuple(info.cluster_dims) not in ((1, 1, 1), ()) or info.num_ctas > 1:
            parts.append("<cluster:{}>".format("x".join(map(str, info.cluster_dims))))
        chosen = info.constexprs if constexprs is None else \
            {k: info.constexprs[k] for k in constexprs if k in info.constexprs}
        parts += [f"<{k}:{v}>" for k, v in chosen.items()]
    _names[key] = found = "_".join(parts)
    return found


def _launch_grid() -> tuple[tuple | None, object]:
    """The grid of the launch in progress, read from Triton's launcher frame
    (CudaLauncher.__call__(gridX, gridY, gridZ, ...)), and that frame (None if not found)."""
    frame: FrameType | None = sys._getframe(3)  # past _launch_grid, _config_name and _enter
    for _ in range(4):
        if frame is None:
            break
        if "gridX" in frame.f_code.co_varnames:
            local = frame.f_locals
            return (local.get("gridX"), local.get("gridY"), local.get("gridZ")), frame
        frame = frame.f_back
    return None, None


def _compiled_kernel(launcher):
    """The CompiledKernel being launched, from the launcher's caller (`kernel` in
    JITFunction.run, `bin` in torch inductor's launchers); only on a name not built yet."""
    frame = launcher.f_back if launcher is not None else None
    for _ in range(2):
        if frame is None:
            break
        names = frame.f_code.co_varnames
        if "kernel" in names or "bin" in names:
            local = frame.f_locals
            return local.get("kernel") or local.get("bin")
        frame = frame.f_back
    return None


def configure(options: HookOptions, spec: str = "triton") -> None:
    """The hook's options (parsed from `spec`), before a session with it starts.

    Raises:
        SessionError: no Triton, or other options than those of a live session's hook.
    """
    global _configured, _options
    if _configured and options != _options:
        raise SessionError(f"hook={spec!r} differs from the hook options of the running "
                           "session; finalize it first or use the same options")
    try:
        from triton import knobs  # noqa: F401
    except ImportError:
        raise SessionError("hook='triton' needs Triton (pip install triton); "
                           "or start without hook") from None
    if options.config:
        from ..compiler.kernels import kernels

        kernels.install()
    _options, _configured = options, True


def reset() -> None:
    """No live session uses the hook any more: the next may configure it afresh."""
    global _configured
    _configured = False
    _names.clear()


if hasattr(os, "register_at_fork"):  # a forked child's own session may configure it afresh
    os.register_at_fork(after_in_child=reset)
