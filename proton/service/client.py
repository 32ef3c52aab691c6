"""The client side of captures: find listening jobs, start a capture in each at once, stop it,
and say where each profile went (`proton capture`, `proton ps`).

Where a profile goes is the capturer's to decide, and only what it checked is reported: a
job's reply is a claim. A job of the capturer's user writes at the path the capturer chose in
its own folder, and a file is reported when it is there, named for the capture, a regular
file of the job's user written since the capture began. A job of another user (root captures
anyone's) is told a file name only; it writes in a folder of its own, and the capturer takes
the file from there (never through a link, only a regular file of the job's user) into its
own folder, replacing nothing.
"""
from __future__ import annotations

import errno
import glob
import os
import re
import select
import shutil
import socket
import stat
import struct
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import files
from ..data.job import alive, pid_path
from ..errors import ProtonError
from ..format import TRACE_EXTENSION, TREE_EXTENSION
from .protocol import (MAX_MESSAGE, SOCKET_DIR_ENV, Lines, ProtocolError, Status, check_status, encode,
                       every_users_folders, printable, search_folders, socket_path)


@dataclass(slots=True)
class Target:
    """A listening job: its Unix socket, or a TCP address with the job's token."""

    pid: int | None
    paths: list[str] = field(default_factory=list)
    """Sockets named after the pid, in every folder searched: one is the job's, should it
    listen; another user may have placed the others in her own folder (Connection tries
    each)."""
    tcp: tuple[str, int] | None = None
    token: str | None = None

    def __str__(self) -> str:
        return f"pid {self.pid}" if self.tcp is None else f"{self.tcp[0]}:{self.tcp[1]}"


@dataclass(slots=True)
class Outcome:
    """What one target did."""

    target: Target
    paths: list[str] = field(default_factory=list)
    error: str | None = None
    started: float | None = None
    partial: bool = False
    warnings: list[str] = field(default_factory=list)
    """What the job said while it was captured (its stderr has them too)."""
    merged: dict[str, str] = field(default_factory=dict)
    """A job file it wrote -> the ranks merged into it ("0-3")."""
    notes: list[str] = field(default_factory=list)
    """What the capturer itself has to say (a name it found taken)."""


def _folders() -> list[str]:
    """This user's endpoint folders; root may capture any user's job, as with ptrace, so it
    searches every user's (unless PROTON_SOCKET_DIR names the one folder to look in)."""
    if os.getuid() == 0 and not os.environ.get(SOCKET_DIR_ENV):
        return every_users_folders()
    return search_folders()


def listening() -> list[Target]:
    """Every listening job of this user on this host (of every user, for root), one target
    per pid with each socket named after it."""
    out: dict[int, Target] = {}
    mine = search_folders()
    for where in _folders():
        for path in sorted(glob.glob(os.path.join(glob.escape(where), "*.sock"))):
            name = os.path.basename(path)[: -len(".sock")]
            if not name.isdigit():
                continue
            pid = int(name)
            if alive(pid):
                out.setdefault(pid, Target(pid)).paths.append(path)
            elif where in mine:
                try:
                    os.remove(path)  # the socket of a job that died without cleaning up
                except OSError:
                    pass
    return list(out.values())


def find(pid: int) -> Target:
    paths = [p for where in _folders() if os.path.exists(p := os.path.join(where, f"{pid}.sock"))]
    if paths:
        return Target(pid, paths)
    if not alive(pid):
        raise ProtonError(f"no process {pid} on this host")
    raise ProtonError(f"process {pid} is not listening for captures (yours under "
                      f"{socket_path(pid)}); start it with `proton --listen`, `proton main.py`, "
                      "proton.listen(), or PROTON_LISTEN=1")


def tcp_target(spec: str, token: str | None) -> Target:
    from .endpoint import parse_tcp

    if not token:
        raise ProtonError(f"--connect {spec} needs the job's token: set PROTON_TOKEN or give "
                          "--token-file FILE")
    return Target(None, tcp=parse_tcp(spec), token=token)


