"""PM samples read in C: one call per decode for every completed sample's span and metric
values, with the GIL released (pm_native.c, built at first use with the machine's C compiler
by c_loader.py, as runtime/intra_native.c is); perfworks.PmSampler reads them one ctypes call
at a time in Python when there is no compiler or PROTON_NATIVE=0.

Why: at the default 250 us interval a GPU gives 4,000 samples a second, each two CUPTI calls
(its span, its values). From Python each call builds a parameter struct and a result list
while holding the GIL, time the job's own Python thread then waits for; here the whole batch
is one foreign call.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import c_loader

HELPER = c_loader.Helper(
    __package__, "pm_native.c", "pm",
    "reading counter samples in Python, which holds the GIL longer: the C reader could not be "
    "built ({exc}); install a C compiler (cc)")


def helper() -> ctypes.CDLL | None:
    """The built reader; None (said once) without a compiler, and under PROTON_NATIVE=0."""
    return HELPER.load()


def read(lib: ctypes.CDLL, info_fn: int | None, eval_fn: int | None, sampler: int | None,
         host: int | None, image, size: int, names, n: int, first: int, count: int
         ) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(CUPTI result, the sample it failed on, spans (count x 2), values (count x n))."""
    spans = np.zeros((count, 2), np.uint64)
    values = np.zeros((count, n), np.float64)
    at = ctypes.c_size_t(0)
    code = lib.proton_pm_read(info_fn, eval_fn, sampler, host, ctypes.addressof(image), size,
                              ctypes.cast(names, ctypes.c_void_p), n, first, count,
                              spans.ctypes.data, values.ctypes.data, ctypes.byref(at))
    return code, at.value, spans, values
