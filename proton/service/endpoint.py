"""A job's control endpoint: `proton capture` starts and stops sessions in it from outside.

`listen()` (or `proton --listen`, or PROTON_LISTEN=1 in the environment) opens it: a thread
waits on a Unix socket (see protocol.py) and nothing is recorded, and CUPTI not touched, until a
capture asks. A capture runs as if the script had called start() and finalize() itself: for a
duration (the client says when to stop), or for N iterations from the next `proton.step()`.
Whatever a client sends, the job runs on: a bad request gets a one-line error, a client that
goes away mid-capture gets its capture written anyway. A capture writes only where its
capturer could: a Unix-socket client of the job's user names a path it resolved in its own
folder; root, capturing another user's job, a file name, written in a folder of the job's own
for root to take (it learns nothing of root's folder); a TCP client a file name inside the
folder the job's owner chose (PROTON_CAPTURE_DIR, else the job's folder); and it never
replaces a file this job did not write.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import os
import select
import socket
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import cast

from .. import api, report, settings
from ..data import place
from ..data.job import detect, ranked_path, span
from ..errors import ProtonError
from ..options import parse_options
from ..report import warn
from ..runtime.profiler import profiler
from . import tokens
from .gate import BAD_TOKEN, HANDSHAKE, Gate
from .protocol import (LISTEN_ENV, MAX_MESSAGE, Lines, ProtocolError, check_request, encode,
                       leave_signals_to_the_main_thread, listen_asked, private_folder)

CAPTURE_DIR_ENV = "PROTON_CAPTURE_DIR"
"""The folder TCP captures write in (file names only, confined to it); default: the job's
current folder when it starts listening."""
written: list[str] = []
"""The files this job's captures wrote, in order (what the job says when it ends)."""
MAX_CONNECTIONS = 16
"""Connections served at once per listening socket; more are refused at once."""
IDLE_TIMEOUT = 600.0
"""Seconds a client may stay silent between requests."""
STEPS_TIMEOUT = 120.0
"""Seconds a --steps capture waits for its steps when the request does not say."""
GRACE = settings.value("PROTON_CAPTURE_GRACE")
"""Seconds past a capture's asked-for duration after which the job stops it by itself
(PROTON_CAPTURE_GRACE sets it)."""
PHASE_TIMEOUT = settings.value("PROTON_CAPTURE_PHASE_TIMEOUT")
"""Seconds a capture's start or stop may take before it is abandoned (the write: three times
that); PROTON_CAPTURE_PHASE_TIMEOUT sets it."""


class CaptureAbandoned(ProtonError):
    """A capture's phase outran its deadline: the capture is given up, the job runs on."""


def run_phase(name: str, work, timeout: float, late=None):
    """work() on a thread of its own, waited for `timeout` seconds; its result or exception.
    Past the deadline the capture is abandoned (its endpoint thread is free again) and
    `late(result)`, if given, tidies up should the work still finish.

    Raises:
        CaptureAbandoned: the work did not finish in time (one line, also on the job's stderr).
    """
    out: dict = {}
    done = threading.Event()
    lock = threading.Lock()
    heard = report.heard_on_this_thread()

    def run() -> None:
        leave_signals_to_the_main_thread()
        report.hear_on_this_thread(heard)  # what the phase says is its capture's alone
        try:
            out["value"] = work()
        except BaseException as exc:
            out["error"] = exc
        with lock:
            done.set()
            abandoned = out.get("abandoned", False)
        if abandoned and late is not None and "error" not in out:
            try:
                late(out["value"])
            except Exception as exc:
                warn(f"tidying up after an abandoned capture: {type(exc).__name__}: {exc}")

    threading.Thread(target=run, name=f"proton-capture-{name}", daemon=True).start()
    done.wait(timeout)
    with lock:
        if not done.is_set():
            out["abandoned"] = True
            message = (f"the capture was abandoned: its {name} took over {timeout:g} s "
                       "(PROTON_CAPTURE_PHASE_TIMEOUT); the job runs on")
            warn(message)
            raise CaptureAbandoned(message)
    if "error" in out:
        raise out["error"]
    return out["value"]


