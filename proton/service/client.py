"""The client side of captures: find listening jobs, start a capture in each at once, stop it,
and say where each profile went (`proton capture`, `proton ps`)."""
from __future__ import annotations

import errno
import glob
import os
import select
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..data.job import alive
from ..errors import ProtonError
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
        if target.tcp is not None:
            self.sock = socket.create_connection(target.tcp, timeout=timeout)
        else:
            self.sock = _connect_unix(target, timeout)
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


def _connect_unix(target: Target, timeout: float) -> socket.socket:
    """A connection to the first of the target's sockets that the job itself answers; the
    others (stale, or another user's placed for its pid) are passed by, told nothing.

    Raises:
        OSError: none of them is the job's (the first one's reason, one line).
    """
    first: OSError | None = None
    for path in target.paths:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            _check_peer(sock, target)
            return sock
        except OSError as exc:
            sock.close()  # a stale socket's refusal leaves nothing open
            first = first or exc
    if first is None:
        raise FileNotFoundError(errno.ENOENT, f"no socket of pid {target.pid}")
    raise first


def _check_peer(sock: socket.socket, target: Target) -> None:
    """The process answering at a job's socket is that job (SO_PEERCRED): a socket another
    user placed in her own folder, named after someone else's pid, is not asked anything
    (root searches every user's folders).

    Raises:
        PermissionError: another process answers (one line: which, and that it is skipped).
    """
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    if target.pid is not None and pid != target.pid:
        raise PermissionError(errno.EPERM, f"its socket is answered by pid {pid} (uid {uid}), "
                              f"not by pid {target.pid}: not that job's socket, skipped")


def ask(target: Target, message: dict, timeout: float = 10.0) -> dict:
    """One request and its reply (status, snapshot)."""
    conn = Connection(target, timeout)
    try:
        conn.send(message)
        reply = conn.reply(timeout)
    finally:
        conn.close()
    if reply is None:
        return {"ok": False, "error": "the job closed the connection (did it end?)"}
    return reply


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
    """Start a capture in every target at once (`names`: each one's profile name), end it
    after `duration` seconds (or let each end after `steps` iterations), and return what each
    wrote."""
    outcomes = [Outcome(t) for t in targets]
    conns: dict[int, Connection] = {}
    for i, target in enumerate(targets):
        try:
            conns[i] = Connection(target)
        except OSError as exc:
            outcomes[i].error = f"cannot reach it: {exc.strerror or exc}"
    request = {"verb": "start", **options,
               **({"steps": steps, "timeout": timeout} if steps else {"duration": duration})}
    for i, conn in list(conns.items()):  # all requests first, then the replies: a small skew
        _try(outcomes[i], conns, i, lambda c=conn, n=names[i]: c.send({**request, "name": n}))
    paths: dict[int, str] = {}
    for i, conn in list(conns.items()):
        reply = _reply(outcomes[i], conns, i, 30.0)
        if reply is not None:
            outcomes[i].started = _number(reply.get("started"))
            paths[i] = printable(reply.get("path", ""), MAX_MESSAGE)
    begun = time.monotonic()  # every target records from here (its start may take seconds)
    if steps is None:
        time.sleep(max(0.0, duration - (time.monotonic() - begun)))
        for i, conn in list(conns.items()):
            _try(outcomes[i], conns, i, lambda c=conn: c.send({"verb": "stop"}), paths.get(i))
        deadline = time.monotonic() + timeout
    else:
        deadline = time.monotonic() + timeout
        _wait_readable(conns, deadline)
        for i, conn in list(conns.items()):  # those the steps did not end in time: stop
            ready, _, _ = select.select([conn.sock], [], [], 0)
            if not ready and not conn.lines.buffer:
                _try(outcomes[i], conns, i, lambda c=conn: c.send({"verb": "stop"}),
                     paths.get(i))
        deadline = time.monotonic() + timeout  # writing the files, after the stop
    for i, conn in list(conns.items()):
        reply = _reply(outcomes[i], conns, i, max(1.0, deadline - time.monotonic()),
                       ended_path=paths.get(i))
        if reply is not None:  # a peer's reply: every field checked, every text escaped
            outcomes[i].paths = _texts(reply.get("paths"))
            outcomes[i].partial = reply.get("partial") is True
            outcomes[i].warnings = _texts(reply.get("warnings"))
            merged = reply.get("merged")
            if isinstance(merged, dict):
                outcomes[i].merged = {printable(k, MAX_MESSAGE): printable(v)
                                      for k, v in merged.items()}
            if _number(reply.get("started")) is not None:
                outcomes[i].started = _number(reply["started"])
        conn.close()
    return outcomes


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


def _wait_readable(conns: dict[int, Connection], deadline: float) -> None:
    """Until every connection has a reply waiting, or the deadline."""
    waiting = {c.sock for c in conns.values() if not c.lines.buffer}
    while waiting and time.monotonic() < deadline:
        ready, _, _ = select.select(list(waiting), [], [], min(1.0, deadline - time.monotonic()))
        waiting -= set(ready)
