"""CUPTI's hardware-counter APIs (profiler host, PM sampling, device chip names), through ctypes.

cupti-python 13.0.1 binds none of them, and cupti-python 13.3+ cannot use the libcupti 13.0 that
torch loads (its profiler-host initialize fails there). The 13.0 library exports them all, so
they are called here on the libcupti already loaded, with the struct layouts of its 13.0 headers
(`cupti_profiler_host.h`, `cupti_pmsampling.h`, `cupti_target.h`, `cupti_profiler_target.h`).
Every parameter struct starts with structSize and pPriv; structSize is the struct's size up to
its last field, which ctypes' sizeof gives for these layouts but for trailing padding
(`_size` below cuts it off).

The profiler host half (metric names -> a configuration image, counter data -> values) runs on
the host alone: it works on a machine without a GPU, given a chip name such as "GH100".
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import NamedTuple, Sequence

import numpy as np

from ..errors import ProtonError

c_size = ctypes.c_size_t
c_void = ctypes.c_void_p
c_str = ctypes.c_char_p

PROFILER_RANGE, PROFILER_PM_SAMPLING = 0, 1
TRIGGER_SYSCLK, TRIGGER_TIME_INTERVAL = 0, 1
KEEP_OLDEST, KEEP_LATEST = 0, 1
DECODE_COUNTER_DATA_FULL, DECODE_END_OF_RECORDS = 1, 2

WHY = {
    35: "hardware counters are reserved to administrators on this machine "
        "(NVreg_RestrictProfilingToAdminUsers=1); ask an admin to set it to 0 in "
        "/etc/modprobe.d and reload the driver, or run as root",
    40: "this virtual GPU does not give its counters to guests",
    33: "this virtual GPU does not give its counters to guests",
    43: "counters are not read on a MIG slice; run on a whole GPU (MIG off)",
    27: "this GPU does not sample counters over time (PM sampling needs Ampere GA10x, Ada, "
        "Hopper or later; not GA100 or Turing)",
    14: "another profiler (Nsight Compute, Nsight Systems' GPU metrics, DCGM's profiling "
        "module) holds the counters; stop it, or run without counters",
    7: "another profiler (Nsight Compute, Nsight Systems' GPU metrics, DCGM's profiling "
       "module) holds the counters; stop it, or run without counters",
    41: "counters are not read under confidential computing",
    42: "this CMP device has no counters",
}
"""Why counters cannot be read, by CUptiResult, with the fix."""


class CountersError(ProtonError):
    """Counters cannot be read here; the message says why and what to do."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


def _params(name: str, fields: list) -> type:
    return type(name, (ctypes.Structure,),
                {"_fields_": [("structSize", c_size), ("pPriv", c_void)] + fields})


HostInitialize = _params("HostInitialize", [
    ("profilerType", ctypes.c_int), ("pChipName", c_str),
    ("pCounterAvailabilityImage", c_void), ("pHostObject", c_void)])
HostObject = _params("HostObject", [("pHostObject", c_void)])
HostBaseMetrics = _params("HostBaseMetrics", [
    ("pHostObject", c_void), ("metricType", ctypes.c_int),
    ("ppMetricNames", ctypes.POINTER(c_str)), ("numMetrics", c_size)])
HostAddMetrics = _params("HostAddMetrics", [
    ("pHostObject", c_void), ("ppMetricNames", ctypes.POINTER(c_str)), ("numMetrics", c_size)])
HostConfigSize = _params("HostConfigSize", [("pHostObject", c_void), ("configImageSize", c_size)])
HostConfigImage = _params("HostConfigImage", [
    ("pHostObject", c_void), ("configImageSize", c_size), ("pConfigImage", c_void)])
HostPasses = _params("HostPasses", [
    ("configImageSize", c_size), ("pConfigImage", c_void), ("numOfPasses", c_size)])
HostEvaluate = _params("HostEvaluate", [
    ("pHostObject", c_void), ("pCounterDataImage", c_void), ("counterDataImageSize", c_size),
    ("rangeIndex", c_size), ("ppMetricNames", ctypes.POINTER(c_str)), ("numMetrics", c_size),
    ("pMetricValues", ctypes.POINTER(ctypes.c_double))])
