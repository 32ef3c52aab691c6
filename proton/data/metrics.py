"""Metric values as sessions hold them, and checks on the metrics users give.

A user metric's value is a real number, a vector (a list of them, written as a JSON array), or a
tensor. Numbers become plain ints and floats where they are given (numpy scalars, Decimal,
Fraction; an int beyond 64 bits a float), so whatever the writer gets encodes; as in Triton 3.9,
the roofline metrics keep one type whatever they are given as (flops* floats, bytes ints). A CPU
tensor becomes a number or a vector at once; a GPU tensor is kept as a DeviceTensor, which the
runtime copies on the GPU where the metric is added (no synchronisation; inside a CUDA graph
capture a metric kernel records it at each replay, runtime/graph_metrics.py) and reads when the
profile is written. Values given again for the same node add up (vectors elementwise),
except a property's (name ending in "(pty)"), where the last one is kept. A property or an
exclusive metric ("(exc)") may also be text, as in Triton's Proton (the last text is kept).
As in Triton's, a user metric keeps the type it was first given on a node: a float, an int,
text or a vector (ints of either sign count as one type, where Triton tells uint64_t from
int64_t).
"""
from __future__ import annotations

import math
import re
from decimal import Decimal
from numbers import Integral, Number, Real
from typing import Any, Mapping

from .. import triton_version
from ..errors import ScopeError
from ..format import (BYTES, COUNT, CPU_COUNT, CPU_TIME, DEVICE_ID, DEVICE_TYPE, EXCLUSIVE,
                      GPU_IDLE, GPU_IDLE_EXCLUDED, MEMORY_METRICS, PROPERTY, SCOPE_WALL,
                      STEP_METRICS, SYNC_COUNT, SYNC_TIME, TABLE_COLUMNS, TIME)

DEVICE_CUDA = 1
"""DEVICE_TYPE's value in memory for NVIDIA GPUs (written as format.CUDA)."""
RESERVED = frozenset({TIME, DEVICE_ID, DEVICE_TYPE, CPU_TIME, CPU_COUNT, "cpu_time",
                      "time", SYNC_TIME, SYNC_COUNT, GPU_IDLE, SCOPE_WALL, GPU_IDLE_EXCLUDED,
                      *STEP_METRICS, *MEMORY_METRICS,
                      *TABLE_COLUMNS})
"""Names the profiler writes itself, and the viewer's table's own columns: user metrics may not
take them. `count` is not among them: Triton 3.9 takes a scope metric of that name (summed with
the launches counted below it, as there); a launch_metadata `count` is still left out
(hooks/triton_hook.py), since it would land on the launch's own count."""


def check_scope_name(name: Any, what: str = "scope name") -> str:
    """A frame name as the user gave it: a non-empty string (ScopeError otherwise)."""
    if not isinstance(name, str) or not name:
        raise ScopeError(f"{what} {name!r} ({type(name).__name__}) is not accepted; give a "
                         "non-empty string, e.g. proton.scope('forward')")
    return name


ROOFLINE_FLOATS = re.compile(r"flops(8|16|32|64)?$")
"""Roofline metrics Triton 3.9 always holds as floats (metric.py's FLOPS_DTYPES); `bytes`
(format.BYTES) it holds as an int."""


def roofline_floats(name: str) -> bool | None:
    """True for a flops metric, False for bytes, None for any other name."""
    if name == BYTES:
        return False
    return True if ROOFLINE_FLOATS.match(name) else None


class DeviceTensor:
    """A metric's GPU tensor as given, not yet copied: the runtime copies it where the metric
    is added (runtime/graph_metrics.place), so the copy's work sits under that node."""

    __slots__ = ("tensor", "floats")

    def __init__(self, tensor: Any, floats: bool) -> None:
        self.tensor = tensor
        """Detached, dense, real-valued, on a GPU."""
        self.floats = floats
        """Read as floats (else as ints): a flops metric, or a floating-point tensor."""

    def copy(self) -> "DeviceValue":
        """A copy on the GPU, as float64 or int64 (no synchronisation), as a DeviceValue."""
        import torch  # a GPU tensor exists: so does torch

        t = self.tensor
        kept = t.to(torch.float64 if self.floats else torch.int64, copy=True)
        return DeviceValue(((kept.reshape(-1) if t.numel() > 1 else kept.reshape(()), 1),))


