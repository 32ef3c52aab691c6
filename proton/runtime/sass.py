"""The SASS instruction mix of the Triton kernels a profile names (for --diagnose's tensor-core
rule), read when a profile is written: nvdisasm once per compiled kernel, cached."""
from __future__ import annotations

from ..format import DOT_NO_TENSOR_CORES, DOT_NO_WGMMA, SASS_PREFIX, TL_DOT

_mix: dict[str, dict[str, int] | None] = {}
"""Compiled kernel hash -> its mix (None: no tl.dot, or no disassembler)."""
MOST = 64
"""Kernels disassembled per write at most (each is a subprocess)."""


def by_name(names: set[str]) -> dict[str, dict[str, int]]:
    """Kernel name -> TL_DOT and `sass_*` counts, for the Triton kernels among `names` whose
    IR does a tl.dot (summed over the name's compiled variants); {} without Triton."""
    try:
        from ..compiler import kernels as table
        from ..compiler.sass import OPCODES, has_dot, instruction_mix
    except ImportError:
        return {}
    if not names:
        return {}
    try:
        table.kernels.install()  # once per process: those loaded so far, then every load
    except Exception:  # Triton's internals moved: no instruction mix, the profile is kept
        return {}
    infos = {i.hash: i for i in list(table.kernels.by_function.values()) if i.name in names}
    out: dict[str, dict[str, int]] = {}
    done = 0
    for info in infos.values():
        if info.hash not in _mix:
            if done >= MOST:
                continue
            done += 1
            mix = instruction_mix(info.cubin() or b"") if has_dot(info.ttir()) else None
            _mix[info.hash] = mix
        mix = _mix[info.hash]
        if mix is None:
            continue
        metrics = out.setdefault(info.name, {TL_DOT: 0, DOT_NO_TENSOR_CORES: 0, DOT_NO_WGMMA: 0,
                                             **{SASS_PREFIX + op.lower(): 0 for op in OPCODES}})
        metrics[TL_DOT] += 1
        for op, n in mix.items():
            metrics[SASS_PREFIX + op.lower()] += n
        if not (mix["HGMMA"] or mix["HMMA"] or mix["IMMA"]):
            metrics[DOT_NO_TENSOR_CORES] += 1
        elif not mix["HGMMA"]:
            metrics[DOT_NO_WGMMA] += 1
    return out
