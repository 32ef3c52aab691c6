"""Run the viewer's work where a profile of any depth fits: a thread with a large stack.

json's decoder recurses once per object and list (two calls a tree level), and Python stops it
at the recursion limit (1000 by default: a tree ~495 levels deep). The viewer's own walks over
the tree are iterative (see graph.py); the parse runs in a worker thread whose stack is
STACK_BYTES (virtual memory: only the pages it touches are used) with the recursion limit
raised to match, so a deeper tree than MAX_LEVELS is refused with a RecursionError rather
than overflowing the C stack.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

STACK_BYTES = 512 << 20
RECURSION_LIMIT = 1_000_000
"""json's decoder uses ~130 bytes of C stack a call (measured: ~65,000 levels in 16 MiB), so a
million calls take ~130 MiB of the 512."""
MAX_LEVELS = RECURSION_LIMIT // 2 - 1000
"""Tree levels the parse reaches (two calls a level, less what the callers use)."""

_local = threading.local()


def call(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) in a worker thread with a large stack and a raised recursion limit
    (directly when already in one); its exception, if any, is raised here.

    Usage:
        doc = deep.call(json.loads, text)  # any nesting up to MAX_LEVELS
    """
    if getattr(_local, "deep", False):
        return fn(*args, **kwargs)
    result: list = []
    error: list[BaseException] = []

    def work() -> None:
        _local.deep = True
        keep_limit()
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            error.append(exc)

    limit = sys.getrecursionlimit()
    size = threading.stack_size()
    try:
        threading.stack_size(STACK_BYTES)  # read when the thread starts
        worker = threading.Thread(target=work, name="proton-viewer", daemon=True)
        worker.start()
    finally:
        threading.stack_size(size)
    try:
        worker.join()
    finally:
        sys.setrecursionlimit(limit)
    if error:
        raise error[0].with_traceback(error[0].__traceback__)
    return result[0]


def keep_limit() -> None:
    """Raise the recursion limit again inside a worker (importing hatchet sets it to 3000,
    through IPython's jedi); does nothing in any other thread."""
    if getattr(_local, "deep", False) and sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
