"""Kernel names people can read: demangled, template arguments folded, the raw name on request."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer
from proton.viewer.names import fold, readable

DATA = os.path.join(os.path.dirname(__file__), "data")
MUL = ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIfffNS0_15binary_"
       "internal10MulFunctorIfEEEESt5arrayIPcLm2EEEEviT0_T1_")


def test_a_mangled_kernel_is_demangled_and_folded():
    assert readable(MUL) == ("at::native::vectorized_elementwise_kernel<4, "
                             "at::native::AUnaryFunctor<…>, std::array<…>>(…)")
    assert readable(MUL, "full") == (
        "at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
        "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >"
        "(int, at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)")
    assert readable(MUL, "raw") == MUL


@pytest.mark.parametrize("name", ["matmul_kernel", "add_kernel", "ROOT", "main.py:12@train",
                                  "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8",
                                  "_Znot a real mangled name"])
def test_other_names_stay_as_they_are(name):
    assert readable(name) == name


@pytest.mark.parametrize("text,want", [
    ("f<4, a::B<float, C<int> >, D<E> >(int, X)", "f<4, a::B<…>, D<…>>(…)"),
    ("g()", "g()"), ("k<1>(void*)", "k<1>(…)"), ("ns::k(a, (b))", "ns::k(…)"),
    ("h<a(b)>(c)", "h<a(…)>(…)"), ("operator<<(int)", "operator<<(…)"),
    ("k<4, F<(lambda)::operator()() const::{lambda(float)#1}>>(int)", "k<4, F<…>>(…)"),
    ("a::b<c::operator->, d>(x)", "a::b<c::operator->, d>(…)"),
    ("at::(anonymous namespace)::k<T<int>>(int)", "at::(anonymous namespace)::k<T<…>>(…)")])
def test_folding(text, want):
    assert fold(text) == want


def test_the_viewer_shows_readable_names_and_the_raw_ones_on_request():
    path = os.path.join(DATA, "example_gpu.hatchet")

    def names(*args):
        result = CliRunner().invoke(viewer, [*args, "--output", "json", path])
        assert result.exit_code == 0, result.output
        return {r["path"][-1] for r in json.loads(result.stdout)}

    folded, full, raw = names(), names("--names", "full"), names("--names", "raw")
    assert "at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<…>, " \
           "std::array<…>>(…)" in folded
    assert any(n.startswith("at::native::vectorized_elementwise_kernel<4, at::native::"
                            "AUnaryFunctor<float, float, float") for n in full)
    assert MUL in raw and not any(n.startswith("_Z") for n in folded | full)
    assert len(folded) == len(raw)  # folding keeps these kernels apart
