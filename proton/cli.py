"""The `proton` command: run a script or pytest under the profiler and write its profile."""
from __future__ import annotations

import difflib
import os
import runpy
import signal
import sys
from typing import Any

import click

from . import api, settings
from .context import python as python_context
from .data import job
from .errors import ProtonError
from .options import AMD_BACKENDS, CONTEXTS, DATA, parse_options
from .report import warn
from .runtime.profiler import profiler
from .service import commands, tokens
from .cli_types import Seconds
from .service.commands import token_options

EPILOG = """\b
Examples:
  proton main.py --lr 3e-4                     # writes proton.hatchet
  proton run ps --lr 3e-4                      # the same for a script named like a command
  proton -- ps                                 # ... the same
  proton -n run1 -k triton main.py             # Triton op names, writes run1.hatchet
  proton -k triton:config=BLOCK_M main.py      # ... with grid/warps/stages/BLOCK_M in names
  proton -c python main.py                     # kernels under python call paths
  proton -m pcsampling main.py                 # + samples and stall reasons per source line
  proton --counters main.py                    # + DRAM, L2, tensor-pipe counters per kernel
  proton-viewer --source matmul_kernel proton.hatchet  # the kernel's source, hottest lines
  proton pytest -x tests/test_model.py         # profile a test run
  python -m proton -n run1 main.py             # module form
  proton-viewer -m time/ms run1.hatchet        # then read it
  proton --listen train.py                     # record nothing until `proton capture PID`
  proton --flush-every 60 train.py             # rewrite the profile every minute (SIGKILL-safe)
  proton capture --all --steps 3               # see `proton capture -h` and `proton ps -h`
"""


@click.command("run", context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False,
                                 "help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.option("-n", "--name", default=None, help="Profile name; the file is NAME.hatchet "
              "(default: proton).")
@click.option("-b", "--backend", type=click.Choice(["cupti", *AMD_BACKENDS, "instrumentation"]),
              default=None, help="Profiling backend (default: cupti). instrumentation: "
              "proton.language scopes inside Triton kernels (Triton 3.6.0 or 3.9.0). roctracer "
              "and rocprofiler (Triton's, for AMD GPUs) are refused: Proton profiles NVIDIA "
              "GPUs.")
@click.option("-c", "--context", type=click.Choice(CONTEXTS), default="shadow", show_default=True,
              help="shadow: proton.scope nesting; python: each kernel under the Python call "
              "path (file:line@function frames) that launched it, with the scopes in it.")
@click.option("-d", "--data", type=click.Choice(DATA), default="tree", show_default=True,
              help="tree: aggregated call tree; trace: every launch.")
@click.option("-k", "--hook", default=None, metavar="triton[:OPTION...]",
              help="triton: name Triton ops and add their launch_metadata metrics. Options: "
              ":config (append grid, warps, stages, shared memory to op names), "
              ":config=BLOCK_M,BLOCK_N (and these constexprs; =* for all), "
              ":include=REGEX / :exclude=REGEX (which kernels the hook names), "
              "e.g. -k triton:config=BLOCK_M:include=matmul.")
@click.option("-m", "--mode", default=None,
              metavar="pcsampling[:interval=N][:serialize=1] | counters[:interval=US]",
              help="pcsampling: also sample the warps' program counters: samples and stall "
              "reasons per kernel and per source line (proton-viewer --source KERNEL FILE). "
              "By default sampling runs continuously and costs almost nothing; CUPTI then "
              "reports samples per kernel function, not per launch, so a function that ran "
              "under several call paths has its samples split over them in proportion to its "
              "GPU time under each. :serialize=1 starts and stops sampling around every launch "
              "for exact per-launch attribution, at a cost (each launch waits for its kernel). "
              ":interval=N samples every 2**N cycles (5..31, default 10); Triton's "
              "pc_sampling:interval=CYCLES works too. "
              "periodic_flushing[:format=hatchet|hatchet_msgpack|chrome_trace]: each phase "
              "(proton.data.advance_phase) goes to NAME.part_<phase>.<fmt>. "
              "counters[:interval=US]: hardware counters of every GPU sampled every US "
              "microseconds (default 250) and joined to the kernels that ran: DRAM and L2 "
              "bytes, tensor-pipe work, issue and SM activity per kernel and per scope "
              "(same as --counters). "
              "Default: kernel times.")
@click.option("--counters", "counters", is_flag=True,
              help="Same as -m counters: DRAM and L2 bytes, tensor-pipe FLOPs, issue and SM "
              "activity per kernel and per scope, measured by the GPU's counters at the cost "
              "of a kernel record (proton-viewer -m dram_gbyte/s,tensor_active).")
@click.option("--memory", "memory", is_flag=True,
              help="Also record torch's CUDA caching allocator per scope: bytes allocated, "
              "freed, the peak inside and what is live at its exit (proton-viewer -m "
              "mem_peak_bytes; --diagnose names the peak and leaks). Costs tens of "
              "microseconds per scope entry.")
