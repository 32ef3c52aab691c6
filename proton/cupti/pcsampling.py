"""CUPTI's PC Sampling API (cupti_pcsampling.h) through ctypes, over the libcupti cupti-python loaded.

cupti-python has no binding for it. The structs below are the header's, written once; the header
packs the PC-data structs with 8-byte alignment (so ctypes needs _pack_ = 1 and explicit tail
padding: CUpti_PCSamplingPCData is 64 bytes, CUpti_PCSamplingData 80).

`Sampler` drives one CUDA context: enable, configure, start/stop, and `drain()` the parsed samples
into numpy arrays; the rest of Proton never touches a ctypes struct.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ..errors import ProtonError

_c = ctypes
STALL_REASON_STRING_SIZE = 128

# CUpti_PCSamplingConfigurationAttributeType
SAMPLING_PERIOD, STALL_REASON, SCRATCH_BUFFER_SIZE, HARDWARE_BUFFER_SIZE = 1, 2, 3, 4
COLLECTION_MODE, START_STOP_CONTROL, OUTPUT_DATA_FORMAT, SAMPLING_DATA_BUFFER = 5, 6, 7, 8
CONTINUOUS, KERNEL_SERIALIZED, PARSED = 1, 2, 1
# CUptiResult values with their own message
OUT_OF_MEMORY, HARDWARE_BUSY, NOT_SUPPORTED, INSUFFICIENT_PRIVILEGES = 8, 26, 27, 35
VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES, MIG_DEVICE_NOT_SUPPORTED = 40, 43


class StallReason(_c.Structure):
    _pack_ = 1
    _fields_ = [("index", _c.c_uint32), ("samples", _c.c_uint32)]


class PCData(_c.Structure):
    _pack_ = 1
    _fields_ = [("size", _c.c_size_t), ("cubinCrc", _c.c_uint64), ("pcOffset", _c.c_uint64),
                ("functionIndex", _c.c_uint32), ("pad", _c.c_uint32),
                ("functionName", _c.c_void_p), ("stallReasonCount", _c.c_size_t),
                ("stallReason", _c.POINTER(StallReason)), ("correlationId", _c.c_uint32),
                ("_tail", _c.c_uint32)]


class SamplingData(_c.Structure):
    _pack_ = 1
    _fields_ = [("size", _c.c_size_t), ("collectNumPcs", _c.c_size_t),
                ("totalSamples", _c.c_uint64), ("droppedSamples", _c.c_uint64),
                ("totalNumPcs", _c.c_size_t), ("remainingNumPcs", _c.c_size_t),
                ("rangeId", _c.c_uint64), ("pPcData", _c.POINTER(PCData)),
                ("nonUsrKernelsTotalSamples", _c.c_uint64), ("hardwareBufferFull", _c.c_uint8),
                ("_tail", _c.c_uint8 * 7)]


class _StallReasonData(_c.Structure):
    _fields_ = [("count", _c.c_size_t), ("indices", _c.POINTER(_c.c_uint32))]


class _AttributeData(_c.Union):
    _fields_ = [("raw", _c.c_uint64 * 3), ("u32", _c.c_uint32), ("size", _c.c_size_t),
                ("stall", _StallReasonData), ("pointer", _c.c_void_p)]


class ConfigurationInfo(_c.Structure):
    _fields_ = [("attributeType", _c.c_int), ("attributeStatus", _c.c_int),
                ("data", _AttributeData)]


class _ContextParams(_c.Structure):
    """Enable, Disable, Start and Stop take {size, pPriv, ctx}."""
    _fields_ = [("size", _c.c_size_t), ("pPriv", _c.c_void_p), ("ctx", _c.c_void_p)]


class _ConfigurationParams(_c.Structure):
    _fields_ = [("size", _c.c_size_t), ("pPriv", _c.c_void_p), ("ctx", _c.c_void_p),
                ("numAttributes", _c.c_size_t), ("info", _c.POINTER(ConfigurationInfo))]


class _GetDataParams(_c.Structure):
    _fields_ = [("size", _c.c_size_t), ("pPriv", _c.c_void_p), ("ctx", _c.c_void_p),
                ("data", _c.c_void_p)]


class _NumStallReasonsParams(_c.Structure):
    _fields_ = [("size", _c.c_size_t), ("pPriv", _c.c_void_p), ("ctx", _c.c_void_p),
                ("count", _c.POINTER(_c.c_size_t))]


class _StallReasonsParams(_c.Structure):
    _fields_ = [("size", _c.c_size_t), ("pPriv", _c.c_void_p), ("ctx", _c.c_void_p),
                ("count", _c.c_size_t), ("indices", _c.POINTER(_c.c_uint32)),
                ("names", _c.POINTER(_c.c_char_p))]


class _SassToSourceParams(_c.Structure):
    _fields_ = [("size", _c.c_size_t), ("cubin", _c.c_void_p), ("functionName", _c.c_char_p),
                ("cubinSize", _c.c_size_t), ("lineNumber", _c.c_uint32),
                ("pcOffset", _c.c_uint64), ("fileName", _c.c_void_p), ("dirName", _c.c_void_p)]


class _CubinCrcParams(_c.Structure):
    _fields_ = [("size", _c.c_size_t), ("cubinSize", _c.c_size_t), ("cubin", _c.c_void_p),
                ("cubinCrc", _c.c_uint64)]


assert _c.sizeof(PCData) == 64 and _c.sizeof(SamplingData) == 80
assert _c.sizeof(ConfigurationInfo) == 32

_PC_DTYPE = np.dtype({"names": ["crc", "offset", "function", "name", "count", "reasons"],
                      "formats": ["<u8", "<u8", "<u4", "<u8", "<u8", "<u8"],
                      "offsets": [8, 16, 24, 32, 40, 48], "itemsize": 64})
"""numpy's view of CUpti_PCSamplingPCData (the fields drain() reads)."""


