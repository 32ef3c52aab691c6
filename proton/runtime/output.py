"""A session's file: its document (a tree or a trace, as its parts complete it), and where it
goes: its own file, its phases' part files, or a job's file merged over its ranks (job_merge).

Runs under the profiler's lock (finalize, snapshot, advance_phase), but for the merges of a
snapshot or of the ranks before their group ends, which wait for the other ranks outside it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Iterator, Protocol, cast

from ..data import chrome_trace, job, writer
from ..data.document import build as build_document
from ..errors import ProfileWriteError
from ..format import LAUNCH_CONFIGS, LAUNCH_METRICS
from ..report import warn
from . import sass
from .session import Phase, Session


class Profiler(Protocol):
    """The profiler as its files see it (runtime/profiler.Profiler)."""

    sessions: dict[int, Session]
    collector: Any
    router: Any
    parts: Any
    merged: dict[str, list[int]]
    """A job file this process wrote -> the ranks merged into it (a capture says which)."""
    _merges: dict[str, int]
    """A job file's path -> how many times this process merged it (job_merge's keys)."""
    _snapshot_unmerged: bool
    """A snapshot's job file could not be merged (said once)."""


def merge_snapshot(prof: Profiler, session: Session, doc: list, key: str) -> list[str]:
    """A periodic snapshot's job file (rank 0 writes it); nothing, said once, when the
    ranks did not all come: each rank's own snapshot file was written anyway."""
    from . import job_merge

    if job_merge.rank_files() == "ranks" or job_merge.group_ready() is not None:
        return []
    who = cast(job.Job, session.job)
    target = job.job_path(session.path, who)
    ok, said = job_merge.merge(
        writer.plain(doc), cast(int, who.rank),
        # the session's last write (finalize's merge) is not replaced by a late snapshot
        lambda d: "" if session.closed else writer.write(d, target, since=session.began,
                                                         keep=session.keep_others),
        key=f"{key}/{os.path.basename(target)}")
    if not ok and not prof._snapshot_unmerged:
        prof._snapshot_unmerged = True
        warn(f"rank {who.rank}: a periodic snapshot of the job's profile was not merged "
             f"({said}); each rank's snapshot file is written (said once)")
    return [said] if ok and said else []


def write_parts(prof: Profiler, s: Session, devices: dict, final: bool = False) -> list[str]:
    """Write `s`'s finished phases (and the current one when `final`) to their part files,
    each once its records are in, and let them go. A part that cannot be written where
    asked goes to the temporary folder (its error is raised after the others are written,
    and only when `final`: a serving loop's advance_phase gets a warning)."""
    if prof.collector is not None:
        prof.collector.flush()
        prof.parts.buffered()
    phases = sorted(s.earlier) + ([s.phase] if final else [])
    stem, _ = os.path.splitext(s.path)
    written, failed = [], []
    for p in phases:
        data = s.data_of(p)
        if data is None:
            continue
        path = f"{stem}.part_{p}.{s.flush}"
        try:
            written.append(writer.write(document(prof, s, data, devices), path,
                                        since=s.began, encoding="msgpack"
                                        if str(s.flush).endswith("msgpack") else "json",
                                        keep=s.keep_others))
        except ProfileWriteError as exc:
            failed.append(str(exc))
        s.clear(p)
    if failed and final:
        raise ProfileWriteError("; ".join(failed))
    for message in failed:
        warn(message)
    return written

def document(prof: Profiler, s: Session, data, devices: dict):
    """The file's document of one phase's data (Session.data_of) of `s`."""
    who = s.job.fields() if s.job else None
    if data is None:
        data = Phase({}, [], [], [])
    args = prof.parts.build_args(s)
    if s.data == "trace":  # a trace of kernels' scopes alone (only_kernels): no kernels
        if s.only_kernels is not None:
            return chrome_trace.build_trace([], [], who, args.get("spans", []))
        return chrome_trace.build_trace(data.events, data.spans, who, waits=data.waits)
    doc = build_document(data.nodes, devices, args.get("notes", {}), who,
                       own_metrics(prof, s, data.nodes), timelines=args.get("timelines", {}))
    prof.parts.document(s, doc, data.nodes)
    return doc

def write(prof: Profiler, session: Session, devices: dict, output_format: str = "") -> list[str]:
    """Close `session` and write its file (or its last part files); return the paths."""
    prof.parts.finish(session, list(prof.sessions.values()), devices)
    if session.flush:
        written = write_parts(prof, session, devices, final=True)
        with session.lock:
            session.closed = True
        return written
    with session.lock:
        session.closed = True
    now = Phase(session.nodes, session.events, session.spans, session.waits)
    doc = document(prof, session, now, devices)
    path, encoding = session.path, "json"
    if output_format == "hatchet_msgpack":
        path, encoding = os.path.splitext(path)[0] + ".hatchet_msgpack", "msgpack"
    elif session.job is not None and session.job.ranked and session.data == "tree":
        return write_job(prof, session, doc)
    return [writer.write(doc, path, since=session.began, encoding=encoding,
                         keep=session.keep_others)]

