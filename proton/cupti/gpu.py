"""What the CUDA driver says about this machine's GPUs (through cuda-bindings, no torch)."""
from __future__ import annotations

import functools

from ..data.devices import DeviceInfo


@functools.cache
def _driver():
    """The driver module with cuInit done, or None when no usable GPU is present."""
    try:
        from cuda.bindings import driver
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return None
        return driver
    except Exception:  # no libcuda, no cuda-bindings: no GPU
        return None


def gpu_available() -> bool:
    return _driver() is not None


def device_table() -> dict[int, DeviceInfo]:
    """Every visible device, keyed by its ordinal (CUPTI's device_id)."""
    driver = _driver()
    if driver is None:
        return {}
    attr = driver.CUdevice_attribute
    _, count = driver.cuDeviceGetCount()
    table = {}
    for ordinal in range(count):
        _, dev = driver.cuDeviceGet(ordinal)

        def get(a):
            return int(driver.cuDeviceGetAttribute(a, dev)[1])

        table[ordinal] = DeviceInfo(
            arch=f"{get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)}"
            f"{get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)}",
            num_sms=get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            clock_rate=get(attr.CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            memory_clock_rate=get(attr.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            bus_width=get(attr.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        )
    return table


def synchronize() -> None:
    """Wait for the work queued in the calling thread's current context, if it has one."""
    driver = _driver()
    if driver is None:
        return
    err, ctx = driver.cuCtxGetCurrent()
    if err == driver.CUresult.CUDA_SUCCESS and int(ctx) != 0:
        driver.cuCtxSynchronize()
