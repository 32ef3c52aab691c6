"""The TCP endpoints' token: where it may come from, and whether it is strong enough.

A token on a command line is readable by every user of the host (/proc/PID/cmdline), so it
comes from the environment (PROTON_TOKEN) or from a file only its owner may read
(--token-file). A token must carry at least MIN_BITS of entropy as estimated from its length, its alphabet and
its repeats (bits): a 4-digit token falls to a loopback client in about a second, and a right
token is always let in at once (gate.py), so its strength is the only bound on guessing.
"""
from __future__ import annotations

import hashlib
import hmac
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


CLASSES = (string.digits, string.hexdigits.lower(), string.hexdigits.upper(),
           string.ascii_lowercase + string.digits, string.ascii_uppercase + string.digits,
           string.ascii_letters + string.digits + "+/=-_")
"""The usual alphabets of generated tokens, smallest first (any other: the 95 printable)."""
RUN = 8
"""Characters from which a stretch that repeats earlier text, or steps evenly (aaaaaaaa,
abcdefgh, 13579bdf), counts as one choice: in a random token of 32 hex characters such a
stretch comes less than once in 500,000 tokens; in `passwordpassword` every time."""


def bits(token: str) -> float:
    """Entropy estimate: each character costs log2 of the smallest usual alphabet that holds
    them all (of the characters used, when they are fewer than an eighth of it: `abcab...`
    is drawn from 3, not from 36), except that a stretch of RUN or more that repeats earlier
    text or steps evenly costs only where and how long it is. So `passwordpasswordpassword1`
    rates about 56 bits, not 129, and a generated token its full length x alphabet."""
    size = next((len(set(c)) for c in CLASSES if set(token) <= set(c)), 95)
    used = len(set(token))
    if used < size / 8:
        size = used
    if size <= 1:
        return 0.0
    per_character, per_run = math.log2(size), 2 * math.log2(max(len(token), 2))
    total, at = 0.0, 0
    while at < len(token):
        run = _structured_run(token, at)
        total += per_run if run else per_character
        at += run or 1
    return total


def _structured_run(token: str, at: int) -> int:
    """The length of the stretch from `at` that repeats earlier text (overlapping it, as in
    abcabcabc) or steps evenly, when it is RUN or longer; else 0."""
    if at + RUN > len(token):
        return 0
    source = token.find(token[at:at + RUN], 0, at + RUN - 1)  # starts before `at`
    if source >= 0:
        length = RUN
        while at + length < len(token) and token[source + length] == token[at + length]:
            length += 1
        return length
    step = ord(token[at + 1]) - ord(token[at])
    length = 2
    while at + length < len(token) and \
            ord(token[at + length]) - ord(token[at + length - 1]) == step:
        length += 1
    return length if length >= RUN else 0


def digest(token: str) -> bytes:
    """What a token is compared by: equal-length digests make the comparison take the same
    time whatever is sent (compare_digest alone returns early on a length that differs)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()  # a lone surrogate


def matches(token: str, expected: bytes) -> bool:
    """`token` is the one whose digest() is `expected`, compared in constant time."""
    return hmac.compare_digest(digest(token), expected)


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
