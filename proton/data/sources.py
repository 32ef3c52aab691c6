"""The text of a sampled profile's source files, carried in the file (format.SOURCES_KEY).

Profiles are read on other machines (a cluster's run on a laptop), where the paths the
source-line frames name do not exist; as Nsight Compute's reports carry their source, ours
carry the files their sampled lines come from. Read once, when the profile is written, from
the recording machine: only regular files with a source suffix, never under /proc, /dev or
/sys, at most format.SOURCE_FILE_BYTES each and SOURCE_TOTAL_BYTES in all (files that do not
fit are left out, the smallest kept first). PROTON_EMBED_SOURCE=0 leaves the text out (a
profile shared where its code should not go; options.embed_source, checked at start).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from ..format import (NEVER_READ, PYTHON_FRAME, SOURCE_FILE_BYTES, SOURCE_SUFFIXES,
                      SOURCE_TOTAL_BYTES)


def files_of(names: Iterable[str]) -> list[str]:
    """The distinct files that `file:line@function` frame names name, in order."""
    out: dict[str, None] = {}
    for name in names:
        m = PYTHON_FRAME.match(name)
        if m:
            out[m["file"]] = None
    return list(out)


def texts(files: Iterable[str]) -> dict[str, str]:
    """{path: text} of those of `files` that may be carried (see the module), within the caps.

    Usage:
        doc[0][SOURCES_KEY] = texts(["/home/u/kernels/matmul.py"])
    """
    found = [(path, data) for path in dict.fromkeys(files)
             if (data := _read(path)) is not None]
    out, total = {}, 0
    for path, data in sorted(found, key=lambda pd: (len(pd[1]), pd[0])):  # smallest first
        if total + len(data) > SOURCE_TOTAL_BYTES:
            break
        out[path] = data.decode("utf-8")
        total += len(data)
    return out


def _read(path: str) -> bytes | None:
    """The file's bytes when it is one to carry, else None."""
    if not os.path.isabs(path) or not path.lower().endswith(SOURCE_SUFFIXES):
        return None
    try:
        real = os.path.realpath(path)
    except OSError:
        return None
    if any(p == n or p.startswith(n + "/") for p in (path, real) for n in NEVER_READ):
        return None
    try:  # O_NONBLOCK: a FIFO at the name must not block the write of the profile
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(SOURCE_FILE_BYTES + 1)
    if len(data) > SOURCE_FILE_BYTES:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data
