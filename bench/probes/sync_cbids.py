"""Which CUDA API calls torch makes for `.item()`, `print(tensor)` and torch.cuda.synchronize()
(a one-off probe for issue 50's waits: every runtime and driver call between markers, named,
with the time spent in each; the product enables only the synchronizing ones).

Usage (GPU machine): python bench/probes/sync_cbids.py
"""
from __future__ import annotations

import ctypes
import io
import contextlib
import threading

import torch
from cupti import cupti

from proton.cupti.buffers import loaded_libcupti
from proton.cupti.collector import _DRIVER_SYNCS, _RUNTIME_SYNCS
from proton.cupti.subscriber import CALLBACK, callback_fields, cupti_enum

drv = cupti_enum(cupti, "driver_api_trace_cbid", "DriverApiTraceCbid")
rt = cupti_enum(cupti, "runtime_api_trace_cbid", "RuntimeApiTraceCbid")
names = {1: {int(v): k for k, v in drv.__members__.items()},
         2: {int(v): k for k, v in rt.__members__.items()}}
site_at = callback_fields(cupti)[0]
seen: list = []
starts: dict = {}


def on_api(userdata, domain, cbid, data):
    if threading.current_thread() is not threading.main_thread():
        return
    now = cupti.get_timestamp()
    site = ctypes.c_uint32.from_address(data + site_at).value
    if site == 0:
        starts[(domain, cbid)] = now
    else:
        seen.append((names[domain].get(cbid, cbid), now - starts.pop((domain, cbid), now)))


x = torch.ones(1, device="cuda")
torch.cuda.synchronize()
cupti.get_timestamp()
lib = ctypes.CDLL(loaded_libcupti())
callback = CALLBACK(on_api)
handle = ctypes.c_void_p()
assert lib.cuptiSubscribe(ctypes.byref(handle), callback, None) == 0
for domain in (1, 2):  # a probe: whole domains here, never in the product
    assert lib.cuptiEnableDomain(1, handle, domain) == 0
for what, step in (("item", lambda: (x + 1).item()),
                   ("print", lambda: print(x + 1, file=io.StringIO())),
                   ("synchronize", torch.cuda.synchronize),
                   ("cpu()", lambda: (x + 1).cpu())):
    seen.clear()
    torch.cuda._sleep(2_000_000)
    with contextlib.redirect_stdout(io.StringIO()):
        step()
    calls = [(n, t) for n, t in seen if "GetLastError" not in str(n)]
    slow = [(n, round(t / 1e3)) for n, t in calls if t > 100_000]
    listed = [n for n, _ in calls if n in _DRIVER_SYNCS + _RUNTIME_SYNCS]
    print(f"{what}: {len(calls)} calls; over 100 us: {slow}; timed as waits: {listed}")
lib.cuptiUnsubscribe(handle)
