"""The metric kernel: a node put into a CUDA graph being captured, where a scope or a launch
gives metrics, so each replay says that it ran and records the values of a GPU tensor as they
are at that replay.

Each launch appends one record to its device's ring, `[tag, value...]` (int64 words; a float
as its float64 bits: the values come as float64 or int64, so two kernels serve every
metric), at a place it reserves with one atomic add on the ring's counter, which
only grows (the host reads the words from where it stopped to the counter). A launch with no
values (scalar metrics only) writes nothing: its kernel record alone says the replay ran.
Loaded only where metrics are given inside a capture (imports Triton and torch).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 128


@triton.jit(do_not_specialize=["tag", "count"])
def _record(ring, counter, size, tag, src, count, BLOCK: tl.constexpr, FLOAT: tl.constexpr):
    if count > 0:
        base = tl.atomic_add(counter, count + 1, sem="relaxed")
        tl.store(ring + base % size, tag)
        for start in range(0, count, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < count
            value = tl.load(src + offs, mask=mask)
            if FLOAT:
                bits = value.to(tl.float64).to(tl.int64, bitcast=True)
            else:
                bits = value.to(tl.int64)
            tl.store(ring + (base + 1 + offs) % size, bits, mask=mask)


_compiled: dict[tuple, object] = {}
"""(device, source dtype, FLOAT) -> the loaded kernel: int64 values (and no values), float64."""


def _kernel(args: tuple):
    ring, src, floats = args[0], args[4], args[7]
    key = (ring.device.index, src.dtype, floats)
    kernel = _compiled.get(key)
    if kernel is None:
        kernel = _record.warmup(*args, grid=(1,), num_warps=1)
        kernel._init_handles()
        _compiled[key] = kernel
    return kernel


def prepare(ring: torch.Tensor, counter: torch.Tensor) -> None:
    """Compile and load both kernels for `ring`'s device now (before a capture needs them)."""
    for src, floats in ((ring, False), (ring.view(torch.float64), True)):
        _kernel((ring, counter, ring.numel(), 0, src, 0, BLOCK, floats))


def launch(ring: torch.Tensor, counter: torch.Tensor, tag: int, src: torch.Tensor | None,
           floats: bool) -> None:
    """Append `[tag, src...]` to `ring` on the current stream of `ring`'s device (nothing when
    `src` is None; else a contiguous float64 tensor when `floats`, int64 otherwise), without
    Triton's launch hooks: the profiler's own kernel is no user op."""
    args = (ring, counter, ring.numel(), tag, ring if src is None else src,
            0 if src is None else src.numel(), BLOCK, floats and src is not None)
    kernel = _kernel(args)
    stream = torch.cuda.current_stream(ring.device).cuda_stream
    kernel.run(1, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None,
               *args)
