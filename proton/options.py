"""Every option of `proton.start()` (and of the `proton` command), checked and parsed in one place.

A bad value raises SessionError with one line naming the option, the value and what is accepted,
before anything starts.

Usage:
    opts = parse_options("run1", context="shadow", data="tree", backend=None,
                         mode="pcsampling:interval=12", hook="triton:config")
    opts.pc.interval, opts.hook.config      # 12, True
"""
from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .errors import SessionError
from .files import check_target
from .format import TRACE_EXTENSION, TREE_EXTENSION

if TYPE_CHECKING:  # imported when the instrumentation backend is asked for
    from .mode import InstrumentationMode

CONTEXTS = ("shadow", "python")
DATA = ("tree", "trace")
BACKENDS = (None, "cupti", "instrumentation")
AMD_BACKENDS = ("roctracer", "rocprofiler")
"""Triton's Proton's backends for AMD GPUs (rocprofiler since 3.9): taken, and refused in a line."""
DEFAULT_NAME = "proton"
DEFAULT_INTERVAL = 10
"""Sample every 2**10 cycles: ~1.0x run time on a 4096^3 matmul (H200), millions of samples."""
DEFAULT_EXACT_INTERVAL = 13
"""Exact mode's default: CUPTI parses each launch's samples before the launch call returns, a
cost that grows with the samples (H100: ~0.25 ms per 1,000), so it samples 8x less often;
thousands of samples a launch still land on the kernel's lines."""
INTERVALS = range(5, 32)
"""CUPTI's sampling periods: a sample every 2**N cycles for N in 5..31."""


@dataclass(slots=True, frozen=True)
class PCOptions:
    """mode="pcsampling[:interval=N][:serialize=1]"."""

    interval: int = DEFAULT_INTERVAL
    """CUPTI's sampling period: a sample every 2**interval cycles per SM."""
    serialize: bool = False
    """Exact mode: each kernel's samples are read when its launch call returns."""
    embed_source: bool = True
    """Carry the sampled lines' source files' text in the profile (PROTON_EMBED_SOURCE=0:
    leave it out; data/sources.py)."""


@dataclass(slots=True, frozen=True)
class CounterOptions:
    """mode="counters[:interval=US]": PM samples of DRAM, L2 and tensor-pipe counters every
    `interval` microseconds, joined to the kernels that ran in them."""

    interval: int = 250  # DEFAULT_COUNTER_INTERVAL
    """Microseconds between samples: a 9 ms GPT step gets 36 (cupti.counters says the cost)."""
    scopes: tuple[str, ...] = ()
    """counters:scopes=A,B: exact counts of these scopes by CUPTI's range profiler instead of
    samples (cupti.scope_ranges)."""


DEFAULT_COUNTER_INTERVAL = 250
"""A GH100 sample takes ~40 KB of the hardware buffer and ~0.1 ms to decode: at 250 us the
decoding thread keeps up with a third of a core (cupti.counters)."""
COUNTER_INTERVALS = range(10, 100_001)
"""10 us to 100 ms: shorter samples cost more to decode than a step of a model runs."""
COUNTERS = "counters"
PARTS = ("copies", "waits", "idle")
"""What the collector records beside kernels (issue 50), each of which PARTS_ENV can leave out."""
PARTS_ENV = "PROTON_OFF"


@dataclass(slots=True, frozen=True)
class HookOptions:
    """hook="triton[:config[=A,B|*]][:include=REGEX][:exclude=REGEX]"."""

    config: bool = False
    """Append grid, warps, stages and shared memory to op names."""
    constexprs: tuple[str, ...] | None = ()
    """Constexprs to append too (None: all the kernel declares)."""
    include: re.Pattern | None = None
    exclude: re.Pattern | None = None


