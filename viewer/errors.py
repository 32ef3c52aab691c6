"""The viewer's error: one line naming the problem and the fix (no runtime import)."""


class ViewerError(Exception):
    """Bad input to proton-viewer; the command prints it and exits with status 2."""

    exit_code = 2
