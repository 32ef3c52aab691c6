"""The columns the attribution pipeline passes between C, numpy and Python, declared once.

Every table is an IntEnum whose members are its columns in order: a member is the column's
index (its row in a numpy block of shape (columns, capacity), or its place in a tuple), and
`len(Table)` the column count. Every column is an int64 (`DTYPE` in numpy, `C_TYPE` in C):
pointers (a kernel's name), ids and timestamps alike. The C helper (native.c) gets the same
indices from a header generated here (`c_header()`), compiled in with it, so the C enums and
the Python indices cannot disagree; tests/test_native.py also compiles a small program that
prints them back.

The first three tables are the fields read from CUPTI's records (cupti-python's dtype field
names: their offsets and sizes come from that dtype, so they follow the binding's version);
the others are what the C join and the Attributor take and give.
"""
from __future__ import annotations

from enum import IntEnum
from itertools import accumulate
from operator import itemgetter

DTYPE = "int64"
"""Every column's numpy dtype (a name: this module imports no numpy, the router and the
Attributor import it, and `import proton` stays cheap)."""
C_TYPE = "int64_t"


class Table(IntEnum):
    """A table's columns, numbered from 0 in the order written."""


def _cols(table: type[Table], names: str) -> list[Table]:
    return [table[n] for n in names.split()]


class ExternalFields(Table):
    """An EXTERNAL_CORRELATION record (activity_external_correlation_dtype)."""
    correlation_id = 0
    external_kind = 1
    external_id = 2


class ApiFields(Table):
    """A DRIVER or RUNTIME API record (activity_api_dtype); `kind` tells which."""
    kind = 0
    correlation_id = 1
    start = 2
    cbid = 3
    thread_id = 4
    return_value = 5


class KernelFields(Table):
    """A CONCURRENT_KERNEL record (activity_kernel10_dtype)."""
    correlation_id = 0
    name = 1  # type: ignore[assignment]  # a column named as CUPTI's field, over Enum.name
    device_id = 2
    start = 3
    end = 4
    stream_id = 5
    grid_x = 6
    grid_y = 7
    grid_z = 8
    block_x = 9
    block_y = 10
    block_z = 11
    registers_per_thread = 12
    static_shared_memory = 13
    dynamic_shared_memory = 14
    graph_node_id = 15


class CopyFields(Table):
    """A MEMCPY or MEMCPY2 (peer) record (activity_memcpy6_dtype, activity_memcpy_pto_p4_dtype:
    one table, each kind read at its own offsets)."""
    correlation_id = 0
    device_id = 1
    start = 2
    end = 3
    stream_id = 4
    bytes = 5
    copy_kind = 6
    src_kind = 7
    dst_kind = 8
    graph_node_id = 9


class SetFields(Table):
    """A MEMSET record (activity_memset4_dtype): CopyFields without the kinds, its columns at
    the same places (native.c's copy_row and shaping.copy_kernels read both alike)."""
    correlation_id = 0
    device_id = 1
    start = 2
    end = 3
    stream_id = 4
    bytes = 5
    graph_node_id = 6


class CopyKind(Table):
    """CUPTI's CUpti_ActivityMemcpyKind, by value (tests/test_copies.py checks them against
    cupti-python's ActivityMemcpyKind)."""
    unknown = 0
    htod = 1
    dtoh = 2
    htoa = 3
    atoh = 4
    atoa = 5
    atod = 6
    dtoa = 7
    dtod = 8
    htoh = 9
    ptop = 10


class MemoryKind(Table):
    """CUPTI's CUpti_ActivityMemoryKind, by value, as far as pageable (the host side of a
    copy is pageable or not)."""
    unknown = 0
    pageable = 1


class CopyName(Table):
    """A copy or set as the join carries it: a kernel row whose name column is -1 - this
    number (a kernel's is CUPTI's pointer to its name), whose launch configuration is none
    (0 blocks) but its bytes (in the shared memory column). format.COPY_NAMES in this order."""
    htod_pageable = 0
    htod_pinned = 1
    dtoh_pageable = 2
    dtoh_pinned = 3
    dtod = 4
    ptop = 5
    htoh = 6
    other = 7
    memset = 8


class Busy(IntEnum):
    """What a busy interval the collector hands the idle tracker ran (runtime/idle.py)."""
    compute = 0
    comm = 1
    """An NCCL kernel (format.COMM_KERNEL)."""
    copy = 2
    """A copy or set."""


class Kernel(Table):
    """A kernel as the C join takes it and hands back what Python places: the launch
    configuration as grid blocks, threads per block, registers per thread and shared memory
    bytes per block (static + dynamic); graph node 0 when not launched through a graph."""
    correlation_id = 0
    name = 1  # type: ignore[assignment]  # a column named as CUPTI's field, over Enum.name
    device = 2
    start = 3
    end = 4
    stream = 5
    blocks = 6
    threads = 7
    registers = 8
    shared = 9
    graph_node = 10


CONFIG = _cols(Kernel, "blocks threads registers shared")
"""The launch configuration's columns, in LaunchConfigs' order."""


