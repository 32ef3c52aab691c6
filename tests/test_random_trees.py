"""Property-style: random trees (random names of any text, random shapes and depths, random
values including NaN, infinity, zero, negatives) written by our writer read back, with the same
nodes and numbers, by hatchet and by proton-viewer."""
from __future__ import annotations

import json
import math
import random

import pytest
from click.testing import CliRunner

from proton.data import document, writer
from proton.data.paths import ROOT, paths
from proton.format import TIME
from proton.viewer.cli import viewer

ALPHABET = "abcxyz_019 .:/@%$()[]{}*+?^|\\\"'\n\té✓世界"


def random_name(rng: random.Random) -> str:
    if rng.random() < 0.02:
        return "long" * rng.randint(100, 500)
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24)))


def random_value(rng: random.Random):
    roll = rng.random()
    if roll < 0.08:
        return rng.choice([math.nan, math.inf, -math.inf])
    if roll < 0.4:
        return rng.randint(-5, 10**12)
    return rng.uniform(-1e3, 1e9)


def random_tree(rng: random.Random) -> dict[int, dict]:
    """Metrics by path id, as a session holds them, on a random tree of interned paths."""
    ids, nodes = [ROOT], {}
    for _ in range(rng.randint(1, 300)):
        parent = ids[-1] if rng.random() < 0.35 else rng.choice(ids)  # runs of children: depth
        pid = paths.intern(parent, random_name(rng))
        ids.append(pid)
        metrics = {TIME: random_value(rng)}
        if rng.random() < 0.5:
            metrics["user"] = random_value(rng)
        if rng.random() < 0.3:
            metrics["own (exc)"] = random_value(rng)
        nodes[pid] = metrics
    return nodes


def finite(value) -> float:
    return value if value is not None and math.isfinite(value) else 0.0


@pytest.mark.parametrize("seed", range(20))
def test_random_trees_read_back_the_same_in_hatchet_and_the_viewer(seed, tmp_path):
    import hatchet as ht

    rng = random.Random(seed)
    nodes = random_tree(rng)
    path = writer.write(document.build(nodes, {}), str(tmp_path / "random.hatchet"))
    with open(path) as f:
        root, _ = json.load(f, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    gf = ht.GraphFrame.from_literal([root])
    names = sorted(n.frame["name"] for n in gf.graph.traverse())
    assert names == sorted(["ROOT", *(paths.frames[p].name for p in nodes)])
    want_time = sum(finite(m[TIME]) for m in nodes.values())
    assert math.isclose(gf.dataframe[TIME].fillna(0).sum(), want_time, rel_tol=1e-9)

    result = CliRunner().invoke(viewer, ["-m", "time/ns,user", "--output", "json", path])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == len(nodes) + 1  # every frame, and ROOT
    assert math.isclose(finite(rows[0]["time (ns)"]), want_time, rel_tol=1e-9)
    want_user = sum(finite(m.get("user")) for m in nodes.values())
    assert math.isclose(finite(rows[0]["user"]), want_user, rel_tol=1e-9, abs_tol=1e-6)
    tree = CliRunner().invoke(viewer, ["-m", "time/ms", "--width", "120", path])
    assert tree.exit_code == 0, tree.output


@pytest.mark.parametrize("seed", range(10))
def test_deep_trees_are_encoded_byte_for_byte_as_json_dump_would(seed):
    """The writer's iterative encoder (for trees deeper than writer.DEEP) against json.dumps,
    on trees shallow enough for json to encode."""
    import io

    doc = document.build(random_tree(random.Random(seed)), {"0": {"arch": "90"}})
    out = io.StringIO()
    writer._encode_tree(doc, out.write)
    assert out.getvalue() == json.dumps(doc, allow_nan=False)