class PCSamplingError(ProtonError):
    """PC sampling cannot run here; the session goes on with kernel times."""


def explain(function: str, rc: int) -> str:
    """One line naming the problem and the fix for a failed PC-sampling call."""
    if rc in (INSUFFICIENT_PRIVILEGES, VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES):
        return (f"{function} was refused: no permission to use the GPU's profiling counters "
                "(CUPTI error 35); run as root or set the nvidia driver option "
                "NVreg_RestrictProfilingToAdminUsers=0 (https://developer.nvidia.com/ERR_NVGPUCTRPERM)")
    if rc == HARDWARE_BUSY:
        return (f"{function}: the GPU's profiling hardware is busy (CUPTI error 26): another "
                "profiler (ncu, DCGM profiling metrics, another PC-sampling process) holds it; "
                "stop it and profile again")
    if rc in (NOT_SUPPORTED, MIG_DEVICE_NOT_SUPPORTED):
        return (f"{function}: this GPU or configuration does not support PC sampling (CUPTI "
                f"error {rc}); it needs compute capability 7.0 or newer, outside MIG and vGPU")
    return f"{function} failed with CUPTI error {rc}"


@dataclass(slots=True)
class Drained:
    """One GetData's samples as columns, one row per (PC, stall reason)."""

    crc: np.ndarray
    offset: np.ndarray
    function: np.ndarray
    """The function's index within its cubin."""
    reason: np.ndarray
    """CUPTI's stall reason index."""
    samples: np.ndarray
    names: dict[tuple[int, int], str]
    """(crc, function index) -> function name, for the functions in these rows."""


CONTROL_CALLS = ("cuptiPCSamplingEnable", "cuptiPCSamplingDisable", "cuptiPCSamplingStart",
                 "cuptiPCSamplingStop", "cuptiPCSamplingGetData",
                 "cuptiPCSamplingSetConfigurationAttribute",
                 "cuptiPCSamplingGetNumStallReasons", "cuptiPCSamplingGetStallReasons")
"""The calls that take the driver's context lock (see main_thread.py)."""


