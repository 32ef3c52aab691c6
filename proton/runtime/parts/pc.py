"""mode="pcsampling" as a part: instruction samples on each kernel node and its source lines.

The sampler (cupti/pc_collector.PCCollector) is set up with the collector, by the first
session, so the others sample exactly when it does and with its options; it runs while a
sampling session is active and is read when each one is written (finished by the last).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from ...data import sources
from ...data.paths import LINE, paths
from ...errors import SessionError
from ...format import SOURCES_KEY
from ...report import warn
from .base import MODE_REFUSED, Part, mode_text, session_mode

if TYPE_CHECKING:
    from ...cupti.settings import PartAsks
    from ...options import PCOptions, SessionOptions
    from ..session import Session


@dataclass(slots=True)
class PCState:
    """A sampling session's own (session.parts["pc"])."""

    options: PCOptions
    base: dict | None = None
    """The sampler's counts when this session started (PCCollector.counted): what came
    before is another session's."""
    notes: dict[int, str] = field(default_factory=dict)
    """Path id -> why its PC samples have no source lines (the file's frame "no_lines")."""


class PCPart(Part):
    """Instruction sampling for the pcsampling sessions."""

    name = "pc"

    def wants(self, opts: SessionOptions) -> bool:
        return opts.pc is not None

    def check(self, opts: SessionOptions, live: list[Session]) -> None:
        for s in live:
            mine = s.parts.get(self.name)
            if (mine.options if mine is not None else None) != opts.pc:
                raise SessionError(
                    f"{MODE_REFUSED}: session {s.id} runs with mode={session_mode(s)}, this "
                    f"one asks for mode={mode_text(opts.pc)}; finalize the live sessions first")

    def collector_asks(self, opts: SessionOptions, asks: PartAsks) -> PartAsks:
        return replace(asks, pc=opts.pc)

    def attach(self, session: Session, opts: SessionOptions) -> None:
        state = session.parts[self.name] = PCState(cast("PCOptions", opts.pc))
        if (pc := self._sampler(session)) is not None:
            state.base = pc.counted()  # a later one counts from its start

    def _sampler(self, session: Session):
        """The PCCollector sampling for `session`, if any."""
        collector = self.profiler.collector
        return collector.pc if self.name in session.parts and collector is not None else None

    def _others(self, session: Session, active: bool = False) -> bool:
        """Another live sampling session (an active one, with `active`) keeps the sampler."""
        return any(self.name in s.parts and s is not session and (s.active or not active)
                   for s in self.profiler.sessions.values())

    def resume(self, session: Session) -> None:
        if (pc := self._sampler(session)) is not None and not pc.active:
            pc.resume()

    def pause(self, session: Session) -> None:
        if (pc := self._sampler(session)) is not None and not self._others(session, active=True):
            pc.pause()

    def finish(self, session: Session, last: bool, devices: dict) -> None:
        if (pc := self._sampler(session)) is None:
            return
        if last:
            self.profiler.collector.pc = None  # it samples
        try:
            self._add_samples(session, pc, last)
        except Exception as exc:  # the time profile is still worth having
            warn(f"PC sampling could not be read at the end ({exc}); the profile keeps "
                 "its kernel times")

    def discard(self, session: Session, last: bool) -> None:
        if (pc := self._sampler(session)) is not None and last:
            self.profiler.collector.pc = None  # it samples
            pc.finish()

    def _add_samples(self, session: Session, pc, last: bool = True) -> None:
        """Put the samples taken since `session` started on its kernel nodes and their lines;
        `last`: no other session samples, so sampling finishes (else it reads what it has)."""
        from ...cupti.pc_collector import place_samples

        router, state = self.profiler.router, session.parts[self.name]
        for node, metrics, why in place_samples(pc, router.kernel_times(session),
                                                router.kernel_path, since=state.base,
                                                finish=last):
            if why:
                state.notes.setdefault(node, why)
            session.add(node, metrics)

    def build_args(self, session: Session) -> dict[str, Any]:
        with session.lock:
            return {"notes": dict(session.parts[self.name].notes)}

    def document(self, session: Session, doc: Any, nodes: dict) -> None:
        if session.parts[self.name].options.embed_source:  # the sampled lines' files travel
            lines = (paths.frames[pid].name for pid in nodes if paths.frames[pid].kind == LINE)
            doc[0][SOURCES_KEY] = sources.texts(sources.files_of(lines))
