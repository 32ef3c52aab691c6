"""Which source files a profile may make the viewer show: only those the user chose.

A profile names its source lines by absolute path (`/abs/file.py:LINE@kernel`), and a profile
may come from anyone: shown as it is, a frame `/proc/self/environ:1@k` would print the viewer's
environment, and `--html` would put it into a page meant for sharing. So a file is read only
when all of these hold:
  * its real path (symlinks resolved) lies under a source root: the profile's folder, the
    current folder, a folder given with `--source-root`, or the folder of the script that was
    profiled (`beside_script`: only a folder that holds a root already, the profile's or the
    current one, as a project holds its `runs/`; never one named by the profile alone); and
    below that root no folder or file is hidden (`.ssh`, `.venv`: name such a folder itself
    as a root to show it);
  * neither the path nor its real path is under /proc, /dev or /sys, whatever the roots;
  * it is a regular file with a source file's suffix (.py, .cu, .h, ...), of at most
    MAX_SOURCE_BYTES.
Otherwise the viewer shows the sampled lines without code and says why in one line.

Profiles are read on other machines, so the path a profile names is only where to start, as
debuggers' source maps treat it: first `--source-map OLD=NEW` rewrites a path that starts
with the folder OLD to start with NEW (a folder the user names, which becomes a root); then,
when that path cannot be shown, the longest ending of it (`tests/diagnose_workload.py`, then
`diagnose_workload.py`) that exists under a root is read instead, under every rule above.

The checks are made on the real path's text, and then exactly that path is opened: one
component at a time from "/", each relative to the folder opened before it and never through a
symlink (O_NOFOLLOW). A folder swapped for a symlink between the check and the open (another
user racing the viewer) makes the open fail instead of leading out of the roots.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..format import NEVER_READ as NEVER
from ..format import SOURCE_SUFFIXES as SUFFIXES
from .errors import ViewerError
from .select import python_frame

MAX_SOURCE_BYTES = 4 << 20
HOW = "add --source-root"
SUFFIX_PARTS = 16
"""The most trailing components of a profile's path tried under each root (a name may be
any length; a real project's files lie a few folders down)."""


@dataclass(slots=True, frozen=True)
class SourceRoots:
    """The folders whose files the viewer may show as source (real paths).

    Usage:
        roots = SourceRoots.default(["run1.hatchet"], extra=["~/kernels"])
        text, why = roots.read("/home/u/kernels/matmul.py")
    """

    folders: tuple[str, ...]
    maps: tuple[tuple[str, str], ...] = ()
    """(OLD, NEW) of each --source-map, the longest OLD first: NEW is a real path."""

    @classmethod
    def default(cls, profiles: Sequence[str], extra: Sequence[str] = (),
                maps: Sequence[str] = ()) -> SourceRoots:
        """The profiles' folders, the current folder, the `extra` folders the user gave and
        the NEW folder of each of `maps` (`OLD=NEW`, as --source-map takes them).

        Raises:
            ViewerError: a map that is not OLD=NEW with NEW a folder.
        """
        pairs = [parse_map(m) for m in maps]
        folders = [p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p))
                   for p in profiles if p != "-"]
        folders += [os.getcwd(), *(os.path.expanduser(e) for e in extra),
                    *(new for _, new in pairs)]
        return cls(tuple(dict.fromkeys(os.path.realpath(f) for f in folders)),
                   tuple(sorted(pairs, key=lambda p: -len(p[0]))))

    def beside_script(self, script: str | None) -> SourceRoots:
        """These roots and the folder of the script the profile was made of (`script`, an
        absolute path the profile names), where that folder's tree holds one of these roots
        (the profile sits in the project it profiled, one or more folders down), the script
        is a source file there and no folder on its way is hidden or a kernel interface.
        Otherwise these roots as they are: a profile from elsewhere names any path it likes.

        Usage:
            roots = SourceRoots.default(["runs/a.hatchet"]).beside_script("/proj/train.py")
        """
        if not script or not os.path.isabs(script):
            return self
        try:
            real = os.path.realpath(script)
        except OSError:
            return self
        folder = os.path.dirname(real)
        if (folder == os.sep or not real.lower().endswith(SUFFIXES) or not os.path.isfile(real)
                or any(_under(p, never) for p in (script, real) for never in NEVER)
                or _hidden_below(real, os.sep)
                or not any(_under(root, folder) for root in self.folders)):
            return self
        return replace(self, folders=tuple(dict.fromkeys((*self.folders, folder))))

    def beside_profile(self, root, job: dict) -> SourceRoots:
        """beside_script of the script the profile whose root frame is `root` (a hatchet
        node) was made of: its `job`'s `script` where the writer put it (the reader's
        Profile.job, which reads older files' root frame too), else the file of a top-level
        python frame `FILE:LINE@<module>` (-c python). The --html page's Source tab and
        --source both look there.

        Usage:
            roots = SourceRoots.default(["runs/a.hatchet"]).beside_profile(
                prof.gf.graph.roots[0], prof.job)
        """
        named = job.get("script")
        if isinstance(named, str):
            return self.beside_script(named)
        for child in root.children:
            m = python_frame(str(child.frame.get("name", "")))
            if m and m["function"] == "<module>":
                return self.beside_script(m["file"])
        return self

    def read(self, path: str) -> tuple[str | None, str | None]:
        """(the text of the file `path` names here: mapped, else by its longest ending under a
        root; None), or (None, one line saying why it is not shown and how to show it when
        the user can)."""
        text, why, _ = self.find(path)
        return text, why

    def find(self, path: str) -> tuple[str | None, str | None, str | None]:
        """read's (text, why), and the path on this machine the text was read from."""
        path = self.mapped(path)
        text, why = self._read(path)
        if text is not None or why is None or why.startswith(_NEVER_WHY):
            return text, why, path if text is not None else None
        for candidate in self._endings(path):
            if os.path.isfile(candidate):  # the longest ending there is; _read checks it all
                text, why = self._read(candidate)
                return text, why, candidate if text is not None else None
        if not os.path.lexists(path):  # another machine's path
            return None, ("source file not found on this machine, nor by its name under a "
                          f"source root; {HOW} DIR or --source-map {os.path.dirname(path)}=DIR "
                          "(DIR: where it is here)"), None
        return text, why, None

    def mapped(self, path: str) -> str:
        """`path` with the first --source-map whose OLD folder holds it applied."""
        for old, new in self.maps:
            if path == old or path.startswith(old.rstrip(os.sep) + os.sep):
                return new + path[len(old.rstrip(os.sep)):]
        return path

    def _endings(self, path: str):
        """Each root joined with each ending of `path`, the longest ending first."""
        parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
        if ".." in parts:  # an ending never climbs out of its root
            parts = parts[len(parts) - parts[::-1].index(".."):]
        parts = parts[-SUFFIX_PARTS:]
        for k in range(len(parts), 0, -1):
            for root in self.folders:
                yield os.path.join(root, *parts[-k:])

    def _read(self, path: str) -> tuple[str | None, str | None]:
        try:
            real = os.path.realpath(path)
        except OSError:  # a link that changed while it was resolved (Python < 3.13 raises)
            return None, "not shown: the path changed while it was read; try again"
        if any(_under(p, never) for p in (os.path.abspath(path), real) for never in NEVER):
            return None, _NEVER_WHY
        containing = [root for root in self.folders if _under(real, root)]
        if not containing:
            return None, ("not shown: not under the profile's folder, the current folder or a "
                          f"--source-root; {HOW} {os.path.dirname(real)} to show it")
        if all(_hidden_below(real, root) for root in containing):
            hidden = _hidden_below(real, containing[0])
            return None, f"not shown: in a hidden folder or file; {HOW} {hidden} to show it"
        if not real.lower().endswith(SUFFIXES):
            return None, ("not shown: not a source file (the viewer shows "
                          f"{', '.join(SUFFIXES)})")
        return _read_regular(real)


