"""Read a .hatchet file (ours or Triton's Proton's), or one piped into stdin, into a hatchet
GraphFrame; a tree of any depth (see deep.py and graph.py)."""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import re
import reprlib
import stat
import sys
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from ..format import (JOB_KEY, JOB_KEYS, LAUNCH_METADATA, PART_OF, SOURCE_FILE_BYTES,
                      SOURCE_TOTAL_BYTES, SOURCES_KEY, TABLE_COLUMNS, VECTOR_SHOWN, WARP_TIMELINE,
                      is_amount, job_of)
from . import deep, job_file
from .errors import ViewerError
from .job_file import JobRanks
from .timelines import check as check_timeline

if TYPE_CHECKING:  # hatchet loads with the graph (graph.py), not on import
    from hatchet import GraphFrame


@dataclass(slots=True)
class Profile:
    """A profile ready to derive metrics from."""

    gf: GraphFrame
    """hatchet.GraphFrame with inclusive columns ("X (inc)") computed."""
    inclusive: list[str]
    """Metrics summed over subtrees (those the file lists on its root)."""
    exclusive: list[str]
    """Metrics that belong to one node only (device_id, cpu_time (ns), "(exc)" user metrics)."""
    devices: dict = field(default_factory=dict)
    """The file's device table: {"CUDA": {"0": {"arch", "num_sms", ...}}}."""
    job: dict = field(default_factory=dict)
    """The writing process: rank, world_size, local_rank, host, pid (format.JOB_KEYS)."""
    notes: list[str] = field(default_factory=list)
    """What the reader should know about what is not shown (Parsed.notes)."""
    timelines: list[dict] = field(default_factory=list)
    """The kernels' warp timelines (Parsed.timelines)."""
    job_ranks: JobRanks | None = None
    """A job file's ranks statistics (job_file.read)."""
    job_rows: np.ndarray | None = None
    """A job file's data frame row of each frame, in job_ranks' (the file's) order."""
    sources: dict[str, str] = field(default_factory=dict)
    """The source files' text the profile carries (Parsed.sources)."""
    derived: dict = field(default_factory=dict)
    """What several parts of one view ask of the profile, derived once (derive.kernel_roofs:
    the page asked for it four times); whoever changes the profile's graph or table clears it
    (diff.diff_columns)."""


STDIN = "-"
"""The FILE that means standard input (`cat run.hatchet | proton-viewer -`)."""


@contextlib.contextmanager
def no_gc():
    """Python's collector rescans every object made so far each time many more are made: a
    profile's frames (their dicts, then hatchet's nodes, which do refer to each other) made a
    100,000-frame profile take 2.5 s to load against 1.6 s without it, and 256 rank files of
    5,000 frames 15.7 s against 4.6. What is made here is kept, or freed by its count."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load(path: str) -> Profile:
    """Parse and check `path` (`-`: standard input); raise ViewerError with a one-line reason
    when it is not a profile. Reads trees of any depth (see deep.py, graph.py).

    Usage:
        prof = load("run.hatchet")
        prof.gf.dataframe["time (ns) (inc)"]
    """
    with no_gc():
        return _load(path)


def _load(path: str) -> Profile:
    parsed = parse(path)
    root = parsed.root
    from .graph import from_tree  # hatchet is heavy (pandas, matplotlib): only for a good file

    deep.keep_limit()
    inclusive = sorted(m for m in root["metrics"] if "(inc)" not in m)
    made: list | None = [] if parsed.ranks is not None else None
    gf = from_tree(root, made)
    gf.inc_metrics = add_inclusive_columns(gf, [m for m in inclusive if m in gf.dataframe])
    exclusive = [c for c in gf.dataframe.columns
                 if c != "name" and c not in inclusive and not c.endswith(" (inc)")]
    rows = None
    if made is not None:  # a job file: each frame's row, for its statistics
        row_of = {node: i for i, node in enumerate(gf.dataframe.index)}
        rows = np.fromiter((row_of[node] for node in made), dtype=np.int64, count=len(made))
    return Profile(gf, inclusive, exclusive, parsed.devices, parsed.job, parsed.notes,
                   parsed.timelines, parsed.ranks, rows, parsed.sources)


@dataclass(slots=True)
class Parsed:
    """A profile file read and checked, before hatchet sees it."""

    root: dict
    """The root node, launch metadata frames dropped, vector metrics expanded."""
    devices: dict
    job: dict
    """The writing process (format.JOB_KEYS; {} for older files)."""
    notes: list[str] = field(default_factory=list)
    """What the reader should know about what is not shown (vectors cut)."""
    timelines: list[dict] = field(default_factory=list)
    """The kernels' warp timelines (format.WARP_TIMELINE, parsed, with their "path")."""
    sources: dict[str, str] = field(default_factory=dict)
    """{path: text} the profile carries for its source-line frames (format.SOURCES_KEY),
    untrusted text from whoever wrote it: only text, within the format's caps (_sources)."""
    ranks: JobRanks | None = None
    """A job file's ranks statistics, taken out of its nodes (job_file.read)."""


