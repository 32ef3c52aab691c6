"""Who may hold a TCP connection to a job's endpoint before it has proved the token.

A client that has not proved the token yet is "pending": it has HANDSHAKE seconds to do so.
Pending connections are bounded per peer address (PER_PEER) and in all (MAX_PENDING); a new
one pushes out the oldest of its peer's (else of all) that sent a wrong token, else the oldest,
so a flood of silent connections or of guesses cannot keep a real client, which sends its
token at once, from being heard.

Every token is checked, in constant time, whoever sends it: a right one is let in at once,
so a guesser sharing an address with the job's owner (every local user is 127.0.0.1) cannot
lock the owner out. A wrong one is answered late: after the waits its peer's earlier wrong
tokens set, doubling from FIRST_WAIT up to MAX_WAIT, while the connection stays pending (so
held answers are bounded too, and a newer connection pushes them out). That slows a guesser
who waits for each answer; one who does not is bounded by the token's strength (tokens.py).
The job's stderr says so at a peer's 1st, 2nd, 4th, 8th... wrong token.
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
BAD_TOKEN = "bad or missing token"


class Gate:
    """The pending TCP connections and the peers' failure records."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[socket.socket, str] = {}  # oldest first
        self._guessed: set[socket.socket] = set()  # pending, their wrong answer held back
        self._failures: dict[str, tuple[int, float]] = {}  # peer -> (count, waits end at)

    def admit(self, conn: socket.socket, peer: str) -> None:
        """`conn` may now try to prove the token (it pushes out an older pending one when
        its peer's, or all, are at their bound)."""
        with self._lock:
            mine = [c for c, p in self._pending.items() if p == peer]
            if len(mine) >= PER_PEER or len(self._pending) >= MAX_PENDING:
                # one that sent a wrong token goes first (its answer comes early), so a real
                # client of the same address (every local user's 127.0.0.1) that has not been
                # read yet outlasts a flood of guesses on a loaded machine
                among = mine if len(mine) >= PER_PEER else list(self._pending)
                out = next((c for c in among if c in self._guessed), among[0])
                del self._pending[out]
                _push_out(out, BAD_ANSWER if out in self._guessed else PUSHED_OUT)
                self._guessed.discard(out)
            self._pending[conn] = peer

    def proved(self, conn: socket.socket) -> None:
        """`conn` sent the right token (its peer's record stays: another user may share the
        address)."""
        with self._lock:
            self._pending.pop(conn, None)

    def failed(self, conn: socket.socket, why: str, guess: bool) -> float:
        """`conn` did not prove the token; for a `guess` (a wrong token, not silence), the
        seconds its answer is held back: until its peer's earlier waits end. It stays
        pending meanwhile; call gone() after."""
        now = time.monotonic()
        with self._lock:
            peer = self._pending.get(conn)
            if peer is None or not guess:
                self._pending.pop(conn, None)
                return 0.0  # pushed out, or silent: the pending bounds take care of it
            count, until = self._failures.pop(peer, (0, 0.0))
            if now > until + MAX_WAIT:
                count, until = 0, now  # quiet for long: forgiven
            count += 1
            wait = min(FIRST_WAIT * 2 ** (count - 1), MAX_WAIT)
            hold = max(0.0, until - now)
            self._failures[peer] = (count, now + hold + wait)
            self._guessed.add(conn)
            while len(self._failures) > MAX_PEERS:
                del self._failures[next(iter(self._failures))]
        if count & (count - 1) == 0:  # 1, 2, 4, 8...: said, but never a flood of lines
            warn(f"capture endpoint: {why} from {peer} ({count} so far); its next wrong token "
                 f"is answered {wait:g} s late (a right one at once)")
        return hold

    def gone(self, conn: socket.socket) -> None:
        with self._lock:
            self._pending.pop(conn, None)
            self._guessed.discard(conn)


PUSHED_OUT = encode({"ok": False, "error": "pushed out by newer connections before it sent "
                     "the token; send it at once"})


BAD_ANSWER = encode({"ok": False, "error": BAD_TOKEN})


def _push_out(conn: socket.socket, answer: bytes) -> None:
    """Tell `conn` why and wake the thread reading it, or holding its answer back (it sees
    the end of the stream), without closing the descriptor under it."""
    try:
        conn.send(answer, socket.MSG_DONTWAIT)
    except OSError:
        pass
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
