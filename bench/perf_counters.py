"""Instructions retired by one thread, from the kernel's perf counters (Linux perf_event_open).

A host's noise moves a step's seconds by 10-30% (other tenants, clocks, SMT siblings) but barely
moves the instructions a thread retires for the same work, so a profiler's added instructions a
step show costs of 1% that timing cannot resolve. Where the counters are not open to us
(perf_event_paranoid, a VM without a virtual PMU), `open_counter` returns None and says why.

    python bench/perf_counters.py      can this machine count? (prints one line)
"""
from __future__ import annotations

import ctypes
import os
import struct

_SYSCALL = {"x86_64": 298, "aarch64": 241}
_HARDWARE, _INSTRUCTIONS = 0, 1
_EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 5, 1 << 6
_CLOEXEC = 8


class Counter:
    """An open counter of instructions retired by one thread (user space only, kernel too
    where allowed); read() gives the count so far."""

    def __init__(self, fd: int, user_only: bool) -> None:
        self.fd, self.user_only = fd, user_only

    def read(self) -> int:
        return struct.unpack("Q", os.pread(self.fd, 8, 0))[0]

    def close(self) -> None:
        os.close(self.fd)


_why_not: str | None = None


def open_counter(tid: int = 0) -> Counter | None:
    """A counter for thread `tid` (0: the calling thread), or None where none can be opened
    (`why_not()` says why)."""
    global _why_not
    number = _SYSCALL.get(os.uname().machine)
    if number is None:
        _why_not = f"no perf_event_open number known for {os.uname().machine}"
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    for flags in (_EXCLUDE_HV, _EXCLUDE_HV | _EXCLUDE_KERNEL):  # kernel too, else user only
        attr = bytearray(128)
        struct.pack_into("IIQ", attr, 0, _HARDWARE, len(attr), _INSTRUCTIONS)
        struct.pack_into("Q", attr, 40, flags)
        buf = (ctypes.c_char * len(attr)).from_buffer(attr)
        fd = libc.syscall(number, buf, tid, -1, -1, _CLOEXEC)
        if fd >= 0:
            return Counter(fd, user_only=bool(flags & _EXCLUDE_KERNEL))
        err = ctypes.get_errno()
    _why_not = f"perf_event_open failed: {os.strerror(err)} (errno {err})"
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            _why_not += f"; perf_event_paranoid is {f.read().strip()}"
    except OSError:
        pass
    return None


def why_not() -> str | None:
    """Why the last open_counter() returned None."""
    return _why_not


if __name__ == "__main__":
    c = open_counter()
    if c is None:
        print(f"no instruction counter: {why_not()}")
    else:
        a = c.read()
        sum(range(100_000))
        print(f"instruction counter open ({'user space only' if c.user_only else 'user and kernel'}"
              f"): sum(range(100000)) retired {c.read() - a:,} instructions")