class _Capture:
    """A capture of N iterations, armed until the next step() starts it."""

    def __init__(self, options: dict, steps: int,
                 merge: tuple[str, list[int]] | None = None) -> None:
        self.options = options
        self.merge = merge
        self.left = steps
        self.sid: int | None = None
        self.started: float | None = None
        self.error: str | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()

    def boundary(self) -> None:
        """An iteration boundary, on the script's thread: the first starts the session, the
        N+1st ends it (the file is written on the endpoint's thread)."""
        global _armed
        with self.lock:
            if self.done.is_set():
                return
            if self.sid is None:
                try:
                    self.sid = api.start(**self.options)
                    if (session := profiler.sessions.get(cast(int, self.sid))) is not None:
                        session.keep_others = True
                        session.merge = self.merge
                except Exception as exc:  # the script must not see the capture's failure
                    self.error = f"{type(exc).__name__}: {exc}"
                    _armed = None
                    self.done.set()
                    return
                self.started = time.time()
                return
            self.left -= 1
            if self.left == 0:
                self._end()

    def _end(self) -> None:
        """Stop recording and let the endpoint write the file; never raises into the script
        (the script may have finalized every session itself)."""
        global _armed
        if _armed is self:
            _armed = None
        try:
            if self.sid is not None:
                api.deactivate(self.sid)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        self.done.set()

    def cancel(self) -> None:
        with self.lock:
            if not self.done.is_set():
                self._end()


_armed: _Capture | None = None
steps_seen = 0
"""proton.step() calls so far."""
_listen_pending = listen_asked()
"""PROTON_LISTEN is set: the first step() opens the endpoint (see listen_from_environment)."""


def step() -> None:
    """Mark an iteration boundary (call it once per training step or served batch), so that
    `proton capture --steps N` records exactly N iterations, from one boundary to the N-th
    after it. Costs a counter increment when no capture waits for it. With PROTON_LISTEN=1
    the first call opens the capture endpoint.

    Usage:
        for batch in loader:
            proton.step()
            train_step(batch)
    """
    global steps_seen, _listen_pending
    steps_seen += 1
    if _listen_pending:
        _listen_pending = False
        listen_from_environment()
    capture = _armed
    if capture is not None:
        capture.boundary()


@dataclass(slots=True)
class Peer:
    """Who is at the other end of a connection, which decides where its captures write."""

    tcp: bool
    other_user: bool = False
    """Root, capturing a job of another user: it names a file only (see _capture_name)."""
    outbox: str | None = None
    """The job's folder for that user's captures (made at the first)."""
    handed: list[str] = field(default_factory=list)
    """Files there whose paths the capturer was sent: it has taken them by the time it hangs
    up (a capture whose capturer went away stays, and the job's stderr names it)."""

    def tidy(self) -> None:
        """The connection ended: the files the capturer took are removed, and the folder
        once empty."""
        for path in self.handed:
            if os.path.dirname(path) == self.outbox:
                with contextlib.suppress(OSError):
                    os.remove(path)
                    written.remove(path)  # the capturer's now, not among the job's
        if self.outbox is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self.outbox)


