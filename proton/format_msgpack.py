"""MessagePack for profiles (`hatchet_msgpack`, Triton's `get_msgpack`): the JSON values a
profile holds (None, bool, int, float, str, list, dict), through the `msgpack` package (C, with
its limits on lengths and nesting), as Triton's Proton reads them.

The package nests up to about 1,000 containers (a tree ~500 levels deep) each way; a profile
nests deeper where a recursion is profiled, so past that limit the values are walked with an
explicit stack while the package still writes and reads every header and scalar. Measured
(2-core CPU machine, a 1,000,001-frame profile of 89 MB): packed in 0.47 s and read in 4.9 s
(1.5 s of it without the garbage collector's passes), where the hand-written codec this
replaced took 5.7 s and 12.8 s.

Imports nothing of Proton: the writer and the viewer both use it.
"""
from __future__ import annotations

import msgpack

MAX_NESTING = 1_000_000
"""Containers one value may nest (the viewer reads JSON trees to ~500,000 levels: two a level)."""
_SCALARS = (str, int, float, bool, type(None))
_NOT_JSON = (b"\xc4", b"\xc5", b"\xc6", b"\xc7", b"\xc8", b"\xc9", b"\xd4", b"\xd5", b"\xd6",
             b"\xd7", b"\xd8")
"""The headers of MessagePack's bin type, which the package reads as bytes, and of its
extension types, of which it reads the timestamp (-1) itself: no JSON kind."""


class MsgpackError(ValueError):
    """Bytes that are not MessagePack of the JSON kinds, or a value that has no such encoding."""


class TooManyContainers(MsgpackError):
    """Bytes whose lists and maps cost more than the reader allowed (unpackb's budget)."""


def packb(value) -> bytes:
    """`value` (JSON kinds, any depth) as MessagePack, each value in its smallest encoding."""
    try:
        return msgpack.packb(value)
    except ValueError as exc:  # nested past the package's limit
        if "recursion" not in str(exc):
            raise MsgpackError(str(exc)) from None
    except (TypeError, OverflowError) as exc:
        raise MsgpackError(f"cannot encode: {exc}") from None
    return _pack_deep(value)


def _pack_deep(value) -> bytes:
    packer = msgpack.Packer()
    out = bytearray()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            out += packer.pack_array_header(len(v))
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            out += packer.pack_map_header(len(v))
            for key, item in reversed(list(v.items())):
                stack.append(item)
                stack.append(key)
        elif isinstance(v, _SCALARS):
            try:
                out += packer.pack(v)
            except (TypeError, OverflowError) as exc:
                raise MsgpackError(f"cannot encode: {exc}") from None
        else:
            raise MsgpackError(f"cannot encode {type(v).__name__} values")
    return bytes(out)


def unpackb(data: bytes, *, budget: tuple[int, int, int] | None = None):
    """The value `data` encodes; MsgpackError when it is not MessagePack of the JSON kinds
    (binary and extension types included) or nests deeper than MAX_NESTING.
    budget: (most, cost of a map, cost of a list): TooManyContainers as soon as the maps and
    lists made cost more than `most` (counted as they are made, ~10% slower: for the reader's
    files whose header bytes say they might)."""
    hooks = {}
    if budget is not None:
        most, map_cost, list_cost = budget
        charge = _charging(most)
        hooks = {"object_hook": lambda d: charge(d, map_cost),
                 "list_hook": lambda items: charge(items, list_cost)}
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_no_ext,
                                **hooks)
    except msgpack.StackError:
        value = _unpack_deep(data, budget)
    except TooManyContainers:
        raise
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.OutOfData, ValueError,
            TypeError, UnicodeDecodeError) as exc:
        raise MsgpackError(_why(exc)) from None
    if any(tag in data for tag in _NOT_JSON):  # else no such value can be in it: skip the walk
        _check_kinds(value)
    return value


