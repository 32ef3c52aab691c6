"""A job's ranks merged in the job at finalize: a tree reduction over torch.distributed.

Under an initialized process group, every rank turns its tree into a partial (rank_merge.leaf),
and in log2(P) rounds rank r receives the partials of r + 1, r + 2, r + 4, ... and sends its
own to r - 2^k (rank_merge.rounds): compact per-frame summaries, never every tree on rank 0.
Rank 0 writes the job file and tells every rank whether it did. The reduction runs on its own
gloo (CPU) group, so it never interleaves with the job's NCCL collectives, and every wait is
bounded (PROTON_MERGE_TIMEOUT, seconds): a rank that died or never comes makes the others
write their own files, never hang at exit.

PROTON_RANK_FILES says what a job writes: `both` (the default: the job file and each rank's
file), `job` (the job file only; each rank's file where the merge failed) or `ranks` (each
rank's file only, no merge).
"""
from __future__ import annotations

import importlib.abc
import pickle
import sys
from datetime import timedelta
from typing import Any, Callable

from .. import rank_merge, settings
from ..data.job import span
from ..format import job_of


def rank_files() -> str:
    """PROTON_RANK_FILES (settings.RANK_FILES; a bad one was said at start: the default)."""
    return settings.value("PROTON_RANK_FILES")


def timeout_s() -> float:
    """PROTON_MERGE_TIMEOUT: how long any one step of the merge may wait (default 30 s)."""
    return settings.value("PROTON_MERGE_TIMEOUT")


def in_use() -> bool:
    """Whether the job imported torch.distributed."""
    return "torch.distributed" in sys.modules


def group_ready() -> str | None:
    """Why the job's process group cannot be used (None when it can). torch is not imported
    here: a job that never imported torch.distributed has no group."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return "torch.distributed is not in use"
    if not dist.is_available() or not dist.is_initialized():
        return ("the process group is not initialized (call proton.finalize() before "
                "dist.destroy_process_group())")
    return None


def merge(doc: list, rank: int, write_job: Callable[[list], str], *, key: str,
          members: list[int] | None = None) -> tuple[bool, str]:
    """Reduce this rank's document over the job's ranks `members` (all when None), on a gloo
    group of their own, rendezvoused in the job's store under `key`. Rank `members[0]` calls
    `write_job(job document)`. Returns (whether the job file was written, why not / its path).

    Why not torch's new_group: it names groups by a per-process counter, so a merge that some
    ranks never joined (a capture of some ranks, a rank that died) would leave every later
    group of the job misnamed, and every later merge, the final one too, waiting out its
    timeout. Each merge here has its own key (a capture's id, the profile's name at
    finalize), and a rank that does not come costs the others one timeout, that merge only.
    """
    import torch
    import torch.distributed as dist

    limit = timeout_s()
    me = dist.get_rank()
    ranks = sorted(set(members)) if members is not None else list(range(dist.get_world_size()))
    if me not in ranks:
        return False, f"rank {me} is not among the ranks merged ({span(ranks)})"
    at, size = ranks.index(me), len(ranks)
    try:
        store = dist.PrefixStore(f"proton-merge/{key}/", _default_store())
        group: Any = dist.ProcessGroupGloo(store, at, size, timedelta(seconds=limit))
    except Exception as exc:  # a rank that never came, or died
        return False, (f"no merge group within {limit:g} s: a rank died or has not reached "
                       f"the merge ({_short(exc)})")
    ok = torch.zeros(1, dtype=torch.int64)
    wrote = ""
    try:
        partial = rank_merge.leaf(doc[0], rank, doc[1] if len(doc) > 1 else {},
                                  job_of(doc[0]))
        sources, target = rank_merge.rounds(at, size)
        failed = None
        for source in sources:
            try:
                partial = rank_merge.combine(partial, _recv(group, source))
            except Exception as exc:
                failed = f"rank {ranks[source]} sent nothing ({_short(exc)})"
                break
        if failed is None and target is not None:
            _send(group, target, partial)
        elif failed is None:
            try:
                wrote = write_job(rank_merge.document(partial, dist.get_world_size()))
                ok[0] = 1
            except Exception as exc:
                failed = f"the job file could not be written ({_short(exc)})"
        if at == 0 and failed:
            wrote = failed
        group.broadcast([ok]).wait()  # every rank learns whether the first one wrote it
    except Exception as exc:
        return False, wrote or f"the merge did not finish ({_short(exc)})"
    finally:
        _destroy(group)
    if not ok[0]:
        return False, wrote or f"rank {ranks[0]} could not merge every rank"
    return True, wrote


def _default_store():
    """The job's own key-value store (the default group's rendezvous)."""
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def _send(group, target: int, partial: rank_merge.Partial) -> None:
    import torch

    # the ranks of one job trust each other (torch's own send_object_list pickles too)
    data = pickle.dumps(partial, protocol=pickle.HIGHEST_PROTOCOL)
    group.send([torch.tensor([len(data)], dtype=torch.int64)], target, 0).wait()
    group.send([torch.frombuffer(bytearray(data), dtype=torch.uint8)], target, 1).wait()


def _recv(group, source: int) -> Any:
    import torch

    size = torch.zeros(1, dtype=torch.int64)
    group.recv([size], source, 0).wait()
    data = torch.empty(int(size[0]), dtype=torch.uint8)
    group.recv([data], source, 1).wait()
    return pickle.loads(data.numpy().tobytes())


def _destroy(group) -> None:
    try:
        group.shutdown()
    except Exception:  # a broken group: nothing more to release
        pass


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


def before_destroy(callback: Callable[[], None]) -> None:
    """Have `callback()` run when the job destroys its default process group
    (torch.distributed.destroy_process_group()), before the group goes: the `proton`
    command writes after the script, by which time a script that tidies up has no group to
    merge over. torch is not imported here: if the script imports torch.distributed later,
    the function is wrapped as that import finishes."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        _wrap(dist, callback)
        return
    if not any(isinstance(f, _Watch) for f in sys.meta_path):
        sys.meta_path.insert(0, _Watch(callback))


class _Watch(importlib.abc.MetaPathFinder):
    """Wraps destroy_process_group once torch.distributed is imported (its spec found by the
    other finders, its loader's exec_module followed by the wrapping)."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def find_spec(self, name, path, target=None):
        if name != "torch.distributed":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, self.callback)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, callback: Callable[[], None]) -> None:
        self.loader, self.callback = loader, callback

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def __getattr__(self, name: str):  # get_source, is_package, ...: the real loader's
        return getattr(self.loader, name)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        _wrap(module, self.callback)
        try:
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Watch)]
        except Exception:  # pragma: no cover - meta_path is a plain list
            pass


def _wrap(dist, callback: Callable[[], None]) -> None:
    from functools import wraps

    try:
        from torch.distributed import distributed_c10d as c10d
    except ImportError:  # a torch built without distributed support: no group to end
        return

    original = c10d.destroy_process_group
    if getattr(original, "_proton_wrapped", False):
        return

    @wraps(original)
    def destroy_process_group(group=None):
        if group is None or group is c10d.GroupMember.WORLD:
            try:
                callback()
            except Exception as exc:  # the script's tidying up goes on regardless
                from ..report import warn

                warn(f"the job's profile could not be merged before its process group ended "
                     f"({_short(exc)})")
        return original(group)

    destroy_process_group._proton_wrapped = True  # type: ignore[attr-defined]
    c10d.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group