class Endpoint:
    """The job's listening sockets and the threads that serve them."""

    def __init__(self, tcp: tuple[str, int] | None = None, token: str | None = None) -> None:
        if tcp is not None and not token:
            raise ProtonError(f"a TCP endpoint needs a token: set {tokens.TOKEN_ENV} or give "
                              f"--token-file FILE ({tokens.MAKE_ONE})")
        self._digest = tokens.digest(token) if token else None
        folder, why = private_folder()
        if why:
            warn(f"{why}: listening in {folder} instead (`proton ps` and `proton capture` "
                 "look there too)")
        self.path = os.path.join(folder, f"{os.getpid()}.sock")
        self.capture_dir = os.path.realpath(os.environ.get(CAPTURE_DIR_ENV) or os.getcwd())
        """Where TCP captures write."""
        self.tcp_address: tuple[str, int] | None = None
        self.busy = threading.Lock()
        """Held while a capture runs: one at a time."""
        self.state = "idle"
        self.command = " ".join([os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]])[:200]
        self._sockets: list[socket.socket] = []
        self._gate = Gate()
        self._owner = os.getpid()
        atexit.register(self.close)
        self._open_unix()
        if tcp is not None:
            try:
                self._open_tcp(tcp)
            except BaseException:
                self.close()  # not half open: no Unix socket left listening either
                raise

    def _open_unix(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)  # our pid's: a stale socket of an earlier process
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is made 0600, never briefly wider
        try:
            sock.bind(self.path)
            sock.listen(16)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old)
        self._serve(sock, tcp=False)

    def _open_tcp(self, address: tuple[str, int]) -> None:
        sock = socket.create_server(address, reuse_port=False)
        self.tcp_address = sock.getsockname()[:2]
        self._serve(sock, tcp=True)
        warn(f"listening for captures on tcp {self.tcp_address[0]}:{self.tcp_address[1]} "
             "(requests need the token)")

    def _serve(self, sock: socket.socket, tcp: bool) -> None:
        self._sockets.append(sock)
        threading.Thread(target=self._accept, args=(sock, tcp), name="proton-endpoint",
                         daemon=True).start()

    def close(self) -> None:
        if os.getpid() != self._owner:
            return  # a forked child: the socket is its parent's
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass
        self._sockets = []
        try:
            os.remove(self.path)
        except OSError:
            pass

    def _accept(self, sock: socket.socket, tcp: bool) -> None:
        leave_signals_to_the_main_thread()  # the connections' threads inherit it
        report.hear_on_this_thread(None)  # nothing said here is any capture's
        slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        pause, said = 0.01, set()
        while True:
            try:
                conn, address = sock.accept()
            except OSError as exc:
                if sock.fileno() < 0 or exc.errno in (errno.EBADF, errno.EINVAL):
                    return  # closed
                # out of descriptors or memory (EMFILE, ENFILE, ENOBUFS), or a handshake
                # aborted: the endpoint waits and tries again, it never ends for it
                if exc.errno not in said:
                    said.add(exc.errno)
                    warn(f"capture endpoint: cannot accept a connection ({exc.strerror or exc}); "
                         "retrying")
                time.sleep(pause)
                pause = min(2 * pause, 1.0)
                continue
            pause = 0.01
            if tcp:  # a slot once it proved the token; until then the gate bounds it
                self._gate.admit(conn, str(address[0]))
                # a peer that vanished (no FIN) is noticed, not waited on for ever
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            elif not slots.acquire(blocking=False):
                _refuse(conn, f"too many connections to this job's endpoint ({MAX_CONNECTIONS} "
                        "at once); try again later")
                continue
            try:
                threading.Thread(target=self._connection, args=(conn, tcp, slots), daemon=True,
                                 name="proton-capture").start()
            except RuntimeError:  # no thread to be had now
                self._gate.gone(conn) if tcp else slots.release()
                _refuse(conn, "the job cannot serve a connection now; try again later")

    def _connection(self, conn: socket.socket, tcp: bool, slots: threading.Semaphore) -> None:
        report.hear_on_this_thread(None)  # a bad request here is told to its sender alone
        held = not tcp
        peer = Peer(tcp)
        with conn:
            try:
                if not tcp:
                    uid = _peer_uid(conn)
                    if not uid_allowed(uid):
                        conn.sendall(encode({"ok": False, "error": "permission denied: only "
                                             "this job's user (or root) may capture it"}))
                        return
                    peer.other_user = uid != os.getuid()
                lines = Lines(conn)
                first = self._handshake(conn, lines) if tcp else None
                if tcp:
                    if first is None:
                        return
                    held = slots.acquire(blocking=False)
                    if not held:
                        _send(conn, {"ok": False, "error": "too many connections to this job's "
                                     f"endpoint ({MAX_CONNECTIONS} at once); try again later"})
                        return
                self._requests(conn, lines, peer, first)
            except OSError:
                pass  # the client went away; nothing of it is kept
            except Exception as exc:  # a bug here must not reach the job
                warn(f"capture endpoint: {type(exc).__name__}: {exc}")
                _send(conn, {"ok": False, "error": "the job could not serve this request "
                             f"({type(exc).__name__}); see its stderr"})
            finally:
                if tcp:
                    self._gate.gone(conn)
                if held:
                    slots.release()
                peer.tidy()

    def _handshake(self, conn: socket.socket, lines: Lines) -> dict | None:
        """A TCP client's first request, if it carries the token within HANDSHAKE seconds;
        else None, the client told why (a wrong token late: gate.py)."""
        try:
            message = lines.read(time.monotonic() + HANDSHAKE)
        except TimeoutError:
            why = f"no request with the token within {HANDSHAKE:g} s"
        except ProtocolError as exc:
            why = str(exc)
        else:
            if message is None:
                self._gate.failed(conn, "closed without the token", guess=False)
                return None
            if self._token_ok(message.get("token")):
                self._gate.proved(conn)
                return message
            why = BAD_TOKEN
        _hold(conn, self._gate.failed(conn, why, guess=why == BAD_TOKEN))
        _send(conn, {"ok": False, "error": why})
        return None

    def _requests(self, conn: socket.socket, lines: Lines, peer: Peer,
                  first: dict | None = None) -> None:
        """Serve requests until the client goes; `first`: one already read (and proved)."""
        conn.settimeout(IDLE_TIMEOUT)  # an idle client is dropped, not kept forever
        while True:
            try:
                message, first = (first, None) if first is not None else (lines.read(), None)
                if message is None:
                    return
                if peer.tcp and not self._token_ok(message.get("token")):
                    conn.sendall(encode({"ok": False, "error": BAD_TOKEN}))
                    return
                verb = check_request(message)["verb"]
            except ProtocolError as exc:
                conn.sendall(encode({"ok": False, "error": str(exc)}))
                continue
            except TimeoutError:
                _send(conn, {"ok": False, "error": "idle too long"})
                return
            if verb == "status":
                conn.sendall(encode({"ok": True, **self.status()}))
            elif verb == "snapshot":
                conn.sendall(encode(_snapshot()))
            elif verb == "stop":
                conn.sendall(encode({"ok": False, "error": "no capture was started on this "
                                     "connection"}))
            else:
                self._capture(conn, lines, message, peer)

    def _token_ok(self, token) -> bool:
        return isinstance(token, str) and tokens.matches(token, cast(bytes, self._digest))

    def status(self) -> dict:
        job = detect().fields()
        return {"pid": os.getpid(), "command": self.command, "state": self.state,
                "steps": steps_seen,
                "sessions": [s.path for s in list(profiler.sessions.values())],
                **{k: job[k] for k in ("rank", "world_size", "local_rank", "host") if k in job}}

    def _capture(self, conn: socket.socket, lines: Lines, request: dict, peer: Peer) -> None:
        if not self.busy.acquire(blocking=False):
            conn.sendall(encode({"ok": False, "error": "another capture is running in this "
                                 "job; wait for it to end"}))
            return
        heard: list[str] = []  # what the job says during this capture goes back with the reply
        try:
            try:
                options = self._capture_options(request, peer)
                merge = _merge_of(request)
            except ProtonError as exc:
                reply: dict = {"ok": False, "error": str(exc)}
            else:
                report.heard = heard
                report.hear_on_this_thread(heard)
                if request.get("steps"):
                    reply = self._capture_steps(conn, lines, options, request["steps"],
                                                request.get("timeout") or STEPS_TIMEOUT, merge)
                else:
                    reply = self._capture_until_stop(conn, lines, options,
                                                     request.get("duration"), merge)
        finally:
            report.heard = None
            report.hear_on_this_thread(None)
            self.state = "idle"
            self.busy.release()  # before the reply: a capture right after this one may start
        if _send(conn, {**reply, "warnings": heard}) and peer.outbox is not None:
            peer.handed += reply.get("paths", [])  # the capturer takes them from here

    def _capture_options(self, request: dict, peer: Peer) -> dict:
        """start()'s options for the capture `request` asks, its file's path checked.

        Raises:
            ProtonError: one line, for the capturer.
        """
        if profiler.sessions:
            paths = ", ".join(s.path for s in list(profiler.sessions.values()))
            raise ProtonError(f"a session is already recording ({paths}); capture --snapshot "
                              "writes it as it stands")
        options = {k: request[k] for k in ("context", "data", "mode", "hook") if k in request}
        options["name"] = self._capture_name(request.get("name"), peer)
        target = ranked_path(parse_options(**options).path, detect())
        if os.path.lexists(target) and not place.wrote(target):
            raise ProtonError(f"{target} exists and this job did not write it; give another "
                              "name or remove it")
        return options

    def _capture_name(self, name, peer: Peer) -> str:
        """The capture's profile name as a path: over TCP a file name inside capture_dir;
        from another user (root) a file name inside a folder of the job's own, from which the
        capturer takes the file (it tells the job nothing of its own folder); from the job's
        user the absolute path it resolved in its own folder."""
        if peer.tcp or peer.other_user:
            name = "capture" if name is None else name
            if not name or "/" in name or "\0" in name or name in (".", ".."):
                where = (f"which the job writes in {self.capture_dir} ({CAPTURE_DIR_ENV})"
                         if peer.tcp else "which the job writes in a folder of its own for "
                         "the capturer to take")
                raise ProtonError(f"name {name!r:.80}: "
                                  f"{'over TCP' if peer.tcp else 'from another user'} a capture "
                                  f"names a file, {where}")
            if peer.tcp:
                return os.path.join(self.capture_dir, name)
            if peer.outbox is None:  # private: the job's socket folder is
                peer.outbox = tempfile.mkdtemp(prefix="captures-", dir=os.path.dirname(self.path))
            return os.path.join(peer.outbox, name)
        if not isinstance(name, str) or not os.path.isabs(name) or "\0" in name \
                or ".." in name.split(os.sep):
            raise ProtonError(f"name {name!r:.80}: a capture names an absolute path without '..' "
                              "(proton capture resolves -n in its own folder)")
        return name

    def _capture_until_stop(self, conn, lines: Lines, options: dict,
                            duration: float | None = None,
                            merge: tuple[str, list[int]] | None = None) -> dict:
        """Record until the client says stop; with the `duration` it asked for, at most that
        plus GRACE seconds, so a client that vanished without a word cannot hold it open.
        Returns the final reply."""
        def discard_late(late_sid: int | None) -> None:
            if late_sid is not None:
                api.discard(late_sid)

        try:
            sid = run_phase("start", lambda: api.start(**options), PHASE_TIMEOUT,
                            late=discard_late)
        except CaptureAbandoned as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        if sid is None:
            return {"ok": False, "error": "profiling is disabled in this job "
                    "(TRITON_PROTON_DISABLE is set)"}
        self.state = "capturing"
        session = profiler.sessions.get(sid)
        if session is not None:
            session.keep_others = True
            session.merge = merge
        sent = _send(conn, {"ok": True, "started": time.time(),
                            "path": session.path if session else ""})
        # a client gone before it heard the start still gets its file written
        limit = time.monotonic() + duration + GRACE if duration else None
        gone = not sent or _wait_for_stop(
            conn, lines, lambda: limit is not None and time.monotonic() > limit)
        return self._finish(sid, gone, started=None)

    def _capture_steps(self, conn, lines: Lines, options: dict, steps: int,
                       timeout: float, merge: tuple[str, list[int]] | None = None) -> dict:
        """Record `steps` iterations; should they not come within `timeout` plus GRACE
        seconds and the client say nothing (it fell silent, or vanished without a FIN), the
        job stops the capture itself and writes what it has, so later captures can run.
        Returns the final reply."""
        global _armed
        capture = _Capture(options, steps, merge)
        _armed = capture
        self.state = f"waiting for proton.step() ({steps} steps)"
        # where it will write, so that a client whose job ends before the last step can say
        sent = _send(conn, {"ok": True, "armed": steps,
                            "path": ranked_path(parse_options(**options).path, detect())})
        limit = time.monotonic() + timeout + GRACE
        gone = not sent or _wait_for_stop(
            conn, lines, lambda: capture.done.is_set() or time.monotonic() > limit)
        if not capture.done.is_set() and time.monotonic() > limit:
            warn(f"the capture's {steps} steps did not come in {timeout + GRACE:g} s and its "
                 "client said nothing; the job stops it and writes what it has")
        if not capture.done.is_set():  # stopped by the client (or it went away, or fell silent)
            try:
                run_phase("stop", capture.cancel, PHASE_TIMEOUT)
            except CaptureAbandoned as exc:
                return {"ok": False, "error": str(exc)}
        if capture.error:
            return {"ok": False, "error": f"the capture could not start: {capture.error}"}
        if capture.sid is None:
            return {"ok": False, "error": "no proton.step() came: the script marks no "
                    f"iteration boundary (it called proton.step() {steps_seen} times so "
                    "far); use --duration, or call proton.step() once per iteration"}
        return self._finish(capture.sid, gone, capture.started, partial=capture.left > 0)

    def _finish(self, sid: int, gone: bool, started: float | None,
                partial: bool = False) -> dict:
        """Write the capture's file; the reply that says where (or warn, when the client
        went away)."""
        try:
            paths = run_phase("write", lambda: api.write_profiles(sid), 3 * PHASE_TIMEOUT,
                              late=lambda paths: warn(f"the abandoned capture wrote "
                                                      f"{', '.join(paths)} after all"))
        except ProtonError as exc:
            return {"ok": False, "error": str(exc)}
        written.extend(paths)
        if gone:
            warn(f"the capture's client went away; wrote {', '.join(paths)}")
        merged = {p: span(profiler.merged[p]) for p in paths if p in profiler.merged}
        return {"ok": True, "paths": paths, "started": started, "partial": partial,
                "merged": merged}


