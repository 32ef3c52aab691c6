"""How `proton capture` talks to a listening job: where its endpoint is, and the messages.

A job listens on a Unix socket, `<tmp>/proton-<uid>/<pid>.sock` (`$PROTON_SOCKET_DIR/<pid>.sock`
when set), in a folder only its owner may enter (mode 0700) with a socket only its owner may
open (0600); the job also checks the peer's uid (root may reach anyone's, as with ptrace).
A usual folder that is not private to the user (another user made it first) is never used: the
job listens in `$XDG_RUNTIME_DIR/proton` (when that is private) or `<tmp>/proton-<uid>-XXXX`
instead, and clients search those too (search_folders).
Optionally it also listens on TCP, loopback unless an address is named, and then every request
must carry the job's token (the first within seconds of connecting).

A message is one line of JSON (an object) of at most MAX_MESSAGE bytes. Requests:
    {"verb": "status"}
    {"verb": "start", "name": str, "context": str, "data": str, "mode": str|null,
     "hook": str|null, "steps": int|null, "duration": seconds|null,
     "timeout": seconds|null}       (with steps: the job ends the capture by itself that long
                                     plus its grace after the start, should the client fall silent)
    {"verb": "stop"}                  (on the connection that started the capture)
    {"verb": "snapshot"}
each with "token" over TCP. A start's name is, on the Unix socket, an absolute path the client
resolved in its own folder (from root to another user's job: a file name, in a folder of the
job's own, which root takes the file from); over TCP a file name in the job's
PROTON_CAPTURE_DIR. The paths a reply names are claims: the client reports only those it
checked (client.py). Every reply
has "ok"; a failed one has "error", one line. A start is answered when it starts ("started",
"path") or is armed for steps ("armed", "path": where it will write), then with "paths" written
and "warnings", what the job said meanwhile.
"""
from __future__ import annotations

import glob
import json
import os
import re
import signal
import socket
import stat
import tempfile
import time
from dataclasses import dataclass, field

from ..errors import ProtonError

LISTEN_ENV = "PROTON_LISTEN"
"""1: listen on the Unix socket; tcp://HOST:PORT (or tcp://PORT, on loopback): also on TCP.
Read by the runtime's entry points (proton.step(), scopes), never at import."""
SOCKET_DIR_ENV = "PROTON_SOCKET_DIR"
"""A private folder to listen in instead of <tmp>/proton-<uid> (tests, per-job /tmp)."""
MAX_MESSAGE = 64 * 1024
VERBS = ("status", "start", "stop", "snapshot")
START_OPTIONS: dict[str, type | tuple[type, ...]] = {"name": str, "context": str, "data": str, "mode": (str, type(None)),
                 "hook": (str, type(None)), "steps": (int, type(None)),
                 "duration": (int, float, type(None)), "timeout": (int, float, type(None)),
                 "merge": (dict, type(None))}


MAX_RANKS = 8192
"""Ranks a capture may name for its merge (a request fits in MAX_MESSAGE)."""


class ProtocolError(Exception):
    """A message that is not one: the one-line reason goes back to the peer."""


ENDING_SIGNALS = frozenset(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
                           if hasattr(signal, n))


def leave_signals_to_the_main_thread() -> None:
    """Block Ctrl-C and the ending signals in the calling (helper) thread, so the kernel
    delivers them to the script's main thread: Python runs its handlers there, and a main
    thread asleep (time.sleep) is woken only by a signal delivered to it (seen: a --listen
    job whose SIGTERM went to an endpoint thread slept on for a minute)."""
    if hasattr(signal, "pthread_sigmask"):  # not on Windows
        signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)


def listen_asked() -> bool:
    """Whether the environment asks the job to listen (PROTON_LISTEN set, and not 0)."""
    return os.environ.get(LISTEN_ENV, "0") not in ("", "0")


def folder(uid: int | None = None) -> str:
    """The usual folder of `uid`'s endpoints (this user's by default): $PROTON_SOCKET_DIR when
    set (the job and its capturer must agree on it), else <tmp>/proton-<uid>."""
    chosen = os.environ.get(SOCKET_DIR_ENV)
    if chosen and uid in (None, os.getuid()):
        return os.path.abspath(chosen)
    return os.path.join(tempfile.gettempdir(), f"proton-{os.getuid() if uid is None else uid}")


