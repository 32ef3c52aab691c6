"""Tensor metric values torch cannot read as plain numbers (issue 46, item 16): sparse, meta and
quantized tensors get our one-line ScopeError naming the metric and the fix, or are read."""
from __future__ import annotations

import pytest

from conftest import find
from proton.api import write_profiles
from proton.context.frames import unwind

import proton

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def no_live_sessions():
    yield
    unwind(0)
    write_profiles()


@pytest.mark.parametrize("kind, make, fix", [
    ("sparse", lambda: torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse(), "to_dense"),
    ("csr", lambda: torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse_csr(), "to_dense"),
    ("meta", lambda: torch.empty(3, device="meta"), "on the CPU or a GPU"),
    ("meta scalar", lambda: torch.empty((), device="meta"), "on the CPU or a GPU")])
def test_a_tensor_without_plain_values_is_a_one_line_scope_error(profile_path, kind, make, fix):
    name, _ = profile_path
    proton.start(name)
    with pytest.raises(proton.ScopeError) as caught:
        with proton.scope("fwd", {"m": make()}):
            pass
    text = str(caught.value)
    assert "'m'" in text and fix in text and "\n" not in text
    proton.finalize()


def test_a_quantized_tensor_is_read_as_its_values(profile_path):
    name, read = profile_path
    proton.start(name)
    q = torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), 0.5, 0, torch.quint8)
    with proton.scope("fwd", {"v": q, "s": torch.quantize_per_tensor(torch.tensor(3.0), 0.5, 0,
                                                                          torch.quint8)}):
        pass
    proton.finalize()
    root, _ = read()
    assert find(root, "fwd")["metrics"]["v"] == [1.0, 2.0]
    assert find(root, "fwd")["metrics"]["s"] == 3.0
