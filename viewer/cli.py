"""The `proton-viewer` command: list metrics, or show the call tree with derived metrics."""
from __future__ import annotations

import sys

import click

from .errors import ViewerError

EPILOG = """\b
Examples:
  proton-viewer run1.hatchet                     # tree with kernel (or CPU) time in ms
  proton-viewer -l run1.hatchet                  # metrics the file has and can derive
  proton-viewer -m time/ms,avg_time/us,count run1.hatchet
  proton-viewer -m tflop16/s,time/% -d 3 run1.hatchet
"""


@click.command(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.option("-l", "--list", "list_metrics", is_flag=True, help="List the metrics and exit.")
@click.option("-m", "--metrics", default=None,
              help="Comma-separated metrics, e.g. time/ms,avg_time/us,count,tflop16/s,time/% "
              "(default: time/ms, or cpu_time/ms for a profile without kernels).")
@click.option("-d", "--depth", type=click.IntRange(min=0), default=100, show_default=True,
              help="Deepest level of the tree to show.")
@click.argument("profile", metavar="FILE.hatchet")
def viewer(list_metrics: bool, metrics: str | None, depth: int, profile: str) -> None:
    """Show the call tree of a Proton profile (ours or Triton's Proton's)."""
    try:
        _show(list_metrics, metrics, depth, profile)
    except ViewerError as exc:
        raise _Failed(str(exc)) from None


class _Failed(click.ClickException):
    """Printed by click as `Error: ...` on stderr, exit status 2."""

    exit_code = 2


def _show(list_metrics: bool, metrics: str | None, depth: int, profile: str) -> None:
    from rich.console import Console

    from .derive import available, derive
    from .reader import load
    from .render import tree_table

    prof = load(profile)
    # Piped or redirected output keeps whole kernel names on one line for grep and diff.
    tty = sys.stdout.isatty()
    console = Console() if tty else Console(width=100_000)
    if list_metrics:
        console.print("inclusive: " + ", ".join(prof.inclusive), soft_wrap=True)
        console.print("exclusive: " + ", ".join(prof.exclusive), soft_wrap=True)
        console.print("derived:   " + ", ".join(available(prof)), soft_wrap=True)
        return
    if metrics is None:
        metrics = "time/ms" if "time/ms" in available(prof) else (
            "cpu_time/ms" if "cpu_time/ms" in available(prof) else None)
        if metrics is None:
            raise ViewerError(f"{profile!r} holds no time metric; choose one with -m "
                              f"(see proton-viewer -l {profile})")
    columns = [derive(prof, spec) for spec in metrics.split(",") if spec.strip()]
    console.print(tree_table(prof.gf, columns, depth=depth, nbsp=tty))


def main() -> None:
    """Console entry point."""
    viewer.main(prog_name="proton-viewer")
