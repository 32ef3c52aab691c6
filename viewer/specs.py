"""Peak throughput of the GPUs we can name, from the file's device table: the roofs that `util`,
the roofline and `--diagnose` judge kernels against.

Each kernel is judged against the roof of the precision its flops metric names: `flops8` and
`flops16` the 8- and 16-bit tensor-core peaks, `flops32` fp32 on the FMA units (or TF32 on the
tensor cores, when its machine code has HMMA/HGMMA or it ran faster than the FMA units can),
`flops64` fp64 (or fp64 on the tensor cores, when it ran faster than the FMA units can).

Peaks are the vendor's published dense figures for one part of each architecture, scaled by the
device table's SM count and clock against that part's own. Why not per-SM-per-clock rates times
the table's clock: `clock_rate` is the highest boost clock, and NVIDIA quotes its peaks at a
lower one (an H100 SXM reports 1980 MHz; its 989 dense fp16 TFLOP/s are 4096 FLOP per SM per
clock at 1830 MHz), so that product overstates every roof by ~8%. Anchored to a published
figure, the roof of the part itself is what NVIDIA states, and a sibling (H100 PCIe vs SXM,
A30 vs A100, L4 vs L40S) scales with its SMs and clock. The sm80 and sm90 tensor peaks are the
ones Triton's viewer uses, so `util` of 8- and 16-bit kernels agrees between the two there.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ViewerError

PRECISIONS = {8: ("8-bit tensor",), 16: ("16-bit tensor",), 32: ("fp32", "tf32 tensor"),
              64: ("fp64", "fp64 tensor")}
"""The roofs a flops<width> metric may run under, slowest first."""
TF32 = "tf32 tensor"


@dataclass(frozen=True, slots=True)
class Part:
    """The part of an architecture whose published peaks anchor its roofs."""

    name: str
    sms: int
    clock_khz: int
    """Its clock as the device table records it (CUDA's clock rate, the highest boost)."""
    tflops: dict[str, float]
    """Dense (no sparsity) peak TFLOP/s (TOPS for INT8) per PRECISIONS name."""


PARTS = {
    # NVIDIA A100 Tensor Core GPU datasheet (SXM4): INT8 624 TOPS, FP16/BF16 312, TF32 156,
    # FP32 19.5, FP64 9.7, FP64 Tensor Core 19.5. sm80 has no fp8: 8-bit is INT8.
    "80": Part("A100 SXM4", 108, 1_410_000,
               {"8-bit tensor": 624, "16-bit tensor": 312, "tf32 tensor": 156, "fp32": 19.5,
                "fp64": 9.7, "fp64 tensor": 19.5}),
    # NVIDIA L40S datasheet (sparse figures halved): FP8 733, FP16/BF16 362.05, TF32 183,
    # FP32 91.6; FP64 is 1/64 of FP32 on Ada (Ada Lovelace architecture whitepaper). GeForce
    # Ada cards (RTX 4090: 128 SMs) run fp16 and fp8 with FP32 accumulation at half these rates:
    # the device table cannot tell them apart, so their tensor roofs read 2x high.
    "89": Part("L40S", 142, 2_520_000,
               {"8-bit tensor": 733, "16-bit tensor": 362.05, "tf32 tensor": 183,
                "fp32": 91.6, "fp64": 91.6 / 64, "fp64 tensor": 91.6 / 64}),
    # NVIDIA H100 Tensor Core GPU datasheet, PCIe column (sparse figures halved): FP8 3026/2,
    # FP16/BF16 1513/2, TF32 756/2, FP32 51, FP64 26, FP64 Tensor Core 51. An H100 SXM (132
    # SMs, 1980 MHz) scales to 1976 FP8, 988 FP16 and 66.6 FP32, against its datasheet's 1979,
    # 989 and 67.
    "90": Part("H100 PCIe", 114, 1_755_000,
               {"8-bit tensor": 3026 / 2, "16-bit tensor": 1513 / 2, "tf32 tensor": 756 / 2,
                "fp32": 51, "fp64": 26, "fp64 tensor": 51}),
    # NVIDIA HGX B200 datasheet, per GPU (eight; sparse figures halved): FP8 72000/8/2,
    # FP16/BF16 36000/8/2, TF32 18000/8/2, FP32 600/8, FP64 and FP64 Tensor Core 296/8; 148 SMs
    # at a 1980 MHz boost clock.
    "100": Part("B200", 148, 1_980_000,
                {"8-bit tensor": 4500, "16-bit tensor": 2250, "tf32 tensor": 1125, "fp32": 75,
                 "fp64": 37, "fp64 tensor": 37}),
}


def peak_known(arch: str) -> bool:
    """Whether the peaks of CUDA arch `arch` ("90" = sm90) are known."""
    return arch in PARTS


def unknown_arch(arch: str) -> ViewerError:
    return ViewerError(f"no peak FLOP/s known for CUDA arch sm{arch}; util needs "
                       f"{', '.join('sm' + a for a in list(PARTS)[:-1])} or "
                       f"sm{list(PARTS)[-1]} (use tflop/s instead)")


def peak(gpu: dict, precision: str) -> float | None:
    """Peak FLOP/s of the device table entry `gpu` at `precision` (a PRECISIONS name); None
    when its arch is unknown or it lacks the figures. Worked out once per GPU and precision:
    a profile asks for each of its kernels, several times."""
    key = (str(gpu.get("arch")), gpu.get("num_sms"), gpu.get("clock_rate"), precision)
    try:
        return _PEAKS[key]
    except KeyError:
        found = _PEAKS[key] = _peak(gpu, precision)
        return found
    except TypeError:  # a figure that is no number (the viewer reads it as unknown)
        return _peak(gpu, precision)


_PEAKS: dict[tuple, float | None] = {}


def _peak(gpu: dict, precision: str) -> float | None:
    part = PARTS.get(str(gpu.get("arch")))
    if part is None:
        return None
    try:
        scale = gpu["num_sms"] / part.sms * gpu["clock_rate"] / part.clock_khz
    except (AttributeError, KeyError, TypeError):
        return None
    value = part.tflops[precision] * 1e12 * scale
    return value if value > 0 else None


def bandwidth(gpu: dict) -> float | None:
    """Peak DRAM bytes/s of the device table entry `gpu` (double data rate over the bus)."""
    try:
        value = 2 * gpu["bus_width"] * gpu["memory_clock_rate"] * 1e3 / 8
    except (KeyError, TypeError):
        return None
    return value if value > 0 else None


L2_BYTES_PER_CLOCK = {"80": 5120, "90": 7776}
"""The L2's bytes per SM clock, whole chip: the roof an L2-resident kernel is judged by when its
profile lacks the GPU's own measure of it (l2_throughput_ns, lts__t_bytes as a share of its
peak, which a counters profile records and which comes first). sm80: NVIDIA A100 Tensor Core
GPU Architecture whitepaper, "L2 cache read bandwidth" 5120 bytes/clk (V100: 2048). sm90:
NVIDIA publishes no figure for Hopper's L2 (the H100 whitepaper gives its size, 50 MB), so the
GPU's own is taken: on an H200 (bench/probes/counters_clock.py, 2026-11-28) lts__t_bytes over
its share of its peak implied 15.2-15.4 TB/s in every sample at 1976-1979 MHz, 7,776 bytes a
clock (15.4 TB/s at 1980 MHz); the 200 adds of 1M fp32 moved 7.6 TB/s through it, a 64M add
6.7 TB/s. Other archs: no L2 roof (L2 is judged only where the profile has the GPU's own
measure)."""


def l2_bandwidth(gpu: dict) -> float | None:
    """The L2 roof of the device table entry `gpu` in bytes/s (L2_BYTES_PER_CLOCK at its
    clock); None where the arch has no figure."""
    per_clock = L2_BYTES_PER_CLOCK.get(str(gpu.get("arch")))
    try:
        value = per_clock * gpu["clock_rate"] * 1e3 if per_clock else None
    except (KeyError, TypeError):
        return None
    return value if value and value > 0 else None


def precision(gpu: dict, width: int, rate: np.ndarray, tensor_code: np.ndarray) -> np.ndarray:
    """The roofs flops<width> kernels run under, as indexes into PRECISIONS[width]: for each,
    the slowest that its achieved `rate` (FLOP/s) does not exceed, TF32 where `tensor_code`
    (its machine code has HMMA/HGMMA: fp32 tl.dot runs as TF32 there)."""
    names = PRECISIONS[width]
    choice = np.full(len(rate), len(names) - 1)
    for i in reversed(range(len(names))):  # the slowest roof that holds the rate wins
        choice = np.where(rate <= (peak(gpu, names[i]) or 0), i, choice)
    if TF32 in names:
        choice = np.where(tensor_code, names.index(TF32), choice)
    return choice


def compute_roof(gpu: dict, flops: dict[int, np.ndarray], seconds: np.ndarray,
                 tensor_code: np.ndarray) -> list[tuple[float, list[str]] | None]:
    """(peak FLOP/s, precisions) of each of the kernels on `gpu` that did flops[width][k]
    operations at each width in seconds[k]: each width at its own roof, their time added (a
    kernel of one width gets that width's peak). None for a kernel whose GPU's peaks are
    unknown or that did nothing. Kernels of a GPU at once: a profile has 100,000s of them."""
    n = len(seconds)
    least = np.zeros(n)  # the least time the work takes at the peaks
    total = np.zeros(n)
    known = np.ones(n, dtype=bool)
    names: list[list[str]] = [[] for _ in range(n)]
    for width, count in flops.items():
        total += count
        done = count != 0
        rate = np.divide(count, seconds, out=np.zeros(n), where=seconds != 0)
        choice = precision(gpu, width, rate, tensor_code)
        tops = np.array([peak(gpu, name) or np.nan for name in PRECISIONS[width]])[choice]
        known &= ~(done & np.isnan(tops))
        least += np.where(done & known, count / np.where(known, tops, 1.0), 0.0)
        for k, c in zip(np.flatnonzero(done).tolist(), choice[done].tolist()):
            names[k].append(PRECISIONS[width][c])
    valid = (known & (least != 0)).tolist()
    top = np.divide(total, least, out=np.zeros(n), where=least != 0).tolist()
    return [(t, ns) if v else None for t, ns, v in zip(top, names, valid)]


# Triton 3.6's viewer's peaks, for its Python API (proton.viewer.derive_metrics' util,
# get_min_time_flops, get_min_time_bytes) and --output triton: a script written against
# Triton's functions gets Triton's numbers. Triton takes one 8-bit peak per GPU and divides it
# by width/8 for every flops<width>; our own util uses the roof of each precision (PARTS).
TRITON_FIXED_8BIT = {"80": 624e12, "89": 330.3e12}
"""sm80 and sm89: one figure whatever the SMs and clock."""
TRITON_HIP_8BIT_PER_CU_CLOCK = {"gfx90a": 1024, "gfx942": 4096, "gfx950": 8192}
"""AMD: 8-bit FLOP per CU per clock (gfx90a: INT8, it has no FP8)."""
TRITON_HIP_BANDWIDTH = {"gfx90a": 3.2e12, "gfx942": 5.3e12, "gfx950": 8.0e12}
"""AMD: bytes/s, a figure per arch."""


def triton_peak_flops(device_type: str, arch: str, width: int, num_sms: int,
                      clock_rate: float) -> float:
    """FLOP/s Triton's viewer divides flops<width> by on this GPU (clock_rate in kHz, as the
    device table has it); ViewerError for a GPU it has no figure for."""
    if device_type == "HIP" and arch in TRITON_HIP_8BIT_PER_CU_CLOCK:
        eight_bit = TRITON_HIP_8BIT_PER_CU_CLOCK[arch] * num_sms * clock_rate * 1e3
    elif device_type == "CUDA" and arch in TRITON_FIXED_8BIT:
        eight_bit = TRITON_FIXED_8BIT[arch]
    elif device_type == "CUDA" and arch == "90":  # H100 PCIe's 1513 TFLOP/s, scaled
        eight_bit = num_sms / 114 * clock_rate / 1755e3 * 1513 * 1e12
    elif device_type == "CUDA" and arch == "100":  # 16,384 FLOP per SM per clock
        eight_bit = num_sms * 16384 * (clock_rate / 1e3) * 1e6
    else:
        raise ViewerError(f"Triton's viewer has no peak FLOP/s for {device_type} arch {arch}; "
                          "its util needs CUDA sm80, sm89, sm90, sm100 or HIP gfx90a, gfx942, "
                          "gfx950 (use proton-viewer -m util for ours)")
    return eight_bit / (width / 8)


def triton_peak_bandwidth(device_type: str, arch: str, bus_width: int,
                          memory_clock_rate: float) -> float:
    """Bytes/s Triton's viewer divides bytes by: CUDA's from the bus, AMD's per arch."""
    if device_type == "CUDA":
        peak = bandwidth({"bus_width": bus_width, "memory_clock_rate": memory_clock_rate})
        if peak:
            return peak
    elif device_type == "HIP" and arch in TRITON_HIP_BANDWIDTH:
        return TRITON_HIP_BANDWIDTH[arch]
    raise ViewerError(f"Triton's viewer has no peak bandwidth for {device_type} arch {arch}; "
                      "its util needs a CUDA GPU with bus_width and memory_clock_rate, or HIP "
                      "gfx90a, gfx942, gfx950")
