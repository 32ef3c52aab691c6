"""`proton.viewer`: the `proton-viewer` command (cli.py) and Triton 3.6's viewer API
(`triton.profiler.viewer`'s functions, triton_api.py), loaded on first use so that importing
the package, or the command, loads no hatchet."""
from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["apply_diff_profile", "derive_metrics", "filter_frames", "format_frames",
           "get_min_time_bytes", "get_min_time_flops", "get_raw_metrics",
           "match_available_metrics", "parse", "print_tree", "read", "show_metrics"]

if TYPE_CHECKING:  # editors and mypy see the signatures
    from .triton_api import (apply_diff_profile, derive_metrics, filter_frames, format_frames,
                             get_min_time_bytes, get_min_time_flops, get_raw_metrics,
                             match_available_metrics, parse, print_tree, read, show_metrics)


def __getattr__(name: str):
    if name in __all__:
        from . import triton_api

        return getattr(triton_api, name)
    raise AttributeError(f"module 'proton.viewer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
