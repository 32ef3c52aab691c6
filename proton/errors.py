"""The errors Proton raises: one line that names the problem and the fix."""
from __future__ import annotations


class ProtonError(Exception):
    """Base class: the commands print it as one line and exit with status 2."""

    exit_code = 2


class ScopeError(ProtonError):
    """A scope was closed out of order or given bad metrics."""


class SessionError(ProtonError):
    """A session id or option is not valid."""


class ProfilerConflictError(ProtonError):
    """Another CUPTI user (torch.profiler, nsys, Triton's Proton) holds this process."""


class ProfileWriteError(ProtonError):
    """A profile could not be written where it was asked (it went to a temporary file, if one
    could be written: the message says where)."""