HostRangeName = _params("HostRangeName", [
    ("pCounterDataImage", c_void), ("counterDataImageSize", c_size), ("rangeIndex", c_size),
    ("delimiter", c_str), ("pRangeName", c_str)])
ProfilerInitialize = _params("ProfilerInitialize", [])
ChipName = _params("ChipName", [("deviceIndex", c_size), ("pChipName", c_str)])

PmEnable = _params("PmEnable", [("deviceIndex", c_size), ("pPmSamplingObject", c_void)])
PmObject = _params("PmObject", [("pPmSamplingObject", c_void)])
PmAvailability = _params("PmAvailability", [
    ("deviceIndex", c_size), ("counterAvailabilityImageSize", c_size),
    ("pCounterAvailabilityImage", c_void)])
PmSetConfig = _params("PmSetConfig", [
    ("pPmSamplingObject", c_void), ("configSize", c_size), ("pConfig", c_void),
    ("hardwareBufferSize", c_size), ("samplingInterval", ctypes.c_uint64),
    ("triggerMode", ctypes.c_int), ("hwBufferAppendMode", ctypes.c_int)])
PmDataSize = _params("PmDataSize", [
    ("pPmSamplingObject", c_void), ("pMetricNames", ctypes.POINTER(c_str)),
    ("numMetrics", c_size), ("maxSamples", ctypes.c_uint32), ("counterDataSize", c_size)])
PmDataInit = _params("PmDataInit", [
    ("pPmSamplingObject", c_void), ("counterDataSize", c_size), ("pCounterData", c_void)])
PmDecode = _params("PmDecode", [
    ("pPmSamplingObject", c_void), ("pCounterDataImage", c_void),
    ("counterDataImageSize", c_size), ("decodeStopReason", ctypes.c_int),
    ("overflow", ctypes.c_uint8)])
PmDataInfo = _params("PmDataInfo", [
    ("pCounterDataImage", c_void), ("counterDataImageSize", c_size),
    ("numTotalSamples", c_size), ("numPopulatedSamples", c_size),
    ("numCompletedSamples", c_size)])
PmSampleInfo = _params("PmSampleInfo", [
    ("pPmSamplingObject", c_void), ("pCounterDataImage", c_void),
    ("counterDataImageSize", c_size), ("sampleIndex", c_size),
    ("startTimestamp", ctypes.c_uint64), ("endTimestamp", ctypes.c_uint64)])


def _size(params: ctypes.Structure) -> int:
    """CUPTI_PROFILER_STRUCT_SIZE: the offset of the last field plus its size (no padding)."""
    name, kind = params._fields_[-1][:2]
    return getattr(type(params), name).offset + ctypes.sizeof(kind)


def _names(metrics: Sequence[str]):
    return (c_str * len(metrics))(*[m.encode() for m in metrics])


_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}


class Cupti:
    """The counter APIs of one libcupti (the one cupti-python loaded, or a path given)."""

    def __init__(self, path: str) -> None:
        with _lock:
            if path not in _libs:
                _libs[path] = ctypes.CDLL(path)
        self.lib = _libs[path]
        self.path = path

    def call(self, function: str, params: ctypes.Structure) -> ctypes.Structure:
        """Fill structSize, call, and raise CountersError with CUPTI's words on failure."""
        params.structSize = _size(params)
        fn = getattr(self.lib, function, None)
        if fn is None:
            raise CountersError(f"{os.path.basename(self.path)} has no {function}: counters "
                                "need CUPTI 12.6 or later (CUDA 12.6+)")
        fn.argtypes = [ctypes.c_void_p]
        code = fn(ctypes.byref(params))
        if code:
            raise CountersError(f"{function}: {self.result_string(code)}", code)
        return params

    def result_string(self, code: int) -> str:
        text = c_str()
        self.lib.cuptiGetResultString(code, ctypes.byref(text))
        return (text.value or b"").decode(errors="replace") or f"CUPTI error {code}"

    def profiler_initialize(self) -> None:
        self.call("cuptiProfilerInitialize", ProfilerInitialize())

    def chip_name(self, device: int) -> str:
        return self.call("cuptiDeviceGetChipName",
                         ChipName(deviceIndex=device)).pChipName.decode()

    def pm_counter_availability(self, device: int) -> bytes:
        size = self.call("cuptiPmSamplingGetCounterAvailability",
                         PmAvailability(deviceIndex=device)).counterAvailabilityImageSize
        image = (ctypes.c_uint8 * size)()
        self.call("cuptiPmSamplingGetCounterAvailability",
                  PmAvailability(deviceIndex=device, counterAvailabilityImageSize=size,
                                 pCounterAvailabilityImage=ctypes.cast(image, c_void)))
        return bytes(image)


