"""The calling thread's user-space CPU cycles and instructions, from Linux perf counters
(perf_event_open through ctypes): a cost measure the host's speed does not move, where wall
time between processes varied 1.5x on the GPU host. None where the kernel or the VM gives no
counters (perf_event_paranoid > 2, no PMU passed through)."""
import ctypes
import os
import struct

_SYSCALL_PERF_EVENT_OPEN = 298  # x86_64
_HARDWARE = 0
_CYCLES, _INSTRUCTIONS = 0, 1
_DISABLED, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
_ATTR_SIZE = 128  # a prefix of struct perf_event_attr that every kernel since 5.x takes
_IOC_ENABLE = 0x2400

_libc = ctypes.CDLL(None, use_errno=True)


def _open(config: int) -> int:
    attr = bytearray(_ATTR_SIZE)
    # type, size, config, sample_period, sample_type, read_format, flags
    struct.pack_into("IIQQQQQ", attr, 0, _HARDWARE, _ATTR_SIZE, config, 0, 0, 0,
                     _EXCLUDE_KERNEL | _EXCLUDE_HV)
    buf = (ctypes.c_char * _ATTR_SIZE).from_buffer(attr)
    # pid 0, cpu -1: this thread on any CPU; no group; no flags
    return _libc.syscall(_SYSCALL_PERF_EVENT_OPEN, buf, 0, -1, -1, 0)


class ThreadCounters:
    """Cycles and instructions of the thread that made it, counting from its creation."""

    def __init__(self) -> None:
        self.fds = [_open(_CYCLES), _open(_INSTRUCTIONS)]
        if min(self.fds) < 0:
            err = ctypes.get_errno()
            self.close()
            raise OSError(err, f"perf_event_open: {os.strerror(err)}")

    def read(self) -> tuple[int, int]:
        """(cycles, instructions) so far."""
        return tuple(struct.unpack("Q", os.read(fd, 8))[0] for fd in self.fds)

    def close(self) -> None:
        for fd in self.fds:
            if fd >= 0:
                os.close(fd)
        self.fds = []


def thread_counters() -> ThreadCounters | None:
    """This thread's counters, or None where the host gives none."""
    try:
        return ThreadCounters()
    except OSError:
        return None


if __name__ == "__main__":
    c = thread_counters()
    if c is None:
        print("no hardware counters here:", os.strerror(ctypes.get_errno()))
    else:
        sum(range(10**6))
        print("cycles, instructions for sum(range(1e6)):", c.read())
