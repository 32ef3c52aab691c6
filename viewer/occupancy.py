"""Theoretical occupancy of a kernel launch, as the CUDA occupancy calculator computes it: how
many blocks of a launch fit on one SM at once, and which resource stops more.

Per compute capability: warps, blocks, registers and shared memory per SM, with the allocation
granularities (registers by 256 per warp, shared memory by 128 bytes plus 1 KiB the system
reserves per block on sm80 and later).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SMLimits:
    warps: int
    blocks: int
    registers: int = 65536
    shared: int = 0
    """Shared memory a block may use per SM, at the largest carveout (bytes)."""
    reserved: int = 1024
    """Shared memory the system keeps per block (bytes)."""
    register_unit: int = 256
    shared_unit: int = 128


LIMITS = {
    "70": SMLimits(warps=64, blocks=32, shared=98304, reserved=0),
    "75": SMLimits(warps=32, blocks=16, shared=65536, reserved=0),
    "80": SMLimits(warps=64, blocks=32, shared=167936),
    "86": SMLimits(warps=48, blocks=16, shared=102400),
    "87": SMLimits(warps=48, blocks=16, shared=167936),
    "89": SMLimits(warps=48, blocks=24, shared=102400),
    "90": SMLimits(warps=64, blocks=32, shared=233472),
    "100": SMLimits(warps=64, blocks=32, shared=233472),
}
"""Per CUDA compute capability ("80" = sm80), from NVIDIA's tuning guides."""


@dataclass(frozen=True, slots=True)
class Occupancy:
    blocks: int
    """Resident blocks per SM."""
    warps: int
    """Resident warps per SM."""
    fraction: float
    """Resident warps over the SM's most."""
    limiter: str
    """What allows no more blocks: "warps", "blocks", "registers" or "shared memory"."""


def occupancy(arch: str, threads: int, registers: int, shared: int) -> Occupancy | None:
    """Blocks of `threads` threads using `registers` per thread and `shared` bytes of shared
    memory per block, on an SM of compute capability `arch`; None for an unknown arch or a
    block that cannot run."""
    sm = LIMITS.get(str(arch))
    if sm is None or threads <= 0:
        return None
    warps = math.ceil(threads / 32)
    limits = {"warps": sm.warps // warps, "blocks": sm.blocks}
    if registers > 0:
        per_warp = math.ceil(registers * 32 / sm.register_unit) * sm.register_unit
        limits["registers"] = (sm.registers // per_warp) // warps
    if shared > 0:
        per_block = math.ceil((shared + sm.reserved) / sm.shared_unit) * sm.shared_unit
        limits["shared memory"] = sm.shared // per_block
    limiter = min(limits, key=lambda k: (limits[k], list(limits).index(k)))
    blocks = limits[limiter]
    if blocks <= 0:
        return None
    return Occupancy(blocks, blocks * warps, blocks * warps / sm.warps, limiter)