def _merge_of(request: dict) -> tuple[str, list[int]] | None:
    """A capture of several ranks of a job: the key their merge meets under (the capture's
    id) and the ranks captured, the only ones it waits for (check_request checked the types)."""
    merge = request.get("merge")
    if not merge:
        return None
    return f"capture/{merge['id']}", sorted(set(merge["ranks"]))


def _wait_for_stop(conn: socket.socket, lines: Lines, finished) -> bool:
    """Until `finished()` or the client says stop (or goes away: then True)."""
    while not finished():
        if not lines.buffer:
            ready, _, _ = select.select([conn], [], [], 0.05)
            if not ready:
                continue
        try:
            message = lines.read()
        except ProtocolError as exc:
            _send(conn, {"ok": False, "error": f"{exc}; send stop to end the capture"})
            continue
        except OSError:
            return True
        if message is None:
            return True
        if message.get("verb") == "stop":
            return False
        _send(conn, {"ok": False, "error": "a capture is running on this connection; only "
                     "stop is accepted"})
    return False


def _hold(conn: socket.socket, seconds: float) -> None:
    """Wait `seconds` before answering `conn`, or less should it be pushed out (gate.py) or
    hang up; what it sends meanwhile is dropped, so talking does not hasten the answer."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([conn], [], [], left)
        if ready:
            try:
                if not conn.recv(MAX_MESSAGE):
                    return
            except OSError:
                return


def _refuse(conn: socket.socket, error: str) -> None:
    """One line to a connection not served, then close it; never blocks the accept loop."""
    with conn:
        try:
            conn.setblocking(False)
            conn.send(encode({"ok": False, "error": error}))
            conn.recv(MAX_MESSAGE)  # unread input would make close() reset the line away
        except OSError:
            pass


def _send(conn: socket.socket, message: dict) -> bool:
    """Whether the message went out (the client may be gone)."""
    try:
        conn.sendall(encode(message))
    except OSError:
        return False
    return True


def _snapshot() -> dict:
    if not profiler.sessions:
        return {"ok": False, "error": "nothing is recording in this job (a --listen job records "
                "only during a capture)"}
    try:
        return {"ok": True, "paths": profiler.snapshot()}
    except ProtonError as exc:
        return {"ok": False, "error": str(exc)}


def _peer_uid(conn: socket.socket) -> int:
    """The user the process at the other end of a Unix socket runs as."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def uid_allowed(uid: int, own: int | None = None) -> bool:
    return uid in (os.getuid() if own is None else own, 0)


