"""The optional measurements as parts: one object each, with one lifecycle, that the profiler
loops over without naming any.

A part is asked by a session's options (`wants`); the first session that asks starts it
(`start`), each one that asks attaches (`attach`, its state in the session's own slot,
`session.parts[name]`), follows the session's active stretches (`resume`, `pause`) and phases
(`phase_ends`), adds its metrics before the session is written (`finish`; `last`: no other
live session asks for it, so it stops too), or is dropped unwritten (`discard`). The last
session that asked stops it (`stop`). A part may listen to the main thread's scopes
(`listener`: context/frames.ScopeListener, heard while it is started), ask things of the
collector the first session starts (`collector_asks`: its fields of cupti/settings.PartAsks),
take the collector's buffers (`buffered`, CUPTI's thread) and put its data in the file (`build_args`,
`document`). Every hook runs under the profiler's lock unless it says otherwise.

The next measurement is one module here, one line in `registry` and its options.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator

from ...context import frames
from .base import Part, Profiler

if TYPE_CHECKING:
    from ...cupti.settings import PartAsks
    from ...options import SessionOptions
    from ..session import Session


def registry(profiler: Profiler) -> list[Part]:
    """Every part, in the order their hooks run."""
    from .counters import CountersPart
    from .idle import CopiesPart, IdlePart
    from .instrument import InstrumentPart
    from .memory import MemoryPart
    from .nvtx import NvtxPart
    from .pc import PCPart

    return [InstrumentPart(profiler), MemoryPart(profiler), CountersPart(profiler),
            PCPart(profiler), IdlePart(profiler), CopiesPart(profiler), NvtxPart(profiler)]


class Parts:
    """The profiler's parts and the fan-out of its sessions' lifecycle to them."""

    def __init__(self, profiler: Profiler) -> None:
        self.all = registry(profiler)
        self.started: list[Part] = []

    def check(self, opts: SessionOptions, live: list[Session]) -> None:
        for part in self.all:
            part.check(opts, live)

    def collector_asks(self, opts: SessionOptions) -> PartAsks:
        """What the parts `opts` asks for want of the collector the session starts; it tells
        them each buffer (buffered)."""
        from ...cupti.settings import PartAsks

        asks = PartAsks(buffered=self.buffered)
        for part in self.all:
            if part.wants(opts):
                asks = part.collector_asks(opts, asks)
        return asks

    def attach(self, session: Session, opts: SessionOptions) -> None:
        """The parts `session` asks for, started for the first session that asks."""
        for part in self.all:
            if part.wants(opts):
                if part not in self.started:
                    self.started.append(part)
                    part.start(opts)
                part.attach(session, opts)
        self.listen()

    def named(self, name: str) -> Part:
        """The part called `name` (tests reach its state here)."""
        return next(p for p in self.all if p.name == name)

    def of(self, session: Session) -> list[Part]:
        return [p for p in self.all if p.name in session.parts]

    def resume(self, session: Session) -> None:
        for part in self.of(session):
            part.resume(session)

    def pause(self, session: Session) -> None:
        for part in self.of(session):
            part.pause(session)

    def phase_ends(self, session: Session) -> None:
        for part in self.of(session):
            part.phase_ends(session)

    def _last(self, part: Part, session: Session, live: list[Session]) -> bool:
        return not any(part.name in s.parts for s in live if s is not session)

    def finish(self, session: Session, live: list[Session], devices: dict) -> None:
        """Each part of `session` adds its metrics; those it was the last to ask for stop."""
        for part in self.of(session):
            last = self._last(part, session, live)
            part.finish(session, last, devices)
            if last:
                self._stop(part)

    def discard(self, session: Session, live: list[Session]) -> None:
        for part in self.of(session):
            last = self._last(part, session, live)
            try:
                part.discard(session, last)
            finally:
                if last:
                    self._stop(part)

    def _stop(self, part: Part) -> None:
        if part in self.started:
            self.started.remove(part)
            part.stop()
        self.listen()

    def listen(self) -> None:
        """frames hear the started parts' scope listeners (none: one check per frame)."""
        frames.listen(tuple(p.listener for p in self.started if p.listener is not None))

    def build_args(self, session: Session) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for part in self.of(session):
            args.update(part.build_args(session))
        return args

    def document(self, session: Session, doc: Any, nodes: dict) -> None:
        for part in self.of(session):
            part.document(session, doc, nodes)

    # the collector's lifetime: every part hears it
    def collector_started(self, collector: Any) -> None:
        for part in self.all:
            part.collector_started(collector)
        self.listen()

    def collector_stopping(self) -> None:
        for part in self.all:
            part.collector_stopping()
        self.listen()

    def collector_stopped(self, collector: Any) -> None:
        for part in self.all:
            part.collector_stopped(collector)

    def buffered(self, final: bool = False) -> None:
        """After each CUPTI buffer (CUPTI's thread) and at each flush."""
        for part in self.all:
            part.buffered(final)

    def sessions_changed(self) -> None:
        for part in self.all:
            part.sessions_changed()

    @contextlib.contextmanager
    def own_work(self) -> Iterator[None]:
        """Proton's own work on the main thread, for the parts that leave it out."""
        with contextlib.ExitStack() as stack:
            for part in self.all:
                stack.enter_context(part.own_work())
            yield

    def after_fork_in_child(self) -> None:
        for part in self.all:
            part.after_fork_in_child()
        self.started.clear()
        frames.listen(())
