/* PM samples read in C for perfworks.PmSampler (see pm_native.py; built at first use by
   cupti/c_loader.py, which derives each PROTON_API function's ctypes signature from its
   definition here). */
#include <stddef.h>
#include <stdint.h>

/* What Python calls (the library is built with -fvisibility=hidden: nothing else is seen). */
#define PROTON_API __attribute__((visibility("default")))

typedef int (*proton_cupti_fn)(void *params);

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
PROTON_API int proton_pm_read(proton_cupti_fn info_fn, proton_cupti_fn eval_fn, void *sampler,
                              void *host, const uint8_t *image, size_t size,
                              const char **names, size_t n, size_t first, size_t count,
                              uint64_t *spans, double *values, size_t *at) {
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
