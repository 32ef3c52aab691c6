"""Files the product writes, made so that no one else can place anything at their names first.

A predictable temporary name (`{path}.{pid}.tmp`) in a folder another user may write lets that
user put a symlink there to a file of ours, which a plain `open(name, "w")` then overwrites.
Here a temporary file has a random name and is created with O_EXCL, which fails on anything
already at the name, a symlink included (O_NOFOLLOW too, for good measure); it is then renamed
over its target, and a rename replaces a symlink at the target instead of following it (and a
FIFO, instead of writing into it for whoever reads the other end).

Imports nothing of Proton: the profile writer and the viewer both use it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import sys
from typing import IO, Iterator

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


STANDARD_STREAMS = {"-": "stdout", "/dev/stdout": "stdout", "/dev/fd/1": "stdout",
                    "/proc/self/fd/1": "stdout", "/dev/stderr": "stderr", "/dev/fd/2": "stderr",
                    "/proc/self/fd/2": "stderr"}
"""Names that mean this process's standard output or error: written through the stream the
process holds, never opened by name (as root, a rename at /dev/stdout would replace the link
in /dev; as a user it fails)."""


def write_whole(path: str, text: str) -> None:
    """Write `text` to `path` through a new file beside it renamed over `path`: no reader sees
    half of it, and whatever stood at `path` (a symlink, another user's FIFO) is replaced,
    never followed nor written into. `-` and `/dev/stdout` (STANDARD_STREAMS) are standard
    output; a device is refused (a rename over it would replace the device node).

    Usage:
        write_whole("report.html", page)

    Raises:
        OSError: `path` could not be written (IsADirectoryError for a folder, EINVAL for a
            device), and nothing was left beside it.
    """
    stream = STANDARD_STREAMS.get(os.path.normpath(path))
    if stream is not None:
        out = getattr(sys, stream)
        out.write(text)
        out.flush()
        return
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = 0
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise OSError(errno.EINVAL, "it is a device, not a file", path)
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


STDOUT_FAILURES = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG}
"""What a write to standard output fails with (`> /dev/full`, a quota, a dead disk) other than
EPIPE, which click already ends quietly with status 1 (`| head`)."""


@contextlib.contextmanager
def standard_output_failures() -> Iterator[None]:
    """Around a command that prints its result: standard output that cannot be written ends
    it with one line on stderr (`Error: cannot write to standard output: No space left on
    device; ...`) and status 1, as other tools end, instead of a traceback (or, for output
    still in the buffer, a message at exit). An error with a file name is another file's and
    passes.

    Usage:
        with standard_output_failures():
            viewer.main()
    """
    try:
        try:
            yield
        finally:
            if sys.stdout is not None:
                with contextlib.suppress(ValueError):  # closed: nothing to flush
                    sys.stdout.flush()  # what is still buffered fails here, not after exit
    except OSError as exc:
        if exc.errno not in STDOUT_FAILURES or exc.filename is not None:
            raise
        with contextlib.suppress(OSError, ValueError):
            # the buffer keeps what failed: let the flush at exit write it nowhere
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        with contextlib.suppress(OSError, ValueError):
            print(f"Error: cannot write to standard output: {os.strerror(exc.errno)}; send "
                  "it to a file on a disk with room, or to a pipe", file=sys.stderr, flush=True)
        raise SystemExit(1) from None

