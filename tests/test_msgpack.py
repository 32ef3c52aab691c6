"""The MessagePack codec of `hatchet_msgpack` files and `proton.data.get_msgpack`."""
from __future__ import annotations

import random

import pytest

from proton.format_msgpack import MsgpackError, packb, unpackb


def value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-2 ** 63, 2 ** 64)
    if kind == 2:
        return rng.choice([0, 1, -1, 127, 128, -32, -33, 255, 256, 65535, 65536, 2 ** 32,
                           -2 ** 31 - 1, -2 ** 63])
    if kind == 3:
        return rng.random() * 10 ** rng.randrange(-5, 20)
    if kind == 4:
        text = "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.choice([0, 5, 31, 32])))
        return text * rng.choice([1, 10, 3000])  # up to str 32 encodings
    if kind == 5:
        return rng.choice(["ROOT", "time (ns)", "ñ·ü"])
    if kind == 6:
        return [value(rng, depth + 1) for _ in range(rng.choice([0, 3, 15, 16, 20]))]
    return {f"k{i}": value(rng, depth + 1) for i in range(rng.choice([0, 2, 15, 16, 17]))}


def test_random_values_round_trip():
    rng = random.Random(3)
    for _ in range(300):
        v = value(rng)
        assert unpackb(packb(v)) == v


def test_the_spec_encodings():
    assert packb([1, -1, "a", None, True, 1.5]) == (b"\x96\x01\xff\xa1a\xc0\xc3"
                                                     b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00")
    assert packb({"n": 300}) == b"\x81\xa1n\xcd\x01\x2c"


def test_a_tree_of_any_depth():
    deep: list = []
    node = deep
    for _ in range(20_000):
        child: list = []
        node.append(child)
        node = child
    back, levels = unpackb(packb(deep)), 0
    while back:
        back, levels = back[0], levels + 1
    assert levels == 20_000


@pytest.mark.parametrize("bad", [b"\xc1", b"\x92\x01", b"\x01\x02", b"\x81\x90\x01", b""])
def test_what_is_not_msgpack_is_an_error(bad):
    with pytest.raises(MsgpackError):
        unpackb(bad)
    with pytest.raises(MsgpackError):
        packb({1j})
