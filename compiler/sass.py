"""What a compiled kernel's machine code (SASS) does with a `tl.dot`: Hopper's warpgroup MMA
(HGMMA), the mma.sync tensor cores (HMMA, IMMA), or plain fused multiply-adds (FFMA).

Read with `nvdisasm`, which Triton ships in its wheel (triton/backends/nvidia/bin), else from
PATH. The counts are static: instructions in the code, not executed ones.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile

OPCODES = ("HGMMA", "HMMA", "IMMA", "FFMA")
_OPCODE = re.compile(r"\b(HGMMA|HMMA|IMMA|FFMA)\b")


@functools.lru_cache(maxsize=1)
def nvdisasm() -> str | None:
    """The disassembler: Triton's own, else one on PATH; None when neither is there."""
    try:
        import triton

        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                               "nvdisasm")
        if os.access(bundled, os.X_OK):
            return bundled
    except ImportError:
        pass
    return shutil.which("nvdisasm")


def instruction_mix(cubin: bytes) -> dict[str, int] | None:
    """How many HGMMA, HMMA, IMMA and FFMA instructions the cubin holds; None when it cannot
    be disassembled here."""
    tool = nvdisasm()
    if tool is None or not cubin:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            done = subprocess.run([tool, "-c", f.name], capture_output=True, text=True,
                                  timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
    if done.returncode != 0:
        return None
    counts = dict.fromkeys(OPCODES, 0)
    for match in _OPCODE.finditer(done.stdout):
        counts[match[1]] += 1
    return counts


def has_dot(ttir: str | None) -> bool | None:
    """Whether the kernel's Triton IR does a tl.dot (None when the IR is not at hand)."""
    if ttir is None:
        return None
    return "tt.dot" in ttir or "tt.dot_scaled" in ttir
