"""Proton: a GPU kernel profiler, a drop-in for `triton.profiler`.

Usage:
    import proton
    sid = proton.start("run1")
    with proton.scope("forward"):
        model(x)
    proton.finalize()                 # writes run1.hatchet; `proton-viewer -m time/ms run1.hatchet`
"""
from __future__ import annotations

from .errors import ProfilerConflictError, ProtonError, ScopeError, SessionError
from .profile import activate, deactivate, finalize, profile, start
from .scope import cpu_timed_scope, enter_scope, enter_state, exit_scope, exit_state, scope, state

DEFAULT_PROFILE_NAME = "proton"

__all__ = [
    "start", "activate", "deactivate", "finalize", "profile",
    "scope", "cpu_timed_scope", "enter_scope", "exit_scope", "state", "enter_state", "exit_state",
    "ProtonError", "ScopeError", "SessionError", "ProfilerConflictError", "DEFAULT_PROFILE_NAME",
]