@click.option("--listen", is_flag=True,
              help="Record nothing until a capture asks: `proton capture PID --duration 5` or "
              "`--steps N` from another shell (`proton ps` lists the jobs). Without it the run "
              "is recorded whole, and `proton capture --snapshot PID` writes it as it stands.")
@click.option("--listen-tcp", default=None, metavar="[HOST:]PORT",
              help="Also accept captures over TCP (loopback unless HOST is given) from "
              "`proton capture --connect HOST:PORT`; needs $PROTON_TOKEN or --token-file.")
@token_options("A file (mode 0600) whose first line is the secret TCP captures must send "
               "(default: $PROTON_TOKEN; at least 128 bits, e.g. `openssl rand -hex 16`).")
@click.option("--flush-every", type=Seconds(low=1), default=None, metavar="SECONDS",
              help="Rewrite the profile every SECONDS (1 to 86400) while recording, so a job "
              "killed with SIGKILL (or by the OOM killer) leaves its last one.")
@click.argument("target", metavar="SCRIPT.py|pytest")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(name, backend, context, data, hook, mode, counters, memory, listen, listen_tcp, token_file,
        flush_every, target, args) -> None:
    """Run SCRIPT.py (or pytest) with its ARGS under the profiler.

    The script runs as __main__ with its own argv; its proton.start() calls join this
    session. The profile is written when the script ends, raises, calls sys.exit or is
    interrupted, and proton exits with the script's status. `proton SCRIPT.py ...` is
    short for `proton run SCRIPT.py ...`.
    """
    if target.startswith("-") and not os.path.isfile(target):
        _no_such_option(target)
    if counters:
        if mode and not str(mode).startswith("counters"):
            raise click.UsageError(f"--counters and -m {mode} cannot run together (one mode a "
                                   "session); drop one")
        mode = mode or "counters"
    if target != "pytest" and not os.path.isfile(target):
        raise click.BadParameter(f"no such script {target!r}; give a path to a .py file or "
                                 "'pytest'", param_hint="SCRIPT.py|pytest")
    python_context.set_runner(_run.__code__)  # nothing outside it is the user's
    if target != "pytest":  # the profile names it: the report finds sources beside it
        job.command_script = os.path.abspath(target)
    if api.disabled():
        warn("TRITON_PROTON_DISABLE is set: running the script without profiling")
        sys.exit(_run_plain(target, list(args)))
    settings.check(strict=True)  # one line and exit 2 now, not a lost profile at the end
    from .service import endpoint, periodic

    sid = None
    try:
        if listen:  # the options are checked now, for the captures that will use them
            parse_options(name, context=context, data=data, backend=backend, mode=mode,
                          hook=hook, memory=memory)
        else:
            sid = api.start(name, context=context, data=data, backend=backend, mode=mode,
                            hook=hook, memory=memory)
        try:
            endpoint.listen(listen_tcp, tokens.find(token_file) if listen_tcp else None)
        except (ProtonError, OSError) as exc:
            if listen or listen_tcp:
                raise ProtonError(f"cannot listen for captures: {exc}") from None
            warn(f"cannot listen for captures ({exc}); recording the run as usual")
    except ProtonError as exc:
        if sid is not None:  # the script never ran: its empty profile must not replace the last
            api.discard(sid)
        raise click.UsageError(str(exc)) from None
    if flush_every:
        periodic.flush_every(flush_every)
    status = _run_profiled(target, list(args))
    sys.exit(status)


def _no_such_option(given: str) -> None:
    """An unknown option before the script: click passes it on as the script (unknown options
    after the script are the script's own), so say what click would."""
    ctx = click.get_current_context()
    known = [opt for param in ctx.command.params for opt in param.opts + param.secondary_opts
             if opt.startswith("-")]
    name = given.split("=", 1)[0]
    raise click.NoSuchOption(name, possibilities=difflib.get_close_matches(name, known), ctx=ctx)


ENDING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT")
               if hasattr(signal, name))  # Windows has SIGTERM alone
"""Signals that end the run as Ctrl-C does: the profile is written, then proton exits 128+N
(SIGHUP: a closed terminal or a dropped ssh session)."""


class _Terminated(KeyboardInterrupt):
    """One of ENDING, raised like Ctrl-C so pytest and the script stop the same way."""

    signum: int | None = None
    """Set by the handler: pytest catches the interrupt itself and returns its own status."""


_profiled_pid: int | None = None
"""The process whose script runs under _on_signal (a fork of it has its own pid)."""


def _on_signal(signum, frame):
    if os.getpid() != _profiled_pid:
        # a forked child that still has this handler (a signal can reach it inside its
        # at-fork callbacks, where CPython swallows what the reset raised): it ends as it
        # would without the profiler, never lives on as a pool worker nobody can end
        signal.signal(signum, _replaced.get(signum, signal.SIG_DFL))
        os.kill(os.getpid(), signum)
        return
    _Terminated.signum = signum
    raise _Terminated()


_replaced: dict[signal.Signals, Any] = {}
"""The handlers _on_signal replaced while the script runs."""


