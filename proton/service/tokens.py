"""The TCP endpoints' token: where it may come from, and whether it is strong enough.

A token on a command line is readable by every user of the host (/proc/PID/cmdline), so it
comes from the environment (PROTON_TOKEN) or from a file only its owner may read
(--token-file). A token must carry at least MIN_BITS of entropy as estimated from its length
and alphabet: a 4-digit token falls to a loopback client in about a second.
"""
from __future__ import annotations

import math
import os
import stat
import string

from ..errors import ProtonError

TOKEN_ENV = "PROTON_TOKEN"
MIN_BITS = 128
MAX_FILE = 4096
"""Bytes of a token file read at most (a token is one line)."""
MAKE_ONE = "e.g. PROTON_TOKEN=$(openssl rand -hex 16)"
ON_COMMAND_LINE = ("--token on the command line is readable by every user of this host "
                   f"(/proc/PID/cmdline); set {TOKEN_ENV} or give --token-file FILE (mode 0600)")


def bits(token: str) -> float:
    """Entropy estimate: length x log2 of the smallest usual alphabet that holds every
    character (a token of one or two distinct characters: none)."""
    classes = [string.digits, string.hexdigits.lower(), string.hexdigits.upper(),
               string.ascii_lowercase + string.digits, string.ascii_uppercase + string.digits,
               string.ascii_letters + string.digits + "+/=-_"]
    size = next((len(set(c)) for c in classes if set(token) <= set(c)), 95)
    if len(set(token)) <= 2:
        return 0.0
    return len(token) * math.log2(size)


def check(token: str, where: str) -> str:
    """The token, stripped of a trailing newline, if strong enough.

    Raises:
        ProtonError: too weak (one line: how many bits, and how to make one).
    """
    token = token.rstrip("\r\n")
    if bits(token) < MIN_BITS:
        raise ProtonError(f"the token from {where} is too weak (about {bits(token):.0f} bits; "
                          f"{MIN_BITS} needed): {MAKE_ONE}")
    return token


def read_file(path: str) -> str:
    """A token file's first line; the file must be a regular file of this user that no one
    else may read or write.

    Raises:
        ProtonError: the file is missing, shared, or not a regular file (one line).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ProtonError(f"--token-file {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ProtonError(f"--token-file {path}: not a regular file")
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ProtonError(f"--token-file {path}: other users may read or change it (owner "
                              f"uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); "
                              f"chmod 600 {path}")
        data = os.read(fd, MAX_FILE)
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace").splitlines()
    return check(text[0] if text else "", f"--token-file {path}")


def find(token_file: str | None) -> str | None:
    """The token from --token-file, else from PROTON_TOKEN, else None; checked for strength.

    Raises:
        ProtonError: a weak token or a bad file (one line).
    """
    if token_file:
        return read_file(token_file)
    value = os.environ.get(TOKEN_ENV)
    return check(value, TOKEN_ENV) if value else None