MAX_VECTOR = VECTOR_SHOWN
"""Elements of a vector metric expanded into metrics of their own (lens[0], lens[1], ...)."""
MAX_CELLS = 100_000_000
"""Frames x distinct metrics the viewer holds at most, whatever the file's size: its table has
a cell for each pair, so a metric on one frame costs a cell on every frame."""
MEMORY_FACTOR = 25
MIN_MEMORY = 128 << 20
"""Reading a file of `size` bytes and drawing its tree may take max(MIN_MEMORY, MEMORY_FACTOR x
size) bytes besides the viewer's own ~120 MB (memory_allowed); a file that would take more, by
COSTS, is refused in one line before its tree is built."""
COSTS = {"frames": 1600, "frame keys": 170, "metric values": 48, "cells": 24,
         "rank entries": 1200, "rank statistics": 450, "rank statistic cells": 56,
         "ranks not listed": 100, "maps": 256, "lists": 128}
"""Bytes each thing a file holds costs at the peak of reading it and drawing its tree
(resident memory, measured with bench/reader_memory.py on a 2-core CPU machine, rounded up):
a frame (its dicts, hatchet's node and frame, the table's row, the tree's line: ~1,500), a
frame key besides its name and type (a dict entry and hatchet's sorted copy), a metric value,
a cell of the table without one (frames x distinct metrics: a metric on one frame costs a cell
on every frame); a job file's frame with ranks statistics, one metric's statistics there, a
cell of its statistics table (frames x metrics with statistics), a rank it counts but does not
list; and a list or map as the file is decoded, before anything is checked (a map of one
entry takes ~190 bytes, from 3 bytes of MessagePack; an empty one ~70, from 1 byte: the
MessagePack bytes that may begin one are counted, and if they are too many, the lists and
maps themselves as they are made)."""


def memory_allowed(size: int) -> int:
    """The most memory the viewer takes to read a file of `size` bytes and draw its tree."""
    return max(MIN_MEMORY, MEMORY_FACTOR * size)


def _too_costly(name: str, size: int, counts: dict[str, int], *,
                more: bool = False) -> ViewerError | None:
    """The one-line refusal of a file of `size` bytes holding `counts` (COSTS' names; `more`:
    more than that) that would take more than memory_allowed(size); None when it fits."""
    costs = {what: n * COSTS[what] for what, n in counts.items()}
    total, allowed = sum(costs.values()), memory_allowed(size)
    if not more and total <= allowed:
        return None
    most = sorted((c, what) for what, c in costs.items() if c)[::-1][:2]  # what costs most
    held = ("more than " if more else "") + " and ".join(f"{counts[what]:,} {what}"
                                                         for _, what in most)
    extra = " (a metric on one frame takes a cell on every frame)" if most[0][1] == "cells" \
        else ""
    return ViewerError(f"{name} holds {held}{extra}: about {total / 2**20:,.0f} MiB to show, "
                       f"where the viewer takes up to {allowed / 2**20:,.0f} MiB for a file of "
                       f"{size:,} bytes ({MEMORY_FACTOR}x its size, at least "
                       f"{MIN_MEMORY >> 20} MiB)")


def _containers(data: bytes | str, msgpack: bool) -> dict[str, int]:
    """At most how many maps and lists `data` decodes to: the bytes that may open one (a JSON
    `{` or `[`; a MessagePack map or array header), in strings and numbers too."""
    if isinstance(data, str):
        return {"maps": data.count("{"), "lists": data.count("[")}
    if not msgpack:
        return {"maps": data.count(b"{"), "lists": data.count(b"[")}
    maps = len(data) - len(data.translate(None, _MSGPACK_MAPS))
    return {"maps": maps, "lists": len(data) - len(data.translate(None, _MSGPACK_LISTS))}


_MSGPACK_MAPS = bytes([*range(0x80, 0x90), 0xDE, 0xDF])
_MSGPACK_LISTS = bytes([*range(0x90, 0xA0), 0xDC, 0xDD])
"""The first bytes of MessagePack's map and array headers."""


def _check_containers(data: bytes | str, name: str, msgpack: bool) -> tuple | None:
    """Before `data` is decoded: ViewerError when its maps and lists alone would take more
    than memory_allowed; for MessagePack, whose header bytes occur in strings and numbers
    too, the budget to count them against as they are made (format_msgpack.unpackb)
    instead, else None. JSON's brackets inside strings (a warp timeline is JSON text) are
    left out of the count when with them it is too high."""
    found = _containers(data, msgpack)
    if _too_costly(name, len(data), found) is None:
        return None
    if msgpack:
        return memory_allowed(len(data)), COSTS["maps"], COSTS["lists"]
    outside: str | bytes = _JSON_TEXT.sub("", data) if isinstance(data, str) \
        else _JSON_BYTES.sub(b"", data)
    found = _containers(outside, False)
    del outside
    too_costly = _too_costly(name, len(data), found)
    if too_costly:
        raise too_costly
    return None


