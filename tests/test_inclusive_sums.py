"""The inclusive sums the reader adds, level by level in numpy, against the plain row-by-row
sum (reader.subtree_sums over hatchet's nodes): the same bits, NaN and -0.0 included."""
import math
import random

import numpy as np
import pytest

from proton.viewer import reader
from proton.viewer.graph import from_tree, post_order


def _tree(rng: random.Random, frames: int) -> dict:
    values = [math.nan, -0.0, 0.0, 1e-300, 1e300, math.inf, 0.1, 0.2, 0.3, 7.0]
    root = {"frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 0.0},
            "children": []}
    made = [root]
    for i in range(frames - 1):
        parent = rng.choice(made[-50:]) if rng.random() < 0.9 else rng.choice(made)
        value = rng.choice(values) if rng.random() < 0.5 else rng.uniform(0, 1e6)
        node = {"frame": {"name": f"f{rng.randrange(8)}", "type": "function"},
                "metrics": {} if math.isnan(value) else {"time (ns)": value}, "children": []}
        parent["children"].append(node)
        made.append(node)
    return root


@pytest.mark.parametrize("seed", range(6))
def test_level_sums_are_the_row_by_row_sums_bit_for_bit(seed):
    gf = from_tree(_tree(random.Random(seed), 3_000))
    assert reader.tree_levels(gf) is not None  # the numpy path is the one under test
    reader.add_inclusive_columns(gf, ["time (ns)"])
    df = gf.dataframe
    own = {node: v for node, v in zip(df.index, df["time (ns)"].tolist())}
    expected = reader.subtree_sums(post_order(gf.graph), own)
    got = df["time (ns) (inc)"].tolist()
    want = [expected[node] for node in df.index]
    assert [(math.isnan(a), math.copysign(1, a), a) if not math.isnan(a) else (True,)
            for a in got] == [(math.isnan(b), math.copysign(1, b), b) if not math.isnan(b)
                              else (True,) for b in want]


def test_a_tree_deeper_than_the_level_sums_reach_sums_row_by_row():
    root = node = {"frame": {"name": "ROOT"}, "metrics": {"time (ns)": 1.0}, "children": []}
    for i in range(reader.LEVEL_SUMS_DEPTH + 5):
        child = {"frame": {"name": f"f{i}"}, "metrics": {"time (ns)": 0.5}, "children": []}
        node["children"].append(child)
        node = child
    gf = from_tree(root)
    assert reader.tree_levels(gf) is None
    reader.add_inclusive_columns(gf, ["time (ns)"])
    top = gf.dataframe.loc[gf.graph.roots[0], "time (ns) (inc)"]
    assert top == 1.0 + 0.5 * (reader.LEVEL_SUMS_DEPTH + 5)
    assert np.isfinite(gf.dataframe["time (ns) (inc)"]).all()
