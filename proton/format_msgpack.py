"""MessagePack for profiles (`hatchet_msgpack`, Triton's `get_msgpack`): the JSON values a
profile holds (None, bool, int, float, str, list, dict) in the spec's smallest encodings, and
back. Pure Python: no dependency for the one format Triton's newer Proton added.

Imports nothing of Proton: the writer and the viewer both use it.
"""
from __future__ import annotations

import struct
from typing import Any


class MsgpackError(ValueError):
    """Bytes that are not MessagePack of the JSON kinds."""


def packb(value) -> bytes:
    out = bytearray()
    stack = [value]
    while stack:  # an explicit stack: a profile may be nested any number of levels deep
        v = stack.pop()
        if v is None:
            out.append(0xC0)
        elif v is True:
            out.append(0xC3)
        elif v is False:
            out.append(0xC2)
        elif isinstance(v, int):
            out += _int(v)
        elif isinstance(v, float):
            out += b"\xcb" + struct.pack(">d", v)
        elif isinstance(v, str):
            data = v.encode("utf-8")
            n = len(data)
            out += (bytes([0xA0 | n]) if n < 32 else b"\xd9" + bytes([n]) if n < 256
                    else b"\xda" + struct.pack(">H", n) if n < 65536
                    else b"\xdb" + struct.pack(">I", n)) + data
        elif isinstance(v, (list, tuple)):
            n = len(v)
            out += (bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n)
                    if n < 65536 else b"\xdd" + struct.pack(">I", n))
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            n = len(v)
            out += (bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
                    if n < 65536 else b"\xdf" + struct.pack(">I", n))
            for key, item in reversed(list(v.items())):
                stack.append(item)
                stack.append(key)
        else:
            raise MsgpackError(f"cannot encode {type(v).__name__} values")
    return bytes(out)


def _int(v: int) -> bytes:
    if 0 <= v < 128:
        return bytes([v])
    if -32 <= v < 0:
        return struct.pack(">b", v)
    for lo, hi, head, fmt in ((0, 1 << 8, 0xCC, ">B"), (0, 1 << 16, 0xCD, ">H"),
                              (0, 1 << 32, 0xCE, ">I"), (0, 1 << 64, 0xCF, ">Q"),
                              (-(1 << 7), 0, 0xD0, ">b"), (-(1 << 15), 0, 0xD1, ">h"),
                              (-(1 << 31), 0, 0xD2, ">i"), (-(1 << 63), 0, 0xD3, ">q")):
        if lo <= v < hi:
            return bytes([head]) + struct.pack(fmt, v)
    raise MsgpackError(f"integer {v} does not fit in 64 bits")


def unpackb(data: bytes):
    """The value `data` encodes; MsgpackError when it is not MessagePack of JSON kinds."""
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise MsgpackError("truncated MessagePack")
        chunk = data[pos:pos + n]
        pos += n
        return chunk

    def unpack(fmt: str, n: int):
        return struct.unpack(fmt, take(n))[0]

    # containers being filled: [kind, target, items left, pending key]
    root: list = []
    stack: list = [["list", root, 1, None]]
    while stack:
        top = stack[-1]
        if top[2] == 0:
            stack.pop()
            continue
        b = take(1)[0]
        container = None
        value: Any
        if b <= 0x7F:
            value = b
        elif b >= 0xE0:
            value = b - 0x100
        elif 0xA0 <= b <= 0xBF:
            value = take(b & 0x1F).decode("utf-8")
        elif 0x90 <= b <= 0x9F:
            value, container = [], ("list", b & 0x0F)
        elif 0x80 <= b <= 0x8F:
            value, container = {}, ("dict", b & 0x0F)
        elif b == 0xC0:
            value = None
        elif b in (0xC2, 0xC3):
            value = b == 0xC3
        elif b in (0xCA, 0xCB):
            value = unpack(">f", 4) if b == 0xCA else unpack(">d", 8)
        elif 0xCC <= b <= 0xD3:
            fmt, n = {0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
                      0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8)}[b]
            value = unpack(fmt, n)
        elif b in (0xD9, 0xDA, 0xDB):
            n = unpack({0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[b], {0xD9: 1, 0xDA: 2, 0xDB: 4}[b])
            value = take(n).decode("utf-8")
        elif b in (0xDC, 0xDD):
            value, container = [], ("list", unpack(">H" if b == 0xDC else ">I",
                                                   2 if b == 0xDC else 4))
        elif b in (0xDE, 0xDF):
            value, container = {}, ("dict", unpack(">H" if b == 0xDE else ">I",
                                                   2 if b == 0xDE else 4))
        else:
            raise MsgpackError(f"byte 0x{b:02x} at {pos - 1} is not MessagePack of JSON kinds")
        kind, target = top[0], top[1]
        if kind == "list":
            target.append(value)
            top[2] -= 1
        elif top[3] is None:
            if isinstance(value, (list, dict)):
                raise MsgpackError("a map key that is a list or map")
            top[3] = (value,)
            continue
        else:
            target[top[3][0]] = value
            top[3] = None
            top[2] -= 1
        if container is not None:
            stack.append([container[0], value, container[1], None])
    if pos != len(data):
        raise MsgpackError(f"{len(data) - pos} bytes after the value")
    return root[0]