def _charging(most: int):
    """A function adding up the cost of each container made (and returning it):
    TooManyContainers once they cost more than `most`."""
    spent = [0]

    def charge(container, cost: int):
        spent[0] += cost
        if spent[0] > most:
            raise TooManyContainers(f"lists and maps costing more than {most:,}")
        return container

    return charge


_STACK_ENTRY = 128
"""Bytes an open container's entry on _unpack_deep's stack takes (a list of four, a key)."""


def _no_ext(code: int, data: bytes):
    raise MsgpackError(f"extension type {code} is not one of the JSON kinds")


def _why(exc: Exception) -> str:
    if isinstance(exc, msgpack.ExtraData):
        return "bytes after the value"
    if isinstance(exc, msgpack.OutOfData):
        return "truncated MessagePack"
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, MsgpackError) else text.splitlines()[0][:200]


_ARRAY = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}
_MAP = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}
"""First bytes of array and map headers (the only bytes read here: the package does the rest)."""


def _unpack_deep(data: bytes, budget: tuple[int, int, int] | None = None):
    """unpackb past the package's nesting: containers opened with an explicit stack."""
    charge, costs = None, (0, 0)
    if budget is not None:
        charge, costs = _charging(budget[0]), (budget[1], budget[2])
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, ext_hook=_no_ext,
                                max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    root: list = []
    # containers being filled: [target, items left, whether a map, pending key]
    stack: list = [[root, 1, False, None]]
    try:
        while stack:
            top = stack[-1]
            if top[1] == 0:
                stack.pop()
                continue
            pos = unpacker.tell()
            if pos >= len(data):
                raise MsgpackError("truncated MessagePack")
            head, opened = data[pos], None
            if head in _ARRAY:
                opened = [[], unpacker.read_array_header(), False, None]
            elif head in _MAP:
                opened = [{}, unpacker.read_map_header(), True, None]
            value = unpacker.unpack() if opened is None else opened[0]
            target = top[0]
            if not top[2]:
                target.append(value)
                top[1] -= 1
            elif top[3] is None:
                if opened is not None:
                    raise MsgpackError("a map key that is a list or map")
                top[3] = (value,)
                continue
            else:
                target[top[3][0]] = value
                top[3] = None
                top[1] -= 1
            if opened is not None:
                if charge is not None:  # the container, and its entry on the stack
                    charge(opened[0], costs[0 if opened[2] else 1] + _STACK_ENTRY)
                if len(stack) > MAX_NESTING:
                    raise MsgpackError(f"nested deeper than {MAX_NESTING:,} lists and maps")
                stack.append(opened)
    except TooManyContainers:
        raise
    except (msgpack.OutOfData, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise MsgpackError(_why(exc)) from None
    if unpacker.tell() != len(data):
        raise MsgpackError(f"{len(data) - unpacker.tell()} bytes after the value")
    return root[0]


def _check_kinds(value) -> None:
    """Only JSON kinds inside `value` (the package gives bytes for MessagePack's bin type and
    a Timestamp for its timestamp extension)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for key, item in v.items():
                if not isinstance(key, _SCALARS):
                    raise MsgpackError(f"a map key {_kind(key)}")
                if isinstance(item, (dict, list)):
                    stack.append(item)
                elif not isinstance(item, _SCALARS):
                    raise MsgpackError(f"a value {_kind(item)}")
        elif isinstance(v, list):
            for item in v:
                if isinstance(item, (dict, list)):
                    stack.append(item)
                elif not isinstance(item, _SCALARS):
                    raise MsgpackError(f"a value {_kind(item)}")
        elif not isinstance(v, _SCALARS):
            raise MsgpackError(f"a value {_kind(v)}")


def _kind(value) -> str:
    if isinstance(value, msgpack.Timestamp):
        return "of extension type -1 (a timestamp), not one of the JSON kinds"
    return f"of type {type(value).__name__}, not one of the JSON kinds"