_JSON_BYTES = re.compile(rb'"(?:[^"\\]++|\\.)*+"?')
_JSON_TEXT = re.compile(r'"(?:[^"\\]++|\\.)*+"?')
"""A JSON string (one not closed runs to the end: each match succeeds, so the scan is linear
in the text however its quotes and backslashes are laid out)."""


def parse(path: str, *, prune_empty: bool = False) -> Parsed:
    """The checked tree, device table and writing process of the profile at `path`;
    ViewerError with a one-line reason when it is not one, or too large to hold.
    prune_empty: besides launch metadata frames, drop frames with no metrics and nothing under
    them, and a frame all of whose children were dropped, as Triton 3.6's viewer reads (its
    Python API and --output triton)."""
    name = "stdin" if path == STDIN else repr(path)
    msgpack = path != STDIN and path.endswith(MSGPACK_EXTENSION)
    data = read_bytes(path)
    size = len(data)
    budget = _check_containers(data, name, msgpack)
    if msgpack:
        doc = _unpack(data, name, budget)
    else:
        text = _text_of(data, path)
        del data  # the bytes, the text and the document are never all held at once
        doc = _decode(text, path, name)
        del text
    return _checked(doc, name, path, msgpack=msgpack, prune_empty=prune_empty, size=size)


def parse_data(data: str | bytes, name: str, *, prune_empty: bool = False) -> Parsed:
    """parse() of a profile already read (an open file's content): JSON text, or bytes of
    JSON or MessagePack; `name` says where it came from in errors."""
    msgpack = False
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            msgpack = True
    size = len(data)
    budget = _check_containers(data, name, msgpack)
    doc = _unpack(data, name, budget) if isinstance(data, bytes) else _decode(data, name, name)
    return _checked(doc, name, name, msgpack=msgpack, prune_empty=prune_empty, size=size)


def _decode(text: str, path: str, name: str):
    """The JSON document in `text`."""
    if not text.strip():
        raise ViewerError(f"{name} is empty; give the .hatchet file a profile wrote"
                          + (", e.g. cat run.hatchet | proton-viewer -" if path == STDIN
                             else ""))
    try:
        doc = deep.call(json.loads, text)
        if _SURROGATE.search(text):
            doc = _without_surrogates(doc)
    except json.JSONDecodeError as exc:
        raise _not_json(path, name, text, exc) from None
    except RecursionError:
        raise ViewerError(f"{name} nests deeper than the {deep.MAX_LEVELS:,} levels the "
                          "viewer reads") from None
    except ValueError:  # Python reads no int of more than 4,300 digits
        digits = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise ViewerError(f"{name} is not a profile: it holds a number of more than "
                          f"{digits:,} digits") from None
    return doc


def _checked(doc, name: str, path: str, *, msgpack: bool, prune_empty: bool,
             size: int) -> Parsed:
    """A decoded document of `size` bytes checked as a profile (parse)."""
    if isinstance(doc, dict) and "traceEvents" in doc:
        raise ViewerError(f"{name} is a Chrome trace (proton -d trace), not a tree; merge it "
                          f"for Perfetto with: proton-viewer --output trace "
                          f"{'FILE' if path == STDIN else path} > trace.json")
    if not (isinstance(doc, list) and len(doc) >= 1 and _is_node(doc[0])):
        raise ViewerError(f"{name} is JSON but not a .hatchet profile; expected "
                          "[root node, device table] as proton writes")
    devices = _check_devices(doc[1] if len(doc) > 1 else {})
    root = doc[0]
    carried, left = _sources(root.pop(SOURCES_KEY, None), name)
    job = {k: v for k in JOB_KEYS if _job_value(v := job_of(root).get(k))}
    root.pop(JOB_KEY, None)
    timelines, left_out, keys = _check_tree(root, name, size)
    if msgpack:
        _text_metric_names(root)  # MessagePack keys may be numbers; JSON's are text
    if prune_empty:
        _prune_empty(root)
    frames, metrics, cut, values = _expand_vectors(root, drop_launch_metadata=not prune_empty)
    cells = frames * len(metrics)
    if cells > MAX_CELLS:
        raise ViewerError(f"{name} has {frames:,} frames and {len(metrics):,} distinct metrics, "
                          f"{cells:,} cells; the viewer holds up to {MAX_CELLS:,} (a metric on "
                          "one frame takes a cell on every frame)")
    ranks = None if prune_empty else job_file.read(root, name)
    too_costly = _too_costly(name, size, {
        "frames": frames, "frame keys": keys, "metric values": values,
        "cells": cells - values,
        "rank entries": ranks.entries if ranks else 0,
        "rank statistics": ranks.values if ranks else 0,
        "rank statistic cells": frames * len(ranks.stats) if ranks else 0,
        "ranks not listed": ranks.size if ranks and not ranks.listed else 0})
    if too_costly:
        raise too_costly
    # Triton's reading (prune_empty) keeps them: its viewer warns of negative values itself
    impossible = {} if prune_empty else _drop_impossible(root, metrics)
    notes = [f"{name}: vector metric {metric!r} has {n:,} elements; the viewer shows the first "
             f"{MAX_VECTOR}" for metric, n in cut.items()] + left_out
    notes += [f"{name}: {n:,} value{'s' * (n != 1)} of {metric!r} left out: negative, infinite, "
              f"not a number{f' or over its {PART_OF[metric]!r}' if metric in PART_OF else ''}, "
              "which no measurement can be" for metric, n in impossible.items()]
    notes += [f"{name}: metric {column!r} is shown as {_renamed(column)!r} (the viewer's table "
              f"uses the name {column!r} itself)" for column in TABLE_COLUMNS
              if _renamed(column) in metrics]
    return Parsed(root, devices, job, notes + left, timelines, carried, ranks)


