"""Which process of which job writes a profile: rank, world size, local rank, host and pid.

Launchers say so in the environment: torchrun and torch.distributed.launch (RANK, WORLD_SIZE,
LOCAL_RANK), SLURM's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), Open MPI's mpirun
(OMPI_COMM_WORLD_*) and MPICH/Intel MPI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID). The first whose
rank variable is set wins: torchrun under srun sets both, and RANK is the one torch uses.
"""
from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from ..format import JOB_KEYS

LAUNCHERS = (
    # (launcher, rank variable, world size variable, local rank variable)
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
)


@dataclass(slots=True, frozen=True)
class Job:
    """The writing process. `rank` and the sizes are None outside a launcher."""

    host: str
    pid: int
    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    launcher: str | None = None
    script: str | None = None
    """The profiled script's absolute path (the report looks for sources beside it)."""

    @property
    def ranked(self) -> bool:
        """One of several ranks: its files are named NAME.rank<R>.<ext>."""
        return self.rank is not None and (self.world_size is None or self.world_size > 1)

    def fields(self) -> dict:
        """The file's record of it (JOB_KEYS; unknown values left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None and k in JOB_KEYS}


def detect(environ: Mapping[str, str] | None = None) -> Job:
    """This process, with its rank when a launcher started it."""
    env = os.environ if environ is None else environ
    host, pid, script = socket.gethostname(), os.getpid(), _script()
    for launcher, rank_var, size_var, local_var in LAUNCHERS:
        rank = _int(env.get(rank_var))
        if rank is not None:
            return Job(host, pid, rank, _int(env.get(size_var)), _int(env.get(local_var)),
                       launcher, script)
    return Job(host, pid, script=script)


command_script: str | None = None
"""The script `proton SCRIPT.py` runs (set by the command, whose own argv is restored before
it writes)."""


def _script() -> str | None:
    """The running script (`proton train.py`, `python train.py`: sys.argv[0]), if a .py file."""
    if command_script is not None:
        return command_script
    argv0 = sys.argv[0] if sys.argv else ""
    if not argv0.endswith(".py"):
        return None
    path = os.path.abspath(argv0)
    return path if os.path.isfile(path) else None


def alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (under any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, under another user
        return True
    return True


def _int(value: str | None) -> int | None:
    try:
        number = int(value) if value is not None else None
    except ValueError:
        return None  # a launcher variable that is not a number names no rank
    return number if number is None or number >= 0 else None


def ranked_path(path: str, job: Job) -> str:
    """`path` as this rank's file: run1.hatchet -> run1.rank3.hatchet (unchanged outside a
    job of several ranks)."""
    if not job.ranked:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{job.rank}{ext}"


def job_path(path: str, job: Job) -> str:
    """The whole job's file beside a rank's: run1.rank3.hatchet -> run1.hatchet."""
    stem, ext = os.path.splitext(path)
    suffix = f".rank{job.rank}"
    return (stem[:-len(suffix)] if stem.endswith(suffix) else stem) + ext


def subset_path(path: str, ranks: list[int]) -> str:
    """The file of some of a job's ranks merged (a capture of one host's): run1.hatchet ->
    run1.ranks0-7.hatchet."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.ranks{span(ranks)}{ext}"


def span(ranks: list[int]) -> str:
    """0-3,5,7-8."""
    out: list[list[int]] = []
    for r in sorted(set(ranks)):
        if out and out[-1][1] == r - 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def pid_path(path: str, pid: int) -> str:
    """`path` as one process's among others of the same name: run1.hatchet ->
    run1.pid4242.hatchet."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.pid{pid}{ext}"
