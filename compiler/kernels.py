"""What each compiled Triton kernel is: its launch configuration, constexprs, cubin and source.

One `KernelInfo` per loaded kernel, keyed by its CUfunction handle (what Triton's launch hook and
CUPTI's records carry). Filled two ways:
- at load, through Triton's `kernel_load_end_hook` (chained, never replacing other hooks);
- for kernels loaded before the session started, from the CompiledKernel objects Triton keeps in
  its JIT caches (found once, when the table is installed);
- for kernels loaded without Triton's launcher (torch.compile's static CUDA launcher loads
  Triton's cubin itself: no load hook, no CompiledKernel kept), `cached_cubins` finds the cubin
  by the kernel's name in Triton's cache folders.
The hook uses it to name launches with their configuration; instruction sampling (issue 7) uses
`cubin()` and `source_file` to map sampled PCs to source lines.
"""
from __future__ import annotations

import getpass
import gc
import glob
import json
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from types import FrameType


@dataclass(slots=True)
class KernelInfo:
    """One compiled and loaded Triton kernel."""

    name: str
    hash: str
    function: int
    """CUfunction handle: the key launches and CUPTI records carry."""
    num_warps: int = 0
    num_stages: int = 0
    num_ctas: int = 1
    shared: int = 0
    """Static shared memory in bytes, as Triton computed it."""
    cluster_dims: tuple = (1, 1, 1)
    target: str = ""
    """e.g. "cuda:90"."""
    constexprs: dict = field(default_factory=dict)
    """The kernel's declared tl.constexpr arguments and their values (empty if unknown)."""
    source_file: str | None = None
    source_line: int | None = None
    """First line of the @triton.jit function in source_file."""
    cubin_path: str | None = None
    _cubin: bytes | None = None
    ttir_path: str | None = None
    _ttir: str | None = None

    def cubin(self) -> bytes | None:
        """The kernel's cubin (from memory, or Triton's cache file), None if it is gone."""
        if self._cubin is None and self.cubin_path:
            try:
                with open(self.cubin_path, "rb") as f:
                    self._cubin = f.read()
            except OSError:
                return None
        return self._cubin

    def ttir(self) -> str | None:
        """The kernel's Triton IR (what the source asked for, before lowering), None if gone."""
        if self._ttir is None and self.ttir_path:
            try:
                with open(self.ttir_path) as f:
                    self._ttir = f.read()
            except OSError:
                return None
        return self._ttir


class KernelTable:
    """Every Triton kernel this process has loaded, by CUfunction handle. Thread-safe."""

    def __init__(self) -> None:
        self.by_function: dict[int, KernelInfo] = {}
        self._lock = threading.Lock()
        self._installed = False

    def get(self, function: int) -> KernelInfo | None:
        return self.by_function.get(function)

    def add(self, info: KernelInfo) -> None:
        with self._lock:
            self.by_function[info.function] = info

    def install(self) -> None:
        """Listen to kernel loads and record the kernels already loaded (once per process)."""
        if self._installed:
            return
        from triton import knobs

        knobs.runtime.kernel_load_end_hook.add(self._on_load)
        self._installed = True
        for kernel in loaded_kernels():
            info = from_compiled(kernel)
            if info is not None:
                self.add(info)

    def _on_load(self, module, function, name, metadata_group, hash) -> None:
        kernel = _loading_kernel(hash)
        info = from_compiled(kernel) if kernel is not None else \
            from_metadata_group(name, function, metadata_group, hash)
        if info is not None:
            self.add(info)


def loaded_kernels() -> list:
    """CompiledKernel objects alive in the process that have been loaded on a device: those in
    Triton's JIT caches, the autotuner's, torch inductor's."""
    from triton.compiler import CompiledKernel

    return [o for o in gc.get_objects()
            if type(o) is CompiledKernel and getattr(o, "function", None) is not None]


