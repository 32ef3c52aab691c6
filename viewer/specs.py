"""Peak throughput of the GPUs we can name, from the file's device table (for `util`).

Peaks are dense tensor-core rates at the 8-bit width, halved for each doubling of width, and
the memory bandwidth from the bus width and memory clock; the same figures Triton's viewer uses,
so `util` agrees between the two.
"""
from __future__ import annotations

from .errors import ViewerError


PEAK_ARCHS = ("80", "89", "90", "100")
"""CUDA compute capabilities whose peak FLOP/s `max_flops` knows."""


def peak_known(arch: str) -> bool:
    """Whether `max_flops` knows the peak of CUDA arch `arch`."""
    return arch in PEAK_ARCHS


def max_flops(arch: str, width: int, num_sms: int, clock_rate_khz: float) -> float:
    """Peak FLOP/s at `width` bits for CUDA compute capability `arch` ("80", "89", "90", "100")."""
    per_byte = width / 8
    if arch == "80":  # A100: 624 dense 8-bit TOPS
        return 624e12 / per_byte
    if arch == "89":  # L40S / RTX 6000 Ada class: 330.3 dense 8-bit TFLOP/s
        return 330.3e12 / per_byte
    if arch == "90":  # H100 PCIe: 1513 dense FP8 TFLOP/s at 114 SMs and 1755 MHz; scale to ours
        return num_sms / 114 * clock_rate_khz / 1755e3 * 1513e12 / per_byte
    if arch == "100":  # B200: 16384 dense FP8 FLOP per SM per clock
        return num_sms * 16384 * clock_rate_khz * 1e3 / per_byte
    raise ViewerError(f"no peak FLOP/s known for CUDA arch sm{arch}; util needs sm80, sm89, "
                      "sm90 or sm100 (use tflop/s instead)")


def max_bytes_per_s(bus_width_bits: int, memory_clock_khz: float) -> float:
    """Peak DRAM bandwidth: double data rate over the bus."""
    return 2 * bus_width_bits * memory_clock_khz * 1e3 / 8


def roof(gpu: dict) -> tuple[float, float] | None:
    """A device table entry's roofs: (16-bit tensor peak FLOP/s, DRAM bytes/s); None when its
    arch's peak is unknown or the entry lacks the figures (missing, or zeros)."""
    try:
        arch = str(gpu["arch"])
        if not peak_known(arch):
            return None
        peak = max_flops(arch, 16, gpu["num_sms"], gpu["clock_rate"])
        bw = max_bytes_per_s(gpu["bus_width"], gpu["memory_clock_rate"])
    except (KeyError, TypeError, ViewerError):
        return None
    return (peak, bw) if peak > 0 and bw > 0 else None
