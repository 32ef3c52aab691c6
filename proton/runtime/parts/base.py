"""The Part interface: one optional measurement with one lifecycle (see runtime/parts)."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, ClassVar, ContextManager, Protocol

from ...context import frames

if TYPE_CHECKING:
    from ...cupti.settings import PartAsks
    from ...options import SessionOptions
    from ..session import Session


class Profiler(Protocol):
    """The profiler as its parts see it (runtime/profiler.Profiler)."""

    sessions: dict[int, Session]
    """The live sessions (the parts read it; only the profiler changes it)."""
    collector: Any
    """cupti.collector.CuptiCollector while CUPTI collects, else None."""
    router: Any
    """runtime/router.KernelRouter: the kernel records onto the sessions."""
    parts: Any
    """runtime/parts.Parts: every part and the fan-out."""

    def now(self) -> int:
        """Timestamp in the clock of the launch records (CUPTI's) when collecting."""


class Part:
    """One optional measurement (every hook a no-op here)."""

    name: ClassVar[str] = ""
    """The session's slot (session.parts[name])."""
    listener: frames.ScopeListener | None = None
    """What hears the main thread's scopes while the part is started (None: nothing)."""

    def __init__(self, profiler: Profiler) -> None:
        self.profiler = profiler

    def wants(self, opts: SessionOptions) -> bool:
        """Whether a session started with `opts` asks for this part."""
        return False

    def check(self, opts: SessionOptions, live: list[Session]) -> None:
        """Raise SessionError when a session with `opts` cannot run beside `live`."""

    def start(self, opts: SessionOptions) -> None:
        """The first live session asks for it."""

    def attach(self, session: Session, opts: SessionOptions) -> None:
        """`session` asks for it: its state goes in session.parts[self.name]."""
        session.parts[self.name] = True

    def resume(self, session: Session) -> None:
        """`session` records again."""

    def pause(self, session: Session) -> None:
        """`session` stopped recording."""

    def phase_ends(self, session: Session) -> None:
        """`session`'s current phase ends (advance_phase) or is merged as it stands."""

    def finish(self, session: Session, last: bool, devices: dict) -> None:
        """Add the part's metrics to `session` before it is written; `last`: no other live
        session asks for the part (it stops after this). `devices`: the file's device table."""

    def discard(self, session: Session, last: bool) -> None:
        """`session` is closed without being written."""

    def stop(self) -> None:
        """The last session that asked for it is finished or discarded."""

    def build_args(self, session: Session) -> dict[str, Any]:
        """What the part gives document.build for `session`'s tree."""
        return {}

    def document(self, session: Session, doc: Any, nodes: dict) -> None:
        """The file's document of `session` (one phase's `nodes`), as the part completes it."""

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent's measurement is not this process's."""

    def collector_asks(self, opts: SessionOptions, asks: PartAsks) -> PartAsks:
        """What the parts ask of the collector the first session starts, with this part's
        asks (its options) put in (dataclasses.replace)."""
        return asks

    # the collector's lifetime (every part hears these, started or not)
    def collector_started(self, collector: Any) -> None:
        """CUPTI collects now (a session started it)."""

    def collector_stopping(self) -> None:
        """CUPTI is about to stop (the last session closed): its last buffers come after."""

    def collector_stopped(self, collector: Any) -> None:
        """CUPTI stopped and `collector` finished (its counts are final)."""

    def buffered(self, final: bool = False) -> None:
        """A CUPTI buffer was read (CUPTI's thread) or the records were flushed; `final`:
        sessions are being finalized."""

    def sessions_changed(self) -> None:
        """A session started or closed."""

    def own_work(self) -> ContextManager[None]:
        """Around Proton's own work on the main thread (start, activate, flushes)."""
        return contextlib.nullcontext()


def session_mode(s: Session) -> str:
    """A live session's mode as start() was given it, for errors."""
    return mode_text(getattr(s.parts.get("pc"), "options", None), s.parts.get("counters"))


def mode_text(pc: Any, counters: Any = None) -> str:
    """A mode as start() is given it (pcsampling options, counter options), for errors."""
    if counters is not None:
        return f"'counters:interval={counters.interval}'"
    if pc is None:
        return "None"
    return f"'pcsampling:interval={pc.interval}{':serialize=1' if pc.serialize else ''}'"


MODE_REFUSED = ("Cannot add a session with the same profiler but a different mode than "
                "existing sessions")
"""Triton's Proton's words, which start the error: scripts and its tests match on them."""
