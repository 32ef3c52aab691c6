"""`proton capture` and `proton ps`: profile running jobs without restarting them."""
from __future__ import annotations

import os
import sys
import uuid

import click

from ..cli_types import Seconds
from ..errors import ProtonError
from ..files import standard_output_failures
from ..options import CONTEXTS, DATA
from . import client, tokens
from .protocol import MAX_MESSAGE, MAX_RANKS, ProtocolError, printable


def refuse_token_argument(ctx, param, value) -> None:
    """A hidden --token: say where the token goes instead (a command line is public)."""
    if value is not None:
        raise click.UsageError(tokens.ON_COMMAND_LINE)


def token_options(help: str):
    """--token-file FILE (`help` says what the token is for) and a hidden --token refused
    with where the token goes instead: `proton` and `proton capture` share them."""
    def decorate(command):
        command = click.option("--token", hidden=True, callback=refuse_token_argument,
                               expose_value=False)(command)
        return click.option("--token-file", default=None, metavar="FILE", help=help)(command)
    return decorate

CAPTURE_EPILOG = """\b
Examples:
  proton --listen train.py &                 # a job that can be captured (records nothing yet)
  proton ps                                  # the listening jobs: pid, rank, state, steps
  proton capture 4242 --duration 5 -n slow   # the next 5 s of pid 4242 -> slow.hatchet
  proton capture --all --steps 3 -n step     # 3 iterations (proton.step()) of every rank
  proton capture --all -m pcsampling --duration 2
  proton capture --snapshot 4242             # write a running `proton main.py` profile now
  PROTON_TOKEN=$T proton capture --connect node7:7000 --duration 5   # a TCP endpoint elsewhere
"""


@click.command("capture", context_settings={"help_option_names": ["-h", "--help"]},
               epilog=CAPTURE_EPILOG)
@click.argument("pids", nargs=-1, type=int)
@click.option("--all", "every", is_flag=True,
              help="Every listening job of this user on this host (e.g. all ranks of a job).")
@click.option("--duration", type=Seconds(low=0, low_open=True), default=None,
              help="Seconds to record (default 5 unless --steps or --snapshot).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Record exactly N iterations, from the next proton.step() in the job.")
@click.option("--snapshot", is_flag=True,
              help="Write the job's live session as it stands and let it record on (a job run "
              "under `proton main.py`).")
@click.option("-n", "--name", default="capture", show_default=True,
              help="Profile name, in this folder (or below it); NAME.rank<R>.hatchet in a "
              "job's ranks, NAME.pid<PID>.hatchet for several jobs without ranks. A --connect "
              "job writes NAME in its own PROTON_CAPTURE_DIR (default: its folder).")
@click.option("-c", "--context", type=click.Choice(CONTEXTS), default="shadow",
              show_default=True)
@click.option("-d", "--data", type=click.Choice(DATA), default="tree", show_default=True)
@click.option("-m", "--mode", default=None, metavar="pcsampling[:...]|counters[:...]",
              help="As `proton -m`.")
@click.option("-k", "--hook", default=None, metavar="triton[:...]", help="As `proton -k`.")
@click.option("--connect", multiple=True, metavar="HOST:PORT",
              help="A job listening on TCP (proton --listen-tcp); needs its token: "
              "$PROTON_TOKEN or --token-file.")
@token_options("A file (mode 0600) whose first line is the TCP endpoints' token "
               "(default: $PROTON_TOKEN).")
@click.option("--timeout", type=Seconds(low=1), default=120, show_default=True,
              help="Seconds to wait for --steps to complete and each profile to be written.")
def capture(pids, every, duration, steps, snapshot, name, context, data, mode, hook, connect,
            token_file, timeout) -> None:
    """Profile running jobs: start a session in each PID (or --all), wait, write each
    profile, print where. The job keeps running."""
    if sum(x is not None and x is not False for x in (duration, steps, snapshot or None)) > 1:
        raise click.UsageError("give one of --duration, --steps and --snapshot")
    try:
        targets = _targets(pids, every, connect, tokens.find(token_file) if connect else None)
        here = _inside_this_folder(name) if any(t.tcp is None for t in targets) else name
    except ProtonError as exc:
        raise click.UsageError(str(exc)) from None
    if snapshot:
        sys.exit(_report([_snapshot(target) for target in targets]))
    options = {"context": context, "data": data, "mode": mode, "hook": hook}
    statuses = client.statuses(targets) if len(targets) > 1 else [None] * len(targets)
    names = []
    for target, status in zip(targets, statuses):  # several jobs without ranks: a file each
        known = status if isinstance(status, client.Status) else None
        pid = target.pid if target.pid is not None else known.pid if known else "unknown"
        ranked = known is not None and known.rank is not None
        suffix = "" if len(targets) == 1 or ranked else f".pid{pid}"
        names.append((name if target.tcp else here) + suffix)  # TCP: a name in the job's folder
    merge = _merge_request(statuses)
    if merge is not None:
        options["merge"] = merge
    what = f"{steps} step{'s' * (steps != 1)}" if steps else f"{duration or 5:g} s"
    click.echo(f"capturing {what} of {len(targets)} job{'s' * (len(targets) > 1)}...", err=True)
    outcomes = client.capture(targets, options, names, duration=duration or 5.0, steps=steps,
                              timeout=timeout)
    failed = _report(outcomes)
    starts = [o.started for o in outcomes if o.started is not None and not o.error]
    if len(starts) > 1:
        click.echo(f"started within {(max(starts) - min(starts)) * 1e3:.1f} ms of each other "
                   f"({len(starts)} jobs)", err=True)
    sys.exit(failed)