_NEVER_WHY = "not shown: files under /proc, /dev and /sys are never read"


def parse_map(text: str) -> tuple[str, str]:
    """`OLD=NEW` (--source-map) -> (OLD as given, NEW's real path).

    Raises:
        ViewerError: no `=`, an empty or relative OLD, or a NEW that is no folder here.
    """
    old, eq, new = text.partition("=")
    if not eq or not old or not new:
        raise ViewerError(f"--source-map {text!r} is not OLD=NEW; e.g. --source-map "
                          "/home/ci/proj=~/proj (the recording machine's folder = this one's)")
    if not os.path.isabs(old):
        raise ViewerError(f"--source-map {text!r}: OLD {old!r} is not an absolute path; give "
                          "the folder as the profile names it, e.g. /home/ci/proj")
    folder = os.path.expanduser(new)
    if not os.path.isdir(folder):
        raise ViewerError(f"--source-map {text!r}: NEW {new!r} is not a folder on this "
                          "machine; give the folder that holds the sources here")
    return old, os.path.realpath(folder)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _hidden_below(path: str, root: str) -> str | None:
    """The first hidden folder (or file) on the way from `root` down to `path`, if any."""
    at = root
    for part in os.path.relpath(path, root).split(os.sep):
        at = os.path.join(at, part)
        if part.startswith(".") and part not in (".", ".."):
            return at
    return None


_FOLDER = (getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0)
           | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
"""A folder on the way to a source file: opened only to open what is in it (O_PATH: a folder
the user may pass through but not list still works), never through a symlink."""
# O_NONBLOCK: a FIFO put at the file's name must not block the open
_FILE = (os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
         | getattr(os, "O_CLOEXEC", 0))


def _open_exactly(real: str) -> int:
    """An open file descriptor of the file at `real` (an absolute path without symlinks),
    reached from "/" one component at a time, none through a symlink: what is opened is what
    lies at `real` now. OSError otherwise (ELOOP or ENOTDIR where a symlink stands)."""
    if os.open not in os.supports_dir_fd or not hasattr(os, "O_NOFOLLOW"):  # not POSIX
        return os.open(real, _FILE)
    *folders, name = [part for part in real.split(os.sep) if part]
    at = os.open(os.sep, _FOLDER)
    try:
        for part in folders:
            inner = os.open(part, _FOLDER, dir_fd=at)
            os.close(at)
            at = inner
        return os.open(name, _FILE, dir_fd=at)
    finally:
        os.close(at)


def _read_regular(path: str) -> tuple[str | None, str | None]:
    try:
        fd = _open_exactly(path)
    except FileNotFoundError:
        return None, "source file not found on this machine"
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink stands where a folder was
            return None, "not shown: the path changed while it was read; try again"
        return None, f"source file cannot be read: {exc.strerror or exc}"
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None, "not shown: not a regular file"
        data = f.read(MAX_SOURCE_BYTES + 1)  # the size stat gave may have grown since
    if len(data) > MAX_SOURCE_BYTES:
        return None, f"not shown: larger than {MAX_SOURCE_BYTES >> 20} MiB"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "not shown: not UTF-8 text"