@dataclass(slots=True, frozen=True)
class SessionOptions:
    """What one session records and where it is written."""

    name: str
    """The name given to start() (default "proton")."""
    path: str
    """The absolute path of the file it writes."""
    context: str = "shadow"
    data: str = "tree"
    pc: PCOptions | None = None
    """Instruction sampling, when mode="pcsampling"."""
    hook: HookOptions | None = None
    """The Triton launch hook, when hook="triton..."."""
    hook_spec: str | None = None
    """`hook` as given (the file records nothing of it; errors quote it)."""
    instrument: InstrumentationMode | None = None
    """backend="instrumentation": the proton.mode.InstrumentationMode kernels compile with."""
    flush: str | None = None
    """mode="periodic_flushing[:format=F]": each finished phase goes to NAME.part_<phase>.F
    (hatchet, hatchet_msgpack or chrome_trace)."""
    counters: CounterOptions | None = None
    """Hardware counters per kernel, when mode="counters"."""
    memory: bool = False
    """torch's CUDA caching allocator per scope (runtime/memory.py)."""


def parse_options(name: str | None, *, context: str = "shadow", data: str = "tree",
                  backend: str | None = None, mode: str | None = None,
                  hook: Any = None, memory: bool = False) -> SessionOptions:
    """start()'s arguments -> SessionOptions.

    Raises:
        SessionError: any value that is not accepted (the message names the accepted ones).
    """
    name = _check_name(name)
    parts_off()  # a bad PROTON_OFF fails here, before anything starts
    _check_choice("context", context, CONTEXTS)
    _check_choice("data", data, DATA)
    if backend in AMD_BACKENDS:
        raise SessionError(f"backend={backend!r} (AMD GPUs) is not supported: Proton profiles "
                           "NVIDIA GPUs; use backend='cupti' or none")
    _check_choice("backend", backend, BACKENDS)
    flush = None
    instrument = None
    if backend == "instrumentation":
        from .mode import instrumentation_mode

        instrument, mode = instrumentation_mode(mode), None
    mode = _mode_text(mode)
    if isinstance(mode, str) and mode.split(":", 1)[0].lower() == PERIODIC_FLUSHING:
        flush, mode = parse_flushing(mode, data), None
    counters = None
    if isinstance(mode, str) and mode.split(":", 1)[0].lower() == COUNTERS:
        counters, mode = parse_counters(mode), None
    pc = parse_mode(mode)
    if pc is not None and not embed_source():  # checked at start, not when written
        pc = replace(pc, embed_source=False)
    hook = hook_spec(hook)
    hook_options = parse_hook(hook) if hook is not None else None
    ext = TREE_EXTENSION if data == "tree" else TRACE_EXTENSION
    path = os.path.abspath(name if name.endswith(ext) else name + ext)
    if os.path.isdir(path):
        raise SessionError(f"the profile would be written to {path!r}, which is a folder; "
                           "give another name")
    try:  # a name too long, or another user's link on the way: said now, not at the end
        check_target(path)
    except OSError as exc:
        raise SessionError(f"the profile would be written to {path!r}: {exc.strerror}") from None
    if counters is not None and data != "tree":
        raise SessionError("mode='counters' sums counters per call path: use data='tree'")
    if not isinstance(memory, bool):
        raise SessionError(f"memory={memory!r} ({type(memory).__name__}) is not accepted; give "
                           "True (torch's allocator per scope) or False")
    if memory and data != "tree":
        raise SessionError("memory=True records the allocator per scope in a call tree: use "
                           "data='tree'")
    return SessionOptions(name, path, context, data, pc, hook_options, hook, instrument, flush,
                          counters, memory)


EMBED_SOURCE_ENV = "PROTON_EMBED_SOURCE"


