"""C++ names demangled with bounds on time, memory and length: a name from a stranger's file
may be built to expand exponentially (an 800-byte name nesting back-references took 5.3 GB and
110 s in `__cxa_demangle`, and made a 583 MB page), so the C++ runtime's demangler runs in a
child process:

- the child's address space is capped (CHILD_BYTES): a name whose text outgrows it fails at once;
- each name gets NAME_SECONDS (else the child is killed and started again for the next);
- a demangled text longer than max_length(name) is not used;
- after SPENT_SECONDS of names that failed or ran slow, the rest of the run keeps raw names;
- the text of all names together is bounded by the names asked for (TOTAL_RATIO x their
  length, past TOTAL_FLOOR): 20,000 names of 131 bytes, each within its own bound at 3,560
  characters, took 23 s and made a 140 MB page. Once the text given out reaches that, a name
  stays raw, and is not sent to the child, until enough names come to pay for it
  (`declined` counts them, for the views' notes).

A name the demangler does not take (None) is shown raw. One child per viewer process, started
at the first mangled name; it ends when its stdin closes (the viewer exits).
"""
from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time

CHILD_BYTES = 128 << 20
NAME_SECONDS = 1.0
SPENT_SECONDS = 6.0
MIN_LENGTH = 4096
LENGTH_RATIO = 32
"""Demangled text up to max(MIN_LENGTH, LENGTH_RATIO x the mangled name's length); measured:
torch's kernel names in tests/data demangle to up to 11x their length."""
TOTAL_FLOOR = 4 << 20
TOTAL_RATIO = 8
"""The demangled text given out in all: up to TOTAL_FLOOR characters, and past that
TOTAL_RATIO x the length of the names asked for (torch's names in tests/data: 3x to 7x)."""
MANGLED = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$")
"""The characters of a mangled name (anything else is not one: never sent to the child)."""

_CHILD = r"""
import json, os, resource, subprocess, shutil, sys
try:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard < 0 else min(cap, hard), hard))
except (ImportError, ValueError, OSError):
    pass  # no address-space limit here (macOS): the parent's time limit still holds
try:
    import cxxfilt
    def demangle(name):
        return cxxfilt.demangle(name)
except ImportError:
    tool = shutil.which("c++filt")
    def demangle(name):
        if tool is None:
            return None
        done = subprocess.run([tool, name], capture_output=True, text=True)
        return done.stdout.strip() or None
for line in sys.stdin:
    name, limit = json.loads(line)
    try:
        text = demangle(name)
    except BaseException:  # not a name it knows, or out of memory: kept raw
        text = None
    if text is not None and len(text) > limit:
        text = None
    sys.stdout.write(json.dumps(text) + "\n")
    sys.stdout.flush()
"""


def max_length(name: str) -> int:
    return max(MIN_LENGTH, LENGTH_RATIO * len(name))


class _Worker:
    """The child and the time spent on names that failed or ran slow."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.spent = 0.0
        self.lock = threading.Lock()
        self.pending = b""
        self.balance = float(TOTAL_FLOOR)
        """Characters of demangled text still to give out (TOTAL_RATIO per character asked)."""
        self.declined = 0
        """Names left raw because the balance was spent."""

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-I", "-c", _CHILD, str(CHILD_BYTES)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, close_fds=True)
            self.pending = b""
        return self.proc

    def close(self) -> None:
        """End the child (at exit: it would end when its stdin closes, but quietly now)."""
        with self.lock:
            self._stop()

    def _stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    if pipe is not None:  # both are pipes (Popen's PIPE)
                        pipe.close()
                except OSError:  # a write that could not be flushed to a dead child
                    pass
            self.proc = None

    def ask(self, name: str) -> str | None:
        with self.lock:
            if self.spent >= SPENT_SECONDS:
                return None
            self.balance += TOTAL_RATIO * len(name)
            if self.balance < len(name):  # spent: not even the raw name's length left
                self.declined += 1
                return None
            start = time.monotonic()
            try:
                text = self._ask(name)
            except OSError:  # no child (no fork, no memory): raw names
                self.spent = SPENT_SECONDS
                self._stop()
                return None
            took = time.monotonic() - start
            if text is None or took > 0.05:
                self.spent += took
            if text is not None:
                self.balance -= len(text)
            return text

    def _ask(self, name: str) -> str | None:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps([name, max_length(name)]) + "\n").encode())
        proc.stdin.flush()
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + NAME_SECONDS
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._stop()  # still working: a bomb
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the child died (out of memory in a way it could not catch)
                self._stop()
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        text = json.loads(line)
        return text if isinstance(text, str) and len(text) <= max_length(name) else None


_worker = _Worker()
atexit.register(_worker.close)


def demangle(name: str) -> str | None:
    """The demangled text of the mangled C++ `name`, None when it is not one the demangler
    takes within the bounds above (the caller shows it raw).

    Usage:
        text = demangle("_ZN2at6native6kernelEv") or "_ZN2at6native6kernelEv"
    """
    if not name.startswith("_Z") or not MANGLED.issuperset(name):
        return None
    return _worker.ask(name)


def declined() -> int:
    """How many names this process left raw because the demangled text reached its bound."""
    return _worker.declined


def declined_note(count: int) -> str:
    """The views' note on `count` names left raw by a bound on the demangled text in all."""
    return (f"{count:,} C++ name{'s' * (count != 1)} shown as the file has "
            f"{'them' if count != 1 else 'it'} (mangled): the demangled names together reached "
            f"their bound, {TOTAL_RATIO}x the names' own length")