def _sources(found, name: str) -> tuple[dict[str, str], list[str]]:
    """The carried source files that are text named by text, within SOURCE_FILE_BYTES each and
    SOURCE_TOTAL_BYTES in all (in the file's order); a note when some are left out."""
    if found is None:
        return {}, []
    if not isinstance(found, dict):
        return {}, [f"{name}: its carried source ({SOURCES_KEY!r}) is not a map of files; "
                    "left out"]
    out: dict[str, str] = {}
    total, left = 0, 0
    for path, text in found.items():
        size = len(text.encode("utf-8", "replace")) \
            if isinstance(text, str) and len(text) <= SOURCE_FILE_BYTES else -1
        if not isinstance(path, str) or not 0 <= size <= SOURCE_FILE_BYTES \
                or total + size > SOURCE_TOTAL_BYTES:
            left += 1
            continue
        out[path] = text
        total += size
    note = [f"{name}: {left:,} carried source file{'s' * (left != 1)} left out: not text, or "
            f"past {SOURCE_FILE_BYTES >> 20} MiB a file or {SOURCE_TOTAL_BYTES >> 20} MiB in "
            "all"] if left else []
    return out, note


def _not_json(path: str, name: str, text: str, exc: json.JSONDecodeError) -> ViewerError:
    """Why text that is not JSON is no profile: a script given by mistake, a file cut short
    (the error at its end), or something else."""
    if path.endswith(".py"):
        return ViewerError(f"{name} is a Python script, not a profile; profile it with "
                           f"`proton {path}`, then read the .hatchet file it writes "
                           "(proton-viewer proton.hatchet)")
    if exc.pos >= len(text.rstrip()):
        return ViewerError(f"{name} is not a profile: not valid JSON ({exc}); the file may be "
                           "truncated, re-run the profile")
    return ViewerError(f"{name} is not a profile: not valid JSON ({exc}); give the .hatchet "
                       "file a profile wrote")


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: alone, it makes a string no terminal can print."""


def _without_surrogates(doc):
    """`doc` with every lone surrogate in its strings (values and keys) written as its escape
    (`\\ud800`): such a name is drawn as text rather than failing at the first print."""
    def text(s: str) -> str:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")

    root: list = [doc]
    stack: list = [root]
    while stack:
        container = stack.pop()
        if isinstance(container, dict):
            items = list(container.items())
            container.clear()
            container.update((text(k), v) for k, v in items)
        for key, value in (container.items() if isinstance(container, dict)
                           else enumerate(container)):
            if isinstance(value, str):
                container[key] = text(value)
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return root[0]


MSGPACK_EXTENSION = ".hatchet_msgpack"
"""A profile in MessagePack (Triton's Proton's output_format="hatchet_msgpack")."""


def _unpack(data: bytes, name: str, budget: tuple | None = None):
    """The MessagePack document in `data`, its maps and lists counted against `budget` (when
    given: _check_containers)."""
    from ..format_msgpack import MsgpackError, TooManyContainers, unpackb

    try:
        return unpackb(data, budget=budget)
    except TooManyContainers:
        allowed = memory_allowed(len(data))
        raise ViewerError(f"{name} holds more maps and lists than {allowed / 2**20:,.0f} MiB "
                          f"hold, where the viewer takes up to that for a file of "
                          f"{len(data):,} bytes ({MEMORY_FACTOR}x its size, at least "
                          f"{MIN_MEMORY >> 20} MiB)") from None
    except (MsgpackError, UnicodeDecodeError) as exc:
        raise ViewerError(f"{name} is not a profile: not valid MessagePack ({exc}); the file "
                          "may be truncated, re-run the profile") from None


MAX_MB_ENV = "PROTON_VIEWER_MAX_MB"
MAX_MB = 256
"""The largest file the viewer reads, in MiB, unless MAX_MB_ENV says otherwise: a profile takes
up to 25x its size in memory (memory_allowed)."""
MAX_MB_LIMIT = 1 << 20
"""The most MAX_MB_ENV may say (1 TiB): reads larger than Python can make are refused."""


def max_bytes() -> int:
    """The most bytes the viewer reads of one file: MAX_MB, or MAX_MB_ENV's number of MiB."""
    given = os.environ.get(MAX_MB_ENV)
    if given is None:
        return MAX_MB << 20
    try:
        mb = int(given) if len(given) <= 20 else 0
    except ValueError:
        mb = 0
    if not 0 < mb <= MAX_MB_LIMIT:
        raise ViewerError(f"{MAX_MB_ENV}={given[:40]!r} is not a number of MiB from 1 to "
                          f"{MAX_MB_LIMIT:,}; e.g. {MAX_MB_ENV}={MAX_MB * 4}")
    return mb << 20


