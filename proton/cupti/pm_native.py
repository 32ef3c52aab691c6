"""PM samples read in C: one call per decode for every completed sample's span and metric
values, with the GIL released (built at first use with the machine's C compiler, in
cupti/native.py's private cache, as runtime/intra_native.py is); perfworks.PmSampler reads
them one ctypes call at a time in Python when there is no compiler or PROTON_NATIVE=0.

Why: at the default 250 us interval a GPU gives 4,000 samples a second, each two CUPTI calls
(its span, its values). From Python each call builds a parameter struct and a result list
while holding the GIL, time the job's own Python thread then waits for; here the whole batch
is one foreign call.
"""
from __future__ import annotations

import ctypes
import subprocess
import threading

import numpy as np

from ..report import warn
from . import native

SOURCE = r"""
#include <stddef.h>
#include <stdint.h>

typedef int (*cupti_fn)(void *params);

/* CUpti_PmSampling_CounterData_GetSampleInfo_Params and
   CUpti_Profiler_Host_EvaluateToGpuValues_Params of CUPTI 13.0's headers. */
typedef struct {
    size_t structSize; void *pPriv; void *pPmSamplingObject; const uint8_t *pCounterDataImage;
    size_t counterDataImageSize; size_t sampleIndex; uint64_t startTimestamp, endTimestamp;
} sample_info;
typedef struct {
    size_t structSize; void *pPriv; void *pHostObject; const uint8_t *pCounterDataImage;
    size_t counterDataImageSize; size_t rangeIndex; const char **ppMetricNames;
    size_t numMetrics; double *pMetricValues;
} evaluate;

/* Samples first .. first+count-1 of a decoded counter data image: spans[2i], spans[2i+1] the
   sample's GPU start and end, values[i*n ..] its n metrics. 0, or the first CUPTI error, with
   the sample it failed on in *at. */
int proton_pm_read(cupti_fn info_fn, cupti_fn eval_fn, void *sampler, void *host,
                   const uint8_t *image, size_t size, const char **names, size_t n,
                   size_t first, size_t count, uint64_t *spans, double *values, size_t *at) {
    for (size_t i = 0; i < count; i++) {
        sample_info s = {offsetof(sample_info, endTimestamp) + sizeof s.endTimestamp, NULL,
                         sampler, image, size, first + i, 0, 0};
        int code = info_fn(&s);
        if (code == 0) {
            evaluate e = {offsetof(evaluate, pMetricValues) + sizeof e.pMetricValues, NULL,
                          host, image, size, first + i, names, n, values + i * n};
            code = eval_fn(&e);
        }
        if (code) { *at = first + i; return code; }
        spans[2 * i] = s.startTimestamp;
        spans[2 * i + 1] = s.endTimestamp;
    }
    return 0;
}
"""

_lock = threading.Lock()
_built: dict[str, ctypes.CDLL | None] = {}


def helper() -> ctypes.CDLL | None:
    """The built reader; None (said once) without a compiler, and under PROTON_NATIVE=0."""
    if not native.enabled():
        return None
    path = native.cached_path("pm", (SOURCE,), native.OTHER_FLAGS)
    with _lock:
        if path not in _built:
            lib = None
            try:
                lib = native.load_cached(path, lambda out: native.compile_source(out, SOURCE))
                lib.proton_pm_read.restype = ctypes.c_int
                ptr, size = ctypes.c_void_p, ctypes.c_size_t
                lib.proton_pm_read.argtypes = (ptr, ptr, ptr, ptr, ptr, size, ptr, size, size,
                                               size, ptr, ptr, ptr)
            except (OSError, subprocess.SubprocessError, native.BuildError) as exc:
                warn(f"reading counter samples in Python, which holds the GIL longer: the C "
                     f"reader could not be built ({exc}); install a C compiler (cc)")
            _built[path] = lib
        return _built[path]


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
