"""Triton's `triton.profiler.profile` module under our name: the session API (start, activate,
deactivate, finalize, the `profile` decorator, DEFAULT_PROFILE_NAME) and `_select_backend`,
which scripts and Triton's own tests import from it.

`proton.profile` is also the decorator, as in Triton (`@proton.profile`,
`@proton.profile(name=...)`): importing this module binds it as the package's `profile`
attribute, so the module itself is callable and calls the decorator. Whichever comes first,
`import proton.profile` or `proton.profile`, both work.
"""
from __future__ import annotations

import sys
import types
from typing import Any

from . import DEFAULT_PROFILE_NAME
from .api import activate, deactivate, finalize, profile, start
from . import triton_version
from .errors import SessionError

__all__ = ["start", "activate", "deactivate", "finalize", "profile", "DEFAULT_PROFILE_NAME"]

_BACKENDS = {"cuda": "cupti", "hip": "roctracer"}
"""Triton's target backend -> the profiling backend Triton 3.6's Proton picks for it (newer
ones pick "rocprofiler" on AMD)."""


def _select_backend() -> str:
    """The profiling backend for Triton's active driver: "cupti" on NVIDIA; on AMD "roctracer"
    under Triton 3.6, "rocprofiler" under newer (ours records with "cupti" only).

    Raises:
        SessionError: no Triton, no active driver, or a target with no backend.
    """
    try:
        import triton

        backend = triton.runtime.driver.active.get_current_target().backend
    except ImportError:
        raise SessionError("_select_backend needs Triton (pip install triton); or start() "
                           "with backend='cupti'") from None
    except RuntimeError as exc:  # Triton found no GPU driver
        raise SessionError(f"no backend: Triton has no active GPU driver ({exc}); run on a "
                           "machine with an NVIDIA GPU") from None
    if backend not in _BACKENDS:
        raise SessionError(f"no profiling backend for Triton's target {backend!r}; Proton "
                           "profiles NVIDIA (cuda) targets")
    if backend == "hip" and triton_version.after_3_6():
        return "rocprofiler"
    return _BACKENDS[backend]


class _CallableModule(types.ModuleType):
    """This module, callable as the decorator it is named after."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return profile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