class MetricConfig:
    """The profiler host object for one chip and metric set: its configuration image and the
    evaluation of counter data to the metrics' values."""

    def __init__(self, cupti: Cupti, chip: str, metrics: Sequence[str],
                 profiler: int = PROFILER_PM_SAMPLING, availability: bytes | None = None) -> None:
        self.cupti, self.chip, self.metrics = cupti, chip, list(metrics)
        self._avail = (ctypes.c_uint8 * len(availability)).from_buffer_copy(availability) \
            if availability else None
        self._host = cupti.call("cuptiProfilerHostInitialize", HostInitialize(
            profilerType=profiler, pChipName=chip.encode(),
            pCounterAvailabilityImage=ctypes.cast(self._avail, c_void) if self._avail else None)
        ).pHostObject
        self._names = _names(self.metrics)
        try:
            cupti.call("cuptiProfilerHostConfigAddMetrics", HostAddMetrics(
                pHostObject=self._host, ppMetricNames=self._names, numMetrics=len(self.metrics)))
        except CountersError as e:
            self.close()
            raise CountersError(f"{chip} cannot sample {', '.join(self.metrics)}: {e}",
                                e.code) from None
        size = cupti.call("cuptiProfilerHostGetConfigImageSize",
                          HostConfigSize(pHostObject=self._host)).configImageSize
        self.image = (ctypes.c_uint8 * size)()
        cupti.call("cuptiProfilerHostGetConfigImage", HostConfigImage(
            pHostObject=self._host, configImageSize=size,
            pConfigImage=ctypes.cast(self.image, c_void)))
        self.passes = cupti.call("cuptiProfilerHostGetNumOfPasses", HostPasses(
            configImageSize=size, pConfigImage=ctypes.cast(self.image, c_void))).numOfPasses

    def base_metrics(self) -> list[str]:
        """Every base metric of the chip (counters, ratios, throughputs)."""
        found = []
        for kind in range(3):
            p = self.cupti.call("cuptiProfilerHostGetBaseMetrics",
                                HostBaseMetrics(pHostObject=self._host, metricType=kind))
            found += [p.ppMetricNames[i].decode() for i in range(p.numMetrics)]
        return found

    def evaluate(self, data, size: int, index: int) -> list[float]:
        """The metrics' values in sample (or range) `index` of a counter data image."""
        values = (ctypes.c_double * len(self.metrics))()
        self.cupti.call("cuptiProfilerHostEvaluateToGpuValues", HostEvaluate(
            pHostObject=self._host, pCounterDataImage=ctypes.cast(data, c_void),
            counterDataImageSize=size, rangeIndex=index, ppMetricNames=self._names,
            numMetrics=len(self.metrics), pMetricValues=values))
        return list(values)

    def close(self) -> None:
        if self._host:
            host, self._host = self._host, None
            self.cupti.call("cuptiProfilerHostDeinitialize", HostObject(pHostObject=host))


class Samples(NamedTuple):
    """PM samples: their GPU time spans (ns) and the metrics' values over them."""

    starts: np.ndarray
    ends: np.ndarray
    values: np.ndarray
    """One row per sample, one column per metric."""

    @staticmethod
    def joined(parts: list[tuple[np.ndarray, np.ndarray]], metrics: int) -> "Samples":
        """Samples from (spans, values) blocks, in order."""
        spans = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, 2), np.uint64)
        values = np.concatenate([p[1] for p in parts]) if parts \
            else np.zeros((0, metrics), np.float64)
        return Samples(spans[:, 0].astype(np.int64), spans[:, 1].astype(np.int64), values)


