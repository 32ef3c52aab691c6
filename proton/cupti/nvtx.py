"""CUPTI's NVTX callbacks decoded: which calls push and pop a range, and a pushed range's name.

CUPTI calls back on the calling thread with a CUpti_NvtxData, read here at fixed offsets
(cupti_nvtx_cbid.h's ids, nvToolsExt's structs). runtime/nvtx.py turns the ranges into scopes.
"""
from __future__ import annotations

import ctypes

DOMAIN = 5
"""CUPTI_CB_DOMAIN_NVTX"""
PUSH_A, PUSH_W, PUSH_EX, POP = 8, 9, 10, 11
"""CUPTI_CBID_NVTX_nvtxRangePushA, ...PushW, ...PushEx, ...Pop: the default domain's ranges,
the ones torch.cuda.nvtx and users push. A library's own domain (nvtxDomainRangePushEx, 33:
NCCL's around every collective and its communicator set-up) is not taken: on two H100s NCCL's
ranges left one open on the main thread and the job's scopes nested under it (Triton's Proton
takes nvtxRangePushA and nvtxRangePop only)."""
CBIDS = (PUSH_A, PUSH_W, PUSH_EX, POP)
POPS = (POP,)
PARAMS_AT = 8
"""CUpti_NvtxData: {const char *functionName; const void *functionParams; ...}"""
EX_ATTRIB_AT = {PUSH_EX: 0}
"""Where an Ex call's params hold its nvtxEventAttributes_t pointer."""
MESSAGE_TYPE_AT, MESSAGE_AT = 32, 40
"""nvtxEventAttributes_t (v2): messageType, and the message union (a char* for ASCII)."""
ASCII, UNICODE = 1, 2
UNNAMED = "<nvtx range>"
"""A range whose message is a registered string handle (not read back here)."""


def _pointer(address: int) -> int:
    return ctypes.c_void_p.from_address(address).value or 0


def message(cbid: int, params: int) -> str:
    """The range's name from a push call's params."""
    if cbid in (PUSH_A, PUSH_W):
        text = _pointer(params)
        if not text:
            return UNNAMED
        return ctypes.string_at(text).decode(errors="replace") if cbid == PUSH_A \
            else ctypes.wstring_at(text)
    attrib = _pointer(params + EX_ATTRIB_AT[cbid])
    if not attrib:
        return UNNAMED
    kind = ctypes.c_int32.from_address(attrib + MESSAGE_TYPE_AT).value
    text = _pointer(attrib + MESSAGE_AT)
    if not text:
        return UNNAMED
    if kind == ASCII:
        return ctypes.string_at(text).decode(errors="replace")
    if kind == UNICODE:
        return ctypes.wstring_at(text)
    return UNNAMED


def pushed_name(cbid: int, data: int) -> str | None:
    """The name of the range a push call (`cbid`, with the CUpti_NvtxData at `data`) opens;
    None when the call carries no params."""
    params = _pointer(data + PARAMS_AT)
    return message(cbid, params) if params else None
