"""Write a profile's data as a .hatchet file (the layout of proton/format.py), and any profile
document (a tree, or a Chrome trace that chrome_trace.py builds) to its file.

Takes plain data (metrics by path id, kernel events), never a session. A node carries its own
(exclusive) values; names ending in "(exc)" or "(pty)" lose the suffix; the root carries a 0 for
each inclusive metric, which is how hatchet and both viewers tell inclusive metrics from exclusive
ones. Vectors (lists) are written as JSON arrays, always exclusive.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import re
import socket
import stat
import tempfile
import time
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None  # type: ignore[assignment]

from ..errors import ProfileWriteError, SessionError
from ..files import create_beside
from ..format import (CHILDREN_KEY, CUDA, DEVICE_ID, DEVICE_TYPE, EXCLUSIVE, FRAME_KEY,
                      FRAME_TYPE, METRICS_KEY, NAME_KEY, NO_LINES, PROPERTY, TYPE_KEY,
                      WARP_TIMELINE)
from ..format_msgpack import packb
from ..report import warn
from .job import alive, pid_path
from .metrics import DeviceValue, base_name, real_number
from .paths import ROOT, paths
from .chrome_trace import WarpSpan, build_trace  # noqa: F401  (their home is chrome_trace)

FORMATS = {"tree": ("", "hatchet", "hatchet_msgpack"), "trace": ("", "chrome_trace")}


def build(nodes: dict[int, dict[str, float]], devices: dict[str, dict],
          notes: dict[int, str] | None = None, job: dict | None = None,
          own: dict[int, dict[str, int]] | None = None,
          timelines: dict[int, str] | None = None) -> list:
    """The JSON document for aggregated `nodes` (metrics by path id). `notes`: why a kernel's
    PC samples have no source lines, written as its frame's "no_lines" (hatchet keeps extra
    frame keys; both viewers read the file as before). `job`: the writing process (job.Job's
    fields), written in the root frame. `own`: more metrics of a node's own, written as
    exclusive ones (a kernel's launch configuration, its SASS instruction mix). `timelines`:
    a kernel's warp timeline (JSON text), its frame's WARP_TIMELINE. Built without
    recursion: a tree may be as deep as the program's scopes."""
    notes = notes or {}
    own = own or {}
    frames = paths.frames
    children: dict[int, set[int]] = {}
    for pid in nodes:
        while pid != ROOT:
            parent = frames[pid].parent
            kids = children.setdefault(parent, set())
            if pid in kids:
                break
            kids.add(pid)
            pid = parent
    inclusive: set[str] = set()
    used_devices: set[str] = set()
    dropped: set[str] = set()

    def number(key: str, value: Any) -> int | float | None:
        try:
            return finite_or_none(real_number(value))
        except (TypeError, ValueError, OverflowError):  # checked when given; a bug costs one value
            dropped.add(key)
            return None

    def node(pid: int) -> dict:
        out: dict[str, Any] = {}
        value: Any
        for key, value in nodes.get(pid, {}).items():
            if key == DEVICE_ID:
                value = str(int(value))
                used_devices.add(value)
            elif key == DEVICE_TYPE:
                value = CUDA
            else:
                if isinstance(value, DeviceValue):
                    value = value.value()  # GPU tensors: read now, once
                if isinstance(value, list) or key.endswith((EXCLUSIVE, PROPERTY)):
                    key = base_name(key)  # a vector is its node's own too, never summed up
                else:
                    inclusive.add(key)
                if isinstance(value, list):
                    value = [number(key, v) for v in value]
                elif not isinstance(value, str):  # text: a property's or exclusive metric's
                    value = number(key, value)
            out[key] = value
        out.update(own.get(pid, ()))
        frame = {NAME_KEY: frames[pid].name, TYPE_KEY: FRAME_TYPE}
        if pid in notes:
            frame[NO_LINES] = notes[pid]
        if timelines and pid in timelines:
            frame[WARP_TIMELINE] = timelines[pid]
        return {FRAME_KEY: frame, METRICS_KEY: out, CHILDREN_KEY: []}

    root = node(ROOT)
    root[FRAME_KEY].update(job or {})
    todo = [(ROOT, root)]
    while todo:
        pid, out = todo.pop()
        for kid in sorted(children.get(pid, ()), key=lambda k: (frames[k].name, frames[k].kind)):
            child = node(kid)
            out[CHILDREN_KEY].append(child)
            todo.append((kid, child))
    for key in sorted(inclusive):  # sorted: the same profile always writes the same bytes
        root[METRICS_KEY].setdefault(key, 0)
    if dropped:
        warn(f"metrics {', '.join(sorted(dropped))} held values that are not real numbers; "
             "written as null")
    table = {d: devices[d] for d in sorted(used_devices) if d in devices}
    return [root, {CUDA: table} if table else {}]


def finite_or_none(value: int | float) -> int | float | None:
    """JSON has no NaN or infinity: such a metric is written as null (the viewer shows it
    blank); every other number as it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def check_format(data: str, output_format: str) -> None:
    if output_format not in FORMATS[data]:
        raise SessionError(f"output_format={output_format!r} is not supported for "
                           f"data={data!r}; use {FORMATS[data][1]!r}")


def write(doc: Any, path: str, since: float | None = None, encoding: str = "json",
          keep: bool = False) -> str:
    """Write a document built above to `path` (through a temporary file moved into place, so
    no reader, and no second signal, ever sees half a file) and return the path written.

    Another process's profile is never overwritten: when `path` holds one that a live process
    on this host wrote, or one written after `since` (time.time() when this profile began: a
    process of the same name that ran alongside), this one goes to NAME.pid<PID>.<ext> beside
    it, with a warning. A profile from an earlier run, or from this process, is replaced;
    with `keep` (a capture's) only a file this process wrote is replaced, anything else stays
    and the profile goes beside it. `encoding`: "json", or "msgpack" (hatchet_msgpack).

    A value the encoder refuses costs only that value (written as null, with a warning), and
    whatever else goes wrong at `path`, the profile is written to the temporary folder. No
    file is opened through a name another user could have placed (see proton/files.py).

    Raises:
        ProfileWriteError: `path` could not be written; the profile went to a file in the
            temporary folder instead, which the message names (or it says that failed too).
    """
    try:
        return _dump_or_salvage(doc, path, since, encoding, keep)
    except Exception as exc:  # not only OSError: the profile must not be lost to a bug here
        reason = _reason(exc, path)
    fallback = None
    try:
        fallback = _fallback(path)
        _dump_or_salvage(doc, fallback, encoding=encoding)
    except Exception as exc:
        raise ProfileWriteError(f"could not write the profile to {path} ({reason}) nor to "
                                f"{fallback or 'the temporary folder'} "
                                f"({_reason(exc, fallback or '')}); free space or give "
                                "another name") from None
    raise ProfileWriteError(f"could not write {path} ({reason}); wrote {fallback} instead; "
                            "give a name in a writable folder")


_fallbacks: dict[str, str] = {}
"""Target path -> the folder its profile went to instead (this process's): a later write of
the same target (a periodic snapshot, the final write) replaces the file there."""


def _fallback(path: str) -> str:
    """Where the profile meant for `path` goes instead: in a fresh folder only this user may
    enter (mkdtemp: no name in it can be pre-placed), the same one for every write of `path`
    while that folder is still this user's and private."""
    folder = _fallbacks.get(path)
    if folder is not None:
        try:
            info = os.lstat(folder)
        except OSError:
            info = None
        if info is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() \
                or stat.S_IMODE(info.st_mode) & 0o077:
            folder = None  # removed (or replaced by another's): a new one
    if folder is None:
        folder = _fallbacks[path] = tempfile.mkdtemp(prefix="proton-")
    return os.path.join(folder, os.path.basename(path))


def _reason(exc: Exception, path: str) -> str:
    """Why writing `path` failed, in a few words on one line."""
    if not isinstance(exc, OSError):
        return " ".join(f"{type(exc).__name__}: {exc}".split())
    reason = exc.strerror or str(exc)
    if exc.filename and not str(exc.filename).startswith(path):  # not the file or its temp
        reason += f": {exc.filename}"  # the folder that could not be made
    return reason


def _dump_or_salvage(doc, path: str, since: float | None = None,
                     encoding: str = "json", keep: bool = False) -> str:
    """_dump; when the document holds a value the encoder refuses, _dump of a copy with only
    JSON's kinds (see _plain), with a warning: the rest of the profile is still written."""
    try:
        return _dump(doc, path, since, encoding, keep)
    except OSError:
        raise
    except Exception as exc:
        plain, dropped = _plain(doc)
        warn(f"{path}: {_reason(exc, path)}; writing it with {dropped} value(s) that are not "
             "numbers, text, lists or maps as null")
        return _dump(plain, path, since, encoding, keep)


def plain(doc: Any) -> Any:
    """`doc` as its file holds it (_plain's copy)."""
    return _plain(doc)[0]


def _plain(doc: Any) -> tuple[Any, int]:
    """A copy of `doc` holding only what JSON and MessagePack encode: numbers made plain ints
    and floats (null when not finite), text as UTF-8 allows, keys as text, any other value
    null; and how many values were made null. Without recursion: a tree may be any depth."""
    dropped = 0

    def leaf(value: Any) -> Any:
        nonlocal dropped
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return value.encode("utf-8", "replace").decode("utf-8")  # lone surrogates
        try:
            return finite_or_none(real_number(value))
        except (TypeError, ValueError, OverflowError):
            dropped += 1
            return None

    out: list = [None]
    todo: list = [(doc, out, 0)]
    copy: Any
    while todo:
        value, into, at = todo.pop()
        if isinstance(value, dict):
            into[at] = copy = {}
            for key, item in value.items():
                key = leaf(key) if isinstance(key, str) else str(key)
                copy[key] = None  # the key's place now: keys keep their order
                todo.append((item, copy, key))
        elif isinstance(value, (list, tuple)):
            into[at] = copy = [None] * len(value)
            todo.extend((item, copy, i) for i, item in enumerate(value))
        else:
            into[at] = leaf(value)
    return out[0], dropped


_placed: set[tuple[int, int, int]] = set()
"""(device, inode, mtime) of every file this process put in place: the files it wrote (the
mtime tells a later file that got a freed inode's number apart)."""


def _place(tmp: str, path: str, since: float | None, keep: bool = False) -> str:
    """Move the finished `tmp` to `path`, or beside it when another process's profile is
    there (with `keep`: anything this process did not write). os.link creates `path` only if
    it does not exist, so of two processes finishing at once, the second sees the first's
    file. When something is there, judging it and replacing it is one step for every writer
    of the folder (_folder_lock): two runs of one name that both find an earlier run's file
    cannot both replace it, the second over the first."""
    info = os.stat(tmp)
    _placed.add((info.st_dev, info.st_ino, info.st_mtime_ns))  # kept under any name
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: judged and replaced below
        pass
    else:
        os.remove(tmp)
        return path
    with _folder_lock(path) as locked:
        if not locked:  # another writer holds the folder too long: replace nothing
            beside = _link_beside(tmp, path)
            warn(f"{path}: its folder stayed locked by another writer for "
                 f"{LOCK_WAIT_S:g} s; wrote {beside} instead")
            return beside
        return _judge_and_place(tmp, path, since, keep)


def _judge_and_place(tmp: str, path: str, since: float | None, keep: bool) -> str:
    """_place's step under the folder's lock: `path` taken again if it is free now, else
    what stands there judged, and replaced or left."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        if keep and not wrote(path):
            beside = _link_beside(tmp, path)
            warn(f"{path} exists and this job did not write it; wrote {beside} instead")
            return beside
        other = None if keep else other_writer(path, since)
        if other is not None:
            distinct = pid_path(path, os.getpid())
            os.replace(tmp, distinct)
            warn(f"{path} holds the profile of {other}; wrote {distinct} instead "
                 "(give each process its own name, or run under a launcher that sets RANK)")
            return distinct
    except OSError:  # a file system without hard links: replace as before
        if keep and os.path.lexists(path) and not wrote(path):
            raise FileExistsError(errno.EEXIST, "it exists and this job did not write it",
                                  path) from None
    else:
        os.remove(tmp)
        return path
    os.replace(tmp, path)
    return path


LOCK_WAIT_S = 10.0
"""How long a writer waits for another to finish placing a file in the same folder."""


@contextlib.contextmanager
def _folder_lock(path: str):
    """An exclusive flock on `path`'s folder, for every writer of profiles there (this
    process's threads and other processes alike); yields False when it was not had within
    LOCK_WAIT_S (another user may hold a lock on a shared folder: the wait is bounded), True
    also where the file system has no locks (as before: nothing to wait for)."""
    try:
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
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


def wrote(path: str) -> bool:
    """The file at `path` (not a link's target) is one this process put in place."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino, info.st_mtime_ns) in _placed


def _link_beside(tmp: str, path: str) -> str:
    """`tmp` linked at the first free name of NAME.pid<PID>[.N].ext; a link replaces nothing."""
    first = pid_path(path, os.getpid())
    stem, ext = os.path.splitext(first)
    for n in range(100):
        name = first if n == 0 else f"{stem}.{n}{ext}"
        try:
            os.link(tmp, name)
        except FileExistsError:
            continue
        os.remove(tmp)
        return name
    raise FileExistsError(errno.EEXIST, "no free name beside it", path)


_OWNER = re.compile(r'"host": ("(?:[^"\\]|\\.)*"), "pid": (\d+)')


def other_writer(path: str, since: float | None) -> str | None:
    """Who wrote the profile at `path`, when it is another process that is still running on
    this host or that wrote it after `since`; None when it may be replaced."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:  # never through a symlink, nor waiting on a FIFO put there: such a thing is replaced
        with open(os.open(path, flags), "rb") as f:
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


DEEP = 200
"""Deeper trees than this are encoded without recursion (json's encoder recurses per level)."""


def _dump(doc, path: str, since: float | None = None, encoding: str = "json",
          keep: bool = False) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    f, tmp = create_beside(path, binary=encoding == "msgpack")  # a name no one placed
    try:
        with f:
            if encoding == "msgpack":
                f.write(packb(doc))
            elif isinstance(doc, list) and doc and _depth(doc[0]) > DEEP:
                _encode_tree(doc, f.write)
            else:
                json.dump(doc, f, allow_nan=False)
        return _place(tmp, path, since, keep)  # a reader never sees half a file
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _depth(root: dict) -> int:
    deepest, todo = 0, [(root, 1)]
    while todo:
        node, level = todo.pop()
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in node[CHILDREN_KEY])
    return deepest


def _encode_tree(doc: list, write) -> None:
    """json.dump of [root node, device table], byte for byte, with an explicit stack."""
    dumps = functools.partial(json.dumps, allow_nan=False)

    def open_node(node: dict) -> None:
        write(f'{{"{FRAME_KEY}": {dumps(node[FRAME_KEY])}, '
              f'"{METRICS_KEY}": {dumps(node[METRICS_KEY])}, "{CHILDREN_KEY}": [')

    def close_node(node: dict) -> None:  # keys after the children (the root's SOURCES_KEY)
        write("]" + "".join(f", {dumps(k)}: {dumps(v)}" for k, v in node.items()
                            if k not in (FRAME_KEY, METRICS_KEY, CHILDREN_KEY)) + "}")

    write("[")
    open_node(doc[0])
    stack = [[iter(doc[0][CHILDREN_KEY]), True, doc[0]]]  # (children left, none written yet)
    while stack:
        top = stack[-1]
        child = next(top[0], None)
        if child is None:
            stack.pop()
            close_node(top[2])
            continue
        if not top[1]:
            write(", ")
        top[1] = False
        open_node(child)
        stack.append([iter(child[CHILDREN_KEY]), True, child])
    for rest in doc[1:]:
        write(f", {dumps(rest)}")
    write("]")
