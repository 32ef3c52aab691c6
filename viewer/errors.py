"""The viewer's error: one line naming the problem and the fix (no runtime import)."""
from __future__ import annotations

import difflib


class ViewerError(Exception):
    """Bad input to proton-viewer; the command prints it and exits with status 2."""

    exit_code = 2


def listing(names: list[str], most: int = 8, longest: int = 80) -> str:
    """Names for a one-line error: at most `most`, each cut at `longest` (C++ kernel names
    run to hundreds of characters; a regex needs only a piece)."""
    if not names:
        return "none"
    shown = [n if len(n) <= longest else n[:longest - 3] + "..." for n in names[:most]]
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(shown) + more


def did_you_mean(typed: str, choices: list[str]) -> str:
    """` (did you mean 'x'?)` naming the choice closest to `typed` (any case), or ""."""
    lower = {c.lower(): c for c in reversed(choices)}  # the first spelling of each
    close = difflib.get_close_matches(typed.strip().lower(), list(lower), n=1)
    return f" (did you mean {lower[close[0]]!r}?)" if close else ""
