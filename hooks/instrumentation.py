"""Triton's `triton.profiler.hooks.instrumentation.InstrumentationHook`, for scripts and tests
that reach it: its switch to copy each instrumented launch's raw profile buffer to the host.

    InstrumentationHook.enable_host_buffer = True      # before or during the session
    proton.start("run", backend="instrumentation")
    kernel[grid](...)
    raw = InstrumentationHook.host_buffer              # torch uint8 CPU tensor, Triton's layout

The session itself is instrumented by start(backend="instrumentation") (the runtime's
runtime/instrumentation.py); this object carries no work of its own: its launch methods do
nothing, so registering one with a hook manager changes no launch. The two class attributes
are the runtime's state (read and written through runtime/ops.py): off, launches pay nothing
for them; on, each instrumented launch is synchronized and copied (as Triton's Proton does).
"""
from __future__ import annotations

from typing import Any

from ..mode import InstrumentationMode, instrumentation_mode
from .hook import Hook


class _HostBuffer(type):
    """`enable_host_buffer` and `host_buffer` as class attributes that are the runtime's."""

    @property
    def enable_host_buffer(cls) -> bool:
        from ..runtime import ops

        return ops.copying_host_buffers()

    @enable_host_buffer.setter
    def enable_host_buffer(cls, on: bool) -> None:
        from ..runtime import ops

        ops.copy_host_buffers(bool(on))

    @property
    def host_buffer(cls) -> Any:
        from ..runtime import ops

        return ops.host_buffer()

    @host_buffer.setter
    def host_buffer(cls, value: Any) -> None:
        from ..runtime import ops

        ops.set_host_buffer(value)


class InstrumentationHook(Hook, metaclass=_HostBuffer):
    """backend="instrumentation" as Triton names its hook.

    Class attributes (Triton's): `enable_host_buffer` (False): copy each instrumented launch's
    buffer to the host; `host_buffer`: the last such launch's buffer, a torch uint8 CPU tensor
    laid out as Triton's (a 40-byte header: version, header offset, header size, payload
    offset at bytes 12:16, payload size, device type, CTAs, warps, scratch bytes per CTA,
    recorded warps at 36:40, their ids from byte 40; then the CTAs' blocks); None before the
    first and at each launch's start. `profile_buffer_alignment`: the alignment Triton's
    launcher asks of the profile allocator.

    Usage:
        InstrumentationHook.enable_host_buffer = True
        proton.start("run", backend="instrumentation")
    """

    priority: int = 0
    profile_buffer_size: int = 1
    """Triton's minimum profile allocation (bytes); ours cuts launches from one arena."""
    profile_buffer_alignment: int = 128

    def __init__(self, mode: str | InstrumentationMode | None = None) -> None:
        """`mode`: as start(mode=...) takes it with backend="instrumentation" ("" or None:
        "default")."""
        self.mode = instrumentation_mode(mode or None)

    def activate(self) -> None:
        """Nothing: start(backend="instrumentation") installs the compiler passes and hooks."""

    def deactivate(self) -> None:
        """As Triton's: the host buffer is let go."""
        type(self).host_buffer = None
