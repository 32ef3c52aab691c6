"""Triton 3.9's `triton.profiler.state` module: the launch-metadata state's names and the state
context managers. `proton.state` is still the `state` class (as `triton.profiler.state` is):
this module is reached by `from proton.state import COMPUTE_METADATA_SCOPE_NAME`."""
from __future__ import annotations

import importlib
from typing import Any

from .format import LAUNCH_METADATA, LAUNCH_METADATA_PREFIX

COMPUTE_METADATA_SCOPE_NAME = LAUNCH_METADATA
"""'__proton_launch_metadata': the state a launch_metadata function runs under."""
COMPUTE_METADATA_SCOPE_PREFIX = LAUNCH_METADATA_PREFIX


def get_metadata_state_name(kernel_name: str | None = None) -> str:
    """The state name Triton 3.9 gives launch-metadata work: COMPUTE_METADATA_SCOPE_NAME, or
    with a kernel's name `__proton_launch_metadata:<kernel>` (both viewers hide either).
    `proton.metadata_state(kernel)` is the state itself, grouped as Triton 3.9 groups it.

    Usage:
        get_metadata_state_name("matmul")   # '__proton_launch_metadata:matmul'
    """
    return f"{COMPUTE_METADATA_SCOPE_PREFIX}{kernel_name}" if kernel_name else \
        COMPUTE_METADATA_SCOPE_NAME


_FROM_SCOPES = {"state", "metadata_state", "enter_state", "exit_state"}


def __getattr__(name: str) -> Any:  # loaded on use: importing this module starts no runtime
    if name in _FROM_SCOPES:
        return getattr(importlib.import_module(".scopes", __package__), name)
    raise AttributeError(f"module 'proton.state' has no attribute {name!r}")