def _report(outcomes: list[client.Outcome]) -> int:
    """Each outcome's lines: what the job said and what went wrong (stderr), each file
    written as checked (stdout); 1 when any failed, else 0."""
    failed = 0
    for outcome in outcomes:
        for warning in outcome.warnings:
            click.echo(f"{outcome.target}: the job said: {warning}", err=True)
        for note in outcome.notes:
            click.echo(f"{outcome.target}: {printable(note, MAX_MESSAGE)}", err=True)
        if outcome.error:
            failed = 1
            click.echo(f"{outcome.target}: {outcome.error}", err=True)
        for path in outcome.paths:
            note = " (stopped before its last step)" if outcome.partial else ""
            if path in outcome.merged:
                note += f" (ranks {outcome.merged[path]} merged)"
            click.echo(f"{outcome.target}: wrote {path}{note}")
    return failed


def _merge_request(statuses: list) -> dict | None:
    """Several ranks of one job captured: they merge their profiles into one (job_merge), under
    a key of this capture's own, waiting for these ranks only."""
    ranked = [s for s in statuses if isinstance(s, client.Status) and s.rank is not None]
    ranks = sorted({s.rank for s in ranked if s.rank is not None})
    if len(ranks) < 2 or len(ranks) != len(ranked) or len(ranks) > MAX_RANKS \
            or len({s.world_size for s in ranked}) != 1:
        return None  # one rank, or not one job's: each writes its own file
    return {"id": uuid.uuid4().hex, "ranks": ranks}


def _inside_this_folder(name: str) -> str:
    """-n NAME as an absolute path in this folder or below, links resolved here: a capture
    writes only where its capturer could.

    Raises:
        ProtonError: NAME leads out of this folder.
    """
    here, path = os.path.realpath("."), os.path.realpath(name)
    if os.path.commonpath([here, path]) != here or path == here:
        raise ProtonError(f"-n {name}: {path} is outside this folder ({here}); a capture writes "
                          "here or below: cd to where the profile should go")
    return path


def _targets(pids, every: bool, connect, token) -> list[client.Target]:
    targets = [client.find(pid) for pid in pids]
    if every:
        found = [t for t in client.listening() if t.pid != os.getpid()]
        if not found:
            raise ProtonError("no job of yours is listening on this host; start one with "
                              "`proton --listen main.py` (or PROTON_LISTEN=1)")
        targets += [t for t in found if t.pid not in pids]
    targets += [client.tcp_target(spec, token) for spec in connect]
    if not targets:
        raise ProtonError("name the jobs to capture: PID..., --all, or --connect HOST:PORT "
                          "(`proton ps` lists them)")
    return targets


def _snapshot(target: client.Target) -> client.Outcome:
    try:
        return client.snapshot(target)
    except (OSError, ProtocolError) as exc:
        return client.Outcome(target, error="cannot reach it: "
                              f"{printable(getattr(exc, 'strerror', '') or exc, MAX_MESSAGE)}")


@click.command("ps", context_settings={"help_option_names": ["-h", "--help"]})
def ps() -> None:
    """List the jobs listening for captures on this host: pid, rank, state, steps, command.
    Each job has 1.5 s to answer; one that cannot is listed as `unreachable: why`."""
    with standard_output_failures():
        _ps()


def _ps() -> None:
    targets = client.listening()
    if not targets:
        click.echo("no job is listening for captures (start one with `proton --listen "
                   "main.py`, `proton main.py`, proton.listen() or PROTON_LISTEN=1)")
        return
    rows = [("PID", "RANK", "STATE", "STEPS", "COMMAND")]
    for target, s in zip(targets, client.statuses(targets)):
        if isinstance(s, str):
            rows.append((str(target.pid), "", f"unreachable: {s}", "", ""))
            continue
        size = "?" if s.world_size is None else s.world_size
        rank = "" if s.rank is None else f"{s.rank}/{size}"
        state = "recording " + ", ".join(os.path.basename(p) for p in s.sessions) \
            if s.sessions else s.state
        rows.append((str(target.pid), rank, state, "" if s.steps is None else str(s.steps),
                     s.command))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