class Connection:
    """One request/reply conversation with a target."""

    def __init__(self, target: Target, timeout: float = 10.0) -> None:
        self.target = target
        self.uid: int | None = None
        """The job's user (SO_PEERCRED); None over TCP."""
        if target.tcp is not None:
            self.sock = socket.create_connection(target.tcp, timeout=timeout)
        else:
            self.sock, self.uid = _connect_unix(target, timeout)
        self.lines = Lines(self.sock)

    def send(self, message: dict) -> None:
        if self.target.token:
            message = {**message, "token": self.target.token}
        self.sock.sendall(encode(message))

    def reply(self, timeout: float | None = None) -> dict | None:
        """The next reply, whole within `timeout` seconds however it trickles in; None when
        the target closed the connection (it ended)."""
        try:
            return self.lines.read(None if timeout is None else time.monotonic() + timeout)
        except ProtocolError as exc:
            return {"ok": False, "error": f"bad reply: {exc}"}
        except ConnectionResetError:
            return None

    def close(self) -> None:
        self.sock.close()


def _connect_unix(target: Target, timeout: float) -> tuple[socket.socket, int]:
    """A connection to the first of the target's sockets that the job itself answers, and
    the job's user; the others (stale, or another user's placed for its pid) are passed by,
    told nothing.

    Raises:
        OSError: none of them is the job's (the first one's reason, one line).
    """
    first: OSError | None = None
    for path in target.paths:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            return sock, _check_peer(sock, target)
        except OSError as exc:
            sock.close()  # a stale socket's refusal leaves nothing open
            first = first or exc
    if first is None:
        raise FileNotFoundError(errno.ENOENT, f"no socket of pid {target.pid}")
    raise first


def _check_peer(sock: socket.socket, target: Target) -> int:
    """The process answering at a job's socket is that job (SO_PEERCRED): a socket another
    user placed in her own folder, named after someone else's pid, is not asked anything
    (root searches every user's folders). Returns the job's user.

    Raises:
        PermissionError: another process answers (one line: which, and that it is skipped).
    """
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    if target.pid is not None and pid != target.pid:
        raise PermissionError(errno.EPERM, f"its socket is answered by pid {pid} (uid {uid}), "
                              f"not by pid {target.pid}: not that job's socket, skipped")
    return uid


STATUS_TIMEOUT = 1.5
"""Seconds one `proton ps` row may take in all: connecting, asking and every byte of the reply
(a job that never answers, or answers a byte at a time, costs this and no more)."""
MAX_ASKED_AT_ONCE = 64


def statuses(targets: list[Target], timeout: float = STATUS_TIMEOUT) -> list[Status | str]:
    """Each target's checked status, or one line saying why there is none, asked of every
    target at once (so a row's wait does not add to the next).

    Usage:
        for target, status in zip(targets, statuses(targets)): ...
    """
    if not targets:
        return []
    with ThreadPoolExecutor(min(len(targets), MAX_ASKED_AT_ONCE)) as pool:
        return list(pool.map(lambda t: _status(t, timeout), targets))


def _status(target: Target, timeout: float) -> Status | str:
    deadline = time.monotonic() + timeout
    try:
        conn = Connection(target, timeout)
        try:
            conn.send({"verb": "status"})
            reply = conn.lines.read(deadline)
        finally:
            conn.close()
        if reply is None:
            return "it closed the connection without an answer"
        return check_status(reply, target.pid)
    except TimeoutError:
        return f"no answer in {timeout:g} s"
    except ProtocolError as exc:
        return f"bad answer: {exc}"
    except OSError as exc:
        return f"cannot reach it: {exc.strerror or exc}"
    except Exception as exc:  # whatever a peer sends, ps lists the other jobs
        return f"bad answer: {type(exc).__name__}: {printable(exc)}"