def _too_big(name: str, limit: int) -> ViewerError:
    return ViewerError(f"{name} holds more than {limit >> 20:,} MiB, the most the viewer reads; "
                       f"to read it anyway set {MAX_MB_ENV} to more MiB")


def _not_waiting(path: str, flags: int) -> int:
    """open()'s opener: a FIFO opens without waiting for a writer (then fstat refuses it)."""
    return os.open(path, flags | os.O_NONBLOCK)


def _kind(mode: int) -> str | None:
    """What a file that is not a regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a regular file"


def read_bytes(path: str) -> bytes:
    """The bytes of the regular file `path`, or of standard input for `-`: at most
    max_bytes() (ViewerError past it, or for a device, pipe or folder: /dev/zero never ends)."""
    limit = max_bytes()
    if path == STDIN:
        if sys.stdin is None or sys.stdin.isatty():
            raise ViewerError("FILE is '-' but nothing is piped into stdin; e.g. "
                              "cat run.hatchet | proton-viewer -")
        data = read_stream(getattr(sys.stdin, "buffer", sys.stdin), "stdin")
        return data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    try:
        with open(path, "rb", opener=_not_waiting) as f:
            info = os.fstat(f.fileno())
            kind = _kind(info.st_mode)
            if kind is not None:
                fix = ("pipe it into stdin instead: ... | proton-viewer -" if "pipe" in kind
                       else "give the .hatchet file a profile wrote")
                raise ViewerError(f"{path!r} is {kind}, not a file; {fix}")
            if info.st_size > limit:
                raise _too_big(repr(path), limit)
            data = f.read(info.st_size + 1)  # no buffer of the limit's size made up front
            if len(data) > info.st_size:  # it grew since fstat
                data += f.read(limit + 1 - len(data))
    except FileNotFoundError:
        raise ViewerError(f"no such file {path!r}; give the .hatchet file a profile wrote") from None
    except IsADirectoryError:
        raise ViewerError(f"{path!r} is a folder; give a .hatchet file") from None
    except PermissionError:
        raise ViewerError(f"cannot read {path!r}: permission denied; make it readable "
                          f"(chmod u+r {path}) or run as a user who may read it") from None
    except OSError as exc:
        raise ViewerError(f"cannot read {path!r}: {exc.strerror or exc}; check the file and "
                          "its disk") from None
    if len(data) > limit:  # it grew after fstat
        raise _too_big(repr(path), limit)
    return data


def read_stream(stream, name: str) -> bytes | str:
    """What an open file (`stream`, binary or text) holds from where it is: at most
    max_bytes() (characters, for a text stream); ViewerError past it, or at once for a device
    or folder (/dev/zero never ends). `name` says what it is in errors."""
    limit = max_bytes()
    try:
        kind = _kind(os.fstat(stream.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # no descriptor (io.StringIO), or closed
        kind = None
    if kind in ("a device", "a folder"):
        raise ViewerError(f"{name} is {kind}, not a profile; give the .hatchet file a profile "
                          "wrote")
    try:
        data = stream.read(limit + 1)
    except OSError as exc:
        raise ViewerError(f"cannot read {name}: {exc.strerror or exc}; check the file") from None
    if len(data) > limit:
        raise _too_big(name, limit)
    return data


def read_text(path: str) -> str:
    """The text of `path`, or of standard input for `-` (read_bytes, as UTF-8)."""
    return _text_of(read_bytes(path), path)


def _text_of(data: bytes, path: str) -> str:
    """`data` read from `path` as UTF-8 text (ViewerError when it is not)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if path == STDIN:
            raise ViewerError(f"stdin is not a profile: not UTF-8 text ({exc}); pipe a "
                              ".hatchet file") from None
        raise ViewerError(f"{path!r} is not a profile: not UTF-8 text ({exc}); give the "
                          ".hatchet file a profile wrote") from None


def add_inclusive_columns(gf, metrics: list[str], names: list[str] | None = None) -> list[str]:
    """hatchet's update_inclusive_columns in one pass per metric (hatchet does pandas work per
    node: 26 s on 100k nodes): column names[i] (default `<metric> (inc)`) is metrics[i] summed
    over each subtree as subtree_sums sums it (the same digits), on lists indexed by row
    rather than dicts keyed by node (5x faster). Returns the names; gf.inc_metrics is the
    caller's."""
    import pandas as pd

    df = gf.dataframe
    levels = tree_levels(gf)
    if levels is None:
        rows, up, slots = _upward(gf)
    names = [f"{metric} (inc)" for metric in metrics] if names is None else names
    nan = float("nan")
    with warnings.catch_warnings():
        # a column insert per metric: pandas warns the frame is fragmented past ~100 inserts,
        # but one concat would copy the whole frame (twice the peak memory on a large profile)
        warnings.simplefilter("ignore", pd.errors.PerformanceWarning)
        for metric, name in zip(metrics, names):
            own = pd.to_numeric(df[metric], errors="coerce").to_numpy(dtype=float)
            if levels is not None:
                df[name] = level_sums(own, levels)
                continue
            inc = own.tolist()
            inc += [nan] * (slots - len(inc))
            for row, parent in zip(rows, up):  # children before parents, in file order
                value = inc[row]
                if value == value and parent >= 0:  # not NaN
                    total = inc[parent]
                    inc[parent] = value if total != total else total + value
            df[name] = np.array(inc[:len(df)])
    return names