def embed_source() -> bool:
    """PROTON_EMBED_SOURCE: 1 (the default; unset or empty too) carries a sampled profile's
    source files' text in it (data/sources.py), 0 leaves it out.

    Raises:
        SessionError: any other value.
    """
    value = os.environ.get(EMBED_SOURCE_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise SessionError(f"{EMBED_SOURCE_ENV}={value!r} is not 0 or 1; "
                           f"{EMBED_SOURCE_ENV}=0 leaves the sampled source files' text out "
                           "of the profile")
    return value != "0"


def parts_off() -> frozenset[str]:
    """PROTON_OFF=copies,waits,idle (any of them): parts the collector leaves out, for a job
    they cost too much, and for benchmarks that price each part.

    Raises:
        SessionError: a name that is not a part (the message lists the parts).
    """
    names = {n.strip() for n in os.environ.get(PARTS_ENV, "").split(",") if n.strip()}
    unknown = sorted(names - set(PARTS))
    if unknown:
        raise SessionError(f"{PARTS_ENV}={os.environ[PARTS_ENV]!r}: {', '.join(unknown)} is not "
                           f"a part; choose from {', '.join(PARTS)}")
    return frozenset(names)


def parse_counters(mode: str) -> CounterOptions:
    """'counters[:interval=US][:scopes=A,B]' -> CounterOptions."""
    interval = DEFAULT_COUNTER_INTERVAL
    scopes: tuple[str, ...] = ()
    for option in mode.split(":")[1:]:
        key, _, value = option.partition("=")
        if key == "scopes" and value.strip(","):
            scopes = tuple(name for name in value.split(",") if name)
            continue
        if key != "interval" or not value.isdigit():
            raise SessionError(f"mode option {option!r} is not supported by counters; use "
                               f"interval=US (microseconds between samples, default {interval}) "
                               "or scopes=A,B (exact counts of the scopes named so)")
        interval = int(value)
    if interval not in COUNTER_INTERVALS:
        raise SessionError(f"counters:interval={interval} is out of range; give 10 to 100000 "
                           f"microseconds between samples (default {DEFAULT_COUNTER_INTERVAL})")
    return CounterOptions(interval, scopes)


def _mode_text(mode):
    """A mode object (proton.mode's or triton.profiler.mode's) as its mode string."""
    if mode is None or isinstance(mode, str):
        return mode
    if type(mode).__name__ == "PCSampling" and isinstance(getattr(mode, "interval", None), int):
        return f"{TRITON_PC_SAMPLING}:interval={mode.interval}"  # cycles, as Triton counts
    if getattr(mode, "name", None) in ("default", "mma"):
        raise SessionError(f"mode={mode} is an instrumentation mode; pass "
                           "backend='instrumentation' with it")
    return mode


def _check_name(name) -> str:
    """The session's name: None or "" for the default, else a string or path (os.PathLike)."""
    if name is None or name == "":
        return DEFAULT_NAME
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str):
        raise SessionError(f"name={name!r} ({type(name).__name__}) is not accepted; give a "
                           "string or path for the profile file, e.g. start('run1')")
    return name


PERIODIC_FLUSHING = "periodic_flushing"
FLUSH_FORMATS = {"tree": ("hatchet", "hatchet_msgpack"), "trace": ("chrome_trace",)}


def parse_flushing(mode: str, data: str) -> str:
    """'periodic_flushing[:format=F]' -> F, checked against `data` (Triton's Proton's mode)."""
    _, _, rest = mode.partition(":")
    key, _, value = rest.partition("=")
    formats = FLUSH_FORMATS.get(data, ())
    if not rest:
        return formats[0]
    if key != "format" or value not in formats:
        raise SessionError(f"mode={mode!r}: periodic_flushing takes format=F with F one of "
                           f"{', '.join(formats)} for data={data!r}")
    return value


def parse_mode(mode: str | None) -> PCOptions | None:
    """'pcsampling[:interval=N][:serialize=1]' -> PCOptions; None or '' -> None (kernel times)."""
    if not mode:
        return None
    if not isinstance(mode, str):
        raise SessionError(f"mode={mode!r} is not supported; use 'pcsampling' or none")
    kind, *options = mode.split(":")
    if kind == TRITON_PC_SAMPLING:  # Triton's name; its interval counts cycles
        return _triton_pc_sampling(mode, options)
    if kind != "pcsampling":
        raise SessionError(f"mode={mode!r} is not supported; use 'pcsampling' (options "
                           "':interval=N' with N in 5..31, ':serialize=1'), "
                           "'periodic_flushing[:format=hatchet|hatchet_msgpack|chrome_trace]', "
                           "'counters[:interval=US][:scopes=A,B]', "
                           "or none for kernel times")
    values = {}
    for option in options:
        key, _, value = option.partition("=")
        if key not in ("interval", "serialize") or not value.isdigit():
            raise SessionError(f"mode option {option!r} is not supported; use interval=N "
                               "(sample every 2**N cycles, 5..31) or serialize=0/1")
        values[key] = int(value)
    serialize = bool(values.get("serialize", 0))
    interval = values.get("interval", DEFAULT_EXACT_INTERVAL if serialize else DEFAULT_INTERVAL)
    if interval not in INTERVALS:
        raise SessionError(f"pcsampling:interval={interval} is out of range; CUPTI samples "
                           f"every 2**N cycles for N in 5..31 (default {DEFAULT_INTERVAL}, "
                           f"{DEFAULT_EXACT_INTERVAL} with serialize=1)")
    return PCOptions(interval, serialize)


