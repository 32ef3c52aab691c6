"""Scopes inside Triton kernels, as `triton.profiler.language`: a drop-in.

Usage:
    import proton
    import proton.language as pl        # or: import triton.profiler.language as pl
    pl.enable_semantic("triton")         # plain @triton.jit kernels, as Triton asks

    @triton.jit
    def kernel(...):
        with pl.scope("load"):
            x = tl.load(...)
        pl.enter_scope("compute"); ...; pl.exit_scope("compute")

    proton.start("run", backend="instrumentation")   # kernels compiled from here on record
    kernel[grid](...)
    proton.finalize()                    # each scope under its kernel: cycles, per warp

Outside such a session the calls compile to nothing, so the same kernel runs uninstrumented.
Only the Gluon semantic is on by default (as in Triton): Triton's compiler pipelines loops and
reorders code, which can move a record; the profile reports pairs it had to leave out.
"""
from __future__ import annotations

from triton._C.libtriton import proton as _triton_proton
from triton.experimental.gluon.language._semantic import GluonSemantic
from triton.language import core as tl
from triton.language.core import builtin
from triton.language.semantic import TritonSemantic

from .errors import ProtonError

__all__ = ["enter_scope", "exit_scope", "scope", "enable_semantic", "disable_semantic"]

_ALL_SEMANTICS = {"triton": TritonSemantic, "gluon": GluonSemantic}
_enabled = {"gluon"}


def enable_semantic(semantic_name: str) -> None:
    """Allow scopes in kernels of this DSL ("triton" or "gluon")."""
    _enabled.add(_check_name(semantic_name))


def disable_semantic(semantic_name: str) -> None:
    _enabled.discard(_check_name(semantic_name))


def _check_name(name: str) -> str:
    if name not in _ALL_SEMANTICS:
        raise ProtonError(f"semantic {name!r} is not known; use 'triton' or 'gluon'")
    return name


def _on() -> bool:
    from .runtime import instrumentation  # at compile time only

    if instrumentation.compiling:
        return True
    try:  # a session of Triton's own Proton turns Triton's flag on
        from triton.profiler.flags import flags
    except ImportError:
        return False
    return flags.instrumentation_on


def record(is_start: tl.constexpr, scope_name: tl.constexpr, semantic):
    if not _on():
        return None
    if not any(isinstance(semantic, _ALL_SEMANTICS[n]) for n in _enabled):
        raise ProtonError(f"proton.language scope in a {type(semantic).__name__} kernel: call "
                          "proton.language.enable_semantic('triton') first (off by default, as "
                          "in Triton: the compiler may reorder code around records)")
    is_start = tl._unwrap_if_constexpr(is_start)
    scope_name = tl._unwrap_if_constexpr(scope_name)
    return tl.tensor(_triton_proton.create_proton_record(semantic.builder, is_start, scope_name),
                     tl.void)


@builtin
def enter_scope(name: tl.constexpr, _semantic=None):
    record(True, name, _semantic)


@builtin
def exit_scope(name: tl.constexpr, _semantic=None):
    record(False, name, _semantic)


class scope:
    """`with pl.scope("name"):` inside a kernel: enter_scope and exit_scope around the body."""

    def __init__(self, name: str, _semantic=None):
        self.name = name
        self.semantic = _semantic

    def __enter__(self):
        enter_scope(self.name, _semantic=self.semantic)

    def __exit__(self, exc_type, exc_value, traceback):
        exit_scope(self.name, _semantic=self.semantic)
