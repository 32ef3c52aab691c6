"""Mode objects for start(mode=...), as `triton.profiler.mode`: PCSampling for instruction
sampling; Default and MMA for backend="instrumentation" (proton.language scopes).

Usage:
    proton.start("run", backend="instrumentation", mode=proton.mode.Default(buffer_size=16384))
    proton.start("run", mode=proton.mode.PCSampling(interval=1000))

str(mode) is the mode string start() also takes ("default:buffer_size=16384"). No Triton import:
the values are strings, turned into the compiler's enums when a session starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import SessionError

METRIC_TYPES = ("cycle",)
SAMPLING_STRATEGIES = ("none", "selective")
GRANULARITIES = ("warp",)
"""Triton's compiler offers cta and warp groups too; its runtime and ours read warps only."""
BUFFER_STRATEGIES = ("circular",)
"""Triton's "flush" strategy is accepted by its compiler but not read by its runtime."""
BUFFER_TYPES = ("shared", "global")
OPTIMIZATIONS = ("time_shift", "sched_stores", "sched_barriers", "clock32")


@dataclass(frozen=True)
class BaseMode:
    name: str


@dataclass(frozen=True)
class PCSampling(BaseMode):
    """Instruction sampling (backend "cupti"): a sample every `interval` cycles."""

    name: str = field(default="pcsampling", init=False)
    interval: int = 1000

    def __post_init__(self):
        if not isinstance(self.interval, int) or self.interval <= 0:
            raise SessionError(f"PCSampling(interval={self.interval!r}): give a positive number "
                               "of cycles")

    def __str__(self) -> str:
        return f"pc_sampling:interval={self.interval}"


def _enum_text(value) -> str:
    """'warp', or Triton's enum (GRANULARITY.WARP) as 'warp'."""
    text = getattr(value, "name", value)
    return str(text).rsplit(".", 1)[-1].lower()


@dataclass(frozen=True)
class InstrumentationMode(BaseMode):
    """What instrumented kernels record and where they keep it while they run."""

    metric_type: str = "cycle"
    sampling_strategy: str = "none"
    sampling_options: str = ""
    granularity: str = "warp"
    buffer_strategy: str = "circular"
    buffer_type: str = "shared"
    buffer_size: int = 0
    """Bytes per CTA for the records (split between its warps); 0: the compiler's default."""
    optimizations: tuple = ()

    def __post_init__(self):
        for key, allowed in (("metric_type", METRIC_TYPES),
                             ("sampling_strategy", SAMPLING_STRATEGIES),
                             ("granularity", GRANULARITIES),
                             ("buffer_strategy", BUFFER_STRATEGIES),
                             ("buffer_type", BUFFER_TYPES)):
            value = _enum_text(getattr(self, key))
            if value not in allowed:
                raise SessionError(f"{key}={value!r} is not supported by backend="
                                   f"'instrumentation'; use one of {', '.join(allowed)}")
            object.__setattr__(self, key, value)
        options = str(self.sampling_options or "")
        if any(not part.strip().isdigit() for part in options.split(",") if part.strip()):
            raise SessionError(f"sampling_options={options!r}: give warp numbers separated by "
                               "commas, as '0,2'")
        object.__setattr__(self, "sampling_options", options)
        if not isinstance(self.buffer_size, int) or self.buffer_size < 0:
            raise SessionError(f"buffer_size={self.buffer_size!r}: give bytes per CTA (0: the "
                               "compiler's default)")
        opts = self.optimizations
        if isinstance(opts, str):
            opts = [o.strip() for o in opts.split(",") if o.strip()]
        opts = tuple(_enum_text(getattr(o, "value", o)) for o in opts)
        for opt in opts:
            if opt not in OPTIMIZATIONS:
                raise SessionError(f"optimization {opt!r} is not known; use "
                                   f"{', '.join(OPTIMIZATIONS)}")
        object.__setattr__(self, "optimizations", opts)

    def __str__(self) -> str:
        return (f"{self.name}:metric_type={self.metric_type}"
                f":sampling_strategy={self.sampling_strategy}"
                f":sampling_options={self.sampling_options}:granularity={self.granularity}"
                f":buffer_strategy={self.buffer_strategy}:buffer_type={self.buffer_type}"
                f":buffer_size={self.buffer_size}:optimizations={','.join(self.optimizations)}")


@dataclass(frozen=True)
class Default(InstrumentationMode):
    name: str = field(default="default", init=False)


@dataclass(frozen=True)
class MMA(InstrumentationMode):
    name: str = field(default="mma", init=False)


_MODES = {"default": Default, "mma": MMA}
_INT_KEYS = ("buffer_size",)


def instrumentation_mode(mode) -> InstrumentationMode:
    """start(mode=...) for backend="instrumentation": None, "default[:key=value...]",
    "mma[:...]", or a mode object (ours or Triton's) -> InstrumentationMode.

    Raises:
        SessionError: an unknown mode name, key or value.
    """
    if isinstance(mode, InstrumentationMode):
        return mode
    if mode is not None and not isinstance(mode, str):  # Triton's mode object: same fields
        name = getattr(mode, "name", None)
        if name not in _MODES:
            raise SessionError(f"mode={mode!r} is not an instrumentation mode; use "
                               "proton.mode.Default() or MMA()")
        keys = ("metric_type", "sampling_strategy", "sampling_options", "granularity",
                "buffer_strategy", "buffer_type", "buffer_size", "optimizations")
        return _MODES[name](**{k: getattr(mode, k) for k in keys if hasattr(mode, k)})
    name, *parts = (mode or "default").split(":")
    if name not in _MODES:
        raise SessionError(f"mode={mode!r} is not supported with backend='instrumentation'; "
                           "use 'default' or 'mma', with options ':buffer_size=BYTES', ...")
    values: dict = {}
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or key not in InstrumentationMode.__dataclass_fields__ or key == "name":
            raise SessionError(f"instrumentation option {part!r} is not known; use key=value "
                               "with metric_type, sampling_strategy, sampling_options, "
                               "granularity, buffer_strategy, buffer_type, buffer_size, "
                               "optimizations")
        if key in _INT_KEYS:
            if not value.isdigit():
                raise SessionError(f"{key}={value!r}: give a number of bytes")
            values[key] = int(value)
        else:
            values[key] = value
    return _MODES[name](**values)
