"""The PROTON_* environment settings the runtime reads after it starts, each checked here.

They are read where they are used (a job's merge at finalize, a capture's deadlines), maybe
hours into a run, where a bad value must cost neither the job nor its profile. So all of them
are checked when profiling starts: the `proton` command refuses a bad one before the script
runs (`check(strict=True)`: one line, exit 2); under `import proton`, start() and PROTON_LISTEN's
first step() warn once per setting and the default is used (`check()`), as `value()` does
wherever it is read, so a typo never stops the user's job nor loses a rank's file.

Settings checked elsewhere, as they are read at start: PROTON_OFF (options.parts_off: start()
refuses it), PROTON_LISTEN, PROTON_TOKEN, PROTON_SOCKET_DIR and PROTON_CAPTURE_DIR (where the
endpoint opens), PROTON_VIEWER_MAX_MB (the viewer's reader). The rest are switches whose every
value means something (PROTON_NATIVE, PROTON_DEBUG, PROTON_DISABLE, PROTON_ENABLE_NVTX, ...).

Usage:
    settings.check(strict=True)                   # the `proton` command, before the script
    limit = settings.value("PROTON_MERGE_TIMEOUT")  # never raises: a bad value, the default
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

from .errors import ProtonError
from .report import warn

DAY = 86400.0
"""The longest wait a setting (or `--flush-every`) may ask for: longer ones are typos (and
past threading's TIMEOUT_MAX a wait raises)."""
RANK_FILES = ("both", "job", "ranks")
"""PROTON_RANK_FILES: the job file and each rank's, the job file alone, each rank's alone."""


def seconds(text: str, *, low: float, low_open: bool = True, high: float = DAY) -> float:
    """A finite number of seconds in (low, high] (or [low, high] when not `low_open`).

    Raises:
        ValueError: anything else (nan, inf, `60s`).
    """
    value = float(text)
    if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
        raise ValueError(text)
    return value


@dataclass(frozen=True, slots=True)
class Setting:
    """One environment setting: its default, how it is read, and what it takes in words."""

    default: Any
    parse: Callable[[str], Any]
    """Raises ValueError for a value that is not accepted."""
    takes: str
    """What it takes, e.g. "a number of seconds over 0 and at most 86400"."""


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(text)
        return value
    return parse


def _whole(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip()) if len(text) <= 20 else low - 1
        if not low <= value <= high:
            raise ValueError(text)
        return value
    return parse


def _seconds(low: float, low_open: bool = True) -> Callable[[str], float]:
    return lambda text: seconds(text, low=low, low_open=low_open)


_OVER_0 = f"a number of seconds over 0 and at most {DAY:g}"
SETTINGS: dict[str, Setting] = {
    "PROTON_RANK_FILES": Setting("both", _choice(RANK_FILES), f"one of {', '.join(RANK_FILES)}"),
    "PROTON_MERGE_TIMEOUT": Setting(30.0, _seconds(0), _OVER_0),
    "PROTON_CAPTURE_GRACE": Setting(60.0, _seconds(0, low_open=False),
                                    f"a number of seconds from 0 to {DAY:g}"),
    "PROTON_CAPTURE_PHASE_TIMEOUT": Setting(20.0, _seconds(0), _OVER_0),
    "PROTON_MAIN_THREAD_TIMEOUT": Setting(10.0, _seconds(0), _OVER_0),
    "PROTON_GRAPH_METRIC_WORDS": Setting(1 << 21, _whole(1024, 1 << 31),
                                         f"a whole number of 64-bit words from 1024 to {1 << 31}"),
    "PROTON_INSTRUMENTATION_ARENA": Setting(64 << 20, _whole(1 << 20, 1 << 40),
                                            f"a whole number of bytes from {1 << 20} to "
                                            f"{1 << 40}"),
}
"""Every setting read after start, with its default (what the code used before it was read
here)."""

_warned: set[str] = set()
_lock = threading.Lock()


def _read(name: str) -> tuple[Any, str | None]:
    """The setting `name` as the environment gives it now (unset or empty: its default), and
    why it is not accepted (one line, without the remedy; the default is then returned)."""
    setting = SETTINGS[name]
    raw = os.environ.get(name, "")
    if not raw.strip():
        return setting.default, None
    try:
        return setting.parse(raw), None
    except (ValueError, OverflowError):
        return setting.default, f"{name}={raw[:40]!r} is not {setting.takes}"


def value(name: str) -> Any:
    """The setting `name` (a key of SETTINGS) as the environment gives it now, else its
    default; a value not accepted is said once (a warning) and the default used."""
    got, problem = _read(name)
    if problem is not None:
        _say(name, problem)
    return got


def check(strict: bool = False) -> None:
    """Every setting, now: each one not accepted warned of once (its default used), or with
    `strict`, all of them refused in one line.

    Raises:
        ProtonError: with `strict`, any setting not accepted (the line names each and what
            it takes).
    """
    problems = {name: p for name in SETTINGS if (p := _read(name)[1]) is not None}
    if strict and problems:
        raise ProtonError("; ".join(f"{p}; e.g. {name}={_shown(SETTINGS[name].default)}"
                                    for name, p in problems.items()))
    for name, problem in problems.items():
        _say(name, problem)


def _say(name: str, problem: str) -> None:
    with _lock:
        if name in _warned:
            return
        _warned.add(name)
    warn(f"{problem}; using the default, {_shown(SETTINGS[name].default)}")


def _shown(default: Any) -> str:
    return f"{default:g}" if isinstance(default, float) else str(default)
