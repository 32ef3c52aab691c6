"""Files the product writes, made so that no one else can place anything at their names first.

A predictable temporary name (`{path}.{pid}.tmp`) in a folder another user may write lets that
user put a symlink there to a file of ours, which a plain `open(name, "w")` then overwrites.
Here a temporary file has a random name and is created with O_EXCL, which fails on anything
already at the name, a symlink included (O_NOFOLLOW too, for good measure); it is then renamed
over its target, and a rename replaces a symlink at the target instead of following it (and a
FIFO, instead of writing into it for whoever reads the other end).

The folders on the way are opened one at a time (Folder): a symlink among them is followed only
where no other user could have placed it (_trusted; the rule is in docs/safety.md), and every
name in the folder is then used through its descriptor, so a folder swapped for a link after
it was opened changes nothing. A temporary name fits the file system's NAME_MAX however long
the target's; its file is locked while it is written, so one a killed writer left (ours, a
regular file, unlocked) is removed at the next write of its target (create_beside).

Imports nothing of Proton: the profile writer and the viewer both use it.
"""
from __future__ import annotations

import collections
import contextlib
import errno
import os
import re
import secrets
import stat
import sys
import time
from typing import IO, Iterator

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None  # type: ignore[assignment]

_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_FOLDER = (getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0)
           | getattr(os, "O_CLOEXEC", 0))  # O_PATH: passing through needs no right to read
_SHARED = stat.S_IWGRP | stat.S_IWOTH
TEMP_SUFFIX = 22
"""What a temporary name adds to its stem: `.` 16 hex digits `.tmp`."""
STALE_S = 5.0
"""A temporary file younger than this is never taken for a killed writer's (one just made
is locked a moment after it is created)."""
MAX_LINKS = 40
"""Symlinks followed on the way to one folder, as the kernel allows (ELOOP past them)."""


class UnsafeLink(PermissionError):
    """A symlink on the way to an output folder that another user could have placed."""


