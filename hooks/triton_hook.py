"""hook="triton": name each Triton launch after its kernel (or its launch_metadata "name") and put
the numbers its launch_metadata function returns (flops8/16/32/64, flops, bytes, ...) on that node.

Options after the name, `triton:OPTION[:OPTION...]`:
  config            append the launch configuration to op names:
                    matmul_kernel_<grid:16x16x1>_<warps:4>_<stages:3>_<shared:65536>
  config=A,B        ... and these constexprs (`config=*`: all of them), e.g. _<BLOCK_M:128>
  include=REGEX     only kernels whose name contains a match become ops (others stay plain
  exclude=REGEX     kernels with their CUPTI name; their launch_metadata is not run)

Chains with any other launch hooks through Triton's knobs (add/remove), never replacing them.
"""
from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass
from numbers import Number

from ..errors import SessionError
from ..metrics import RESERVED
from ..paths import OP, paths
from ..scope import enter_frame, exit_scope, launch_parent, pop_op, push_op
from ..session import profiler

LAUNCH_METADATA = "__proton_launch_metadata"
"""Kernels that a launch_metadata function launches go under this frame (hidden by the viewers)."""
_NOT_METRICS = {"name", "function", "stream"}


class _State(threading.local):
    busy = False
    """In the hook on this thread: a launch made by launch_metadata is not an op."""


_state = _State()
_installed = False


@dataclass(frozen=True, slots=True)
class HookOptions:
    config: bool = False
    """Append grid, warps, stages and shared memory to op names."""
    constexprs: tuple[str, ...] | None = ()
    """Constexprs to append too (None: all the kernel declares)."""
    include: re.Pattern | None = None
    exclude: re.Pattern | None = None


_options = HookOptions()
_KEYS = ("config", "include", "exclude")


def parse(spec: str) -> HookOptions:
    """`triton[:config[=A,B|*]][:include=REGEX][:exclude=REGEX]` -> HookOptions.

    Raises:
        SessionError: another hook name, an unknown option or a bad regular expression.
    """
    head, _, rest = spec.partition(":")
    if head != "triton":
        raise SessionError(f"hook={spec!r} is not supported; use 'triton' or "
                           "'triton:config', 'triton:include=REGEX', ... (see proton -h)")
    found: dict = {}
    # a regex may hold ':'; split only where a known option follows
    for part in re.split(r":(?=(?:config|include|exclude)(?:=|:|$))", rest) if rest else []:
        key, eq, value = part.partition("=")
        if key not in _KEYS or (key != "config" and not eq):
            raise SessionError(f"hook option {part!r} in {spec!r} is not known; use config, "
                               "config=NAME,NAME, include=REGEX or exclude=REGEX")
        if key == "config":
            names = [n.strip() for n in value.split(",") if n.strip()]
            found["config"] = True
            found["constexprs"] = None if names == ["*"] else tuple(names)
        else:
            try:
                found[key] = re.compile(value)
            except re.error as exc:
                raise SessionError(f"hook option {key}={value!r} is not a valid regular "
                                   f"expression: {exc}") from None
    return HookOptions(**found)


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
    """Per launch, so lean: the op is not a scope on the thread's stack, only its path id pushed
    as CUPTI's external correlation id for the one launch between the enter and exit hooks."""
    state = _state
    pop_op()  # the last launch raised before the exit hook ran
    collector = profiler.collector
    if state.busy or collector is None or not profiler.sessions:
        return
    data = metadata.data
    opts = _options
    if opts.include is not None or opts.exclude is not None:
        kernel = data.get("name", "")
        if (opts.include is not None and not opts.include.search(kernel)) or \
                (opts.exclude is not None and opts.exclude.search(kernel)):
            return
    values = None
    if getattr(metadata, "extras", True):  # a launch_metadata function: it may launch kernels
        state.busy = True
        try:
            enter_frame(LAUNCH_METADATA, {})
            try:
                md = metadata.get()
            finally:
                exit_scope()
        finally:
            state.busy = False
        name = md.get("name") or data.get("name", "triton_kernel")
        values = _metrics(md)
    else:
        name = data.get("name", "triton_kernel")
    if opts.config:
        name = _config_name(name, data.get("function"), opts.constexprs)
    path = paths.intern(launch_parent(), name, OP)
    push_op(collector, path)
    if values:
        profiler.add_metrics(path, values)


def _exit(metadata) -> None:
    pop_op()


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
    frame = sys._getframe(3)  # past _launch_grid, _config_name and _enter
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


def install(spec: str = "triton") -> None:
    """Add the hooks to Triton's launch hook chains (once), with the options in `spec`."""
    global _installed, _options
    options = parse(spec)
    if _installed and options != _options:
        raise SessionError(f"hook={spec!r} differs from the hook options of the running "
                           "session; finalize it first or use the same options")
    try:
        from triton import knobs
    except ImportError:
        raise SessionError("hook='triton' needs Triton (pip install triton); "
                           "or start without hook") from None
    if options.config:
        from ..compiler.kernels import kernels

        kernels.install()
    _options = options
    if _installed:
        return
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
    _names.clear()
