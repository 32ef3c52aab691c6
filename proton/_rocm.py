"""Triton 3.9's `triton.profiler._rocm`, for scripts and tests that reach it: Proton profiles
NVIDIA GPUs only, so it finds TheRock's ROCm libraries (the `rocm_sdk` wheels) when they are
installed and configures nothing with them."""
from __future__ import annotations

import functools

_LIBRARIES = ("amdhip64", "rocprofiler-sdk", "rocprofiler-sdk-roctx", "roctracer64", "roctx64")


@functools.lru_cache
def find_therock_rocm_libraries() -> dict[str, str] | None:
    """Library name -> path from TheRock's wheels; None without them."""
    try:
        import rocm_sdk  # type: ignore[import-not-found]

        return {name: str(rocm_sdk.find_libraries(name)[0]) for name in _LIBRARIES}
    except (ImportError, FileNotFoundError, IndexError):
        return None


def configure_runtime() -> dict[str, str] | None:
    """What Triton's sets up for ROCm profiling; here nothing is set (no ROCm backend): the
    libraries found, or None without TheRock's."""
    return find_therock_rocm_libraries()