class DeviceValue:
    """A metric given as GPU tensors: copies on the GPU, each with how many times it was given,
    summed when read (`value()`, at write time: the one synchronisation). Immutable: `plus`
    returns a new one, so a snapshot that shares it is not changed by later entries."""

    __slots__ = ("parts",)
    FOLD = 256
    """Past this many distinct copies, they are summed on the GPU into one (memory stays flat),
    when `plus` is allowed to launch that sum."""

    def __init__(self, parts: tuple) -> None:
        self.parts = parts
        """((tensor, times), ...)"""

    def plus(self, other: "DeviceValue", fold: bool = True) -> "DeviceValue":
        if other.parts[0][0].shape != self.parts[0][0].shape:
            return other  # a vector of another length: the newer one, as for lists
        merged = dict((id(t), [t, n]) for t, n in self.parts)
        for t, n in other.parts:
            if id(t) in merged:  # the same copy again (a graph replay): counted, not kept twice
                merged[id(t)][1] += n
            else:
                merged[id(t)] = [t, n]
        parts = tuple((t, n) for t, n in merged.values())
        if fold and len(parts) > self.FOLD:
            import torch  # a GPU tensor exists: so does torch

            first = parts[0][0]
            if not (first.is_cuda and torch.cuda.is_current_stream_capturing()):  # not in a graph
                total = torch.stack([t.to(torch.float64) * n for t, n in parts]).sum(0)
                parts = ((total, 1),)
        return DeviceValue(parts)

    def value(self) -> float | list:
        total: Any = None
        for part, times in self.parts:
            got = part.tolist()
            got = [v * times for v in got] if isinstance(got, list) else got * times
            total = got if total is None else combine(total, got)
        return total


INT64 = 1 << 63
"""Ints from -INT64 to INT64 - 1 are kept exact; larger ones become floats, as every reader of
the file (pandas, hatchet, msgpack) would take them anyway."""
ACCEPTED = ("real numbers (int, float, numpy scalars, Decimal, Fraction), lists of them or "
            "tensors; text only under a name ending in ' (pty)' or ' (exc)'")


def real_number(value: Any) -> int | float:
    """`value` as a plain int (within 64 bits) or float. TypeError for what is not a real number
    (bool, complex, text); OverflowError or ValueError for one no float holds (an int or
    Fraction past 1.8e308, a Decimal 1e400 or signalling NaN)."""
    kind = type(value)
    if kind is float:  # the common cases first: launch_metadata calls this per launch
        return value
    if kind is int:
        return value if -INT64 <= value < INT64 else float(value)
    if isinstance(value, bool) or not isinstance(value, (Real, Decimal)):  # Decimal: not a Real
        raise TypeError(f"{kind.__name__} is not a real number")
    if isinstance(value, Integral):
        return real_number(int(value))
    number = float(value)
    if math.isinf(number) and value != number:  # finite, but past what a float holds
        raise OverflowError(f"{kind.__name__} too large to convert to float")
    return number


def _shown(value: Any) -> str:
    """`value` for a one-line message: its repr on one line, cut to 60 characters; an int too
    long to print (Python refuses past 4,300 digits) by its size."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"<int of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    try:
        text = " ".join(repr(value).split())
    except ValueError:  # a list holding such an int
        return f"<{type(value).__name__} too long to show>"
    return text if len(text) <= 60 else text[:57] + "..."


def _real_or_error(name: str, value: Any, given: Any, at: str = "") -> int | float:
    """real_number(value), or ScopeError naming the metric `name` (as `given`), `value`'s type
    (`at`: which element of a vector) and what is accepted."""
    try:
        return real_number(value)
    except TypeError:
        why = f"; metrics must be {ACCEPTED}"
    except OverflowError:
        why = ", beyond what a float holds; give a number within ±1.8e308"
    except ValueError as exc:  # a signalling NaN
        why = f", which no float holds ({exc}); give a number"
    where = f" whose {at} is {_shown(value)}" if at else ""
    kind = type(value).__name__
    raise ScopeError(f"metric {name!r} has value {_shown(given)}{where} ({kind}){why}") from None


def metric_value(name: str, value: Any) -> float | list | DeviceTensor:
    """A user metric's value as sessions hold it (plain ints and floats, see real_number; a
    roofline metric's in its one type, see roofline_floats), or a GPU tensor's DeviceTensor;
    ScopeError (naming `name`) for anything that is not a real number, a list of them or a
    tensor of them."""
    given = value
    floats = roofline_floats(name)
    if hasattr(value, "detach") and hasattr(value, "numel"):  # a torch tensor
        if value.dtype.is_complex or value.numel() == 0:
            raise ScopeError(f"metric {name!r} is a {value.dtype} tensor of "
                             f"{value.numel()} values; give real numbers")
        value = _plain_tensor(name, value.detach())
        if value.is_cuda:  # no .item(): that would wait for the GPU
            return DeviceTensor(value, value.is_floating_point() if floats is None else floats)
        value = value.tolist() if value.numel() > 1 else value.item()
    elif hasattr(value, "tolist") and not isinstance(value, Number):  # a numpy array
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        return _typed(_real_or_error(name, value, given), floats)
    if not value:
        raise ScopeError(f"metric {name!r} has value {_shown(given)} ({type(given).__name__}); "
                         f"a vector needs at least one number")
    return [_typed(_real_or_error(name, v, given, f"element {i}"), floats)
            for i, v in enumerate(value)]


def _typed(number: int | float, floats: bool | None) -> int | float:
    """`number` as a roofline metric holds it (floats: True a float, False an int)."""
    if floats is None:
        return number
    return float(number) if floats else int(number)


def transform_tensor_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Triton 3.9's `proton.metric.transform_tensor_metrics`: metrics split into the numbers
    (CPU tensors read, the roofline metrics in their one type) and the GPU tensors (as float64
    or int64 tensors). Raises ScopeError for a value that is neither.

    Usage:
        numbers, tensors = transform_tensor_metrics({"flops": 2, "bytes": x.sum()})
    """
    numbers: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for name, value in metrics.items():
        got = metric_value(name, value) if not isinstance(value, str) else value
        if isinstance(got, DeviceTensor):
            import torch  # a GPU tensor exists: so does torch

            tensors[name] = got.tensor.to(torch.float64 if got.floats else torch.int64)
        else:
            numbers[name] = got
    return numbers, tensors