TRITON_PC_SAMPLING = "pc_sampling"


def _triton_pc_sampling(mode: str, options: list[str]) -> PCOptions:
    """Triton's 'pc_sampling[:interval=CYCLES]': the power of two nearest CYCLES."""
    cycles = None
    for option in options:
        key, _, value = option.partition("=")
        if key != "interval" or not value.isdigit() or int(value) <= 0:
            raise SessionError(f"mode={mode!r}: pc_sampling takes interval=CYCLES (a positive "
                               "number), as in Triton's Proton")
        cycles = int(value)
    if cycles is None:
        return PCOptions(DEFAULT_INTERVAL, False)
    exponent = min(max(round(math.log2(cycles)), INTERVALS.start), INTERVALS.stop - 1)
    return PCOptions(exponent, False)


def hook_spec(hook) -> str | None:
    """hook= as a string: a hook object (Triton's newer `LaunchHook()`, or ours from
    proton.hooks, configured with include/exclude) is the "triton:..." spec it stands for."""
    if hook is None or isinstance(hook, str):
        return hook
    if type(hook).__name__ == "LaunchHook" and hasattr(hook, "_include_pattern"):
        spec = "triton"
        for key in ("include", "exclude"):
            pattern = getattr(hook, f"_{key}_pattern", None)
            if pattern:
                spec += f":{key}={pattern}"
        return spec
    raise SessionError(f"hook={hook!r} is not supported; use 'triton[:OPTIONS]' or a "
                       "LaunchHook() (proton.hooks.LaunchHook, or Triton's)")


_HOOK_KEYS = ("config", "include", "exclude")


def parse_hook(spec: str) -> HookOptions:
    """`triton[:config[=A,B|*]][:include=REGEX][:exclude=REGEX]` -> HookOptions.

    Raises:
        SessionError: another hook name, an unknown option or a bad regular expression.
    """
    head, _, rest = spec.partition(":") if isinstance(spec, str) else (spec, "", "")
    if head != "triton":
        _check_choice("hook", spec, (None, "triton"))
    found: dict = {}
    # a regex may hold ':'; split only where a known option follows
    for part in re.split(r":(?=(?:config|include|exclude)(?:=|:|$))", rest) if rest else []:
        key, eq, value = part.partition("=")
        if key not in _HOOK_KEYS or (key != "config" and not eq):
            raise SessionError(f"hook option {part!r} in {spec!r} is not known; use config, "
                               "config=NAME,NAME, include=REGEX or exclude=REGEX")
        if key == "config":
            names = [n.strip() for n in value.split(",") if n.strip()]
            found["config"] = True
            found["constexprs"] = None if names == ["*"] else tuple(names)
        else:
            try:
                found[key] = re.compile(value)
            except re.error as exc:
                raise SessionError(f"hook option {key}={value!r} is not a valid regular "
                                   f"expression: {exc}") from None
    return HookOptions(**found)


def _check_choice(what: str, value, choices) -> None:
    """One line naming the valid values (None: the option left out) and the closest one."""
    if value in choices:
        return
    named = [c for c in choices if c is not None]
    shown = " or ".join(repr(c) for c in named) if len(named) < 3 else \
        "one of " + ", ".join(repr(c) for c in named)
    close = difflib.get_close_matches(str(value), named, n=1)
    raise SessionError(f"{what}={value!r} is not supported"
                       + (f" (did you mean {close[0]!r}?)" if close else "")
                       + f"; choose {shown}" + (", or leave it out" if None in choices else ""))
