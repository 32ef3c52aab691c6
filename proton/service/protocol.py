"""How `proton capture` talks to a listening job: where its endpoint is, and the messages.

A job listens on a Unix socket, `<tmp>/proton-<uid>/<pid>.sock` (`$PROTON_SOCKET_DIR/<pid>.sock`
when set), in a folder only its owner may enter (mode 0700) with a socket only its owner may
open (0600); the job also checks the peer's uid (root may reach anyone's, as with ptrace).
Optionally it also listens on TCP, loopback unless an address is named, and then every request
must carry the job's token.

A message is one line of JSON (an object) of at most MAX_MESSAGE bytes. Requests:
    {"verb": "status"}
    {"verb": "start", "name": str, "context": str, "data": str, "mode": str|null,
     "hook": str|null, "steps": int|null, "duration": seconds|null}
    {"verb": "stop"}                  (on the connection that started the capture)
    {"verb": "snapshot"}
each with "token" over TCP. Every reply has "ok"; a failed one has "error", one line.
"""
from __future__ import annotations

import json
import os
import socket
import stat
import tempfile

LISTEN_ENV = "PROTON_LISTEN"
"""1: listen on the Unix socket; tcp://HOST:PORT (or tcp://PORT, on loopback): also on TCP.
Read by the runtime's entry points (proton.step(), scopes), never at import."""
SOCKET_DIR_ENV = "PROTON_SOCKET_DIR"
"""A private folder to listen in instead of <tmp>/proton-<uid> (tests, per-job /tmp)."""
MAX_MESSAGE = 64 * 1024
VERBS = ("status", "start", "stop", "snapshot")
START_OPTIONS = {"name": str, "context": str, "data": str, "mode": (str, type(None)),
                 "hook": (str, type(None)), "steps": (int, type(None)),
                 "duration": (int, float, type(None))}


class ProtocolError(Exception):
    """A message that is not one: the one-line reason goes back to the peer."""


def listen_asked() -> bool:
    """Whether the environment asks the job to listen (PROTON_LISTEN set, and not 0)."""
    return os.environ.get(LISTEN_ENV, "0") not in ("", "0")


def folder(uid: int | None = None) -> str:
    """The folder of `uid`'s endpoints (this user's by default): $PROTON_SOCKET_DIR when set
    (the job and its capturer must agree on it), else <tmp>/proton-<uid>."""
    chosen = os.environ.get(SOCKET_DIR_ENV)
    if chosen and uid in (None, os.getuid()):
        return os.path.abspath(chosen)
    return os.path.join(tempfile.gettempdir(), f"proton-{os.getuid() if uid is None else uid}")


def socket_path(pid: int, uid: int | None = None) -> str:
    return os.path.join(folder(uid), f"{pid}.sock")


def private_folder() -> str:
    """This user's endpoint folder, made 0700; refuse one that others could write into."""
    path = folder()
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() \
            or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ProtocolError(f"{path} is not a private folder of this user (owner uid "
                            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); remove it")
    return path


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
        steps = message.get("steps")
        if steps is not None and steps < 1:
            raise ProtocolError(f"start: steps={steps} must be at least 1")
        duration = message.get("duration")
        if duration is not None and not 0 < duration < 7 * 24 * 3600:
            raise ProtocolError(f"start: duration={duration} must be a positive number of "
                                "seconds")
    return message


class Lines:
    """Reads one message at a time from a socket, refusing oversized ones."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def read(self) -> dict | None:
        """The next message; None at end of stream. ProtocolError for a bad one (the rest of
        an oversized line is dropped)."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_MESSAGE:
                self.buffer = b""
                raise ProtocolError(f"message over {MAX_MESSAGE} bytes")
            chunk = self.sock.recv(65536)
            if not chunk:
                if self.buffer:
                    self.buffer = b""
                    raise ProtocolError("truncated message (no newline before the end)")
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return decode(line)
