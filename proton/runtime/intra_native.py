"""Kernel scope buffers (data/intra.py's layout) decoded in C: many launches of one kernel in
one call that releases the GIL (intra_native.c, built at first use with the machine's C
compiler by cupti/c_loader.py, as cupti/native.c is); data/intra.decode does it in numpy
when there is no compiler or PROTON_NATIVE=0.

Why: numpy's decode makes ~20 passes and fancy-indexed gathers over the records (~0.2 us a
record, ~50 us a launch of 8 CTAs x 4 warps x 4 scopes on the build machine); this walks each
warp's records once, pairing them per scope with a pending start per scope id (~5 ns a record).
Event records (Triton 3.9) are set aside as the walk meets them and paired once their CTA's
warps are read (sorted by clock; data/intra pairs them in Python, one record at a time).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..cupti import c_loader
from ..data import intra

HELPER = c_loader.Helper(
    __package__, "intra_native.c", "intra",
    "instrumentation: decoding kernel scope buffers in numpy, which costs more per launch: the "
    "C helper could not be built ({exc}); install a C compiler (cc) or set "
    + c_loader.NATIVE_ENV + "=0 to silence this")
COLUMNS = ("launch", "block", "sm", "warp", "scope", "start", "end", "init_ns",
           "block_min_clock", "end_warp", "event")


def library_path() -> str:
    """Where the decoder is cached (c_loader's key)."""
    return HELPER.path()


def helper() -> ctypes.CDLL | None:
    """The compiled decoder; None (said once) without a compiler or with PROTON_NATIVE=0."""
    return HELPER.load()


def decode_launches(host: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, scratch: int,
                    num_warps: int, warps: tuple[int, ...] | None = None) -> intra.Decoded:
    """Every launch of one kernel in `host` (launch i: `sizes[i]` bytes at `offsets[i]`) at
    once, Decoded.launch numbering them; in C when built, else data/intra.decode. `warps`:
    the recorded warps (intra.recorded_warps; every warp when None).

    Raises:
        intra.LayoutError: the buffers do not hold Triton's layout.
    """
    offsets = np.ascontiguousarray(offsets, np.int64)
    counts = np.ascontiguousarray(np.asarray(sizes, np.int64) // scratch)
    if scratch <= 0 or scratch % 4:
        raise intra.LayoutError(f"profile_scratch_size {scratch} is not a positive multiple "
                                "of 4")
    if offsets.size and int((offsets + counts * scratch).max()) > host.size:
        raise intra.LayoutError(f"launches reach past the {host.size}-byte buffer")
    uids = np.ascontiguousarray(range(num_warps) if warps is None else warps, np.int32)
    if not uids.size or int(uids.min()) < 0 or int(uids.max()) >= num_warps:
        raise intra.LayoutError(f"recorded warps {uids.tolist()[:8]} are not warps of "
                                f"{num_warps}")
    lib = helper()
    if lib is None:
        return _numpy(host, offsets, counts, scratch, num_warps, tuple(uids.tolist()))
    host = np.ascontiguousarray(host).view(np.uint8)
    base, off, nb = host.ctypes.data, offsets.ctypes.data, counts.ctypes.data
    bound = lib.proton_intra_bound(base, off, nb, offsets.size, scratch, num_warps,
                                   uids.ctypes.data, uids.size)
    if bound < 0:
        raise intra.LayoutError(f"the per-warp segments of {uids.size} warps do not fit a "
                                f"{scratch}-byte block: not Triton's layout")
    cols = np.empty((len(COLUMNS), max(bound, 1)), np.int64)
    ptrs = (ctypes.c_void_p * len(COLUMNS))(*[cols[i].ctypes.data for i in range(len(COLUMNS))])
    stats = np.zeros(6, np.int64)
    unbalanced, reordered = np.zeros(256, np.int64), np.zeros(256, np.int64)
    ctas = np.empty((max(int(counts.sum()), 1), 4), np.int64)
    lib.proton_intra_decode(base, off, nb, offsets.size, scratch, num_warps, uids.ctypes.data,
                            uids.size, ptrs, cols.shape[1], ctas.ctypes.data, stats.ctypes.data,
                            unbalanced.ctypes.data, reordered.ctypes.data)
    if stats[4] == 3:
        raise MemoryError("instrumentation: no memory for a CTA's event records")
    if stats[4]:
        raise intra.LayoutError("segment sizes differ between CTAs")
    n = int(stats[0])
    c = dict(zip(COLUMNS, cols[:, :n]))
    return intra.Decoded(block=c["block"], sm=c["sm"], warp=c["warp"], scope=c["scope"],
                         start=c["start"], end=c["end"], launch=c["launch"],
                         init_ns=c["init_ns"], block_min_clock=c["block_min_clock"],
                         end_warp=c["end_warp"], event=c["event"].astype(bool),
                         ctas=ctas[:int(stats[5])],
                         num_blocks=int(counts.sum()), num_warps=num_warps,
                         dropped=int(stats[1]), needed_bytes=int(stats[2]),
                         unbalanced=_nonzero(unbalanced), reordered=_nonzero(reordered),
                         bad_blocks=int(stats[3]))


def _nonzero(counts: np.ndarray) -> dict[int, int]:
    ids = np.nonzero(counts)[0]
    return dict(zip(ids.tolist(), counts[ids].tolist()))


def _numpy(host: np.ndarray, offsets: np.ndarray, counts: np.ndarray, scratch: int,
           num_warps: int, warps: tuple[int, ...]) -> intra.Decoded:
    label = np.repeat(np.arange(offsets.size), counts)
    sizes = counts * scratch
    if offsets.size and np.all(offsets[1:] == offsets[:-1] + sizes[:-1]):  # side by side
        blocks = host[offsets[0]:offsets[-1] + sizes[-1]]
    else:
        blocks = np.concatenate([host[o:o + n] for o, n in zip(offsets, sizes)] or
                                [np.zeros(0, np.uint8)])
    return intra.decode(blocks, scratch, num_warps, label=label, warps=warps)