def capture(targets: list[Target], options: dict, names: list[str], *,
            duration: float = 5.0, steps: int | None = None,
            timeout: float = 120.0) -> list[Outcome]:
    """Start a capture in every target at once (`names`: each one's profile name, an absolute
    path for a job on this host), end it after `duration` seconds (or let each end after
    `steps` iterations), and return what each wrote, as checked here (see the module's
    docstring)."""
    outcomes = [Outcome(t) for t in targets]
    asked = time.time()
    conns: dict[int, Connection] = {}
    for i, target in enumerate(targets):
        try:
            conns[i] = Connection(target)
        except OSError as exc:
            outcomes[i].error = f"cannot reach it: {exc.strerror or exc}"
    request = {"verb": "start", **options,
               **({"steps": steps, "timeout": timeout} if steps else {"duration": duration})}
    for i, conn in list(conns.items()):  # all requests first, then the replies: a small skew
        _try(outcomes[i], conns, i, lambda c=conn, n=_name_sent(conn, names[i]):
             c.send({**request, "name": n}))
    paths: dict[int, str] = {}
    for i, conn in list(conns.items()):
        reply = _reply(outcomes[i], conns, i, 30.0)
        if reply is not None:
            outcomes[i].started = _number(reply.get("started"))
            path = reply.get("path")
            if _may_be(path, conn, names[i]):  # where it said it will write, should it end
                paths[i] = printable(path, MAX_MESSAGE)
    begun = time.monotonic()  # every target records from here (its start may take seconds)
    # the duration (or the steps' timeout), or less where every job already answered (its steps
    # done, or it ended during the capture); then those still recording are told to stop
    _wait_readable(conns, begun + duration if steps is None else time.monotonic() + timeout)
    _stop_unanswered(outcomes, conns, paths)
    deadline = time.monotonic() + timeout  # writing the files, after the stop
    for i, conn in list(conns.items()):
        reply = _reply(outcomes[i], conns, i, max(1.0, deadline - time.monotonic()),
                       ended_path=paths.get(i))
        if reply is not None:  # a peer's reply: every field checked, every text escaped
            taken = _take_files(outcomes[i], conn, reply.get("paths"), asked, names[i])
            outcomes[i].partial = reply.get("partial") is True
            outcomes[i].warnings = _texts(reply.get("warnings"))
            merged = reply.get("merged")
            if isinstance(merged, dict):
                outcomes[i].merged = {taken[k]: printable(v) for k, v in merged.items()
                                      if k in taken}
            if _number(reply.get("started")) is not None:
                outcomes[i].started = _number(reply["started"])
        conn.close()
    return outcomes


def _name_sent(conn: Connection, name: str) -> str:
    """What a job is told of where its capture goes: the path, to a job of this user; to one
    of another user (root capturing it), the file name alone (the capturer takes the file)."""
    return os.path.basename(name) if conn.uid not in (None, os.getuid()) else name


NAMED = r"(\.ranks?[0-9,-]+|\.pid[0-9]+(\.[0-9]+)?)*\.(hatchet|hatchet_msgpack|chrome_trace)"
"""What a job adds to a capture's name: a rank's or ranks' part, a pid's (a name taken), and
the file's kind."""


def _named_for(path: str, name: str) -> bool:
    """`path`'s file name is one a job writes for the capture `name` (NAME.rank3.hatchet)."""
    stem = os.path.basename(name)
    for ext in (TREE_EXTENSION, TRACE_EXTENSION):
        stem = stem.removesuffix(ext)
    return re.fullmatch(re.escape(stem) + NAMED, os.path.basename(path)) is not None


def _may_be(path, conn: Connection, name: str) -> bool:
    """`path` is where the job may write the capture `name`: named for it, and, for a job of
    this user, beside the name (another user's writes in a folder of its own)."""
    return isinstance(path, str) and _named_for(path, name) and (
        conn.uid != os.getuid() or os.path.dirname(path) == os.path.dirname(name))


