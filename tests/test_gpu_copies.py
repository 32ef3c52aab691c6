"""Copies and sets on a GPU (issue 50, item 1): torch's pageable and pinned host-to-device
copies, its device-to-host read-back and memsets through the runtime and the driver, each
on its node under the scope that issued it with exact bytes and counts. Run with
`pytest -m gpu`."""
from __future__ import annotations

import ctypes
import json

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

import proton  # noqa: E402
from proton import format as fmt  # noqa: E402

N = 5
ELEMENTS = 3 << 18  # 3 MiB of float32: several of the driver's pageable staging chunks
BYTES = ELEMENTS * 4


def _cudart() -> ctypes.CDLL:
    """The CUDA runtime torch loaded (its cudaMemsetAsync)."""
    with open("/proc/self/maps") as f:
        for line in f:
            if "/libcudart.so" in line:
                return ctypes.CDLL(line[line.index("/"):].strip())
    return ctypes.CDLL("libcudart.so")


def _scope(root: dict, name: str) -> dict:
    """The node named `name` (the python context puts scopes under the Python call path)."""
    todo = [root]
    while todo:
        node = todo.pop()
        if node["frame"]["name"] == name:
            return node
        todo += node["children"]
    raise AssertionError(f"no scope {name!r}: {json.dumps(root)[:4000]}")


def _copies(node: dict) -> dict[str, dict]:
    """The copy and set nodes under `node`, by name, their metrics summed (the python context
    puts them under the line that copied, inside the scope)."""
    found: dict[str, dict] = {}
    todo = list(node["children"])
    while todo:
        c = todo.pop()
        todo += c["children"]
        if fmt.COPY_FRAME.match(c["frame"]["name"]):
            into = found.setdefault(c["frame"]["name"], {})
            for k, v in c["metrics"].items():
                into[k] = into.get(k, 0) + v if isinstance(v, (int, float)) else v
    return found


@pytest.mark.parametrize("context,native", [("shadow", "1"), ("python", "1"), ("shadow", "0")])
def test_copies_and_sets_under_their_scopes(profile_path, monkeypatch, context, native):
    monkeypatch.setenv("PROTON_NATIVE", native)
    name, read = profile_path
    host = torch.ones(ELEMENTS)
    pinned = torch.ones(ELEMENTS).pin_memory()
    dev = torch.empty(ELEMENTS, device="cuda")
    cudart = _cudart()
    cudart.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                       ctypes.c_void_p]
    cudart.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int]
    stream = torch.cuda.current_stream().cuda_stream
    driver = pytest.importorskip("cuda.bindings.driver")
    torch.cuda.synchronize()
    proton.start(name, context=context)
    with proton.scope("pageable"):
        for _ in range(N):
            dev.copy_(host)
    with proton.scope("pinned"):
        for _ in range(N):
            dev.copy_(pinned, non_blocking=True)
    with proton.scope("runtime_memcpy"):  # the runtime's synchronous copy, host to device
        for _ in range(N):
            assert cudart.cudaMemcpy(dev.data_ptr(), host.data_ptr(), BYTES, 1) == 0
    with proton.scope("readback"):
        for _ in range(N):
            dev.cpu()
    with proton.scope("runtime_memset"):
        for _ in range(N):
            assert cudart.cudaMemsetAsync(dev.data_ptr(), 0, BYTES, stream) == 0
    with proton.scope("driver_memset"):
        for _ in range(N):
            (err,) = driver.cuMemsetD32Async(dev.data_ptr(), 0, ELEMENTS, stream)
            assert int(err) == 0
    torch.cuda.synchronize()
    proton.finalize()
    root, _ = read()
    tree = json.dumps(root)[:4000]
    for scope, copy in (("pageable", fmt.MEMCPY_HTOD_PAGEABLE),
                        ("pinned", fmt.MEMCPY_HTOD_PINNED),
                        ("runtime_memcpy", fmt.MEMCPY_HTOD_PAGEABLE),
                        ("readback", fmt.MEMCPY_DTOH_PAGEABLE),
                        ("runtime_memset", fmt.MEMSET), ("driver_memset", fmt.MEMSET)):
        found = _copies(_scope(root, scope))
        assert list(found) == [copy], (scope, tree)
        m = found[copy]
        assert m[fmt.COUNT] == N and m[fmt.BYTES] == N * BYTES, (scope, m)
        assert m[fmt.TIME] > 0 and m[fmt.DEVICE_TYPE] == fmt.CUDA
        # the GPU's own time, not the host's wait: 3 MiB moves in microseconds on any
        # GPU this runs on (well under 100 us a copy or set, 0.1 GB/s pageable included)
        assert m[fmt.TIME] / N < 100_000 if copy == fmt.MEMSET else m[fmt.TIME] / N < 30e6, m
    assert not [c for c in root["children"]  # none lost to the root
                if fmt.COPY_FRAME.match(c["frame"]["name"])], tree
    if context == "shadow":  # the scopes right under the root
        assert {c["frame"]["name"] for c in root["children"]} == {
            "pageable", "pinned", "runtime_memcpy", "readback", "runtime_memset",
            "driver_memset"}, tree