def socket_path(pid: int, uid: int | None = None) -> str:
    return os.path.join(folder(uid), f"{pid}.sock")


def private(path: str, uid: int | None = None) -> bool:
    """`path` is a real folder (not a link) of `uid` (this user) that no one else may enter."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == (os.getuid() if uid is None else uid)
            and not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO))


def _describe(path: str) -> str:
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be used ({exc.strerror or exc})"
    what = "" if stat.S_ISDIR(info.st_mode) else "not a folder: "
    return (f"{path} is not a private folder of this user ({what}owner uid {info.st_uid}, "
            f"mode {stat.S_IMODE(info.st_mode):o})")


def _runtime_folder() -> str | None:
    """$XDG_RUNTIME_DIR/proton, when $XDG_RUNTIME_DIR is this user's private folder."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, "proton") if runtime and private(runtime) else None


def _fresh_folders(uid: int | None = None) -> list[str]:
    """The private <tmp>/proton-<uid>-XXXX folders of `uid` (made when the usual one was not)."""
    return [p for p in sorted(glob.glob(glob.escape(folder(uid)) + "-*")) if private(p, uid)]


def search_folders(uid: int | None = None) -> list[str]:
    """Where `uid`'s jobs (this user's) may listen: its private folders only, so a folder
    another user made at the usual name is not searched. $PROTON_SOCKET_DIR alone when set."""
    if os.environ.get(SOCKET_DIR_ENV) and uid in (None, os.getuid()):
        return [folder()]
    runtime = _runtime_folder() if uid in (None, os.getuid()) else None
    found = [p for p in (folder(uid), runtime) if p and private(p, uid)]
    return found + _fresh_folders(uid)


RUNTIME_ROOT = "/run/user"
"""Where login sessions' $XDG_RUNTIME_DIR folders are (/run/user/<uid>)."""


def every_users_folders() -> list[str]:
    """Every user's endpoint folders, each private to the user it belongs to (for root)."""
    out = search_folders()
    for path in sorted(glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), "proton-*"))):
        named = re.fullmatch(r"proton-(\d+)(-.+)?", os.path.basename(path))
        if named and private(path, int(named[1])):
            out.append(path)
    for path in sorted(glob.glob(os.path.join(RUNTIME_ROOT, "*", "proton"))):
        uid = os.path.basename(os.path.dirname(path))
        if uid.isdigit() and private(path, int(uid)):
            out.append(path)
    return list(dict.fromkeys(out))


def private_folder() -> tuple[str, str | None]:
    """The folder this job listens in, made 0700, and why it is not the usual one (None when
    it is). $PROTON_SOCKET_DIR is used as given or not at all.

    Raises:
        ProtonError: no private folder could be had (the reason, one line).
    """
    usual = folder()
    try:
        os.makedirs(usual, mode=0o700, exist_ok=True)
    except OSError:
        pass  # said below, with what is there
    if private(usual):
        return usual, None
    why = _describe(usual)
    if os.environ.get(SOCKET_DIR_ENV):
        raise ProtonError(f"{SOCKET_DIR_ENV}: {why}; make it 0700 or name another")
    runtime = _runtime_folder()
    if runtime is not None:
        try:
            os.mkdir(runtime, 0o700)
        except OSError:
            pass
        if private(runtime):
            return runtime, why
    existing = _fresh_folders()
    if existing:  # one an earlier job of this user made
        return existing[0], why
    parent, base = os.path.split(usual)
    try:  # a new name: no one can have placed anything at it
        return tempfile.mkdtemp(prefix=f"{base}-", dir=parent), why
    except OSError as exc:
        raise ProtonError(f"{why}, and no private folder could be made in "
                          f"{os.path.dirname(usual)} ({exc.strerror or exc})") from None


def encode(message: dict) -> bytes:
    return json.dumps(message).encode() + b"\n"


def decode(line: bytes) -> dict:
    """One request or reply; ProtocolError naming what is wrong with it."""
    if len(line) > MAX_MESSAGE:
        raise ProtocolError(f"message over {MAX_MESSAGE} bytes")
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not a JSON line ({exc})") from None
    except RecursionError:  # json's parser recurses per level
        raise ProtocolError("not a JSON line (nested too deeply)") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message is a JSON object")
    return message