LEVEL_SUMS_DEPTH = 1000
"""Deeper trees sum row by row (_upward): numpy's calls per level would cost more."""


def tree_levels(gf) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """For a tree whose maker listed its nodes (graph.every) and whose table rows are its
    node ids: (rows, their parents' rows) of each depth, the deepest first, a parent's
    children in their order; None for any other graph (a node with two parents, a table
    not in id order) or one deeper than LEVEL_SUMS_DEPTH."""
    every = getattr(gf.graph, "every", None)
    index = gf.dataframe.index
    if every is None or len(every) != len(index) or any(
            len(node.parents) > 1 for node in every) or not all(
            node._hatchet_nid == i for i, node in enumerate(index)):
        return None
    depth = np.fromiter((node._depth for node in every), dtype=np.int64, count=len(every))
    if not len(every) or depth.max() > LEVEL_SUMS_DEPTH:
        return None
    rows = np.fromiter((node._hatchet_nid for node in every), dtype=np.int64, count=len(every))
    up = np.fromiter((node.parents[0]._hatchet_nid if node.parents else -1 for node in every),
                     dtype=np.int64, count=len(every))
    order = np.argsort(-depth, kind="stable")  # every lists a parent's children in order
    depth, rows, up = depth[order], rows[order], up[order]
    cuts = np.flatnonzero(np.diff(depth)) + 1
    return [(r, u) for r, u, d in zip(np.split(rows, cuts), np.split(up, cuts),
                                      np.split(depth, cuts)) if d[0] > 0]


def level_sums(own: np.ndarray, levels: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """`own` summed over each subtree with the digits of the row-by-row sum (_upward's): a
    parent's own value, then each child's in order, NaN left out and NaN only where all are.
    A missing value starts as -0.0, which adds to any number exactly; np.add.at adds a
    parent's children one after another in their order."""
    inc = own.copy()
    has = ~np.isnan(inc)
    inc[~has] = -0.0
    for rows, up in levels:  # deepest first: a level's sums are whole before they are added
        np.add.at(inc, up, inc[rows])
        np.logical_or.at(has, up, has[rows])
    inc[~has] = np.nan
    return inc


def _upward(gf) -> tuple[list[int], list[int], int]:
    """The rows of gf's tree, each after its children and those in their order (so a sum
    over them adds the first child first, as subtree_sums does), each row's parent row (-1
    at a root), and how many rows there are: the data frame's, then the graph's nodes it
    lacks."""
    from itertools import repeat

    index = gf.dataframe.index
    n = len(index)
    extra: dict = {}  # a node the table lacks (by its id, or itself) -> its row, after its own
    if all(getattr(node, "_hatchet_nid", -1) == i for i, node in enumerate(index)):
        def row_of(node) -> int:  # the common case (reader.load): a node's row is its id, read
            row = node._hatchet_nid  # with no call of Node.__hash__ (a Python function)
            return row if 0 <= row < n else extra.setdefault(row, n + len(extra))
    else:
        slot = {node: i for i, node in enumerate(index)}

        def row_of(node) -> int:
            row = slot.get(node)
            return row if row is not None else extra.setdefault(node, n + len(extra))
    rows: list[int] = []
    up: list[int] = []
    stack = [(root, -1) for root in gf.graph.roots]
    while stack:  # pre-order of each node's children taken last first: reversed, post-order
        node, parent = stack.pop()
        row = row_of(node)
        rows.append(row)
        up.append(parent)
        if node.children:
            stack += zip(node.children, repeat(row))
    rows.reverse()
    up.reverse()
    return rows, up, n + len(extra)


def subtree_sums(post_order: list, own: dict) -> dict:
    """Node -> its own value (`own`, NaN where missing) plus its descendants', NaN only when
    all of those are NaN; `post_order`: the graph's nodes, children before parents."""
    inc: dict = {}
    for node in post_order:
        total = own.get(node, float("nan"))
        for child in node.children:
            value = inc[child]
            if value == value:  # not NaN
                total = value if total != total else total + value
        inc[node] = total
    return inc


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring = 2, 40  # a node's repr, not its subtree's


def _is_node(obj) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("frame"), dict) and "name" in obj["frame"]


