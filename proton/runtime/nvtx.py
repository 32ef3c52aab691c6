"""NVTX ranges as scopes, as Triton's Proton does (TRITON_ENABLE_NVTX, on unless set to 0).

`torch.cuda.nvtx.range_push("attn")`, `torch.cuda.nvtx.range(...)`, or a library's
`nvtxRangePushA/W/Ex` in NVTX's default domain called from a Python thread open a scope of that
name on the calling thread while a session collects; the matching pop closes it. Ranges in a
library's own domain (nvtxDomainRangePushEx: NCCL's) are not scopes (cupti/nvtx.py says why). Ranges pushed on
threads that run no Python (autograd's backward thread under emit_nvtx, NCCL's) are left out.

NVTX calls reach CUPTI only when NVTX loaded it as its injection library: the collector points
NVTX_INJECTION64_PATH at the libcupti in use before it starts (and takes it back after), which
takes effect if the process makes its first NVTX call in between (NVTX reads it once). CUPTI
calls back on the calling thread; cupti/nvtx.py decodes its CUpti_NvtxData. The collector takes
a NvtxScopes among its callback users (cupti/settings.PartAsks; it knows nothing of scopes).
"""
from __future__ import annotations

import os
import sys
import threading

from ..context.frames import close_frame, enter_frame
from ..context.stack import depth
from ..cupti.nvtx import CBIDS, POPS, pushed_name
from ..cupti.subscriber import caller, passes_on
from ..report import callback_failed

ENV = ("TRITON_ENABLE_NVTX", "PROTON_ENABLE_NVTX")


def enabled() -> bool:
    """NVTX ranges become scopes unless TRITON_ENABLE_NVTX (or PROTON_ENABLE_NVTX) says no."""
    for name in ENV:
        value = os.environ.get(name)
        if value is not None:
            return value.strip().lower() not in ("0", "false", "off", "no")
    return True


class NvtxScopes:
    """Wraps the subscriber's callback: NVTX calls open and close scopes, the rest go on."""

    def __init__(self, nvtx_domain: int) -> None:
        self.domain = nvtx_domain
        self.callbacks = [(nvtx_domain, cbid) for cbid in CBIDS]
        """(domain, cbid) for the collector to enable."""
        self._local = threading.local()
        """Per thread: the depths at which NVTX opened the frames still open."""

    def prepare(self, libcupti: str) -> None:
        """Before CUPTI starts: ask NVTX to load it (unless the user named another library)."""
        self._set = "NVTX_INJECTION64_PATH" not in os.environ
        if self._set:
            os.environ["NVTX_INJECTION64_PATH"] = libcupti

    def release(self) -> None:
        """After CUPTI stopped: processes started from now on do not inherit the injection."""
        if getattr(self, "_set", False):
            os.environ.pop("NVTX_INJECTION64_PATH", None)
            self._set = False

    def wrap(self, on_api):
        domain, handle = self.domain, self.handle

        @passes_on
        def on_call(userdata, dom, cbid, data) -> None:
            if dom == domain:
                # a thread with no Python (autograd's, NCCL's) would get a fresh thread state,
                # and so an empty stack, at every call: its ranges are not scopes
                if caller(sys._getframe().f_back) is not None:
                    handle(cbid, data)
            elif on_api is not None:
                on_api(userdata, dom, cbid, data)

        return on_call

    def handle(self, cbid: int, data: int) -> None:
        try:
            opened = getattr(self._local, "opened", None)
            if opened is None:
                opened = self._local.opened = []
            if cbid in POPS:
                # only a frame NVTX opened, and only while it is the innermost one: a pop
                # without its push, or a scope left open inside the range, changes nothing
                if opened and opened[-1] == depth():
                    opened.pop()
                    close_frame({})
                elif opened and opened[-1] > depth():  # closed by an unwind: forget it
                    opened.pop()
                return
            name = pushed_name(cbid, data)
            if name is not None:
                enter_frame(name, {})
                opened.append(depth())
        except BaseException as exc:
            callback_failed("while opening a scope for an NVTX range", exc)