def _take_files(outcome: Outcome, conn: Connection, claimed, since: float,
                name: str | None = None) -> dict[str, str]:
    """The files a job says it wrote, each checked (see _check), into outcome.paths; returns
    each claim -> the path reported. A claim that does not hold is an error, and not
    reported."""
    taken: dict[str, str] = {}
    for claim in claimed if isinstance(claimed, list) else []:
        try:
            taken[claim] = _check(claim, conn, since, name, outcome.notes)
        except (ProtocolError, OSError) as exc:
            why = f"it cannot be read there ({exc.strerror or exc})" \
                if isinstance(exc, OSError) else exc
            outcome.error = printable(f"it says it wrote {claim}, but {why}; not reported",
                                      MAX_MESSAGE)
        else:
            outcome.paths.append(taken[claim])
    return taken


def _check(claim, conn: Connection, since: float, name: str | None, notes: list[str]) -> str:
    """The path to report for a job's claim that it wrote `claim` (for the capture `name`;
    None: a snapshot of the job's own run): over TCP the claim, named for the capture; from
    a job of this user, the claim once it holds; from another user's, the copy taken here.

    Raises:
        ProtocolError: the claim does not hold (why, a few words).
        OSError: it could not be checked or taken.
    """
    if not isinstance(claim, str):
        raise ProtocolError("that is not a path")
    if name is not None and not _may_be(claim, conn, name):
        raise ProtocolError(f"that is not {os.path.basename(name)}'s file"
                            + (f" in {os.path.dirname(name)}" if conn.uid == os.getuid() else ""))
    if conn.uid is None:
        return printable(claim, MAX_MESSAGE)  # the job's folder, on its host
    mine = conn.uid == os.getuid()
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with open(os.open(claim, flags), "rb") as source:  # never through a link, nor a FIFO
        info = os.fstat(source.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != conn.uid:
            raise ProtocolError(f"that is not a regular file of the job's user (uid {conn.uid})")
        if info.st_mtime < since - 1:
            raise ProtocolError("that file is older than the capture")
        if mine or name is None:
            return claim
        return _copy_beside(source, os.path.join(os.path.dirname(name),
                                                 os.path.basename(claim)), conn, notes)


def _copy_beside(source, path: str, conn: Connection, notes: list[str]) -> str:
    """`source` copied to `path`, or, that name taken, to NAME.pid<PID>[.N].ext beside it
    (noted): a capture taken from another user's job replaces nothing. Should `path`'s
    folder refuse it, the copy goes to a new folder only this user may enter (noted), as
    the profile writer's does: the job removes its own once the capturer hangs up."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return _copy_to_free_name(source, path, conn.target.pid or 0, notes)
    except OSError as exc:
        source.seek(0)
        other = os.path.join(tempfile.mkdtemp(prefix="proton-"), os.path.basename(path))
        _copy_to_free_name(source, other, conn.target.pid or 0, notes)
        notes.append(f"could not write {path} ({exc.strerror or exc}); wrote {other} instead")
        return other


def _copy_to_free_name(source, path: str, pid: int, notes: list[str]) -> str:
    """Copy `source` to `path`, or beside it where that is taken (NAME.pid<PID>, then
    NAME.pid<PID>.N): a hard link of a finished temporary file, which never replaces."""
    with files.Folder(os.path.dirname(path)) as folder:
        base = os.path.basename(path)
        f, tmp = files.create_beside(folder, base, binary=True)  # a name no one placed
        try:
            with f:
                shutil.copyfileobj(source, f)
            first = os.path.basename(pid_path(path, pid))
            stem, ext = os.path.splitext(first)
            for n in range(100):
                name = base if n == 0 else first if n == 1 else f"{stem}.{n - 1}{ext}"
                try:
                    folder.link(tmp, name)  # creates `name` only where nothing is
                except FileExistsError:
                    continue
                if n:
                    notes.append(f"{path} exists; wrote {folder.name(name)} instead")
                return folder.name(name)
            raise FileExistsError(errno.EEXIST, "no free name beside it", path)
        finally:
            folder.remove(tmp)


def snapshot(target: Target, timeout: float = 10.0) -> Outcome:
    """Ask the job to write its live session as it stands; the outcome's paths are those
    checked (see _check)."""
    outcome = Outcome(target)
    asked = time.time()
    conn = Connection(target, timeout)
    try:
        conn.send({"verb": "snapshot"})
        reply = conn.reply(timeout)
        if reply is None or reply.get("ok") is not True:
            outcome.error = printable((reply or {}).get(
                "error", "the job closed the connection (did it end?)"), MAX_MESSAGE)
        else:
            _take_files(outcome, conn, reply.get("paths"), asked)
    finally:
        conn.close()
    return outcome


def _try(outcome: Outcome, conns: dict, i: int, action, ended_path: str | None = None) -> None:
    try:
        action()
    except (BrokenPipeError, ConnectionResetError):
        outcome.error = _ended(outcome, ended_path)
        conns.pop(i).close()
    except OSError as exc:
        outcome.error = f"the connection failed: {exc.strerror or exc}"
        conns.pop(i).close()


ENDING_WAIT = 10.0
"""Seconds a capturer waits for a job that closed the connection to exit (it writes then)."""


def _ended(outcome: Outcome, path: str | None) -> str:
    """What became of a job that closed the connection mid-capture: it wrote its profile as
    it exited, or it ended without (killed), or it is still exiting."""
    pid = outcome.target.pid
    if pid is None:  # over TCP: nothing here can tell
        where = f"; it writes what it has as it exits, if it can ({path})" if path else ""
        return f"it ended, or the connection broke, during the capture{where}"
    deadline = time.monotonic() + ENDING_WAIT
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _running(pid):
        where = f" ({path})" if path else ""
        return f"it is ending during the capture; it writes what it has as it exits{where}"
    if path and _written_since(path, outcome.started):
        return f"it ended during the capture and wrote what it had ({path})"
    where = f" {path}" if path else " its profile"
    return f"it ended during the capture without writing{where} (killed, or it crashed)"


def _running(pid: int) -> bool:
    """`pid` runs (a zombie, ended but not yet reaped by its parent, does not)."""
    if not alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def _written_since(path: str, started: float | None) -> bool:
    try:
        return os.stat(path).st_mtime >= (started or 0) - 1.0
    except OSError:
        return False


def _reply(outcome: Outcome, conns: dict, i: int, timeout: float,
           ended_path: str | None = None) -> dict | None:
    """A target's reply; on failure the outcome says why and its connection is dropped."""
    conn = conns.get(i)
    if conn is None:
        return None
    try:
        reply = conn.reply(timeout)
    except (TimeoutError, socket.timeout):
        reply = {"ok": False, "error": f"no reply in {timeout:.0f} s"}
    except OSError as exc:
        reply = {"ok": False, "error": f"the connection failed: {exc.strerror or exc}"}
    if reply is None:
        reply = {"ok": False, "error": _ended(outcome, ended_path)}
    if not reply.get("ok"):
        outcome.error = printable(reply.get("error", "failed"), MAX_MESSAGE)
        outcome.warnings = _texts(reply.get("warnings"))
        conns.pop(i).close()
        return None
    return reply


def _texts(value) -> list[str]:
    """A reply's list of texts (paths, warnings), each fit for a terminal; anything else: []."""
    return [printable(v, MAX_MESSAGE) for v in value] if isinstance(value, list) else []


def _number(value) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and value == value else None


def _stop_unanswered(outcomes: list[Outcome], conns: dict[int, Connection],
                     paths: dict[int, str]) -> None:
    """Ask each job that has not answered yet (nothing to read: it is still recording) to
    stop."""
    for i, conn in list(conns.items()):
        ready, _, _ = select.select([conn.sock], [], [], 0)
        if not ready and not conn.lines.buffer:
            _try(outcomes[i], conns, i, lambda c=conn: c.send({"verb": "stop"}), paths.get(i))


def _wait_readable(conns: dict[int, Connection], deadline: float) -> None:
    """Until every connection has a reply waiting, or the deadline."""
    waiting = {c.sock for c in conns.values() if not c.lines.buffer}
    while waiting and time.monotonic() < deadline:
        ready, _, _ = select.select(list(waiting), [], [], min(1.0, deadline - time.monotonic()))
        waiting -= set(ready)