def _check_tree(root: dict, name: str, size: int) -> tuple[list[dict], list[str], int]:
    """Every node has frame.name, metrics and children; names and frame keys become text (a
    name may be any text; hatchet sorts frames, so mixed types could not be compared).
    Returns the kernels' warp timelines, taken out of their frames, notes (_timelines) and
    how many frame keys there are besides the names and types. A file of `size` bytes with
    more frames than memory_allowed affords is refused as soon as they are counted."""
    found = False
    keys = frames = 0
    most = memory_allowed(size) // COSTS["frames"]
    stack = [root]
    while stack:
        node = stack.pop()
        frames += 1
        if frames > most:
            raise cast(ViewerError, _too_costly(name, size, {"frames": most}, more=True))
        is_node = _is_node(node)
        if is_node:
            if node.get("metrics") is None:
                node["metrics"] = {}
            if node.get("children") is None:
                node["children"] = []
        if not is_node or not isinstance(node["metrics"], dict) \
                or not isinstance(node["children"], list):
            raise ViewerError(f"{name} has a malformed node {_SHORT.repr(node)[:80]}; each node "
                              "needs frame.name, metrics and children")
        frame = node["frame"]
        keys += len(frame) - 1 - ("type" in frame)  # hatchet gives a frame a type if none
        found = found or WARP_TIMELINE in frame
        texts = True  # every key and value text: the common case, one pass over the frame
        for key, value in frame.items():
            if type(key) is not str or type(value) is not str:
                texts = False
                break
        if not texts:
            if not all(isinstance(k, str) for k in frame):  # MessagePack's keys may be numbers
                frame = node["frame"] = {_text(k): v for k, v in frame.items()}
            for key, value in frame.items():
                if not isinstance(value, str):
                    frame[key] = _text(value)
        stack.extend(node["children"])
    return (*(_timelines(root, name) if found else ([], [])), keys)


def _text(value) -> str:
    """A frame value that is not text, as text: a list or map shortened (str() of one nested
    300,000 levels deep took minutes and recursed)."""
    if value is None:
        return ""
    return _SHORT.repr(value) if isinstance(value, (list, dict)) else str(value)


def _timelines(root: dict, name: str) -> tuple[list[dict], list[str]]:
    """Each WARP_TIMELINE frame key, removed from its frame (hatchet need not carry it) and
    checked (timelines.check): the timeline's dict with "path", its kernel's call path from
    the root's child; and a note for each timeline left out, saying why."""
    out: list[dict] = []
    notes: list[str] = []
    names: list[str] = []  # each frame's name and its parent's place here: paths made only
    parents: list[int] = []  # for the timelines (a path per frame is quadratic in the depth)
    stack: list[tuple[dict, int]] = [(child, -1) for child in reversed(root["children"])]
    while stack:
        node, parent = stack.pop()
        frame = node["frame"]
        here = len(names)
        names.append(frame["name"])
        parents.append(parent)
        text = frame.pop(WARP_TIMELINE, None)
        if text is not None:
            t = check_timeline(text)
            if isinstance(t, dict):
                out.append({**t, "path": _path(here, names, parents)})
            else:
                notes.append(f"{name}: the warp timeline of {_SHORT.repr(frame['name'])} is "
                             f"left out: {t}")
        stack.extend((child, here) for child in reversed(node["children"]))
    return out, notes


def _path(at: int, names: list[str], parents: list[int]) -> list[str]:
    """The names from the root's child down to frame `at` (_timelines' numbering)."""
    path = []
    while at >= 0:
        path.append(names[at])
        at = parents[at]
    return path[::-1]


GPU_FIGURES = ("num_sms", "clock_rate", "memory_clock_rate", "bus_width")
"""A device table GPU's numbers the viewer computes peaks and occupancy with."""
MAX_FIGURE = 1e9
"""More than any GPU has of each (SMs, kHz, bits): a larger figure is not a GPU's."""


def _check_devices(table) -> dict:
    """The device table as the viewer uses it: {type: {id: {field: value}}}, ids as text, a
    GPU's figures (GPU_FIGURES) numbers from 1 to MAX_FIGURE; what is not is left out (the
    rules that need it then say they could not run)."""
    if not isinstance(table, dict):
        return {}
    out = {}
    for kind, devices in table.items():
        if not isinstance(devices, dict):
            continue
        out[str(kind)] = {str(dev): {str(k): v for k, v in gpu.items() if k not in GPU_FIGURES
                                     or _number(v) and 1 <= v <= MAX_FIGURE}
                          for dev, gpu in devices.items() if isinstance(gpu, dict)}
    return out


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _job_value(value) -> bool:
    """A rank, world size, pid (a whole number a process could have) or a host name."""
    return isinstance(value, str) or type(value) is int and 0 <= value < 1 << 31


LARGEST_INT = 1 << 63
"""Whole numbers past int64 become floats (pandas cannot hold them as numbers)."""


def _as_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:  # past 1.8e308
        return math.inf if value > 0 else -math.inf


