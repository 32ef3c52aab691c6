"""The profile's data: the call-path table, metric names and checks, PC-sample counts, the device
table, and the writers. Imports nothing above it (no CUPTI, no sessions).

Also `proton.data`'s phase API, as Triton's Proton has it (advance_phase, get, get_msgpack,
is_phase_complete / is_phase_flushed, clear): serving systems read a live session's data phase
by phase. The runtime registers itself here (`attach`) when it loads; before that no session
exists, and the calls say so as Triton's do (None, False, nothing).
"""
from __future__ import annotations

from typing import Protocol


class Phases(Protocol):
    def advance_phase(self, session: int) -> int: ...
    def phase_data(self, session: int, phase: int) -> list | dict: ...
    def phase_complete(self, session: int, phase: int) -> bool: ...
    def clear_phase(self, session: int, phase: int, up_to: bool = False) -> None: ...


_phases: Phases | None = None


def attach(phases: Phases) -> None:
    """The runtime's profiler answers the phase API from now on."""
    global _phases
    _phases = phases


def advance_phase(session: int | None = 0) -> int | None:
    """Start the session's next phase and return its number (None without a session). With
    mode="periodic_flushing", the finished phase is written to NAME.part_<phase>.<fmt>."""
    if session is None or _phases is None:
        return None
    return _phases.advance_phase(session)


def get(session: int | None = 0, phase: int = 0) -> list | dict | None:
    """One phase's data as the file would hold it: [tree, device table] (a trace's dict for
    data="trace"); an empty tree once the phase was written away or cleared."""
    if session is None or _phases is None:
        return None
    return _phases.phase_data(session, phase)


def get_msgpack(session: int | None = 0, phase: int = 0) -> bytes | None:
    """get(), encoded with MessagePack."""
    from ..format_msgpack import packb

    data = get(session, phase)
    return None if data is None else packb(data)


def is_phase_complete(session: int | None = 0, phase: int = 0) -> bool:
    """Whether a finished phase's data is all in (every kernel it launched has come)."""
    if session is None or _phases is None:
        return False
    return _phases.phase_complete(session, phase)


is_phase_flushed = is_phase_complete
"""Triton's other name for it."""


def clear(session: int | None = 0, phase: int = 0, clear_up_to_phase: bool = False) -> None:
    """Drop a phase's data (and every earlier one's with clear_up_to_phase)."""
    if session is None or _phases is None:
        return
    _phases.clear_phase(session, phase, clear_up_to_phase)
