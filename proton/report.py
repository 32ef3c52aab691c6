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
"""While a capture runs, the job's warnings are also kept in its list, so that `proton capture`
can show the person capturing what the job said (it goes to the job's stderr too)."""
_thread_heard = threading.local()
"""A list (or None) per endpoint thread: what a capture's own threads say goes to that capture
alone, and what other connections' threads say to no capture (see hear_on_this_thread)."""


def warn(message: str) -> None:
    """One line on stderr."""
    print(f"proton: {message}", file=sys.stderr)
    kept = getattr(_thread_heard, "kept", heard)
    if kept is not None:
        kept.append(message)


def hear_on_this_thread(kept: list[str] | None) -> None:
    """Warnings made on this thread from now on go to `kept` (None: to no capture) instead of
    the running capture's `heard`: for the capture endpoint's threads."""
    _thread_heard.kept = kept


def heard_on_this_thread() -> list[str] | None:
    """Where this thread's warnings go (see hear_on_this_thread)."""
    return getattr(_thread_heard, "kept", heard)


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
