"""Files the product writes, made so that no one else can place anything at their names first.

A predictable temporary name (`{path}.{pid}.tmp`) in a folder another user may write lets that
user put a symlink there to a file of ours, which a plain `open(name, "w")` then overwrites.
Here a temporary file has a random name and is created with O_EXCL, which fails on anything
already at the name, a symlink included (O_NOFOLLOW too, for good measure); it is then renamed
over its target, and a rename replaces a symlink at the target instead of following it.

Imports nothing of Proton: the profile writer and the viewer both use it.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from typing import IO

_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def create_beside(path: str, binary: bool = False) -> tuple[IO, str]:
    """A new, empty file in `path`'s folder, open for writing (text: UTF-8), and its name.

    Its mode is what `open()` would give (0666 less the umask): the kernel applies the umask,
    so no process-wide umask is read or changed.
    """
    folder, base = os.path.split(path)
    for _ in range(100):
        name = os.path.join(folder, f"{base}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(name, _FLAGS, 0o666)
        except FileExistsError:  # 64 random bits taken: someone guessed, or placed, this one
            continue
        try:
            return (os.fdopen(fd, "wb") if binary else
                    os.fdopen(fd, "w", encoding="utf-8")), name
        except BaseException:
            os.close(fd)
            raise
    raise FileExistsError(errno.EEXIST, "no free temporary name beside it", path)


def write_whole(path: str, text: str) -> None:
    """Write `text` to `path` through a new file beside it renamed over `path`: no reader sees
    half of it, and a symlink at `path` is replaced, not followed. A device or pipe
    (`/dev/stdout`, a FIFO) is written into, as `open()` would.

    Usage:
        write_whole("report.html", page)
    """
    if _stream(path):
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
        return
    f, name = create_beside(path)
    try:
        with f:
            f.write(text)
        os.replace(name, path)
    except BaseException:
        try:
            os.remove(name)
        except OSError:
            pass
        raise


def _stream(path: str) -> bool:
    """`path` is a device or pipe, named itself or through a symlink of this user's or root's
    (`/dev/stdout`): no rename can put a file there (and as root one would replace the link in
    /dev). A symlink another user made is never followed."""
    try:
        target, entry = os.stat(path), os.lstat(path)
    except OSError:
        return False
    if stat.S_ISREG(target.st_mode) or stat.S_ISDIR(target.st_mode):
        return False
    own = os.geteuid() if hasattr(os, "geteuid") else 0  # Windows has no user ids
    return not stat.S_ISLNK(entry.st_mode) or entry.st_uid in (0, own)
