"""Where a finished profile file goes: its temporary file (files.create_beside, in a folder
files.Folder opened) moved to its name, or beside it when another process's profile is there.

Every name is used through the folder's descriptor. What stands at a name is judged and
replaced under a lock only this user can hold (a file in its private cache folder), so two of
its runs of one name cannot both replace an earlier run's file, and no other user can make a
write wait by holding a lock.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import stat
import time
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None  # type: ignore[assignment]

from ..files import Folder, cache_folder, fit, private_dir
from ..report import debug, warn
from .job import alive, pid_path

_placed: set[tuple[int, int, int]] = set()
"""(device, inode, mtime) of every file this process put in place: the files it wrote (the
mtime tells a later file that got a freed inode's number apart)."""


def place(folder: Folder, tmp: str, base: str, since: float | None, keep: bool = False) -> str:
    """Move the finished `tmp` to `base` in `folder`, or beside it when another process's
    profile is there (with `keep`: anything this process did not write); return its path.
    os.link creates `base` only if it does not exist, so of two processes finishing at once,
    the second sees the first's file. When something is there, judging it and replacing it is
    one step for every writer of this user (_user_lock)."""
    info = folder.stat(tmp)
    _placed.add((info.st_dev, info.st_ino, info.st_mtime_ns))  # kept under any name
    try:
        folder.link(tmp, base)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: judged and replaced below
        pass
    else:
        folder.remove(tmp)
        return folder.name(base)
    with _user_lock() as locked:
        if not locked:  # another of this user's writers holds it too long: replace nothing
            beside = _link_beside(folder, tmp, base)
            warn(f"{folder.name(base)}: another writer of yours held the lock on placing "
                 f"profiles for {LOCK_WAIT_S:g} s; wrote {beside} instead")
            return beside
        return _judge_and_place(folder, tmp, base, since, keep)


def _judge_and_place(folder: Folder, tmp: str, base: str, since: float | None,
                     keep: bool) -> str:
    """place's step under the lock: `base` taken again if it is free now, else what stands
    there judged, and replaced or left."""
    path = folder.name(base)
    try:
        folder.link(tmp, base)
    except FileExistsError:
        if keep and not wrote(base, folder):
            beside = _link_beside(folder, tmp, base)
            warn(f"{path} exists and this job did not write it; wrote {beside} instead")
            return beside
        other = None if keep else other_writer(base, since, folder)
        if other is not None:
            distinct = _pid_name(folder, base)
            folder.replace(tmp, distinct)
            warn(f"{path} holds the profile of {other}; wrote {folder.name(distinct)} instead "
                 "(give each process its own name, or run under a launcher that sets RANK)")
            return folder.name(distinct)
    except OSError:  # a file system without hard links: replace as before
        if keep and _exists(folder, base) and not wrote(base, folder):
            raise FileExistsError(errno.EEXIST, "it exists and this job did not write it",
                                  path) from None
    else:
        folder.remove(tmp)
        return path
    folder.replace(tmp, base)
    return path


def _exists(folder: Folder, name: str) -> bool:
    try:
        folder.stat(name)
    except OSError:
        return False
    return True


LOCK_WAIT_S = 10.0
"""How long a writer waits for another of this user's to finish placing a file."""
LOCK_NAME = "place.lock"


@contextlib.contextmanager
def _user_lock() -> Iterator[bool]:
    """An exclusive flock on this user's lock file (LOCK_NAME in locks/ of its cache folder,
    private: no other user can open it), for every writer of profiles of this user (this
    process's threads and other processes alike); yields False when it was not had within
    LOCK_WAIT_S (a stopped process of ours holds it), True also where there is no private
    folder or no locks (nothing to wait for)."""
    fd = None
    try:
        folder = cache_folder("locks")
        private_dir(folder)
        fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDWR | os.O_CREAT
                     | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise PermissionError(errno.EPERM, "not this user's lock file", folder)
    except OSError as exc:
        debug(f"placing profiles unlocked: {exc}")
        if fd is not None:
            os.close(fd)
            fd = None
    try:
        yield fd is None or _lock(fd)
    finally:
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the lock


def _lock(fd: int) -> bool:
    """flock(LOCK_EX) on `fd` within LOCK_WAIT_S; True also where there are no locks."""
    if fcntl is None:  # Windows
        return True
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        except OSError:  # no locks on this file system
            return True


def wrote(path: str, folder: Folder | None = None) -> bool:
    """The file at `path` (a name in `folder`, if given; not a link's target) is one this
    process put in place."""
    try:
        info = folder.stat(path) if folder is not None else os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (info.st_dev, info.st_ino, info.st_mtime_ns) in _placed


def _link_beside(folder: Folder, tmp: str, base: str) -> str:
    """`tmp` linked at the first free name of NAME.pid<PID>[.N].ext; a link replaces nothing."""
    first = _pid_name(folder, base)
    stem, ext = os.path.splitext(first)
    for n in range(100):
        name = first if n == 0 else f"{stem}.{n}{ext}"
        try:
            folder.link(tmp, name)
        except FileExistsError:
            continue
        folder.remove(tmp)
        return folder.name(name)
    raise FileExistsError(errno.EEXIST, "no free name beside it", folder.name(base))


def _pid_name(folder: Folder, base: str) -> str:
    """job.pid_path's NAME.pid<PID>.ext for `base`, NAME shortened so that it fits NAME_MAX
    with room for _link_beside's `.N`."""
    whole = pid_path(base, os.getpid())
    over = len(os.fsencode(whole)) + 3 - folder.name_max()
    if over <= 0:
        return whole
    stem, ext = os.path.splitext(base)
    return pid_path(fit(stem, len(os.fsencode(stem)) - over) + ext, os.getpid())


_OWNER = re.compile(r'"host": ("(?:[^"\\]|\\.)*"), "pid": (\d+)')


def other_writer(path: str, since: float | None, folder: Folder | None = None) -> str | None:
    """Who wrote the profile at `path` (a name in `folder`, if given), when it is another
    process that is still running on this host or that wrote it after `since`; None when it
    may be replaced."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:  # never through a symlink, nor waiting on a FIFO put there: such a thing is replaced
        with open(os.open(path, flags) if folder is None else folder.open(path, flags), "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            head, mtime = f.read(4096), st.st_mtime
    except OSError:
        return None
    found = _OWNER.search(head.decode("utf-8", "replace"))
    host, pid = (json.loads(found[1]), int(found[2])) if found else _owner_msgpack(head)
    here = socket.gethostname()
    if host == here and pid == os.getpid():
        return None  # this process's own earlier profile
    who = f"process {pid} on {host}" if pid is not None else "another process"
    if host == here and pid is not None and alive(pid):
        return f"{who}, still running"
    if since is not None and mtime >= since:
        return f"{who}, written at {time.strftime('%H:%M:%S', time.localtime(mtime))} " \
               "while this one ran"
    return None


def _owner_msgpack(head: bytes) -> tuple[str | None, int | None]:
    """The host and pid a hatchet_msgpack file's root frame records (its first bytes)."""
    host, pid = _msgpack_after(head, b"\xa4host"), _msgpack_after(head, b"\xa3pid")
    return (host if isinstance(host, str) else None), (pid if isinstance(pid, int) else None)


def _msgpack_after(head: bytes, key: bytes):
    """The string or unsigned integer MessagePack encodes right after `key`, if any."""
    at = head.find(key)
    if at < 0 or at + len(key) >= len(head):
        return None
    at += len(key)
    b = head[at]
    try:
        if b <= 0x7F:
            return b
        if b in (0xCC, 0xCD, 0xCE, 0xCF):
            n = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}[b]
            return int.from_bytes(head[at + 1:at + 1 + n], "big")
        if 0xA0 <= b <= 0xBF:
            return head[at + 1:at + 1 + (b & 0x1F)].decode()
        if b == 0xD9:
            return head[at + 2:at + 2 + head[at + 1]].decode()
    except (UnicodeDecodeError, IndexError):
        return None
    return None