class _Collecting:
    """What PmSampler and RangeProfiler share: a CUPTI object on a MetricConfig, stopped and
    disabled by close (`_disable`: the CUPTI call, `_object`: its parameter struct, whose one
    field `_field` is the object)."""

    cupti: Cupti
    config: MetricConfig
    chip: str
    _obj: int | None
    _disable: str
    _object: type
    _field: str

    def _configure(self, cupti: Cupti, device: int, metrics: Sequence[str],
                   profiler: int) -> None:
        """The device's chip and the metrics' one-pass configuration for `profiler` (in the
        order the GPU runs took: initialize, chip, availability, host configuration)."""
        cupti.profiler_initialize()
        self.chip = cupti.chip_name(device)
        availability = cupti.pm_counter_availability(device) \
            if profiler == PROFILER_PM_SAMPLING else None
        self.config = MetricConfig(cupti, self.chip, metrics, profiler, availability)
        if self.config.passes != 1:
            passes = self.config.passes
            self.config.close()
            raise CountersError(f"{', '.join(metrics)} need {passes} passes on {self.chip}; "
                                "counters are read in one pass (no replay): give fewer")

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        try:
            self.stop()
        finally:
            obj, self._obj = getattr(self, "_obj", None), None
            if obj:
                self.cupti.call(self._disable, self._object(**{self._field: obj}))
            self.config.close()