def _default_signals_in_child() -> None:
    """A forked child (a multiprocessing worker, which Pool.terminate() ends with SIGTERM)
    ends on these signals as it would without the profiler: the profile is its parent's.
    The signals wait while the handlers are put back (one coming meanwhile is handled after,
    by the child's own handler)."""
    ending = set(_replaced)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ending) if ending else None
    try:
        for signum, handler in _replaced.items():
            if signal.getsignal(signum) is _on_signal:
                signal.signal(signum, handler)
    finally:
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_default_signals_in_child)


def _run_profiled(target: str, args: list[str]) -> int:
    """Run the target, then write the profile whatever happened; return the exit status."""
    global _profiled_pid
    _Terminated.signum, _profiled_pid = None, os.getpid()
    # A signal the job was started ignoring (`nohup proton ...`, SIGHUP) stays ignored.
    saved = sys.argv[:], sys.path[:], {s: signal.signal(s, _on_signal) for s in ENDING
                                       if signal.getsignal(s) is not signal.SIG_IGN}
    _replaced.update(saved[2])
    profiler.command_line = True
    from .runtime import job_merge  # the job's file merged before a script ends its group

    job_merge.before_destroy(profiler.merge_before_group_ends)
    status = 0
    try:
        status = _run(target, args)
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except KeyboardInterrupt:
        status = 130
    except BaseException as exc:
        _print_users_traceback(exc, target)
        status = 1
    finally:
        ended = _Terminated.signum  # also when pytest caught the interrupt first
        if ended is not None:
            status = 128 + ended
        if ended is not None or status == 130:
            cause = signal.Signals(ended).name if ended is not None else "interrupted"
            warn(f"{cause}; writing the profile" if profiler.sessions
                 else f"{cause}; {_nothing_to_write()}")
        sys.argv[:], sys.path[:] = saved[0], saved[1]
        profiler.command_line = False
        # A second signal must not cut the write short (and the file is renamed into place).
        held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, *ENDING)}
        try:
            status = _write(status)
        finally:
            for s, handler in saved[2].items():
                signal.signal(s, handler)
            signal.signal(signal.SIGINT, held[signal.SIGINT])
    return status


def _print_users_traceback(exc: BaseException, target: str) -> None:
    """The traceback `python SCRIPT.py` would print: from the script's first frame on, without
    proton's and runpy's frames above it (none at all for a script that does not compile),
    through sys.excepthook, which the script may have replaced (rich.traceback.install())."""
    script = os.path.abspath(target)
    tb = exc.__traceback__
    if target != "pytest":
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # the hook reads __traceback__


def _nothing_to_write() -> str:
    """What a job with no session left to write says at its end: a --listen job between
    captures has written what its captures recorded."""
    endpoint = sys.modules.get("proton.service.endpoint")  # imported by the run it served
    files = list(getattr(endpoint, "written", []))
    if not files:
        return "nothing was recorded"
    shown = ", ".join(files[-3:])
    return (f"no capture running (its captures wrote {len(files)} "
            f"file{'s' * (len(files) != 1)}: {'..., ' * (len(files) > 3)}{shown})")


def _write(status: int) -> int:
    """Write every session; the exit status: the script's, or 2 (when it was 0) if a profile
    could not be written where asked."""
    where = ", ".join(s.path for s in profiler.sessions.values())
    try:
        for path in api.write_profiles():
            warn(f"wrote {path}")
    except ProtonError as exc:
        warn(str(exc))
        return status or exc.exit_code
    except Exception as exc:
        warn(f"could not write the profile ({where}): {type(exc).__name__}: {exc}")
        return status or ProtonError.exit_code
    return status


def _run(target: str, args: list[str]) -> int:
    if target == "pytest":
        import pytest

        return int(pytest.main(args))
    script = os.path.abspath(target)
    sys.argv = [target, *args]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")
    return 0


def _run_plain(target: str, args: list[str]) -> int:
    try:
        return _run(target, args)
    except SystemExit as exc:
        return _exit_status(exc.code)


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class _Group(click.Group):
    """A group whose default command is `run`: a first word that names no subcommand (a
    script, `pytest`, a run option or `--`) is given to `run`, so `proton main.py` works."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in {*self.commands, *ctx.help_option_names, "--version"}:
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EPILOG)
@click.version_option(package_name="proton-profiler", prog_name="proton",
                      message="%(prog)s %(version)s (%(package)s, not Triton's own Proton: "
                      "that one runs as python -m triton.profiler.proton)")
def proton() -> None:
    """Profile a script, a test run or a running job (`proton run -h`: the profiling options).

    `proton SCRIPT.py ARGS...` is `proton run SCRIPT.py ARGS...`; a script named like a
    command (`ps`, `capture`, `run`) runs with `proton run ps` or `proton -- ps`.
    """


proton.add_command(run)
proton.add_command(commands.capture)
proton.add_command(commands.ps)


def main() -> None:
    """Console entry point: ProtonError becomes one line on stderr and exit status 2."""
    try:
        proton.main(prog_name="proton", standalone_mode=True)
    except ProtonError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
