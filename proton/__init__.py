"""Proton: a GPU kernel profiler, a drop-in for `triton.profiler`.

Usage:
    import proton
    sid = proton.start("run1")
    with proton.scope("forward"):
        model(x)
    proton.finalize()                 # writes run1.hatchet; `proton-viewer -m time/ms run1.hatchet`

Names load on first use (PEP 562), so `import proton.viewer` or `import proton.compiler` loads
no runtime module and starts nothing (PROTON_LISTEN=1 included: the job listens from its first
proton.step() or scope). ARCHITECTURE.md maps the package.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what editors and mypy see; at run time __getattr__ loads each name on use
    from . import bench, context, data, hooks, language, mode
    from .api import activate, deactivate, finalize, profile, start
    from .errors import (ProfilerConflictError, ProfileWriteError, ProtonError, ScopeError,
                         SessionError)
    from .scopes import (cpu_timed_scope, enter_scope, enter_state, exit_scope, exit_state,
                         metadata_state, scope, state)
    from .service.endpoint import listen, step

DEFAULT_PROFILE_NAME = "proton"

_TOP = __path__[0] if __path__ else ""  # noqa: F821 (a package's own __path__)
_CHECKOUT = os.path.dirname(_TOP)
_MAPPED = {"proton.compiler", "proton.hooks", "proton.viewer"}
"""pyproject's package-dir: proton.<name> is the folder <name> beside proton/ in a checkout."""


class _CheckoutFolders:
    """Finds the _MAPPED packages in a checkout's folders of those names, as the installed
    package maps them, and nothing else there (proton.tests, proton.docs do not import)."""

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _MAPPED:
            return None
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(fullname, [_CHECKOUT])  # <checkout>/<name>/__init__.py


if not os.path.isdir(os.path.join(_TOP, "viewer")) and os.path.isfile(
        os.path.join(_CHECKOUT, "viewer", "__init__.py")):
    # Imported from a checkout's own folder (`python -m pytest` there puts it first on
    # sys.path): proton.viewer, .hooks and .compiler live beside this folder. Asked only
    # after the package's own folder came up empty (the end of the finders).
    sys.meta_path.append(_CheckoutFolders)

_WHERE = {
    "start": "api", "activate": "api", "deactivate": "api", "finalize": "api",
    "scope": "scopes", "cpu_timed_scope": "scopes", "enter_scope": "scopes", "exit_scope": "scopes",
    "state": "scopes", "enter_state": "scopes", "exit_state": "scopes",
    "metadata_state": "scopes",
    "ProtonError": "errors", "ScopeError": "errors", "SessionError": "errors",
    "ProfilerConflictError": "errors", "ProfileWriteError": "errors",
    "step": "service.endpoint", "listen": "service.endpoint",
}
"""Public name -> the module (of this package) that defines it."""
_SUBMODULES = {"data", "hooks", "bench", "mode", "language", "context", "profile", "metric",
               "_rocm"}
"""Modules scripts reach as attributes, as Triton's: proton.data.advance_phase(...),
proton.mode.Default(), proton.language (which imports Triton), proton.context.depth(sid).
proton.profile is Triton's module of that name and, called, the decorator (profile.py)."""

__all__ = [
    "start", "activate", "deactivate", "finalize", "profile",
    "scope", "cpu_timed_scope", "enter_scope", "exit_scope", "state", "enter_state", "exit_state",
    "metadata_state",
    "ProtonError", "ScopeError", "SessionError", "ProfilerConflictError", "ProfileWriteError",
    "step", "listen", "DEFAULT_PROFILE_NAME",
]


from . import state as _state_module  # noqa: E402  Triton 3.9's module proton.state, loaded
# first so `from proton.state import ...` never rebinds the name; proton.state stays the class
del globals()["state"]  # (the class loads on first use, below)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)  # binds proton.<name> too
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'proton' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