class Library:
    """The PC-sampling entry points of one libcupti (the one cupti-python loaded)."""

    def __init__(self, path: str) -> None:
        # The control calls keep the GIL (PyDLL): made on the main thread (main_thread.py),
        # no other Python thread may start a kernel launch while one runs. The cubin calls
        # wait on nothing and run long: they let go of it.
        held, free = _c.PyDLL(path), _c.CDLL(path)
        self._calls = {}
        for lib, names in ((held, CONTROL_CALLS),
                           (free, ("cuptiGetSassToSourceCorrelation", "cuptiGetCubinCrc"))):
            for name in names:
                function = getattr(lib, name)
                function.argtypes = [_c.c_void_p]
                function.restype = _c.c_int
                self._calls[name] = function
        self._free = _c.CDLL(None).free
        self._free.argtypes = [_c.c_void_p]

    def call(self, name: str, params: _c.Structure, check: bool = True) -> int:
        params.size = _c.sizeof(params)
        rc = self._calls[name](_c.byref(params))
        if rc and check:
            raise PCSamplingError(explain(name, rc))
        return rc

    def cubin_crc(self, cubin: bytes) -> int:
        params = _CubinCrcParams(cubinSize=len(cubin), cubin=_c.cast(_c.c_char_p(cubin),
                                                                      _c.c_void_p))
        self.call("cuptiGetCubinCrc", params)
        return params.cubinCrc

    def source_line(self, cubin: bytes, function: str, offset: int) -> tuple[str, int] | None:
        """(file path, line) of the instruction at `offset` of `function`, None without line
        info."""
        buf = _c.c_char_p(cubin)
        params = _SassToSourceParams(cubin=_c.cast(buf, _c.c_void_p),
                                     functionName=function.encode(), cubinSize=len(cubin),
                                     pcOffset=offset)
        if self.call("cuptiGetSassToSourceCorrelation", params, check=False):
            return None
        names = []
        for pointer in (params.dirName, params.fileName):
            names.append(_c.string_at(pointer).decode(errors="replace") if pointer else "")
            if pointer:
                self._free(pointer)  # CUPTI mallocs them for the caller
        directory, file = names
        if not file or not params.lineNumber:
            return None
        path = file if not directory or file.startswith("/") else f"{directory}/{file}"
        return path, params.lineNumber