_endpoint: Endpoint | None = None
_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) inherits the endpoint but not its threads: it
    closes its copies of the sockets (the parent's file and listening stay), forgets an armed
    capture (its proton.step() must not start one), and serves nothing unless it listens."""
    global _endpoint, _armed, _lock
    if _endpoint is not None:
        for sock in _endpoint._sockets:
            sock.close()
        _endpoint._sockets = []
    _endpoint, _armed, _lock = None, None, threading.Lock()
    report.heard = None  # a capture's, in the parent


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


def listen(tcp: str | None = None, token: str | None = None) -> str:
    """Open this process's capture endpoint (once; later calls return the same) and return its
    socket's path. `tcp`: also listen on TCP, "PORT" (loopback) or "HOST:PORT" (port 0 picks
    one), with `token` (default: PROTON_TOKEN; at least 128 bits) required in every request.

    Usage:
        proton.listen()          # then, from a shell: proton capture --all --duration 5
    """
    global _endpoint
    with _lock:
        if _endpoint is None:
            address = parse_tcp(tcp) if tcp else None
            if address is not None:
                token = tokens.check(token, "listen(token=...)") if token else tokens.find(None)
            _endpoint = Endpoint(address, token)
        return _endpoint.path


def parse_tcp(spec: str) -> tuple[str, int]:
    """"PORT" or "HOST:PORT" (tcp:// allowed) -> (host, port); loopback by default."""
    spec = spec.removeprefix("tcp://")
    host, _, port = spec.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ProtonError(f"tcp endpoint {spec!r:.80} is not PORT or HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise ProtonError(f"tcp endpoint {spec!r:.80}: port {str(number)[:20]} is not 0 to 65535")
    return host or "127.0.0.1", number


_from_environment_tried = False


def listen_from_environment() -> None:
    """PROTON_LISTEN=1 (or tcp://HOST:PORT) opens the endpoint (for launchers that cannot
    change the command line); called by the first proton.step() or scope, never at import.
    Tried once per process, so a failure is said once."""
    global _from_environment_tried
    if _from_environment_tried:
        return
    _from_environment_tried = True
    if listen_asked():
        settings.check()  # the job starts here: a bad setting said now, its default used
        value = os.environ[LISTEN_ENV]
        try:
            listen(value if value.startswith("tcp") else None)
        except (ProtonError, OSError) as exc:
            warn(f"{LISTEN_ENV}={value}: cannot listen for captures: {exc}")