class PmSampler(_Collecting):
    """PM sampling of one device: enable, configure, start; `decode()` drains the hardware
    buffer into samples as often as called; stop and close at the end.

    interval_ns: the sampling period (trigger GPU_TIME_INTERVAL). max_samples: the counter data
    image's capacity per decode; a decode that fills it is followed by another at once.
    """

    _disable, _object, _field = "cuptiPmSamplingDisable", PmObject, "pPmSamplingObject"

    def __init__(self, cupti: Cupti, device: int, metrics: Sequence[str], interval_ns: int,
                 hardware_buffer: int = 256 << 20, max_samples: int = 4096) -> None:
        self.cupti, self.device = cupti, device
        self.overflowed = 0
        """Decodes that found the hardware buffer overflowed (samples were lost)."""
        self._configure(cupti, device, metrics, PROFILER_PM_SAMPLING)
        self._obj = cupti.call("cuptiPmSamplingEnable",
                               PmEnable(deviceIndex=device)).pPmSamplingObject
        try:
            size = cupti.call("cuptiPmSamplingGetCounterDataSize", PmDataSize(
                pPmSamplingObject=self._obj, pMetricNames=self.config._names,
                numMetrics=len(self.config.metrics), maxSamples=max_samples)).counterDataSize
            self._data = (ctypes.c_uint8 * size)()
            self._size = size
            image = self.config.image
            cupti.call("cuptiPmSamplingSetConfig", PmSetConfig(
                pPmSamplingObject=self._obj, configSize=len(image),
                pConfig=ctypes.cast(image, c_void), hardwareBufferSize=hardware_buffer,
                samplingInterval=interval_ns, triggerMode=TRIGGER_TIME_INTERVAL,
                hwBufferAppendMode=KEEP_OLDEST))
        except CountersError:
            self.close()
            raise
        self._init_data()
        self.started = False
        self._first = True

    def _init_data(self) -> None:
        self.cupti.call("cuptiPmSamplingCounterDataImageInitialize", PmDataInit(
            pPmSamplingObject=self._obj, counterDataSize=self._size,
            pCounterData=ctypes.cast(self._data, c_void)))

    def start(self) -> None:
        self.cupti.call("cuptiPmSamplingStart", PmObject(pPmSamplingObject=self._obj))
        self.started = True

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.cupti.call("cuptiPmSamplingStop", PmObject(pPmSamplingObject=self._obj))

    def decode(self) -> Samples:
        """Every completed sample in the hardware buffer, oldest first. The first sample of a
        run spans everything before the first interval (it starts at timestamp 0): dropped."""
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        while True:
            p = self.cupti.call("cuptiPmSamplingDecodeData", PmDecode(
                pPmSamplingObject=self._obj, pCounterDataImage=ctypes.cast(self._data, c_void),
                counterDataImageSize=self._size))
            if p.overflow:
                self.overflowed += 1
            info = self.cupti.call("cuptiPmSamplingGetCounterDataInfo", PmDataInfo(
                pCounterDataImage=ctypes.cast(self._data, c_void),
                counterDataImageSize=self._size))
            spans, values = self._read(info.numCompletedSamples)
            if self._first and len(spans):
                self._first = False
                if spans[0, 0] == 0:
                    spans, values = spans[1:], values[1:]
            parts.append((spans, values))
            self._init_data()
            if p.decodeStopReason != DECODE_COUNTER_DATA_FULL:
                return Samples.joined(parts, len(self.config.metrics))

    def _read(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The decoded image's samples: spans (count x 2) and values (count x metrics), in one
        C call (pm_native) or, without it, two CUPTI calls a sample from Python."""
        from . import pm_native

        n = len(self.config.metrics)
        lib = pm_native.helper()
        if lib is not None and count:
            code, at, spans, values = pm_native.read(
                lib, ctypes.cast(self.cupti.lib.cuptiPmSamplingCounterDataGetSampleInfo,
                                 c_void).value,
                ctypes.cast(self.cupti.lib.cuptiProfilerHostEvaluateToGpuValues, c_void).value,
                self._obj, self.config._host, self._data, self._size, self.config._names, n,
                0, count)
            if code:
                raise CountersError(f"sample {at}: {self.cupti.result_string(code)}", code)
            return spans, values
        spans = np.zeros((count, 2), np.uint64)
        values = np.zeros((count, n), np.float64)
        for i in range(count):
            s = self.cupti.call("cuptiPmSamplingCounterDataGetSampleInfo", PmSampleInfo(
                pPmSamplingObject=self._obj, pCounterDataImage=ctypes.cast(self._data, c_void),
                counterDataImageSize=self._size, sampleIndex=i))
            spans[i] = s.startTimestamp, s.endTimestamp
            values[i] = self.config.evaluate(self._data, self._size, i)
        return spans, values


# -- the range profiler (counts, not samples, between a push and its pop) ----------------------
RANGE_USER, REPLAY_USER = 2, 3
"""CUpti_ProfilerRange CUPTI_UserRange; CUpti_ProfilerReplayMode CUPTI_UserReplay."""

RpEnable = _params("RpEnable", [("ctx", c_void), ("pRangeProfilerObject", c_void)])
RpObject = _params("RpObject", [("pRangeProfilerObject", c_void)])
RpSetConfig = _params("RpSetConfig", [
    ("pRangeProfilerObject", c_void), ("configSize", c_size), ("pConfig", c_void),
    ("counterDataImageSize", c_size), ("pCounterDataImage", c_void), ("range", ctypes.c_int),
    ("replayMode", ctypes.c_int), ("maxRangesPerPass", c_size),
    ("numNestingLevels", ctypes.c_uint16), ("minNestingLevel", ctypes.c_uint16),
    ("passIndex", c_size), ("targetNestingLevel", ctypes.c_uint16)])
RpStop = _params("RpStop", [
    ("pRangeProfilerObject", c_void), ("passIndex", c_size), ("targetNestingLevel", c_size),
    ("isAllPassSubmitted", ctypes.c_uint8)])
RpPush = _params("RpPush", [("pRangeProfilerObject", c_void), ("pRangeName", c_str)])
RpDecode = _params("RpDecode", [("pRangeProfilerObject", c_void), ("numOfRangeDropped", c_size)])
RpDataSize = _params("RpDataSize", [
    ("pRangeProfilerObject", c_void), ("pMetricNames", ctypes.POINTER(c_str)),
    ("numMetrics", c_size), ("maxNumOfRanges", c_size), ("maxNumRangeTreeNodes", ctypes.c_uint32),
    ("counterDataSize", c_size)])
RpDataInit = _params("RpDataInit", [
    ("pRangeProfilerObject", c_void), ("counterDataSize", c_size), ("pCounterData", c_void)])
RpDataInfo = _params("RpDataInfo", [
    ("pCounterDataImage", c_void), ("counterDataImageSize", c_size), ("numTotalRanges", c_size)])
RpRangeInfo = _params("RpRangeInfo", [
    ("pCounterDataImage", c_void), ("counterDataImageSize", c_size), ("rangeIndex", c_size),
    ("rangeDelimiter", c_str), ("rangeName", c_str)])


class RangeProfiler(_Collecting):
    """Exact counts of `metrics` between each push and its pop, on one CUDA context: user
    ranges, one nesting level, replayed by nobody (the set must fit one pass), so kernels
    run as they would. `ranges()` after `stop()`: [(name, values)], one per range name (CUPTI
    sums the pushes of one name into it)."""

    _disable, _object, _field = ("cuptiRangeProfilerDisable", RpObject,
                                 "pRangeProfilerObject")

    def __init__(self, cupti: Cupti, context: int, device: int, metrics: Sequence[str],
                 max_ranges: int = 4096) -> None:
        """context: the CUcontext (an address) whose work is counted, on `device`."""
        self.cupti = cupti
        self._configure(cupti, device, metrics, PROFILER_RANGE)
        self._obj = cupti.call("cuptiRangeProfilerEnable",
                               RpEnable(ctx=context)).pRangeProfilerObject
        try:
            self._size = cupti.call("cuptiRangeProfilerGetCounterDataSize", RpDataSize(
                pRangeProfilerObject=self._obj, pMetricNames=self.config._names,
                numMetrics=len(self.config.metrics), maxNumOfRanges=max_ranges,
                maxNumRangeTreeNodes=max_ranges)).counterDataSize
            self._data = (ctypes.c_uint8 * self._size)()
            cupti.call("cuptiRangeProfilerCounterDataImageInitialize", RpDataInit(
                pRangeProfilerObject=self._obj, counterDataSize=self._size,
                pCounterData=ctypes.cast(self._data, c_void)))
            image = self.config.image
            cupti.call("cuptiRangeProfilerSetConfig", RpSetConfig(
                pRangeProfilerObject=self._obj, configSize=len(image),
                pConfig=ctypes.cast(image, c_void), counterDataImageSize=self._size,
                pCounterDataImage=ctypes.cast(self._data, c_void), range=RANGE_USER,
                replayMode=REPLAY_USER, maxRangesPerPass=max_ranges, numNestingLevels=1,
                minNestingLevel=1, passIndex=0, targetNestingLevel=1))
            cupti.call("cuptiRangeProfilerStart", RpObject(pRangeProfilerObject=self._obj))
        except CountersError:
            self.close()
            raise
        self.started = True
        self.dropped = 0

    def push(self, name: str) -> None:
        self.cupti.call("cuptiRangeProfilerPushRange",
                        RpPush(pRangeProfilerObject=self._obj, pRangeName=name.encode()))

    def pop(self) -> None:
        self.cupti.call("cuptiRangeProfilerPopRange", RpObject(pRangeProfilerObject=self._obj))

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.cupti.call("cuptiRangeProfilerStop", RpStop(pRangeProfilerObject=self._obj))
            self.dropped = self.cupti.call("cuptiRangeProfilerDecodeData", RpDecode(
                pRangeProfilerObject=self._obj)).numOfRangeDropped

    def ranges(self) -> list[tuple[str, list[float]]]:
        data = ctypes.cast(self._data, c_void)
        n = self.cupti.call("cuptiRangeProfilerGetCounterDataInfo", RpDataInfo(
            pCounterDataImage=data, counterDataImageSize=self._size)).numTotalRanges
        out = []
        for i in range(n):
            name = self.cupti.call("cuptiRangeProfilerCounterDataGetRangeInfo", RpRangeInfo(
                pCounterDataImage=data, counterDataImageSize=self._size, rangeIndex=i,
                rangeDelimiter=b"/")).rangeName
            out.append(((name or b"").decode(errors="replace"),
                        self.config.evaluate(self._data, self._size, i)))
        return out

