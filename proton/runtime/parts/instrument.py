"""backend="instrumentation" as a part: kernels compiled with Triton's instrumentation passes
(runtime/instrumentation.py), their scopes read from the device arena onto the kernel nodes
(a tree, each with its warp timeline) or as warp spans (a trace).

One such session at a time (kernels compile with one mode at a time); it counts only its
instrumented launches (Session.only_kernels).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .base import Part

if TYPE_CHECKING:
    from ...options import SessionOptions
    from ..session import Session


@dataclass(slots=True)
class InstrumentState:
    """An instrumentation session's own (session.parts["instrument"])."""

    inst: Any
    """The runtime/instrumentation.Instrumentation it reads, until it is written (None)."""
    spans: list = field(default_factory=list)
    """Kernel scopes' spans per warp (data="trace"), read when the session is written."""
    timelines: dict = field(default_factory=dict)
    """Kernel node -> its latest launch's warp timeline (data="tree", format.WARP_TIMELINE)."""


class InstrumentPart(Part):
    """Intra-kernel scopes of the instrumented launches."""

    name = "instrument"

    def wants(self, opts: SessionOptions) -> bool:
        return opts.instrument is not None

    def check(self, opts: SessionOptions, live: list[Session]) -> None:
        if opts.instrument is None:
            return
        from .. import instrumentation  # numpy and Triton: only for such sessions

        instrumentation.check_start(any(
            self.name in s.parts and s.parts[self.name].inst is not None for s in live))

    def attach(self, session: Session, opts: SessionOptions) -> None:
        from .. import instrumentation

        inst = instrumentation.start(opts.instrument, opts.data)  # type: ignore[arg-type]
        session.parts[self.name] = InstrumentState(inst)
        session.only_kernels = inst.launches

    def resume(self, session: Session) -> None:
        if (inst := session.parts[self.name].inst) is not None:
            inst.recording = True

    def pause(self, session: Session) -> None:
        if (inst := session.parts[self.name].inst) is not None:
            inst.recording = False

    def finish(self, session: Session, last: bool, devices: dict) -> None:
        state = session.parts[self.name]
        inst, state.inst = state.inst, None
        if inst is not None:
            from .. import instrumentation

            state.spans, state.timelines = instrumentation.finish(inst, session, devices)

    def build_args(self, session: Session) -> dict[str, Any]:
        state = session.parts[self.name]
        return {"timelines": state.timelines, "spans": state.spans}