class Sampler:
    """PC sampling on one CUDA context: CONTINUOUS collection under start/stop control, or
    KERNEL_SERIALIZED (exact per-launch samples)."""

    def __init__(self, lib: Library, context: int, *, period: int, max_pcs: int = 10_000,
                 scratch_bytes: int = 32 << 20, hardware_bytes: int = 256 << 20,
                 serialized: bool = False) -> None:
        """period: sample every 2**period cycles (CUPTI takes 5..31).
        serialized: CUPTI runs kernels one at a time and each launch's samples are ready when
        its call returns (read them with drain()); else CONTINUOUS under start()/stop()."""
        self.lib, self.context = lib, context
        self.enabled = self.started = False
        lib.call("cuptiPCSamplingEnable", _ContextParams(ctx=context))
        self.enabled = True
        try:
            self._configure(period, max_pcs, scratch_bytes, hardware_bytes, serialized)
        except PCSamplingError:
            self.disable()
            raise
        self.total_samples = self.dropped_samples = self.non_user_samples = 0
        self.hardware_buffer_full = 0
        """GetData calls that found the hardware buffer full (samples were lost)."""

    def _configure(self, period: int, max_pcs: int, scratch: int, hardware: int,
                   serialized: bool) -> None:
        count = _c.c_size_t()
        self.lib.call("cuptiPCSamplingGetNumStallReasons",
                      _NumStallReasonsParams(ctx=self.context, count=_c.pointer(count)))
        n = count.value
        indices = (_c.c_uint32 * n)()
        strings = [_c.create_string_buffer(STALL_REASON_STRING_SIZE) for _ in range(n)]
        names = (_c.c_char_p * n)(*[_c.cast(s, _c.c_char_p) for s in strings])
        self.lib.call("cuptiPCSamplingGetStallReasons", _StallReasonsParams(
            ctx=self.context, count=n, indices=indices, names=names))
        # only the stall reasons: CUPTI also lists smsp__pcsamp_sample_count and ..._data_dropped
        self.stall_reasons = {int(indices[i]): strings[i].value.decode() for i in range(n)
                              if b"_stalled_" in strings[i].value}
        """CUPTI's stall reason index -> its name (smsp__pcsamp_warps_issue_stalled_...)."""
        indices = (_c.c_uint32 * len(self.stall_reasons))(*self.stall_reasons)
        # the PC records CUPTI fills: each PC's stall reasons in one block of our own
        self._reasons = (StallReason * (max_pcs * n))()
        self._pcs = (PCData * max_pcs)()
        base = _c.addressof(self._reasons)
        for i in range(max_pcs):
            self._pcs[i].size = _c.sizeof(PCData)
            self._pcs[i].stallReason = _c.cast(base + i * n * _c.sizeof(StallReason),
                                               _c.POINTER(StallReason))
        self._data = SamplingData(size=_c.sizeof(SamplingData), collectNumPcs=max_pcs,
                                  pPcData=self._pcs)
        self._indices = indices
        self._n_reasons = n
        attrs = [(SAMPLING_PERIOD, "u32", period), (STALL_REASON, "stall", None),
                 *([(SCRATCH_BUFFER_SIZE, "size", scratch)] if scratch else []),
                 *([(HARDWARE_BUFFER_SIZE, "size", hardware)] if hardware else []),
                 (COLLECTION_MODE, "u32", KERNEL_SERIALIZED if serialized else CONTINUOUS),
                 (START_STOP_CONTROL, "u32", int(not serialized)),
                 (OUTPUT_DATA_FORMAT, "u32", PARSED),
                 (SAMPLING_DATA_BUFFER, "pointer", _c.addressof(self._data))]
        infos = (ConfigurationInfo * len(attrs))()
        for info, (kind, field, value) in zip(infos, attrs):
            info.attributeType = kind
            if field == "stall":
                info.data.stall = _StallReasonData(len(indices), indices)
            else:
                setattr(info.data, field, value)
        params = _ConfigurationParams(ctx=self.context, numAttributes=len(attrs), info=infos)
        rc = self.lib.call("cuptiPCSamplingSetConfigurationAttribute", params, check=False)
        if rc:
            bad = [f"attribute {i.attributeType}: error {i.attributeStatus}"
                   for i in infos if i.attributeStatus]
            raise PCSamplingError(explain("cuptiPCSamplingSetConfigurationAttribute", rc)
                                  + (f" ({', '.join(bad)})" if bad else ""))

    def start(self) -> None:
        if not self.started:
            self.lib.call("cuptiPCSamplingStart", _ContextParams(ctx=self.context))
            self.started = True

    def stop(self) -> None:
        if self.started:
            self.started = False
            self.lib.call("cuptiPCSamplingStop", _ContextParams(ctx=self.context))

    def drain(self) -> list[Drained]:
        """Every sample CUPTI holds, one Drained per filling of the buffer. Stop fills the
        buffer itself (so it is read before GetData), and GetData hands out at most max_pcs
        PCs a call."""
        out: list[Drained] = []
        data = self._data
        self._take(out)
        while True:
            rc = self.lib.call("cuptiPCSamplingGetData",
                               _GetDataParams(ctx=self.context, data=_c.addressof(data)),
                               check=False)
            if rc == OUT_OF_MEMORY:
                self.hardware_buffer_full += 1
            elif rc:
                raise PCSamplingError(explain("cuptiPCSamplingGetData", rc))
            remaining = data.remainingNumPcs
            self._take(out)
            if not remaining or rc:
                return out

    def _take(self, out: list[Drained]) -> None:
        """Read what CUPTI put in the buffer and mark it read (zero counts)."""
        data = self._data
        self.hardware_buffer_full += bool(data.hardwareBufferFull)
        self.total_samples += data.totalSamples
        self.dropped_samples += data.droppedSamples
        self.non_user_samples += data.nonUsrKernelsTotalSamples
        if data.totalNumPcs:
            out.append(self._read(data.totalNumPcs))
        data.totalNumPcs = data.remainingNumPcs = data.totalSamples = data.droppedSamples = 0
        data.nonUsrKernelsTotalSamples = data.hardwareBufferFull = 0

    def _read(self, n_pcs: int) -> Drained:
        """The first n_pcs PC records as columns (a few numpy calls, no Python per sample)."""
        # a ctypes array is a buffer (numpy's stubs do not list it)
        pcs = np.frombuffer(cast(Any, (_c.c_char * (n_pcs * 64)).from_address(
            _c.addressof(self._pcs))), dtype=_PC_DTYPE)
        n = self._n_reasons
        reasons = np.frombuffer(cast(Any, self._reasons), dtype=np.uint32).reshape(-1, n, 2)[:n_pcs]
        counts = np.minimum(pcs["count"].astype(np.int64), n)
        used = np.arange(n)[None, :] < counts[:, None]  # each PC's first `count` entries
        rows = np.nonzero(used)
        names = {}
        for crc, function, pointer in zip(pcs["crc"].tolist(), pcs["function"].tolist(),
                                          pcs["name"].tolist()):
            if (crc, function) not in names:
                names[crc, function] = _c.string_at(pointer).decode(errors="replace") \
                    if pointer else "<unknown>"
        return Drained(crc=pcs["crc"][rows[0]].copy(), offset=pcs["offset"][rows[0]].copy(),
                       function=pcs["function"][rows[0]].copy(),
                       reason=reasons[rows[0], rows[1], 0].copy(),
                       samples=reasons[rows[0], rows[1], 1].astype(np.int64), names=names)

    def disable(self) -> None:
        if self.enabled:
            self.enabled = False
            self.lib.call("cuptiPCSamplingDisable", _ContextParams(ctx=self.context), check=False)
