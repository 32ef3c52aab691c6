"""Who may hold a TCP connection to a job's endpoint before it has proved the token.

A client that has not proved the token yet is "pending": it has HANDSHAKE seconds to do so.
Pending connections are bounded per peer address (PER_PEER) and in all (MAX_PENDING); a new
one pushes out the oldest of its peer's, else the oldest of all, so a flood of silent
connections cannot keep a real client, which sends its token at once, from being heard. A
peer that sent a bad token waits, doubling with each one up to MAX_WAIT seconds, before it is
heard again (guessing is slow), and the job's stderr says so at its 1st, 2nd, 4th, 8th...
bad token. Proving the token clears a peer's record.
"""
from __future__ import annotations

import socket
import threading
import time

from ..report import warn
from .protocol import encode

HANDSHAKE = 1.0
"""Seconds a TCP client has to send its first request, with the token."""
MAX_PENDING = 16
PER_PEER = 4
FIRST_WAIT = 0.25
MAX_WAIT = 60.0
MAX_PEERS = 4096
"""Failure records kept at most (the oldest go first): memory stays bounded."""


class Gate:
    """The pending TCP connections and the peers' failure records."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[socket.socket, str] = {}  # oldest first
        self._failures: dict[str, tuple[int, float]] = {}  # peer -> (count, heard again at)

    def admit(self, conn: socket.socket, peer: str) -> str | None:
        """None when `conn` may now try to prove the token, else why not (one line)."""
        now = time.monotonic()
        with self._lock:
            count, until = self._failures.get(peer, (0, 0.0))
            if now < until:
                return (f"{count} bad tokens from {peer}; try again in {until - now:.1f} s "
                        "with the job's token")
            mine = [c for c, p in self._pending.items() if p == peer]
            if len(mine) >= PER_PEER or len(self._pending) >= MAX_PENDING:
                oldest = mine[0] if len(mine) >= PER_PEER else next(iter(self._pending))
                del self._pending[oldest]
                _push_out(oldest)
            self._pending[conn] = peer
        return None

    def proved(self, conn: socket.socket) -> None:
        with self._lock:
            peer = self._pending.pop(conn, None)
            if peer is not None:
                self._failures.pop(peer, None)

    def failed(self, conn: socket.socket, why: str, guess: bool) -> None:
        """`conn` did not prove the token; a `guess` (a bad token, not silence) makes its
        peer wait before it is heard again."""
        with self._lock:
            peer = self._pending.pop(conn, None)
            if peer is None or not guess:
                return  # pushed out, or silent: the pending bounds take care of it
            count = self._failures.pop(peer, (0, 0.0))[0] + 1
            wait = min(FIRST_WAIT * 2 ** (count - 1), MAX_WAIT)
            self._failures[peer] = (count, time.monotonic() + wait)
            while len(self._failures) > MAX_PEERS:
                del self._failures[next(iter(self._failures))]
        if count & (count - 1) == 0:  # 1, 2, 4, 8...: said, but never a flood of lines
            warn(f"capture endpoint: {why} from {peer} ({count} in a row); it is not heard "
                 f"for {wait:g} s")

    def gone(self, conn: socket.socket) -> None:
        with self._lock:
            self._pending.pop(conn, None)


PUSHED_OUT = encode({"ok": False, "error": "pushed out by newer connections before it sent "
                     "the token; send it at once"})


def _push_out(conn: socket.socket) -> None:
    """Tell `conn` why and wake the thread reading it (it sees the end of the stream),
    without closing the descriptor under it."""
    try:
        conn.send(PUSHED_OUT, socket.MSG_DONTWAIT)
    except OSError:
        pass
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
