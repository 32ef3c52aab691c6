"""Scopes and events inside Triton kernels, as `triton.profiler.language`: a drop-in.

Usage:
    import proton
    import proton.language as pl        # or: import triton.profiler.language as pl
    pl.enable_semantic("triton")         # plain @triton.jit kernels, as Triton asks

    @triton.jit
    def kernel(...):
        with pl.scope("load"):
            x = tl.load(...)
        pl.enter_scope("compute"); ...; pl.exit_scope("compute")
        done = pl.allocate_event("store")    # Triton 3.9: an event may end in another
        pl.start_event(done); ...            # iteration, or in another warp
        pl.end_event(done)

    proton.start("run", backend="instrumentation")   # kernels compiled from here on record
    kernel[grid](...)
    proton.finalize()                    # each scope under its kernel: cycles, per warp

Outside such a session the calls compile to nothing, so the same kernel runs uninstrumented
(an event is then an i32 constant: a kernel that hands one to a warp_specialize partition
still compiles, which Triton 3.9's own module does not). Only the Gluon semantic is on by
default (as in Triton): Triton's compiler pipelines loops and reorders code, which can move a
record; the profile reports pairs it had to leave out.
"""
from __future__ import annotations

from triton._C.libtriton import proton as _triton_proton
from triton.experimental.gluon.language._semantic import GluonSemantic
from triton.language import core as tl
from triton.language.core import builtin
from triton.language.semantic import TritonSemantic

from .errors import ProtonError

__all__ = ["enter_scope", "exit_scope", "scope", "enable_semantic", "disable_semantic",
           "allocate_event", "start_event", "end_event", "Event"]

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


def _check_semantic(semantic, what: str) -> None:
    if not any(isinstance(semantic, _ALL_SEMANTICS[n]) for n in _enabled):
        raise ProtonError(f"proton.language {what} in a {type(semantic).__name__} kernel: call "
                          "proton.language.enable_semantic('triton') first (off by default, as "
                          "in Triton: the compiler may reorder code around records)")


def record(is_start: tl.constexpr, scope_name: tl.constexpr, semantic):
    if not _on():
        return None
    _check_semantic(semantic, "scope")
    is_start = tl._unwrap_if_constexpr(is_start)
    scope_name = tl._unwrap_if_constexpr(scope_name)
    op = _triton_proton.create_proton_record(semantic.builder, is_start, scope_name)
    # Triton 3.6's builder hands back the op, which the frontend keeps as a void value; 3.9's
    # returns nothing
    return None if op is None else tl.tensor(op, tl.void)


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


# -- events (Triton 3.9's proton.allocate_event / proton.event ops) ----------------------------
class _EventType(tl.base_type):
    """An event's frontend type: an i32 in the IR, kept distinct so an event passed into a
    jit function, a loop or a warp_specialize partition comes back as an Event."""

    def _unflatten_ir(self, handles, cursor):
        return Event(handles[cursor]), cursor + 1

    def _flatten_ir_types(self, builder, out) -> None:
        tl.int32._flatten_ir_types(builder, out)

    def __eq__(self, other) -> bool:
        return isinstance(other, _EventType)

    def __hash__(self) -> int:
        return hash(_EventType)

    def mangle(self) -> str:
        return "PEvent"

    def __str__(self) -> str:
        return "proton.event"


EVENT_TYPE = _EventType()


class Event(tl.base_value):
    """What allocate_event returns: one named asynchronous transaction, started with
    start_event and ended with end_event (later, or in another warp)."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.type = EVENT_TYPE

    def _flatten_ir(self, handles) -> None:
        handles.append(self.handle)

    def _set_name(self, builder, name: str) -> None:
        self.handle.set_loc(builder.create_name_loc(name, self.handle.get_loc()))


def _event_ops() -> tuple:
    """Triton's builders for the event ops; a ProtonError on a Triton without them."""
    try:
        return _triton_proton.create_proton_allocate_event, _triton_proton.create_proton_event
    except AttributeError:
        import triton

        raise ProtonError(f"proton.language events need Triton 3.9's compiler (this is Triton "
                          f"{triton.__version__}); use enter_scope/exit_scope, or install "
                          "triton==3.9.0") from None


@builtin
def allocate_event(name: tl.constexpr, _semantic=None):
    """An event named `name` (its node and spans in the profile carry the name)."""
    if not _on():
        return Event(_semantic.builder.get_int32(0))  # a placeholder that compiles anywhere
    _check_semantic(_semantic, "event")
    allocate, _ = _event_ops()
    return Event(allocate(_semantic.builder, tl._unwrap_if_constexpr(name)))


def record_event(event, is_start: tl.constexpr, _semantic=None) -> None:
    if not _on():
        return
    _check_semantic(_semantic, "event")
    if not isinstance(event, Event):
        raise ProtonError(f"pl.start_event/end_event take what pl.allocate_event returned, "
                          f"not {type(event).__name__}")
    _, mark = _event_ops()
    mark(_semantic.builder, bool(tl._unwrap_if_constexpr(is_start)), event.handle)


@builtin
def start_event(event, _semantic=None):
    record_event(event, True, _semantic)


@builtin
def end_event(event, _semantic=None):
    record_event(event, False, _semantic)
