"""Which Triton is installed, read once from its metadata without importing it: where Triton's
Proton changed what a user sees between versions (an error's words, where a kernel lands), ours
follows the installed one, and this is the one place that asks. (The instrumentation backend
keys its pass registration by exact version instead, runtime/instrumentation.py's _PASS_HOOKS:
it reads a buffer layout pinned to each release, not a behaviour that holds for a range.)"""
from __future__ import annotations

import functools
import importlib.metadata


@functools.cache
def installed() -> tuple[int, int]:
    """(major, minor) of the installed triton; (0, 0) without one."""
    try:
        text = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return (0, 0)
    parts = (text.split("+")[0].split(".") + ["0"])[:2]
    try:
        return (int(parts[0]), int(parts[1]))
    except ValueError:
        return (0, 0)


def after_3_6() -> bool:
    """True for a Triton newer than 3.6 (3.9's Proton tests pin these behaviours), and without
    one (the newest behaviour is the default)."""
    version = installed()
    return version == (0, 0) or version > (3, 6)
