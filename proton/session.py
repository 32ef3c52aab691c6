"""Sessions: what each profile records, when it is active, and where it is written.

One `Profiler` per process owns the sessions and, while any of them needs kernels, the CUPTI
collector. Kernel records reach `_on_kernel` on CUPTI's thread; a kernel counts for every session
that was active when its launch call started (so deactivated regions stay out, whichever thread
launched).
"""
from __future__ import annotations

import atexit
import bisect
import os
import sys
import threading
import time
from dataclasses import dataclass, field

from . import metrics as m
from .attribution import Kernel, KernelRecord, each
from .errors import ProtonError, SessionError
from .paths import KERNEL, LINE, OP, ROOT, paths

CONTEXTS = ("shadow", "python")
DATA = ("tree", "trace")
BACKENDS = (None, "cupti")
HOOKS = (None, "triton")


@dataclass(slots=True)
class Session:
    """One profile being recorded."""

    id: int
    name: str
    """The name given to start(); the file is written to `path`."""
    path: str
    context: str
    data: str
    hook: str | None
    pc: bool = False
    """mode="pcsampling": kernels get instruction samples and source-line children."""
    intervals: list[list[int]] = field(default_factory=list)
    """[start, end] timestamps of each active stretch; the last end is -1 while active."""
    nodes: dict[int, dict[str, float]] = field(default_factory=dict)
    """Metrics by path id; exclusive values, as written to the file (data="tree")."""
    events: list[tuple[int, KernelRecord]] = field(default_factory=list)
    """Every kernel with its path id (data="trace")."""
    notes: dict[int, str] = field(default_factory=dict)
    """Path id -> why its PC samples have no source lines (the file's frame "no_lines")."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    """Set (under `lock`) when finalize takes the data; late kernel records are then ignored."""

    @property
    def active(self) -> bool:
        return bool(self.intervals) and self.intervals[-1][1] == -1

    def active_at(self, ts: int) -> bool:
        for start, end in reversed(self.intervals):
            if ts >= start:
                return end == -1 or ts <= end
        return False

    def add(self, path_id: int, values: dict[str, float]) -> None:
        if self.data == "trace":
            return  # a trace holds kernels only
        with self.lock:
            if self.closed:
                return
            node = self.nodes.setdefault(path_id, {})
            for key, value in values.items():
                node[key] = node.get(key, 0) + value

    def add_kernel(self, path_id: int, rec: KernelRecord) -> None:
        with self.lock:
            if self.closed:
                return
            if self.data == "trace":
                self.events.append((path_id, rec))
                return
            node = self._kernel_node(path_id, rec.device_id)
            node[m.TIME] += rec.end - rec.start
            node[m.COUNT] += 1

    def add_kernel_totals(self, totals: dict[int, list]) -> None:
        """Kernels summed per path: {path id: [time ns, count, device id]} (data="tree")."""
        with self.lock:
            if self.closed:
                return
            for path_id, (ns, count, device) in totals.items():
                node = self._kernel_node(path_id, device)
                node[m.TIME] += ns
                node[m.COUNT] += count

    def _kernel_node(self, path_id: int, device_id: int) -> dict:
        node = self.nodes.get(path_id)
        if node is None or m.COUNT not in node:  # an op node may hold only its metadata yet
            node = self.nodes.setdefault(path_id, {})
            node.update({m.TIME: 0, m.COUNT: 0, m.DEVICE_ID: device_id, m.DEVICE_TYPE: m.CUDA})
        return node


MAIN_TIMELINE_CAP = 262_144
"""Scope changes of the main thread kept for helper-thread launches (a few MB)."""
TRIM_EVERY = 65_536


class Profiler:
    """The process's sessions and the collector they share."""

    def __init__(self) -> None:
        self.sessions: dict[int, Session] = {}
        self.collector = None
        self.command_line = False
        """Set by the `proton` command: the script's own start() calls then join its session."""
        self._next_id = 0
        self._gpu: bool | None = None
        self._lock = threading.RLock()
        self.lost_kernels = 0
        self._atexit = False
        self.main_thread = threading.main_thread().ident
        self._kernel_paths: dict[tuple[int, str, int], int] = {}
        """(path id, kernel name, device) -> the node its kernels count on (_kernel_path)."""
        self._main_timeline: list[tuple[int, int]] = []
        """(timestamp, path id) each time the main thread's innermost scope changed."""
        self._trim_at = TRIM_EVERY
        self.python = False
        """A context="python" session is live: launches go under Python call paths."""

    # -- clock and GPU ----------------------------------------------------------------------
    @property
    def gpu(self) -> bool:
        if self._gpu is None:
            from . import gpu

            self._gpu = gpu.gpu_available()
            if not self._gpu:
                print("proton: no NVIDIA GPU found; recording scopes with CPU time only",
                      file=sys.stderr)
        return self._gpu

    def now(self) -> int:
        """Timestamp in the clock of the launch records (CUPTI's) when collecting."""
        if self.collector is not None:
            return self.collector.timestamp()
        return time.monotonic_ns()

    # -- sessions ---------------------------------------------------------------------------
    def start(self, name: str | None, *, context: str, data: str, backend: str | None,
              mode: str | None, hook: str | None) -> int:
        _check_choice("context", context, CONTEXTS)
        _check_choice("data", data, DATA)
        _check_choice("backend", backend, BACKENDS)
        from .pc_collector import parse_mode

        pc = parse_mode(mode)
        if hook is not None and hook.partition(":")[0] != "triton":
            _check_choice("hook", hook, HOOKS)
        name = name or "proton"
        with self._lock:
            for session in self.sessions.values():
                if session.name == name:  # starting a live name again resumes it
                    self._activate(session)
                    return session.id
            ext = ".hatchet" if data == "tree" else ".chrome_trace"
            path = os.path.abspath(name if name.endswith(ext) else name + ext)
            if os.path.isdir(path):
                raise SessionError(f"the profile would be written to {path!r}, which is a "
                                   "folder; give another name")
            if pc is not None:
                self._check_pc()
            was_python = self._choose_context(context)
            try:
                if hook is not None:  # before anything is registered: a failure leaves nothing
                    from .hooks import triton_hook

                    triton_hook.install(hook)
                if self.gpu and self.collector is None:
                    self._start_collector(pc)
            except BaseException:
                self.python = was_python  # nothing started: scopes go on as before
                raise
            session = Session(self._next_id, name, path, context, data, hook,
                              pc=pc is not None)
            self._next_id += 1
            self.sessions[session.id] = session
            self._activate(session)
            if not self._atexit:
                atexit.register(self._finalize_at_exit)
                self._atexit = True
            return session.id

    def _check_pc(self) -> None:
        """Instruction sampling is set up with the collector: one sampling session at a time,
        started before any other session (CUPTI's module callback and context are set then)."""
        if any(s.pc for s in self.sessions.values()):
            raise SessionError("a mode='pcsampling' session is live; finalize it before "
                               "starting another (one instruction-sampling session at a time)")
        if self.collector is not None:
            raise SessionError("mode='pcsampling' must start before the other live sessions; "
                               "finalize them first, or start the sampling session first")

    def _choose_context(self, context: str) -> bool:
        """One context per process at a time: the collector attributes launches one way.
        Returns the context flag as it was."""
        live = {s.context for s in self.sessions.values()}
        if live and context not in live:
            raise SessionError(f"a session with context={live.pop()!r} is live; finalize it "
                               f"before starting one with context={context!r}")
        if context == "python" and not self.python:
            from . import python_context

            python_context.enable()
        was, self.python = self.python, context == "python"
        return was

    def _finalize_at_exit(self) -> None:
        """A script that never calls finalize() or dies of an exception still gets its file."""
        try:
            for path in self.finalize():
                print(f"proton: wrote {path} at exit", file=sys.stderr)
        except Exception as exc:  # at exit a traceback helps nobody: one line
            print(f"proton: could not write the profile at exit: {exc}", file=sys.stderr)

    def _start_collector(self, pc=None) -> None:
        try:
            from .cupti_collector import CuptiCollector
        except ImportError as exc:
            raise ProtonError(f"cannot load CUPTI ({exc}); install cupti-python 13.0.x "
                              "matching your CUDA 13 driver") from None

        collector = CuptiCollector(self._on_kernels, self._unscoped, python=self.python, pc=pc)
        collector.start()
        self.collector = collector
        from .scope import repush_open_scopes

        repush_open_scopes()

    def _targets(self, session: int | None) -> list[Session]:
        if session is None:
            return list(self.sessions.values())
        if session not in self.sessions:
            live = ", ".join(str(s) for s in self.sessions) or "none"
            raise SessionError(f"no live session {session!r} (live sessions: {live}); "
                               "use the id that proton.start() returned")
        return [self.sessions[session]]

    def _pc(self, session: Session):
        """The PCCollector sampling for `session`, if any."""
        return self.collector.pc if session.pc and self.collector is not None else None

    def _activate(self, session: Session) -> None:
        if not session.active:
            session.intervals.append([self.now(), -1])
            if (pc := self._pc(session)) is not None:
                pc.resume()

    def activate(self, session: int | None = None) -> None:
        with self._lock:
            for s in self._targets(session):
                self._activate(s)

    def deactivate(self, session: int | None = None) -> None:
        with self._lock:
            now = self.now()
            for s in self._targets(session):
                if s.active:
                    s.intervals[-1][1] = now
                    if (pc := self._pc(s)) is not None:
                        pc.pause()

    def finalize(self, session: int | None = None, output_format: str = "") -> list[str]:
        """Flush, write and close sessions; return the files written."""
        from . import writer

        with self._lock:
            targets = self._targets(session) if self.sessions or session is not None else []
            if not targets:
                return []
            for s in targets:  # a bad format must not cost the data
                writer.check_format(s.data, output_format)
            if self.collector is not None:
                self.lost_kernels += self.collector.flush()
            self.deactivate(session)
            devices = self._device_table()
            written = []
            for s in targets:
                if (pc := self._pc(s)) is not None:
                    self.collector.pc = None
                    self._add_pc_samples(s, pc)
                with s.lock:
                    s.closed = True
                written.append(writer.write(s, output_format, devices))
                del self.sessions[s.id]
            if any(s.hook for s in targets) and not any(s.hook for s in self.sessions.values()):
                from .hooks import triton_hook

                triton_hook.uninstall()
            if not self.sessions and self.collector is not None:
                t0 = time.monotonic()
                self._stop_collector()
                if os.environ.get("PROTON_DEBUG"):
                    print(f"proton: stopping CUPTI took {time.monotonic() - t0:.3f} s",
                          file=sys.stderr)
            if not self.sessions and self.python:
                from . import python_context
                from .scope import stacks

                python_context.reset(stacks)
                self.python = False
            return written

    def _add_pc_samples(self, session: Session, pc) -> None:
        """Finish sampling and put the samples on `session`'s kernel nodes and their lines."""
        pc.finish()
        by_name: dict[str, list[tuple[int, float]]] = {}
        for (_, name, _), node in list(self._kernel_paths.items()):
            ns = session.nodes.get(node, {}).get(m.TIME)
            if ns:
                by_name.setdefault(name, []).append((node, ns))

        def kernel_nodes(path: int | None, function: str) -> list[tuple[int, float]]:
            if path is None:  # continuous: the function's nodes, weighted by their GPU time
                return by_name.get(function) or [(self._kernel_path(ROOT, function, pc.device), 1)]
            return [(self._kernel_path(path, function, pc.device), 1)]

        table = pc.table
        for group in table.attribute(pc.line_finder(), kernel_nodes):
            if group.line is None:
                node = group.kernel
                session.notes.setdefault(node, group.why)
            else:
                file, line = group.line
                node = paths.intern(group.kernel, f"{file}:{line}@{group.function}", LINE)
            session.add(node, table.metrics(group.counts))

    def _stop_collector(self) -> None:
        collector, self.collector = self.collector, None
        collector.stop()
        self._main_timeline = []  # a new list: CUPTI's thread may be reading the old
        self._trim_at = TRIM_EVERY
        lost = self.lost_kernels + collector.finish()
        dropped = collector.dropped_records()
        if os.environ.get("PROTON_DEBUG"):
            a = collector.attributor
            print(f"proton: {a.launches} launch records, {a.kernels} kernels attributed, "
                  f"{lost} lost, {dropped} dropped; {collector.records} records read in "
                  f"{collector.callback_seconds * 1e3:.1f} ms", file=sys.stderr)
        if lost or dropped:
            print(f"proton: {lost} kernel launches had no kernel record and CUPTI dropped "
                  f"{dropped} records; the profile misses them", file=sys.stderr)
        self.lost_kernels = 0

    def _device_table(self) -> dict:
        if not self.gpu:
            return {}
        from . import gpu

        return {str(k): v.to_json() for k, v in gpu.device_table().items()}

    # -- called by scopes and the collector --------------------------------------------------
    def add_metrics(self, path_id: int, values: dict[str, float]) -> None:
        for s in list(self.sessions.values()):
            if s.active:
                s.add(path_id, values)

    def note_main_path(self, path_id: int) -> None:
        """The main thread's innermost scope is now `path_id` (called while collecting)."""
        timeline = self._main_timeline
        now = self.collector.timestamp()
        timeline.append((now, path_id))
        if len(timeline) > self._trim_at:  # bounded: launch records come within minutes at most
            self._forget_before(now - 300_000_000_000, keep=MAIN_TIMELINE_CAP - TRIM_EVERY)
            # not again before TRIM_EVERY more changes: a busy loop of scopes pays one bisect
            # per TRIM_EVERY of them, and the timeline never holds more than the cap
            self._trim_at = len(self._main_timeline) + TRIM_EVERY

    def _forget_before(self, ts: int, keep: int | None = None) -> None:
        """Drop entries older than `ts` (keeping the one current at `ts`) and all but the last
        `keep`. A new list replaces the old: CUPTI's thread may be searching the old one."""
        timeline = self._main_timeline
        i = bisect.bisect_right(timeline, ts, key=lambda e: e[0]) - 1
        if keep is not None:
            i = max(i, len(timeline) - keep)
        if i > 0:
            self._main_timeline = timeline[i:]

    def _unscoped(self, thread_id: int, ts: int) -> int:
        """Where a launch made with no scope open goes: a helper thread's launch (PyTorch's
        autograd engine runs backward on one) goes under the main thread's scope at that time.

        CUPTI's thread id is the low 32 bits of pthread_self (threading.get_ident())."""
        if thread_id == self.main_thread & 0xFFFFFFFF:
            return ROOT
        timeline = self._main_timeline
        i = bisect.bisect_right(timeline, ts, key=lambda e: e[0]) - 1
        return timeline[i][1] if i >= 0 else ROOT

    def _kernel_path(self, path_id: int, name: str, device: int) -> int:
        """The node a kernel of `name` on `device` launched at `path_id` is counted on."""
        key = (path_id, name, device)
        kernel = self._kernel_paths.get(key)
        if kernel is None:
            if paths.frames[path_id].kind == OP:  # the hook named this launch: the op is it
                kernel = path_id
            else:
                kernel = paths.intern(path_id, name, f"{KERNEL}{device}")
            self._kernel_paths[key] = kernel
        return kernel

    def _on_kernel(self, path_id: int, rec: KernelRecord, launch_ts: int) -> None:
        kernel = self._kernel_path(path_id, rec.name, rec.device_id)
        for s in list(self.sessions.values()):
            if s.active_at(launch_ts):
                s.add_kernel(kernel, rec)

    def _on_kernels(self, kernels: list[Kernel]) -> None:
        """One buffer's kernels (see attribution.Kernel). When every session is a tree that
        has been active since before the first launch, they are summed per path first and each
        session takes the sums under one lock: this runs on CUPTI's thread holding the GIL, so
        it must be short."""
        sessions = list(self.sessions.values())
        first = min(k[1] for k in kernels)
        if not all(s.data == "tree" and s.active and s.intervals[-1][0] <= first
                   for s in sessions):
            each(self._on_kernel)(kernels)
            return
        totals: dict[int, list] = {}
        for path_id, _, _, name, device, start, end, _ in kernels:
            kernel = self._kernel_path(path_id, name, device)
            total = totals.get(kernel)
            if total is None:
                totals[kernel] = [end - start, 1, device]
            else:
                total[0] += end - start
                total[1] += 1
        for s in sessions:
            s.add_kernel_totals(totals)


def _check_choice(what: str, value, choices) -> None:
    if value not in choices:
        shown = ", ".join(repr(c) for c in choices)
        raise SessionError(f"{what}={value!r} is not supported; choose one of {shown}")


profiler = Profiler()