class Group(Table):
    """The C join's sum of a buffer's kernels per (path, name, device, configuration)."""
    path = 0
    name = 1  # type: ignore[assignment]  # a column named as CUPTI's field, over Enum.name
    device = 2
    blocks = 3
    threads = 4
    registers = 5
    shared = 6
    ns = 7
    count = 8


class Row(Table):
    """One kernel the C join matched, with its launch's path and start."""
    path = 0
    launch = 1
    correlation_id = 2
    name = 3  # type: ignore[assignment]  # a column named as CUPTI's field, over Enum.name
    device = 4
    start = 5
    end = 6
    stream = 7
    blocks = 8
    threads = 9
    registers = 10
    shared = 11


class External(Table):
    """A launch's path from its external record (the Attributor's `external` columns)."""
    correlation_id = 0
    path = 1


class Launch(Table):
    """A launch call that succeeded (the Attributor's `api` columns); graph is 1 for a graph
    launch, thread the low 32 bits of pthread_self."""
    correlation_id = 0
    start = 1
    graph = 2
    thread = 3


class Placed(Table):
    """A kernel as the Attributor takes it (its `kernels` columns) and gives it on (after
    the launch's path and start in attribution.Kernel): config is LaunchConfigs' number;
    graph_node comes only when some kernel of the buffer ran in a graph."""
    correlation_id = 0
    name = 1  # type: ignore[assignment]  # a column named as CUPTI's field, over Enum.name
    device = 2
    start = 3
    end = 4
    stream = 5
    config = 6
    graph_node = 7


class Sunk(Table):
    """attribution.Kernel, the tuple the kernel sink gets: the launch's path and start, then
    Placed's columns up to config."""
    path = 0
    launch = 1
    correlation_id = 2
    name = 3  # type: ignore[assignment]  # a column named as CUPTI's field, over Enum.name
    device = 4
    start = 5
    end = 6
    stream = 7
    config = 8


class Count(Table):
    """What the C join counts of one buffer: groups and rows made, external, API and kernel
    rows left to Python, the earliest launch start among the rows, launch records seen."""
    groups = 0
    rows = 1
    external = 2
    launches_left = 3
    kernels = 4
    first = 5
    launches = 6


OUTPUT = (Group, Row, External, Launch, Kernel)
"""The C join's outputs, in the order they lie in its one block (one stride for all)."""
OUTPUT_AT = tuple(accumulate(map(len, OUTPUT), initial=0))
"""Where each of OUTPUT begins in that block's rows, and its end."""
INPUT = (ExternalFields, ApiFields, KernelFields, CopyFields, CopyFields, SetFields)
"""The record fields native.Columns reads, group by group, as the C join takes them (MEMCPY,
then MEMCPY2, then MEMSET records after the kernels)."""

_PREFIXES = {ExternalFields: "XF", ApiFields: "AF", KernelFields: "KF", CopyFields: "CF",
             SetFields: "SF", CopyKind: "CK", MemoryKind: "MK", CopyName: "CN", Kernel: "K",
             Group: "G", Row: "R", External: "X", Launch: "L", Placed: "P", Sunk: "S",
             Count: "OUT"}
"""Each table's C enum prefix: column `start` of Kernel is K_START, its column count
K_COLUMNS."""


def getter(table: type[Table], names: str) -> itemgetter:
    """A function picking the columns `names` (space-separated) from a row of `table`."""
    return itemgetter(*_cols(table, names))


def unpacks(table: type[Table], names: str) -> None:
    """Say that code unpacks rows of `table` as `names` (space-separated, every column in
    order): where picking columns by index costs too much per row (a loop over every kernel),
    the unpacking is checked against the declaration when its module is imported.

    Raises:
        RuntimeError: the table's columns are not `names`.
    """
    if names.split() != [m.name for m in table]:
        raise RuntimeError(f"records.{table.__name__} is ({', '.join(m.name for m in table)}) "
                           f"but code unpacks it as ({names}); update that code")


def c_header() -> str:
    """The tables as C enums (native.c includes it as proton_records.h)."""
    lines = ["/* Generated from proton/cupti/records.py at build time: do not edit. */",
             "#ifndef PROTON_RECORDS_H", "#define PROTON_RECORDS_H", "#include <stdint.h>",
             f"typedef {C_TYPE} proton_column;"]
    for table, prefix in _PREFIXES.items():
        names = [f"{prefix}_{m.name.upper()} = {int(m)}" for m in table]
        lines.append(f"enum {{ {', '.join(names)}, {prefix}_COLUMNS = {len(table)} }};")
    lines += ["#endif", ""]
    return "\n".join(lines)


def c_names() -> dict[str, int]:
    """Every C enum name c_header declares, with its value (for the test that reads them back
    from a compiled program)."""
    out = {}
    for table, prefix in _PREFIXES.items():
        out.update({f"{prefix}_{m.name.upper()}": int(m) for m in table})
        out[f"{prefix}_COLUMNS"] = len(table)
    return out
