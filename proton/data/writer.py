"""Write any profile document (a tree that document.py builds, or a Chrome trace that
chrome_trace.py builds) to its file, as JSON or MessagePack: encoded into a temporary file,
salvaged into the private temporary folder when the path fails, and handed to place.py, which
puts the finished file at its name.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import tempfile
from typing import Any

from ..errors import ProfileWriteError, SessionError
from ..files import Folder, create_beside, fit, name_max
from ..format import CHILDREN_KEY, FRAME_KEY, JOB_KEY, METRICS_KEY
from ..format_msgpack import packb
from ..report import warn
from .document import finite_or_none
from .metrics import real_number
from .place import place

FORMATS = {"tree": ("", "hatchet", "hatchet_msgpack"), "trace": ("", "chrome_trace")}


def check_format(data: str, output_format: str) -> None:
    if output_format not in FORMATS[data]:
        raise SessionError(f"output_format={output_format!r} is not supported for "
                           f"data={data!r}; use {FORMATS[data][1]!r}")


def write(doc: Any, path: str, since: float | None = None, encoding: str = "json",
          keep: bool = False) -> str:
    """Write a document built above to `path` (through a temporary file moved into place, so
    no reader, and no second signal, ever sees half a file) and return the path written.

    Another process's profile is never overwritten: when `path` holds one that a live process
    on this host wrote, or one written after `since` (time.time() when this profile began: a
    process of the same name that ran alongside), this one goes to NAME.pid<PID>.<ext> beside
    it, with a warning. A profile from an earlier run, or from this process, is replaced;
    with `keep` (a capture's) only a file this process wrote is replaced, anything else stays
    and the profile goes beside it. `encoding`: "json", or "msgpack" (hatchet_msgpack).

    A value the encoder refuses costs only that value (written as null, with a warning), and
    whatever else goes wrong at `path`, the profile is written to the temporary folder. No
    file is opened through a name another user could have placed (see proton/files.py).

    Raises:
        ProfileWriteError: `path` could not be written; the profile went to a file in the
            temporary folder instead, which the message names (or it says that failed too).
    """
    try:
        return _dump_or_salvage(doc, path, since, encoding, keep)
    except Exception as exc:  # not only OSError: the profile must not be lost to a bug here
        reason = _reason(exc, path)
    fallback = None
    try:
        fallback = _fallback(path)
        _dump_or_salvage(doc, fallback, encoding=encoding)
    except Exception as exc:
        _drop_fallback(path)
        raise ProfileWriteError(f"could not write the profile to {path} ({reason}) nor to "
                                f"{fallback or 'the temporary folder'} "
                                f"({_reason(exc, fallback or '')}); free space or give "
                                "another name") from None
    raise ProfileWriteError(f"could not write {path} ({reason}); wrote {fallback} instead; "
                            "give a name in a writable folder")


_fallbacks: dict[str, str] = {}
"""Target path -> the folder its profile went to instead (this process's): a later write of
the same target (a periodic snapshot, the final write) replaces the file there."""


def _fallback(path: str) -> str:
    """Where the profile meant for `path` goes instead: in a fresh folder only this user may
    enter (mkdtemp: no name in it can be pre-placed), the same one for every write of `path`
    while that folder is still this user's and private."""
    folder = _fallbacks.get(path)
    if folder is not None:
        try:
            info = os.lstat(folder)
        except OSError:
            info = None
        if info is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() \
                or stat.S_IMODE(info.st_mode) & 0o077:
            folder = None  # removed (or replaced by another's): a new one
    if folder is None:
        folder = _fallbacks[path] = tempfile.mkdtemp(prefix="proton-")
    # a name too long for any folder still goes (shortened): the profile is not lost to it
    return os.path.join(folder, fit(os.path.basename(path), name_max(folder)))


def _drop_fallback(path: str) -> None:
    """The fallback folder of `path` removed if nothing was written there: a failed attempt
    leaves no empty folder in the temporary folder."""
    folder = _fallbacks.get(path)
    if folder is not None:
        with contextlib.suppress(OSError):
            os.rmdir(folder)  # fails when an earlier write is there: kept, for later ones
            del _fallbacks[path]


def _reason(exc: Exception, path: str) -> str:
    """Why writing `path` failed, in a few words on one line."""
    if not isinstance(exc, OSError):
        return " ".join(f"{type(exc).__name__}: {exc}".split())
    reason = exc.strerror or str(exc)
    name = str(exc.filename or "")
    the_file = name.startswith(path) or name == os.path.basename(path) or (
        os.sep not in name and name.endswith(".tmp"))  # its temporary file
    if name and not the_file:
        reason += f": {name}"  # a folder on the way that could not be made
    return reason


def _dump_or_salvage(doc, path: str, since: float | None = None,
                     encoding: str = "json", keep: bool = False) -> str:
    """_dump; when the document holds a value the encoder refuses, _dump of a copy with only
    JSON's kinds (see _plain), with a warning: the rest of the profile is still written."""
    try:
        return _dump(doc, path, since, encoding, keep)
    except OSError:
        raise
    except Exception as exc:
        plain, dropped = _plain(doc)
        warn(f"{path}: {_reason(exc, path)}; writing it with {dropped} value(s) that are not "
             "numbers, text, lists or maps as null")
        return _dump(plain, path, since, encoding, keep)


def plain(doc: Any) -> Any:
    """`doc` as its file holds it (_plain's copy)."""
    return _plain(doc)[0]


def _plain(doc: Any) -> tuple[Any, int]:
    """A copy of `doc` holding only what JSON and MessagePack encode: numbers made plain ints
    and floats (null when not finite), text as UTF-8 allows, keys as text, any other value
    null; and how many values were made null. Without recursion: a tree may be any depth."""
    dropped = 0

    def leaf(value: Any) -> Any:
        nonlocal dropped
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return value.encode("utf-8", "replace").decode("utf-8")  # lone surrogates
        try:
            return finite_or_none(real_number(value))
        except (TypeError, ValueError, OverflowError):
            dropped += 1
            return None

    out: list = [None]
    todo: list = [(doc, out, 0)]
    copy: Any
    while todo:
        value, into, at = todo.pop()
        if isinstance(value, dict):
            into[at] = copy = {}
            for key, item in value.items():
                key = leaf(key) if isinstance(key, str) else str(key)
                copy[key] = None  # the key's place now: keys keep their order
                todo.append((item, copy, key))
        elif isinstance(value, (list, tuple)):
            into[at] = copy = [None] * len(value)
            todo.extend((item, copy, i) for i, item in enumerate(value))
        else:
            into[at] = leaf(value)
    return out[0], dropped


DEEP = 200
"""Deeper trees than this are encoded without recursion (json's encoder recurses per level)."""


def _dump(doc, path: str, since: float | None = None, encoding: str = "json",
          keep: bool = False) -> str:
    where, base = os.path.split(path)
    with Folder(where, create=True) as folder:  # reached as files.Folder says
        f, tmp = create_beside(folder, base, binary=encoding == "msgpack")  # no one placed it
        held = os.dup(f.fileno())  # its lock (files.py) held until it is placed
        try:
            with f:
                if encoding == "msgpack":
                    f.write(packb(doc))
                elif isinstance(doc, list) and doc and _depth(doc[0]) > DEEP:
                    _encode_tree(doc, f.write)
                else:
                    json.dump(doc, f, allow_nan=False)
            return place(folder, tmp, base, since, keep)  # a reader never sees half a file
        except BaseException:
            with contextlib.suppress(OSError):
                folder.remove(tmp)
            raise
        finally:
            os.close(held)


def _depth(root: dict) -> int:
    deepest, todo = 0, [(root, 1)]
    while todo:
        node, level = todo.pop()
        deepest = max(deepest, level)
        todo.extend((child, level + 1) for child in node[CHILDREN_KEY])
    return deepest


def _encode_tree(doc: list, write) -> None:
    """json.dump of [root node, device table], byte for byte, with an explicit stack."""
    dumps = functools.partial(json.dumps, allow_nan=False)

    def open_node(node: dict) -> None:
        # the root's JOB_KEY before its children: in the file's first bytes, where place.py looks
        job = f'"{JOB_KEY}": {dumps(node[JOB_KEY])}, ' if JOB_KEY in node else ""
        write(f'{{"{FRAME_KEY}": {dumps(node[FRAME_KEY])}, {job}'
              f'"{METRICS_KEY}": {dumps(node[METRICS_KEY])}, "{CHILDREN_KEY}": [')

    def close_node(node: dict) -> None:  # keys after the children (the root's SOURCES_KEY)
        write("]" + "".join(f", {dumps(k)}: {dumps(v)}" for k, v in node.items()
                            if k not in (FRAME_KEY, JOB_KEY, METRICS_KEY, CHILDREN_KEY)) + "}")

    write("[")
    open_node(doc[0])
    stack = [[iter(doc[0][CHILDREN_KEY]), True, doc[0]]]  # (children left, none written yet)
    while stack:
        top = stack[-1]
        child = next(top[0], None)
        if child is None:
            stack.pop()
            close_node(top[2])
            continue
        if not top[1]:
            write(", ")
        top[1] = False
        open_node(child)
        stack.append([iter(child[CHILDREN_KEY]), True, child])
    for rest in doc[1:]:
        write(f", {dumps(rest)}")
    write("]")
