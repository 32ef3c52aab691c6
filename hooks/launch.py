"""Names of Triton's `triton.profiler.hooks.launch`: the scope a launch_metadata function runs
under (kernels it launches are counted there, never under the kernel's op)."""
from __future__ import annotations

from ..format import LAUNCH_METADATA

COMPUTE_METADATA_SCOPE_NAME = LAUNCH_METADATA
"""'__proton_launch_metadata', as in Triton's files."""
