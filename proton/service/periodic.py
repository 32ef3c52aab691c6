"""`proton --flush-every SECONDS`: rewrite the live sessions' files on a timer, so a job that is
killed without warning (SIGKILL, the OOM killer) leaves its last snapshot."""
from __future__ import annotations

import threading

from ..report import warn
from ..runtime.profiler import profiler
from .protocol import leave_signals_to_the_main_thread


def flush_every(seconds: float) -> threading.Thread:
    """Start the timer thread (a daemon: it never keeps the job alive)."""

    def run() -> None:
        leave_signals_to_the_main_thread()
        failed = False
        while not stop.wait(seconds):
            if not profiler.sessions:
                continue
            try:
                profiler.snapshot()
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