def _plain_tensor(name: str, value: Any) -> Any:
    """A tensor whose values can be read as numbers: a quantized one dequantized; ScopeError for
    one without values to read here (meta) or not laid out densely (sparse, mkldnn)."""
    if getattr(value, "is_meta", False):
        raise ScopeError(f"metric {name!r} is a meta tensor, which has no values; give a tensor "
                         "on the CPU or a GPU")
    layout = str(getattr(value, "layout", "torch.strided"))
    if layout != "torch.strided":
        raise ScopeError(f"metric {name!r} is a tensor of layout {layout}; give a dense one "
                         "(t.to_dense())")
    return value.dequantize() if getattr(value, "is_quantized", False) else value


def combine(old: Any, new: Any, key: str = "", fold: bool = True) -> Any:
    """`new` given again for a node that holds `old`: summed (vectors elementwise), or `new`
    for a property, text, or when the two do not add (a vector of another length, number and
    vector). `fold`: GPU copies may be summed on the GPU now (not on CUPTI's thread)."""
    if key.endswith(PROPERTY) or isinstance(new, str):
        return new
    if isinstance(old, DeviceValue) and isinstance(new, DeviceValue):
        return old.plus(new, fold)
    if isinstance(old, list) or isinstance(new, list):
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            return [a + b for a, b in zip(old, new)]
        return new
    if isinstance(old, DeviceValue) or isinstance(new, DeviceValue):
        return new
    return old + new


def _type_name(value: Any) -> str | None:
    """The C++ type Triton's Proton would hold `value` as (its error messages name it), None
    for a GPU tensor, read only when the profile is written."""
    kind = type(value)
    if kind is float:
        return "double"
    if kind is int:  # Triton 3.6 names a non-negative int uint64_t; newer ones int64_t
        return "int64_t" if value < 0 or triton_version.after_3_6() else "uint64_t"
    if kind is str:
        return "std::string"
    if kind is list:
        return "std::vector"
    return None


_SAME_TYPE = {"int64_t": "uint64_t"}
"""Type names that do not clash: ints of either sign add up."""


def check_same_type(key: str, old: Any, new: Any) -> None:
    """ScopeError when `new` changes the type of the metric `key` a node holds as `old` (a
    float after an int, text after a number, ...), with Triton's words first."""
    was, now = _type_name(old), _type_name(new)
    if was is None or now is None or _SAME_TYPE.get(was, was) == _SAME_TYPE.get(now, now):
        return
    name = base_name(key)
    raise ScopeError(f"Metric value type mismatch for valueId 0 ({name}): current={was}, "
                     f"new={now}; give metric {key!r} one type of value on a scope (all "
                     "floats, all ints, all text or all vectors)")


TEXT_SUFFIXES = (PROPERTY, EXCLUSIVE)
"""Metrics that may be text: a property or an exclusive metric is never summed."""


def check_user_metrics(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """Values by name, ready to add (see metric_value; text for a "(pty)" or "(exc)" name);
    raise ScopeError for a reserved name or a value that is not a number, vector or tensor."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ScopeError(f"metrics {metrics!r} ({type(metrics).__name__}) is not accepted; give "
                         "a mapping of names to numbers, e.g. {'tokens': 4096}")
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise ScopeError(f"metric name {name!r} must be a non-empty string")
        if base_name(name) in RESERVED:
            raise ScopeError(f"metric name {name!r} is reserved for the profiler and its viewer; "
                             f"rename it (reserved: {', '.join(sorted(RESERVED))})")
        if isinstance(value, str) and name.endswith(TEXT_SUFFIXES):
            out[name] = value
        else:
            out[name] = metric_value(name, value)
    return out


def base_name(name: str) -> str:
    """A metric's name without its "(exc)" or "(pty)" suffix."""
    for suffix in (EXCLUSIVE, PROPERTY):
        if name.endswith(suffix):
            return name[: -len(suffix)].strip()
    return name.strip()
