"""Run a gloo job's ranks as forks of one process that imported torch.distributed once.

    python forked_ranks.py SIZE OUTDIR SCRIPT [ARG ...]
    python forked_ranks.py SIZE OUTDIR -m MODULE [ARG ...]   (as `python -m MODULE ARG ...`)

Each rank is a child forked after the import (as torch.multiprocessing's fork start method
makes them): RANK, WORLD_SIZE and LOCAL_RANK set, its stdout and stderr in OUTDIR/rank<R>.out,
SCRIPT (or MODULE) run as __main__ with ARGs, its end the interpreter's usual one (exit handlers, buffers
flushed). The launcher prints `R CODE` as each rank ends and exits when all have.

Why: each fresh `python rank.py` spent ~1.9 CPU s importing torch (measured on the 2-core CI
machine), most of a small test job's cost; a fork shares the one import. Proton is not
imported before the fork: each rank starts its own profiler, as in a job of fresh processes.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback


def _run_rank(rank: int, size: int, outdir: str, run: list[str]) -> None:
    """In the forked child: become rank `rank` and run the script; never returns."""
    fd = os.open(os.path.join(outdir, f"rank{rank}.out"),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # the launcher's pipe is no longer held: a hung rank does not keep it open
    os.close(fd)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank))
    try:
        if run[0] == "-m":
            sys.argv = [run[1], *run[2:]]
            runpy.run_module(run[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = run
            runpy.run_path(run[0], run_name="__main__")
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - printed as an uncaught exception would be
        traceback.print_exc()
        sys.exit(1)
    sys.exit(0)


def main() -> None:
    size, outdir, run = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    import torch.distributed  # noqa: F401 - once, for every rank

    ranks = {}
    for rank in range(size):
        pid = os.fork()
        if pid == 0:
            _run_rank(rank, size, outdir, run)
        ranks[pid] = rank
    while ranks:
        pid, status = os.wait()
        print(ranks.pop(pid), os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    main()
