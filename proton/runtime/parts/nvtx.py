"""NVTX ranges as scopes (runtime/nvtx.py; TRITON_ENABLE_NVTX, on unless set to 0) as a part:
the collector's launch callback passes NVTX's calls to it while CUPTI collects."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .base import Part

if TYPE_CHECKING:
    from ...cupti.settings import PartAsks
    from ...options import SessionOptions


class NvtxPart(Part):
    """NVTX ranges pushed on Python threads open and close scopes of their names."""

    name = "nvtx"

    def wants(self, opts: SessionOptions) -> bool:
        return True

    def collector_asks(self, opts: SessionOptions, asks: PartAsks) -> PartAsks:
        from ...cupti.nvtx import DOMAIN
        from .. import nvtx

        if not nvtx.enabled():
            return asks
        return replace(asks, callback_users=(*asks.callback_users, nvtx.NvtxScopes(DOMAIN)))