class Folder:
    """A folder the product writes in, opened one component at a time from `/` (or the
    current folder): a symlink on the way is followed only when `_trusted`. Names in it are
    then used through its descriptor (where the system has none for folders, Windows, by
    their paths).

    Usage:
        with Folder("runs/exp1", create=True) as folder:
            f, tmp = create_beside(folder, "prof.hatchet")

    Raises:
        UnsafeLink: a symlink on the way may have been placed by another user.
        OSError: a folder on the way is missing (without `create`) or not a folder.
    """

    __slots__ = ("fd", "path")

    def __init__(self, path: str, create: bool = False) -> None:
        self.path = path
        self.fd: int | None = None
        if not _BY_DESCRIPTOR:
            if create:
                os.makedirs(path or ".", exist_ok=True)
            return
        self.fd = _walk(path, create)

    def name(self, base: str) -> str:
        """`base`'s path, as the folder was named."""
        return os.path.join(self.path, base)

    def _at(self, name: str) -> str:
        return name if self.fd is not None else self.name(name)

    def open(self, name: str, flags: int, mode: int = 0o777) -> int:
        return os.open(self._at(name), flags, mode, dir_fd=self.fd)

    def stat(self, name: str) -> os.stat_result:
        """`name`'s own status (a symlink's, not its target's)."""
        return os.stat(self._at(name), dir_fd=self.fd, follow_symlinks=False)

    def link(self, src: str, dst: str) -> None:
        os.link(self._at(src), self._at(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def replace(self, src: str, dst: str) -> None:
        os.replace(self._at(src), self._at(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def remove(self, name: str) -> None:
        os.remove(self._at(name), dir_fd=self.fd)

    def names(self) -> list[str]:
        """The names in the folder (a folder one may write but not read: OSError)."""
        if self.fd is None:
            return os.listdir(self.path or ".")
        listing = os.open(".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                          | getattr(os, "O_CLOEXEC", 0), dir_fd=self.fd)  # ours is O_PATH
        try:
            return os.listdir(listing)
        finally:
            os.close(listing)

    def name_max(self) -> int:
        return name_max(self.path or "." if self.fd is None else self.fd)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_BY_DESCRIPTOR = os.open in os.supports_dir_fd and os.listdir in os.supports_fd
"""Folders used through descriptors (Linux, macOS; not Windows)."""


def _walk(path: str, create: bool, partial: bool = False) -> int:
    """The descriptor of folder `path`, reached as Folder says; with `partial`, of the
    deepest folder that exists on the way."""
    todo = collections.deque(path.split("/"))
    where = "/" if path.startswith("/") else ""
    fd = os.open("/" if where else ".", _FOLDER)
    links, made, name = 0, False, ""
    try:
        while todo:
            name = todo.popleft()
            if name in ("", "."):
                continue
            try:
                step = os.open(name, _FOLDER | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
            except FileNotFoundError:
                if partial:
                    return fd
                if not create or made:  # made, and gone again: not raced for ever
                    raise
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)  # the umask applies, as os.makedirs
                except FileExistsError:
                    pass
                todo.appendleft(name)  # whatever is there now is judged as any other
                made = True
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                target = _trusted_link(fd, name, os.path.join(where, name))
                if target is None:
                    raise
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None
                if target.startswith("/"):
                    os.close(fd)
                    fd, where = os.open("/", _FOLDER), "/"
                todo.extendleft(reversed(target.split("/")))
                continue
            os.close(fd)
            fd, where, made = step, os.path.join(where, name), False
        return fd
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError) and exc.filename == name:  # named as the folder is
            exc.filename = os.path.join(where, name)
        raise


def _trusted_link(folder: int, name: str, where: str) -> str | None:
    """The target of the symlink `name` in `folder` when it may be followed; None when it is
    no symlink. A link is judged and read in one step: read between two looks at it that
    find the same link.

    Raises:
        UnsafeLink: it is not _trusted.
    """
    first = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if not stat.S_ISLNK(first.st_mode):
        return None
    if not _trusted(first, os.fstat(folder)):
        raise UnsafeLink(errno.EPERM, f"{where} is a symlink of uid {first.st_uid} in a "
                         "folder others may write, not followed; give the folder's real path")
    target = os.readlink(name, dir_fd=folder)
    again = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if (again.st_ino, again.st_uid, again.st_ctime_ns) != \
            (first.st_ino, first.st_uid, first.st_ctime_ns):
        raise UnsafeLink(errno.EPERM, f"{where} changed while it was read; try again")
    return target


def _trusted(link: os.stat_result, holder: os.stat_result) -> bool:
    """A symlink is followed when you or root own it, or when its owner owns the folder it is
    in and no one else may write that folder: then no other user could have placed it."""
    return link.st_uid in (os.geteuid(), 0) or (
        link.st_uid == holder.st_uid and not holder.st_mode & _SHARED)


def check_target(path: str) -> None:
    """Raise OSError when a file at `path` could never be written: a symlink on the way is not
    followed (UnsafeLink), or the name is longer than its file system allows (ENAMETOOLONG).
    Folders still missing are fine (the writer makes them), and so is any other trouble on
    the way (the writer says it, and where the profile went instead)."""
    limit = 255
    try:
        fd = _walk(os.path.dirname(path), create=False, partial=True) if _BY_DESCRIPTOR \
            else None
    except UnsafeLink:
        raise
    except OSError:
        fd = None
    if fd is not None:
        try:
            limit = name_max(fd)
        finally:
            os.close(fd)
    size = len(os.fsencode(os.path.basename(path)))
    if size > limit:
        raise OSError(errno.ENAMETOOLONG, f"its file name is {size} bytes, over the {limit} "
                      "its file system allows; give a shorter name")


def name_max(folder: int | str) -> int:
    """The longest file name (bytes) the file system of `folder` (a descriptor or path) takes."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255
    return limit if limit > 0 else 255


def fit(name: str, limit: int) -> str:
    """`name`, shortened (its extension kept where it can be) to at most `limit` bytes."""
    raw = os.fsencode(name)
    if len(raw) <= limit:
        return name
    stem, ext = os.path.splitext(name)
    tail = os.fsencode(ext)
    if len(tail) >= limit // 2:
        tail = b""
    return os.fsdecode(os.fsencode(stem)[:max(limit - len(tail), 1)] + tail)


def create_beside(folder: Folder, base: str, binary: bool = False) -> tuple[IO, str]:
    """A new, empty file in `folder` for the target `base`, open for writing (text: UTF-8) and
    locked (flock) until closed, and its name: `{base}.{16 hex}.tmp`, `base` shortened to fit
    NAME_MAX. Temporary files of `base` a killed writer left are removed first (_sweep).

    Its mode is what `open()` would give (0666 less the umask): the kernel applies the umask,
    so no process-wide umask is read or changed.
    """
    stem = fit(base, folder.name_max() - TEMP_SUFFIX)
    _sweep(folder, stem)
    for _ in range(100):
        name = f"{stem}.{secrets.token_hex(8)}.tmp"
        try:
            fd = folder.open(name, _FLAGS, 0o666)
        except FileExistsError:  # 64 random bits taken: someone guessed, or placed, this one
            continue
        try:
            _lock_now(fd)  # a writer at work: its file is never taken for a stale one
            return (os.fdopen(fd, "wb") if binary else
                    os.fdopen(fd, "w", encoding="utf-8")), name
        except BaseException:
            os.close(fd)
            raise
    raise FileExistsError(errno.EEXIST, "no free temporary name beside it", folder.name(base))


def _lock_now(fd: int) -> bool:
    """flock(LOCK_EX) on `fd` if free now; False when held elsewhere or not supported."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


_swept: set[tuple[str, str]] = set()
"""(folder, stem): swept once per process, not at every snapshot."""


def _sweep(folder: Folder, stem: str) -> None:
    """Remove the temporary files of `stem` in `folder` that a killed writer left: only
    names of ours (`{stem}.{16 hex}.tmp`), only regular files of this user with no other
    link, older than STALE_S, that no writer holds locked. A name another user could swap
    (in a folder all may write) is theirs to remove anyway."""
    key = (os.path.abspath(folder.path), stem)
    if key in _swept:
        return
    _swept.add(key)
    ours = re.compile(re.escape(stem) + r"\.[0-9a-f]{16}\.tmp")
    try:
        names = [n for n in folder.names() if ours.fullmatch(n)]
    except OSError:  # a folder we may write but not read: nothing to sweep
        return
    for name in names:
        try:
            _remove_stale(folder, name)
        except OSError:
            pass


def _remove_stale(folder: Folder, name: str) -> None:
    first = folder.stat(name)
    if not stat.S_ISREG(first.st_mode) or first.st_uid != os.geteuid() \
            or first.st_nlink != 1 or time.time() - first.st_mtime < STALE_S:
        return
    fd = folder.open(name, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) == (first.st_dev, first.st_ino) and _lock_now(fd):
            folder.remove(name)
    finally:
        os.close(fd)


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
            device, UnsafeLink for a folder reached through another user's link), and
            nothing was left beside it.
    """
    stream = STANDARD_STREAMS.get(os.path.normpath(path))
    if stream is not None:
        out = getattr(sys, stream)
        out.write(text)
        out.flush()
        return
    where, base = os.path.split(path)
    with Folder(where) as folder:
        try:
            mode = folder.stat(base).st_mode
        except OSError:
            mode = 0
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise OSError(errno.EINVAL, "it is a device, not a file", path)
        f, name = create_beside(folder, base)
        try:
            with f:
                f.write(text)
            folder.replace(name, base)
        except BaseException:
            try:
                folder.remove(name)
            except OSError:
                pass
            raise


CACHE_ENV = "PROTON_CACHE_DIR"


def cache_folder(name: str) -> str:
    """`name` in Proton's cache: PROTON_CACHE_DIR, else $XDG_CACHE_HOME/proton or
    ~/.cache/proton."""
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "proton")
    return os.path.join(base, name)


def private_dir(path: str) -> None:
    """Make `path` (and its parents) if missing, and refuse it unless it is a real folder of
    this user's that no one else may write: a library loaded from a folder another local
    user can write would run their code, a lock file there could be held by them."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & _SHARED:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~_SHARED)  # ours, made under a loose umask
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & _SHARED:
        raise OSError(f"the cache folder {path} is not a folder of this user's that only it "
                      f"may write; set {CACHE_ENV} to a private folder")


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

