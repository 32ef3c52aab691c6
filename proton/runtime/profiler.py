"""The process's sessions: starting, pausing and finishing them, and the collector they share.

One `Profiler` per process (`profiler`). While any session is live it owns the CUPTI collector,
the context chosen for the process (one at a time), the kernel router and the main thread's
timeline; it is also the recorder that frames (context/frames.py) report to. Each optional
measurement is a part (runtime/parts), which it starts, feeds and stops through one fan-out
without naming any; a session's file is written by runtime/output.py.

Threads:
  * User threads open and close frames (context/frames.py: per-thread stacks, no lock) and call
    start/activate/deactivate/finalize, which take `Profiler._lock` (an RLock). A CPU-timed
    frame's time is clipped, at its close, to each session's active stretches; finalize,
    whichever thread calls it, also credits the frames still open on every thread (copies of
    their stacks, context/stack.every_open), since they will close after their sessions end.
  * CUPTI's buffer thread runs the collector pipeline's `read` holding the GIL: it reads the
    collector's attributor under the collector's lock, the timeline's current list (replaced,
    never cut, by the main thread), the router's memo (only it writes there, and finalize
    after flushing), and writes each session's metrics under that session's lock. A session
    closed by finalize (`closed`, set under its lock) takes no more kernels.
  * The python context's launch callback runs on each launching thread at the launch call's
    enter and exit: it registers the launch with the attributor (one dict store, atomic under
    the GIL) before any record of its kernels can exist. A part's own callbacks and threads
    (runtime/parts) say in their modules what they touch under which lock.
  * Every function CUPTI calls catches everything (report.callback_failed): nothing raises into
    CUPTI.
  * A forked child keeps only the forking thread, and locks as the others left them. Hooks
    registered with os.register_at_fork make it start afresh: `after_fork_in_child` here
    (sessions dropped unwritten, the collector and CUDA never used), frames/stack (the thread
    is the main one, its CUPTI ids the parent's), paths' lock, the capture endpoint (closed,
    not serving, no armed capture) and the `proton` command's signal handlers.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
from typing import TYPE_CHECKING, Callable, cast

from ..context import frames, make, stack
from .. import data, triton_version
from ..data import job, writer
from ..data.metrics import DeviceTensor
from . import output
from ..errors import ProfileWriteError, ProtonError, SessionError
from ..options import SessionOptions
from ..report import debug, debugging, warn
from .graph_metrics import GraphMetrics, capturing, metric_frame
from .parts import Parts
from .router import KernelRouter
from .session import Phase, Session
from .timeline import MainTimeline

if TYPE_CHECKING:  # imported when a session starts (CUPTI loads with it)
    from ..cupti.collector import CuptiCollector


class Profiler:
    """The process's sessions and the collector they share."""

    def __init__(self) -> None:
        self.sessions: dict[int, Session] = {}
        self.collector: CuptiCollector | None = None
        """The CUPTI collector while a session records kernels."""
        self.context = make("shadow")
        """Where frames and launches go; chosen by the first live session."""
        self.recording = False
        """A session is live (frames read it on every change: a plain attribute)."""
        self.command_line = False
        """Set by the `proton` command: the script's own start() calls then join its session."""
        self.router = KernelRouter(self.sessions)
        self.graph_metrics = GraphMetrics(self.sessions, self.router.graft)
        """GPU tensor metrics copied where they are given; metrics given inside a CUDA graph
        capture counted at each replay."""
        self.timeline = MainTimeline()
        self.lost_kernels = 0
        """Launches inside a finalized session's window whose kernel record never came."""
        self.merged: dict[str, list[int]] = {}
        """A job file this process wrote -> the ranks merged into it (a capture says which)."""
        self._merges: dict[str, int] = {}
        self._snapshot_unmerged = False
        """A job file's path -> how many times this process merged it (job_merge's keys)."""
        self.window_end: int | None = None
        """The latest end of a finalized session's window (CUPTI time): the job's launches
        after it, cut off when CUPTI stops, are no session's."""
        self._next_id = 0
        self._gpu: bool | None = None
        self._lock = threading.RLock()
        self._atexit = False
        self.forked = False
        """This process was forked from one with Proton loaded: its files are NAME.pid<PID>."""
        self._inherited: CuptiCollector | None = None
        """A forked child's copy of its parent's collector: kept, never used nor freed."""
        self._cuda_forked = False
        """Forked after the parent started CUDA, which cannot serve this process."""
        self.span_clock: Callable[[], int] | None = None
        """frames.Recorder.span_clock: what times scopes for the trace sessions, if any."""
        self.parts = Parts(self)
        """The optional measurements (runtime/parts), each started by the first session that
        asks for it."""

    # -- clock and GPU ----------------------------------------------------------------------
    @property
    def gpu(self) -> bool:
        if self._gpu is None and self._cuda_forked:
            self._gpu = False
            warn("this process was forked after its parent started CUDA, which cannot serve "
                 "it; recording scopes with CPU time only")
        elif self._gpu is None:
            from ..cupti import gpu

            missing = gpu.missing_bindings()
            self._gpu = missing is None and gpu.gpu_available()
            if missing is not None:
                warn(missing)
            elif not self._gpu:
                warn("no NVIDIA GPU found; recording scopes with CPU time only")
        return self._gpu

    def now(self) -> int:
        """Timestamp in the clock of the launch records (CUPTI's) when collecting."""
        if self.collector is not None:
            return self.collector.timestamp()
        return time.monotonic_ns()

    # -- sessions ---------------------------------------------------------------------------
    def live(self, name: str) -> int | None:
        """The id of the live session called `name`, if any."""
        return next((s.id for s in self.sessions.values() if s.name == name), None)

    def start(self, opts: SessionOptions) -> int:
        """Start a session (a live one of the same name is resumed) and return its id.

        Raises:
            SessionError: it cannot run beside the live sessions.
            ProtonError: CUPTI could not start.
        """
        with self._lock, self.parts.own_work():
            sid = self.live(opts.name)
            if sid is not None:  # starting a live name again resumes it
                self._activate(self.sessions[sid])
                return sid
            self.parts.check(opts, list(self.sessions.values()))
            live = {s.context for s in self.sessions.values()}
            if live and opts.context not in live:
                raise SessionError(f"a session with context={live.pop()!r} is live; finalize "
                                   f"it before starting one with context={opts.context!r}")
            if not live:
                self._choose_context(opts.context)
            if self.gpu and self.collector is None:
                try:
                    self._start_collector(opts)
                except BaseException:
                    if not self.sessions:
                        self._choose_context("shadow")  # nothing started: as before
                    raise
            who = job.detect()  # a launcher's variables are set before the process runs
            path = job.ranked_path(opts.path, who)
            if self.forked:  # never over the parent's file, nor a sibling worker's
                path = job.pid_path(path, who.pid)
                warn(f"a forked process: session {opts.name!r} writes {path}")
            session = Session(self._next_id, opts.name, path,
                              opts.context, opts.data, opts.hook_spec, job=who,
                              flush=opts.flush)
            self.parts.attach(session, opts)
            session.phase_starts[0] = self.now()
            self._next_id += 1
            self.sessions[session.id] = session
            self.recording = True
            self.parts.sessions_changed()
            self._keep_span_clock()
            self._activate(session)
            if not self._atexit:
                atexit.register(self._finalize_at_exit)
                self._atexit = True
            return session.id

    def _choose_context(self, name: str) -> None:
        """One context per process at a time: the collector attributes launches one way."""
        if self.context.name != name:
            self.context.end()
            self.context = make(name)
            self.context.start()

    def after_fork_in_child(self) -> None:
        """In a forked child (a DataLoader worker, multiprocessing's "fork", os.fork): it
        inherits the parent's sessions, collector and locks but none of the threads behind
        them (CUPTI's, or one that held a lock). It drops the sessions unwritten (they are the
        parent's to write), never calls CUPTI, and starts afresh: its own start() records
        into NAME.pid<PID>."""
        self._lock = threading.RLock()
        self.sessions.clear()  # in place: the router holds this dict
        self.recording = False
        self.command_line = False  # the `proton` command's session is the parent's
        self._inherited, self.collector = self.collector, None  # CUPTI's state is the parent's
        self.span_clock = None
        if self._gpu:  # cuInit was done
            self._gpu, self._cuda_forked = None, True
        self.lost_kernels = 0
        self.window_end = None
        self.router.clear()
        self.timeline.clear()
        self._choose_context("shadow")
        self.forked = True
        self.parts.after_fork_in_child()
        frames.after_fork_in_child()

    def _finalize_at_exit(self) -> None:
        """A script that never calls finalize() or dies of an exception still gets its file;
        a Ctrl-C meanwhile waits for it (output.interrupt_held)."""
        with output.interrupt_held():
            try:
                for path in self.finalize():
                    warn(f"wrote {path} at exit")
            except ProtonError as exc:  # at exit a traceback helps nobody: one line
                warn(f"at exit: {exc}")
            except Exception as exc:
                warn(f"could not write the profile at exit: {type(exc).__name__}: {exc}")

    def _start_collector(self, opts: SessionOptions) -> None:
        """CUPTI's collector, with what the parts the first session asks for ask of it."""
        try:
            from ..cupti.collector import CuptiCollector
        except ImportError as exc:
            raise ProtonError(f"cannot load CUPTI ({exc}); install cupti-python 13.0.x "
                              "matching your CUDA 13 driver") from None
        from ..cupti.settings import CollectorSettings, GraphHooks

        context, router, metrics = self.context, self.router, self.graph_metrics
        collector = CuptiCollector(CollectorSettings(
            router.on_kernels, groups=router.on_groups, graft=router.graft,
            unscoped=self.timeline.unscoped, moved=self.timeline.note,
            launch_path=context.launch_path, in_callback=context.in_callback, walk=context.walk,
            graphs=GraphHooks(self._any_active, metrics.tag, metrics.executed, metrics.read),
            parts=self.parts.collector_asks(opts)))
        collector.start()
        self.collector = collector
        self.parts.collector_started(collector)
        frames.repush_open_scopes()
        # the main thread's open scopes were entered before CUPTI listened (a capture starts
        # from another thread; proton.start may run inside a scope): threads with no scope
        # of their own (autograd's) launch into where it is now until it moves
        collector.main_path(frames.main_innermost())

    def _targets(self, session: int | None, *, finished_ok: bool = False) -> list[Session]:
        """The live sessions `session` names (every one when None). A finalized session's id
        names none when `finished_ok` (finalize twice is a no-op), else it is an error."""
        if session is None:
            return list(self.sessions.values())
        if isinstance(session, bool) or not isinstance(session, int):
            raise SessionError(f"session={session!r} ({type(session).__name__}) is not a "
                               "session id; use the id that proton.start() returned, or none "
                               "for every session")
        if session in self.sessions:
            return [self.sessions[session]]
        if 0 <= session < self._next_id:
            if finished_ok:
                return []
            raise SessionError(f"session {session} was finalized; start a new one with "
                               "proton.start()")
        live = ", ".join(str(s) for s in self.sessions) or "none"
        # Triton's words first: scripts and Triton's own tests match on them
        raise SessionError(f"Session has not been initialized: {session!r} (live sessions: "
                           f"{live}); use the id proton.start() returned")

    def check_session(self, session: int | None) -> None:
        """Raise SessionError unless `session` names a live session (None: any)."""
        with self._lock:
            self._targets(session)

    def _activate(self, session: Session) -> None:
        if not session.active:
            session.resume(self.now())
            self.parts.resume(session)

    def activate(self, session: int | None = None) -> None:
        """Record again into `session` (every live session when None)."""
        with self._lock, self.parts.own_work():
            for s in self._targets(session):
                self._activate(s)

    def deactivate(self, session: int | None = None, flushing: bool = False) -> None:
        """Stop recording into `session` (every live session when None) until activate();
        `flushing`: then wait for the kernels launched so far."""
        with self._lock, self.parts.own_work():
            now = self.now()
            for s in self._targets(session):
                if s.active:
                    s.pause(now)
                    self.parts.pause(s)
            if flushing and self.collector is not None:
                self.lost_kernels += self.collector.flush()
                self.parts.buffered()

    def finalize(self, session: int | None = None, output_format: str = "") -> list[str]:
        """Flush, write and close sessions (every live one when None); return the files
        written. A session is closed even when its file cannot be written.

        Raises:
            ProfileWriteError: a profile could not be written where asked (after every
                session was closed; the message says where each one went instead).
        """
        with self._lock:
            targets = self._targets(session, finished_ok=True)
            if not targets:
                return []
            for s in targets:  # a bad format must not cost the data
                writer.check_format(s.data, output_format)
            if self.collector is not None:
                with self.parts.own_work():
                    end = self._window_end(targets)
                    self.lost_kernels += self.collector.flush(until=end)
                    self.window_end = max(end, self.window_end or end)
                self.parts.buffered(final=True)  # the last steps end where the GPU drained
            self.deactivate(session)
            self._add_open_cpu_time(targets)
            devices = self._device_table()
            written: list[str] = []
            failed: list[str] = []
            try:
                for s in targets:
                    try:
                        written += output.write(self, s, devices, output_format)
                    except ProfileWriteError as exc:
                        failed.append(str(exc))
                    except Exception as exc:  # a bug here must not keep the session open
                        failed.append(f"could not write {s.path}: {type(exc).__name__}: {exc}")
                    except BaseException:  # Ctrl-C: the session stays, for the exit handler
                        raise  # (or a later finalize) to write
                    del self.sessions[s.id]
            finally:
                self._closed()
            if failed:
                raise ProfileWriteError("; ".join(failed))
            return written

    def _window_end(self, sessions: list[Session]) -> int:
        """The last launch time these sessions take: the end of each one's last active
        stretch (now for an active one; a --steps capture ended at a step boundary)."""
        now = self.now()
        return max((now if s.active or not s.intervals else s.intervals[-1][1])
                   for s in sessions)

    def discard(self, session: int) -> None:
        """Close `session` without writing its file (a capture abandoned before it began)."""
        with self._lock:
            for s in self._targets(session, finished_ok=True):
                try:
                    self.parts.discard(s, list(self.sessions.values()))
                finally:
                    with s.lock:
                        s.closed = True
                    del self.sessions[s.id]
                    self._closed()

    def _closed(self) -> None:
        """Sessions were closed: with none left, CUPTI is released. Under the lock."""
        self.recording = bool(self.sessions)
        self.parts.sessions_changed()
        self._keep_span_clock()
        if not self.sessions:
            if self.collector is not None:
                t0 = time.monotonic()
                self._stop_collector()
                debug(f"stopping CUPTI took {time.monotonic() - t0:.3f} s")
            self.router.clear()
            self._choose_context("shadow")

    def snapshot(self, merge_key: str | None = None) -> list[str]:
        """Write each live session's file as it stands and keep recording (a capture's
        --snapshot, `proton --flush-every`): a job killed later still leaves this file.
        Kernels still running are left for the next one; PC samples are read only at the end.
        `merge_key`: the ranks of a job also merge their trees into the job's file, meeting
        under this key (every rank's timer gives the same one; job_merge), outside the lock
        so that a rank that never comes keeps nothing waiting but this snapshot."""
        with self._lock:
            if self.collector is not None:
                with self.parts.own_work():
                    self.collector.flush(timeout_s=2.0)
                self.parts.buffered()
            devices = self._device_table()
            docs = [(s, output.document(self, s, s.data_of(s.phase), devices))
                    for s in list(self.sessions.values())]
        written: list[str] = []
        for s, doc in docs:
            written.append(writer.write(doc, s.path, since=s.began, keep=s.keep_others))
            if merge_key is not None and s.job is not None and s.job.ranked \
                    and s.data == "tree":
                written += output.merge_snapshot(self, s, doc, merge_key)
        return written

    def merge_before_group_ends(self) -> None:
        """The job's process group is about to be destroyed (job_merge.before_destroy, under
        the `proton` command, which writes only after the script): each ranked job session's
        tree as it stands now is merged into the job's file while the ranks can still meet;
        the rank files are written at the end as usual."""
        from . import job_merge

        if not self.command_line or job_merge.rank_files() == "ranks" \
                or job_merge.group_ready() is not None:
            return
        with self._lock:
            targets = [s for s in self.sessions.values() if s.job is not None and s.job.ranked
                       and s.data == "tree" and not s.flush and s.merged_early is None]
            if not targets:
                return
            if self.collector is not None:
                self.lost_kernels += self.collector.flush()
            for s in targets:
                self.parts.phase_ends(s)
            devices = self._device_table()
            docs = [(s, output.document(self, s, Phase(s.nodes, s.events, s.spans, s.waits),
                                       devices)) for s in targets]
        for s, doc in docs:
            for path in output.write_job(self, s, doc, merge_only=True):
                warn(f"wrote {path}")

    # -- phases (proton.data, mode="periodic_flushing") ----------------------------------------
    def advance_phase(self, session: int) -> int:
        """Start `session`'s next phase and return its number; with periodic flushing, the
        finished phase's records are flushed and it is written to NAME.part_<phase>.<fmt>."""
        with self._lock, self.parts.own_work():
            s = self._targets(session)[0]
            self.parts.phase_ends(s)
            phase = s.advance(self.now())
            if s.flush:
                output.write_parts(self, s, self._device_table())
            return phase

    def phase_data(self, session: int, phase: int) -> list | dict:
        """The document of one phase of a live session, as the file would hold it (an empty
        tree once the phase was written away or cleared)."""
        with self._lock:
            s = self._targets(session)[0]
            if self.collector is not None and phase < s.phase:
                self.collector.deliver()
            return output.document(self, s, s.data_of(phase), self._device_table())

    def phase_complete(self, session: int, phase: int) -> bool:
        """A finished phase whose launches have all come in (or were written away)."""
        with self._lock:
            s = self._targets(session)[0]
            if phase >= s.phase:
                return False
            if self.collector is None or phase not in s.earlier:
                return True
            self.collector.deliver()
            return self.collector.waiting_before(s.phase_starts[phase + 1]) == 0

    def clear_phase(self, session: int, phase: int, up_to: bool = False) -> None:
        with self._lock:
            self._targets(session)[0].clear(phase, up_to, self.now())

    def _stop_collector(self) -> None:
        collector = cast("CuptiCollector", self.collector)  # called while one collects
        self.collector = None
        self.parts.collector_stopping()
        collector.stop()
        self.timeline.clear()
        # kernels whose launch was never taken, inside a window (none finalized: no file)
        unlaunched = collector.finish(until=self.window_end if self.window_end else 0)
        lost, dropped = self.lost_kernels, collector.dropped_records()
        if debugging():
            debug(f"{collector.launches} launch records ({collector.attributor.launches} "
                  f"joined in Python), {collector.kernels} kernels "
                  f"attributed, {lost} launches without their kernel, {unlaunched} kernels "
                  f"without their launch, {dropped} dropped; {collector.records} records "
                  f"read in {collector.callback_seconds * 1e3:.1f} ms")
        if lost or unlaunched or dropped:
            said = [f"{lost} kernel launches had no kernel record" * bool(lost),
                    f"{unlaunched} kernels had no launch record" * bool(unlaunched),
                    f"CUPTI dropped {dropped} records" * bool(dropped)]
            warn(f"the profile misses kernels: {', '.join(s for s in said if s)}")
        self.parts.collector_stopped(collector)
        self.lost_kernels = 0
        self.window_end = None
        self.graph_metrics.reset()

    def _any_active(self) -> bool:
        """A session records now (a CUDA graph node created otherwise is no session's)."""
        return any(s.active for s in list(self.sessions.values()))

    def _device_table(self) -> dict:
        if not self.gpu:
            return {}
        from ..cupti import gpu
        from ..data.devices import table_json

        return table_json(gpu.device_table())

    # -- the recorder frames report to (context/frames.py) ----------------------------------
    def add_metrics(self, path_id: int, values: dict[str, float], typed: bool = True,
                    metric_at: int | None = None, span: frames.Span | None = None) -> None:
        """Metrics of a frame, for every active session. `typed` (user metrics): a value that
        changes a metric's type on the node raises ScopeError, and no session takes any.
        GPU tensors are copied, and inside a CUDA graph capture every value goes into the graph
        (graph_metrics), under `metric_at` (default: the frame's own metric frame). `span`:
        the scope entry the trace sessions show them on (as they are kept: copied)."""
        active = [s for s in list(self.sessions.values()) if s.active]
        if active and (any(isinstance(v, DeviceTensor) for v in values.values())
                       or (self.collector is not None and capturing())):
            placed = self.graph_metrics.place(
                path_id, values, metric_frame(path_id) if metric_at is None else metric_at,
                self.collector)
            if not placed:
                return
            values = placed
        if typed and len(active) > 1:
            for s in active:
                s.check_types(path_id, values)
        for s in active:
            s.add(path_id, values, typed=typed)
        if span is not None and active:
            span.take(values)

    def add_cpu_time(self, path_id: int, start_ns: int, end_ns: int) -> None:
        """A CPU-timed frame closed on the calling thread: each session takes the part inside
        its active stretches."""
        for s in list(self.sessions.values()):
            s.add_cpu_time(path_id, start_ns, end_ns)

    def add_span(self, path_id: int, span: frames.Span, thread: int,
                 sessions: list[Session] | None = None) -> None:
        """A scope's entry timed by `span` ends now on `thread`: each trace session (of
        `sessions`; default every live one) takes the part inside its active stretches. An
        entry timed on another clock than the trace's now is dropped."""
        clock = self.span_clock
        if clock is None or span.clock != clock:
            return
        end, host = clock(), self.collector is None
        for s in list(self.sessions.values()) if sessions is None else sessions:
            s.add_span(path_id, span, end, thread, host)

    def _keep_span_clock(self) -> None:
        """frames time scopes for traces (Recorder.span_clock) while a live session's trace
        shows them (Session.traces_scopes): on CUPTI's clock while collecting (the kernels'),
        else on the host's (time.time_ns, as cpu_time). Triton 3.6's traces hold the kernels
        alone; newer ones the scopes and their launches' flows too. Under the lock."""
        clock = None
        if any(s.traces_scopes for s in self.sessions.values()):
            if self.collector is None:
                clock = time.time_ns
            elif triton_version.after_3_6():
                clock = self.collector.timestamp
        if clock != self.span_clock:
            self.span_clock = clock
            frames.time_open_scopes(clock)

    def _add_open_cpu_time(self, targets: list[Session]) -> None:
        """Sessions being finalized take the part of every thread's open CPU-timed frames
        inside their active stretches, and of their open scopes' entries (a capture ends inside
        the job's step): those frames close after the sessions are gone."""
        now, collector = time.time_ns(), self.collector
        for thread, opened in stack.every_open():
            for top in opened:
                if frames.times_cpu(top, collector):
                    for s in targets:
                        s.add_cpu_time(top.path, top.start_ns, now)
                if top.span is not None:
                    self.add_span(top.path, top.span, thread, targets)


profiler = Profiler()
"""The process's profiler."""
frames.attach(profiler)  # type: ignore[arg-type]  # has the Recorder's attributes and methods
data.attach(profiler)
if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=profiler.after_fork_in_child)
