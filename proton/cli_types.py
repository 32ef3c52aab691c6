"""Click parameter types the commands share."""
from __future__ import annotations

import click

from . import settings


class Seconds(click.ParamType):
    """A finite number of seconds over `low` (from `low` when not `low_open`) up to a day:
    click's FloatRange takes nan, of which no comparison is true (a timer that spins), and inf
    (one that never fires)."""

    name = "seconds"

    def __init__(self, low: float, low_open: bool = False) -> None:
        self.low, self.low_open = low, low_open

    def convert(self, value, param, ctx) -> float:
        try:
            return settings.seconds(str(value), low=self.low, low_open=self.low_open)
        except ValueError:
            bound = f"over {self.low:g}" if self.low_open else f"from {self.low:g}"
            self.fail(f"{str(value)[:40]!r} is not a number of seconds {bound} to "
                      f"{settings.DAY:g}", param, ctx)
