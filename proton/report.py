"""What the profiler tells the user while it runs: warnings, debug lines, and errors caught in
callbacks that CUPTI calls (an exception must never cross into CUPTI).

Everything goes to stderr, prefixed "proton: ", so a profiled script's stdout stays its own.
"""
from __future__ import annotations

import _thread
import os
import sys
import threading

_seen: set[tuple[str, str]] = set()
_lock = threading.Lock()
heard: list[str] | None = None
"""While a capture runs, every warning is also kept here, so that `proton capture` can show
the person capturing what the job said (it goes to the job's stderr too)."""


def warn(message: str) -> None:
    """One line on stderr."""
    print(f"proton: {message}", file=sys.stderr)
    kept = heard
    if kept is not None:
        kept.append(message)


def debugging() -> bool:
    """PROTON_DEBUG is set: timings and counts of the profiler's own work go to stderr."""
    return bool(os.environ.get("PROTON_DEBUG"))


def debug(message: str) -> None:
    """A line on stderr when PROTON_DEBUG is set."""
    if debugging():
        warn(message)


def callback_failed(where: str, exc: BaseException, errors: list[str] | None = None) -> None:
    """Call from `except BaseException as exc:` in any function CUPTI calls, which must return;
    `where` completes "error ...", e.g. "in the launch callback".

    Ctrl-C that landed in the callback is raised again in the main thread at once; any other
    error is said once per distinct message (and kept in `errors`, if given), and the run goes
    on. Usage:
        def on_api(userdata, domain, cbid, data):
            try:
                ...
            except BaseException as exc:
                callback_failed("in the launch callback", exc)
    """
    if isinstance(exc, KeyboardInterrupt):
        _thread.interrupt_main()
        return
    message = f"{type(exc).__name__}: {exc}"
    with _lock:
        first = (where, message) not in _seen
        _seen.add((where, message))
    if errors is not None and message not in errors:
        errors.append(message)
    if first:
        warn(f"error {where}: {message}")
