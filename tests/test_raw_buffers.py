"""CUPTI's activity buffers (cupti/buffers.py) over the real libcupti, driven as CUPTI drives
them (lend, then hand back filled): the process keeps one set however many sessions it runs,
and a session over lets go of its pipeline."""
from __future__ import annotations

import ctypes
import gc
import glob
import os
import weakref

import pytest

from proton.cupti.buffers import RawBuffers

cupti = pytest.importorskip("cupti")


def libcupti() -> str:
    import nvidia

    found = [p for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "**", "libcupti.so*"),
                                                           recursive=True)]
    if not found:
        pytest.skip("no libcupti beside cupti-python")
    return found[0]


def lend_and_return(raw: RawBuffers, valid: int) -> int:
    """CUPTI asks a buffer, then hands it back holding `valid` bytes; the buffer's address."""
    buffer, size, records = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    # the C callbacks registered with CUPTI, called as CUPTI calls them
    raw._requested(ctypes.pointer(buffer), ctypes.pointer(size), ctypes.pointer(records))
    assert buffer.value and size.value in (1 << 16, 1 << 17)
    raw._completed(None, 0, buffer.value, size.value, valid)
    return buffer.value


class Session:
    """What a session hangs on the buffers: its pipeline's read."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def read(self, buffer: int, valid: int) -> None:
        self.seen.append(valid)


def test_sessions_share_the_processs_buffers_and_let_go_of_their_pipelines():
    path = libcupti()
    first = RawBuffers.shared(path, 1 << 16)
    session = Session()
    first.on_buffer = session.read
    address = lend_and_return(first, 100)
    assert session.seen == [100]
    first.detach()
    lend_and_return(first, 200)  # a late buffer after the session: dropped
    assert session.seen == [100]
    gone = weakref.ref(session)
    del session
    gc.collect()
    assert gone() is None  # nothing of the ended session is kept
    again = RawBuffers.shared(path, 1 << 16)
    assert again is first  # the next session's: the same callbacks, the same buffers
    assert lend_and_return(again, 1) == address  # a handed-back buffer is lent again
    assert RawBuffers.shared(path, 1 << 17) is not first  # another size: its own