def check_request(message: dict) -> dict:
    """A request's verb and options checked (types only; start() checks the values)."""
    verb = message.get("verb")
    if verb not in VERBS:
        raise ProtocolError(f"unknown verb {verb!r}; one of {', '.join(VERBS)}")
    if verb == "start":
        for key, kind in START_OPTIONS.items():
            if key in message and not isinstance(message[key], kind):
                raise ProtocolError(f"start: {key}={message[key]!r} has the wrong type")
            if key in message and kind is not str and isinstance(message[key], bool):
                raise ProtocolError(f"start: {key}={message[key]!r} has the wrong type")
        merge = message.get("merge")
        if merge is not None and not (
                isinstance(merge.get("id"), str) and 0 < len(merge["id"]) <= 64
                and merge["id"].isalnum() and isinstance(merge.get("ranks"), list)
                and 0 < len(merge["ranks"]) <= MAX_RANKS
                and all(type(r) is int and r >= 0 for r in merge["ranks"])):
            raise ProtocolError("start: merge must be {\"id\": up to 64 letters or digits, "
                                "\"ranks\": [the ranks captured]}")
        steps = message.get("steps")
        if steps is not None and steps < 1:
            raise ProtocolError(f"start: steps={steps} must be at least 1")
        for key in ("duration", "timeout"):
            seconds = message.get(key)
            if seconds is not None and not 0 < seconds < 7 * 24 * 3600:
                raise ProtocolError(f"start: {key}={seconds} must be a positive number of "
                                    "seconds")
    return message


@dataclass(slots=True)
class Status:
    """A job's answer to {"verb": "status"}, checked (check_status)."""

    pid: int | None
    state: str
    """"idle", "capturing", "waiting for proton.step() (N steps)", ..."""
    steps: int | None = None
    """proton.step() calls so far."""
    sessions: list[str] = field(default_factory=list)
    """The files its live sessions will write."""
    rank: int | None = None
    world_size: int | None = None
    command: str = ""


MAX_SHOWN = 200
"""Characters of a job's text that `proton ps` shows (a reply may hold 64 KiB)."""


def printable(value: object, most: int = MAX_SHOWN) -> str:
    """A peer's text for a terminal: control characters escaped (a reply cannot drive the
    terminal or break a row), cut at `most` characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value)[: most + 1])
    return text if len(text) <= most else text[: most - 3] + "..."


def check_status(reply: dict, pid: int | None = None) -> Status:
    """A status reply as a Status; ProtocolError naming the field that is missing or of the
    wrong type, or the pid that is not the socket's (`pid`, when known).

    Usage:
        status = check_status(reply, target.pid)  # reply: the job's answer to a status
    """
    if reply.get("ok") is not True:
        raise ProtocolError(f"it answered: {printable(reply.get('error', 'not ok'))}")

    def get(key: str, kind, default=None, required: bool = False):
        value = reply.get(key, default)
        if (value is None and not required) or (isinstance(value, kind) and
                                                not isinstance(value, bool)):
            return value
        shown = "none" if key not in reply else printable(repr(value), 40)
        raise ProtocolError(f"{key} {shown} is not {kind.__name__}")

    said = get("pid", int, required=pid is None)
    if pid is not None and said is not None and said != pid:
        raise ProtocolError(f"it answers as pid {said}, not as {pid}, whose socket it holds")
    sessions = get("sessions", list, [])
    if not all(isinstance(s, str) for s in sessions):
        raise ProtocolError("sessions is not a list of paths")
    steps = get("steps", int)
    return Status(pid if pid is not None else said, printable(get("state", str, required=True)),
                  steps if steps is None or steps >= 0 else None,
                  [printable(s) for s in sessions[:16]], get("rank", int),
                  get("world_size", int), printable(get("command", str, "")))


class Lines:
    """Reads one message at a time from a socket, refusing oversized ones."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def read(self, deadline: float | None = None) -> dict | None:
        """The next message; None at end of stream. ProtocolError for a bad one (the rest of
        an oversized line is dropped); TimeoutError when it is not whole by `deadline`
        (time.monotonic()), however it trickles in."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_MESSAGE:
                self.buffer = b""
                raise ProtocolError(f"message over {MAX_MESSAGE} bytes")
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no whole message in time")
                self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                if self.buffer:
                    self.buffer = b""
                    raise ProtocolError("truncated message (no newline before the end)")
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return decode(line)