def _expand_vectors(root: dict, *, drop_launch_metadata: bool = False
                    ) -> tuple[int, set[str], dict[str, int], int]:
    """A vector metric ("lens": [3, 5]) becomes one exclusive metric per element ("lens[0]",
    "lens[1]"), which every view can show, sort and export like any number; its first
    MAX_VECTOR elements only. A metric named as a column of the table (TABLE_COLUMNS: "node",
    refused when recorded since) is read as "node (metric)". (frames, distinct metric names, the longest length of each
    vector cut, metric values.) drop_launch_metadata: launch metadata frames (and what is
    under them) are dropped on the way (_drop_launch_children)."""
    frames, names, cut, values = 0, set[str](), dict[str, int](), 0
    element: dict = {}  # (vector, i) -> "vector[i]": one string for every frame's element i
    stack = [root]
    while stack:
        node = stack.pop()
        frames += 1
        metrics = node["metrics"]
        vector = big = False
        for value in metrics.values():  # one pass: most frames hold neither
            kind = type(value)
            if kind is int:
                big = big or not -LARGEST_INT <= value < LARGEST_INT
            elif kind is not float and isinstance(value, list):
                vector = True
        if vector:
            for key, value in metrics.items():
                if isinstance(value, list) and len(value) > MAX_VECTOR:
                    cut[key] = max(cut.get(key, 0), len(value))
            node["metrics"] = metrics = {
                k: v for key, value in metrics.items()
                for k, v in ([(element.get((key, i)) or element.setdefault((key, i),
                                                                          f"{key}[{i}]"), e)
                              for i, e in enumerate(value[:MAX_VECTOR])]
                             if isinstance(value, list) else [(key, value)])}
        if vector or big:
            for key, value in metrics.items():
                if type(value) is int and not -LARGEST_INT <= value < LARGEST_INT:
                    metrics[key] = _as_float(value)
        if not _TABLE_COLUMNS.isdisjoint(metrics):  # an older file's user metric
            node["metrics"] = metrics = {_renamed(k) if k in TABLE_COLUMNS else k: v
                                         for k, v in metrics.items()}
        names.update(metrics)
        values += len(metrics)
        stack += _drop_launch_children(node) if drop_launch_metadata else node["children"]
    return frames, names, cut, values


_TABLE_COLUMNS = frozenset(TABLE_COLUMNS)


def _drop_impossible(root: dict, metrics: set[str]) -> dict[str, int]:
    """Each amount (format.is_amount: a time, count, bytes, flops, samples) that is not a
    finite number of zero or more, and each part over its whole on its node (format.PART_OF),
    made None (the key stays: the root's keys say which metrics are inclusive); how many per
    metric. A negative time would make a child's inclusive time exceed its parent's and a
    share exceed its whole."""
    amounts = [m for m in metrics if is_amount(m)]
    parts = [(p, w) for p, w in PART_OF.items() if p in metrics and w in metrics]
    dropped: dict[str, int] = {}
    if not amounts:
        return dropped
    stack = [root]
    inf = math.inf
    while stack:
        node = stack.pop()
        values = node["metrics"]
        for metric in amounts if values else ():
            v = values.get(metric)
            if v is None:
                continue
            kind = type(v)  # the common kinds first: _number and isfinite calls cost 2x
            if not (v >= 0 if kind is int else 0 <= v < inf if kind is float
                    else _number(v) and math.isfinite(v) and v >= 0):
                values[metric] = None
                dropped[metric] = dropped.get(metric, 0) + 1
        for part, whole in parts:
            v, of = values.get(part), values.get(whole)
            if v is not None and of is not None and v > of:
                values[part] = None
                dropped[part] = dropped.get(part, 0) + 1
        stack.extend(node["children"])
    return dropped


def _renamed(column: str) -> str:
    """The name a metric called as one of the table's own columns is read under."""
    return f"{column} (metric)"


def _text_metric_names(root: dict) -> None:
    stack = [root]
    while stack:
        node = stack.pop()
        if not all(isinstance(k, str) for k in node["metrics"]):
            node["metrics"] = {str(k): v for k, v in node["metrics"].items()}
        stack.extend(node["children"])


def _drop_launch_children(node: dict) -> list:
    """The node's children, its launch metadata children dropped (a new list only where there
    are some). Names are text here (_check_tree)."""
    # Triton's newer Proton names it per kernel: __proton_launch_metadata:<kernel>
    kids = node["children"]
    for child in kids:
        if child["frame"]["name"].startswith(LAUNCH_METADATA):
            kids = node["children"] = [c for c in kids
                                       if not c["frame"]["name"].startswith(LAUNCH_METADATA)]
            break
    return kids


def _prune_empty(root: dict) -> None:
    """Triton 3.6's viewer's frame removal, without recursion: launch metadata frames, frames
    with no metrics and no children, and frames whose children were all removed (even with
    metrics of their own) go; ROOT stays, if only as itself."""
    order, stack = [], [root]
    while stack:  # parents before children; reversed, children before parents
        node = stack.pop()
        order.append(node)
        stack.extend(node["children"])
    gone: set[int] = set()
    for node in reversed(order):
        kids = node["children"]
        node["children"] = [c for c in kids if id(c) not in gone]
        if str(node["frame"]["name"]).startswith(LAUNCH_METADATA) \
                or (not node["metrics"] and not kids) or (kids and not node["children"]):
            gone.add(id(node))
