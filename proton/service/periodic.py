"""`proton --flush-every SECONDS`: rewrite the live sessions' files on a timer, so a job that is
killed without warning (SIGKILL, the OOM killer) leaves its last snapshot.

The timer fires at the multiples of SECONDS of the wall clock, so the ranks of a job (started
at different times) snapshot together, and each snapshot's number (the multiple) is the key
their merge into the job's file meets under (job_merge): a rank whose clock or timer is off
costs that snapshot's merge, never a hang."""
from __future__ import annotations

import threading
import time

from ..report import warn
from ..runtime.profiler import profiler
from .protocol import leave_signals_to_the_main_thread


def flush_every(seconds: float) -> threading.Thread:
    """Start the timer thread (a daemon: it never keeps the job alive)."""

    def run() -> None:
        leave_signals_to_the_main_thread()
        failed = False
        while not stop.wait(seconds - time.time() % seconds):
            if not profiler.sessions:
                continue
            try:
                profiler.snapshot(merge_key=f"flush/{round(time.time() / seconds)}")
                failed = False
            except Exception as exc:  # say it once, and keep trying
                if not failed:  # a fallback file is the same one each time (writer.write)
                    warn(f"could not write the periodic snapshot: {type(exc).__name__}: {exc}; "
                         "each later snapshot replaces the same file")
                failed = True

    stop = threading.Event()
    thread = threading.Thread(target=run, name="proton-flush", daemon=True)
    thread.stop = stop  # type: ignore[attr-defined]
    thread.start()
    return thread