def from_compiled(kernel) -> KernelInfo | None:
    """A KernelInfo from a loaded triton.compiler.CompiledKernel."""
    if kernel.function is None:
        return None
    md = kernel.metadata
    info = KernelInfo(name=kernel.name, hash=kernel.hash, function=int(kernel.function),
                      **_config(md._asdict()))
    src = kernel.src
    fn = getattr(src, "fn", None)
    if fn is not None:  # an ASTSource: the @triton.jit function and its specialisation
        info.constexprs = _constexprs(fn, getattr(src, "constants", {}))
        code = getattr(getattr(fn, "fn", None), "__code__", None)
        if code is not None:
            info.source_file = code.co_filename
            info.source_line = getattr(fn, "starting_line_number", code.co_firstlineno)
    info._cubin = kernel.asm.get("cubin") if hasattr(kernel.asm, "get") else None
    info.cubin_path = _cubin_path(kernel.metadata_group)
    info._ttir = kernel.asm.get("ttir") if hasattr(kernel.asm, "get") else None
    info.ttir_path = _path(kernel.metadata_group, ".ttir")
    return info


def from_metadata_group(name: str, function, metadata_group: dict, hash: str) -> KernelInfo | None:
    """A KernelInfo from Triton's cache files alone (no constexprs or source): the fallback when
    the CompiledKernel being loaded cannot be found."""
    if function is None:
        return None
    meta = {}
    for key, path in metadata_group.items():
        if key.endswith(".json"):
            try:
                with open(path) as f:
                    meta = json.load(f)
            except (OSError, ValueError):
                pass
    return KernelInfo(name=name, hash=hash, function=int(function), **_config(meta),
                      cubin_path=_cubin_path(metadata_group),
                      ttir_path=_path(metadata_group, ".ttir"))


def _config(md: dict) -> dict:
    target = md.get("target")
    if isinstance(target, dict):
        target = f"{target.get('backend')}:{target.get('arch')}"
    elif target is not None:
        target = f"{getattr(target, 'backend', '')}:{getattr(target, 'arch', '')}"
    return {"num_warps": int(md.get("num_warps", 0)), "num_stages": int(md.get("num_stages", 0)),
            "num_ctas": int(md.get("num_ctas", 1)), "shared": int(md.get("shared", 0)),
            "cluster_dims": tuple(md.get("cluster_dims", (1, 1, 1))), "target": target or ""}


def _constexprs(fn, constants: dict) -> dict:
    names = getattr(fn, "arg_names", [])
    declared = {p.name for p in getattr(fn, "params", []) if getattr(p, "is_constexpr", False)}
    out = {}
    for path, value in constants.items():
        if len(path) == 1 and path[0] < len(names) and names[path[0]] in declared:
            out[names[path[0]]] = value
    return out


def _cubin_path(metadata_group: dict) -> str | None:
    return _path(metadata_group, ".cubin")


def _path(metadata_group: dict, ext: str) -> str | None:
    return next((p for key, p in metadata_group.items() if key.endswith(ext)), None)


def _loading_kernel(hash: str):
    """The CompiledKernel whose _init_handles called the load hook (a few frames up)."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(4):
        if frame is None:
            return None
        kernel = frame.f_locals.get("self")
        if getattr(kernel, "hash", None) == hash and hasattr(kernel, "metadata_group"):
            return kernel
        frame = frame.f_back
    return None


def cache_folders() -> list[str]:
    """Folders where Triton keeps compiled kernels (<folder>/<hash>/<name>.cubin), those of this
    process first: TRITON_CACHE_DIR (torch.compile sets it to its own, e.g.
    /tmp/torchinductor_USER/triton/0), torch.compile's default ones, Triton's default."""
    folders = [os.environ.get("TRITON_CACHE_DIR", "")]
    try:
        from triton import knobs

        folders.append(knobs.cache.dir or "")
    except (ImportError, AttributeError):
        pass
    try:
        user = getpass.getuser()
    except (KeyError, ImportError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    folders += sorted(glob.glob(os.path.join(glob.escape(inductor), "triton", "*")))
    folders.append(os.path.join(os.path.expanduser("~"), ".triton", "cache"))
    return list(dict.fromkeys(f for f in folders if f and os.path.isdir(f)))


def cached_cubins(name: str, limit: int = 64) -> list[bytes]:
    """Cubins of kernels called `name` in Triton's cache folders (at most `limit`; a kernel
    compiled for several specialisations has one per hash)."""
    out: list[bytes] = []
    for folder in cache_folders():
        for path in glob.iglob(os.path.join(glob.escape(folder), "*", glob.escape(name) + ".cubin")):
            try:
                with open(path, "rb") as f:
                    out.append(f.read())
            except OSError:
                continue
            if len(out) >= limit:
                return out
    return out


kernels = KernelTable()
"""The process's table (CUfunction handles are per process)."""