def write_job(prof: Profiler, session: Session, doc: list, merge_only: bool = False) -> list[str]:
    """A rank's tree written as PROTON_RANK_FILES says (job_merge): merged into the job
    file that rank 0 writes, and/or this rank's own file; its own file whenever the merge
    could not be made, with one line saying why. `merge_only`: the job file alone (before
    the group ends); a session merged so writes its rank file at the end (unless the
    merge made the job file and PROTON_RANK_FILES=job)."""
    from . import job_merge

    mode = job_merge.rank_files()
    if session.merged_early is not None and not merge_only:  # merged before the group went
        if session.merged_early == "ok" and mode == "job":
            return []
        return [writer.write(doc, session.path, since=session.began,
                             keep=session.keep_others)]
    who = cast(job.Job, session.job)
    write = lambda d, p: writer.write(d, p, since=session.began,  # noqa: E731
                                      keep=session.keep_others)
    written: list[str] = []
    if mode == "ranks":
        return [write(doc, session.path)]
    why = job_merge.group_ready()
    # with every rank's file written anyway, rank 0 alone says why (nothing when the
    # job does not use torch.distributed at all)
    quiet = mode == "both" and why is not None and (who.rank != 0 or
                                                    not job_merge.in_use())
    if why is None:
        plain = writer.plain(doc)  # what the rank's file holds, to the last digit
        target = job.job_path(session.path, who)
        key, members = session.merge or (merge_key(prof, target), None)
        if members is not None and sorted(members) != list(range(who.world_size or 0)):
            target = job.subset_path(target, members)  # not the whole job's file
        try:
            ok, said = job_merge.merge(plain, cast(int, who.rank),
                                       lambda d: write(d, target), key=key, members=members)
        except Exception as exc:  # nothing in the merge may cost this rank its own file
            ok, said = False, f"the merge failed ({type(exc).__name__}: {exc})"
        if merge_only:
            session.merged_early = "ok" if ok else "failed"
            if not ok:
                warn(f"rank {who.rank}: the job's profile was not merged ({said}); this "
                     f"rank writes its own file {session.path} at the end")
                return []
        if ok:
            if said:  # the rank that wrote it
                prof.merged[said] = sorted(members) if members is not None else \
                    list(range(who.world_size or 0))
                written.append(said)
            if mode == "job" or merge_only:
                return written
        else:
            why = said
    if why is not None and not quiet:
        warn(f"rank {who.rank}: the job's profile was not merged ({why}); this rank "
             f"writes its own file {session.path}")
    return written + [write(doc, session.path)]

def merge_key(prof: Profiler, target: str) -> str:
    """The key a job's ranks meet under to merge the file `target` at finalize: its name
    and how many times this process merged it before (every rank finalizes the same)."""
    seen = prof._merges[target] = prof._merges.get(target, 0) + 1
    return f"final/{seen}/{os.path.basename(target)}"

def own_metrics(prof: Profiler, session: Session, nodes: dict) -> dict[int, dict[str, int]]:
    """Kernel node -> its launch configuration (the one with the most GPU time when its
    launches differed, and how many there were) and, for a Triton kernel that does a
    tl.dot, its SASS instruction mix."""
    configs = getattr(prof.collector, "launch_configs", None)
    if configs is None:
        return {}
    out: dict[int, dict[str, int]] = {}
    with session.lock:
        launch = {path: dict(seen) for path, seen in session.launch.items() if path in nodes}
    for path, seen in launch.items():
        shape = configs.get(max(seen, key=lambda config: seen[config])) if seen else None
        if shape is not None:
            out[path] = dict(zip(LAUNCH_METRICS, shape))
            if len(seen) > 1:
                out[path][LAUNCH_CONFIGS] = len(seen)
    names = {node: name for (_, name, _), node in list(prof.router._kernel_paths.items())
             if node in nodes}
    for node, metrics in sass.by_name(set(names.values())).items():
        for kernel, name in names.items():
            if name == node:
                out.setdefault(kernel, {}).update(metrics)
    return out



@contextlib.contextmanager
def interrupt_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) held back on the main thread while the block runs: the last chance to
    write the profile is not cut short (at exit nothing would write it later). A Ctrl-C then
    ends the process after the block as it would have: the script's own handler runs, or the
    process dies of SIGINT (status 130 in the shell), as Python's own ending on one does."""
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:
        previous = None
    if previous in (None, signal.SIG_IGN) \
            or threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []

    def hold(signum, frame):
        if not pressed:
            warn("interrupted; finishing the profile's write first (Ctrl-\\ ends it now)")
        pressed.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if not pressed:
        return
    if callable(previous) and previous is not signal.default_int_handler:
        try:
            previous(signal.SIGINT, None)
            return
        except KeyboardInterrupt:
            pass
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


