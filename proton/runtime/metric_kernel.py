"""The metric kernel: a node put into a CUDA graph being captured, where a scope or a launch
gives metrics, so each replay says that it ran and records the values of a GPU tensor as they
are at that replay.

Each launch appends one record to its device's ring, `[tag, value...]` (int64 words; a float
as its float64 bits), at a place it reserves with one atomic add on the ring's counter, which
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
"""(device, source dtype, FLOAT) -> the loaded kernel."""


def launch(ring: torch.Tensor, counter: torch.Tensor, tag: int, src: torch.Tensor | None,
           floats: bool) -> None:
    """Append `[tag, src...]` to `ring` on the current stream of `ring`'s device (nothing when
    `src` is None), without Triton's launch hooks: the profiler's own kernel is no user op."""
    source = ring if src is None else src
    count = 0 if src is None else src.numel()
    key = (ring.device.index, source.dtype, floats)
    kernel = _compiled.get(key)
    args = (ring, counter, ring.numel(), tag, source, count, BLOCK, floats)
    if kernel is None:
        kernel = _record.warmup(*args, grid=(1,), num_warps=1)
        kernel._init_handles()
        _compiled[key] = kernel
    stream = torch.cuda.current_stream(ring.device).cuda_stream
    kernel.run(1, 1, 1, stream, kernel.function, kernel.packed_metadata, None, None, None,
               *args)
