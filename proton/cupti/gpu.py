"""What the CUDA driver says about this machine's GPUs (through cuda-bindings, no torch)."""
from __future__ import annotations

import contextlib
import functools
import os
import sys

from ..data.devices import DeviceInfo

CUPTI_REQUIREMENT = "cupti-python>=13.0.1,<13.1"
"""What pyproject asks for on Linux (the binding's minor version matches CUDA 13.0's libcupti)."""


def missing_bindings(platform: str = sys.platform) -> str | None:
    """Why kernels cannot be profiled in this Python, with the fix, in one line; None when
    cupti-python and cuda-bindings (installed with it, Linux only) import."""
    try:
        import cupti  # noqa: F401  (the package only: its binding loads when a session starts)
        from cuda import bindings  # noqa: F401
    except ImportError as exc:
        what = "cuda-bindings" if "cuda" in str(exc.name) else "cupti-python"
    else:
        return None
    if platform.startswith("linux"):
        return (f"{what} is not installed, so GPU kernels are not profiled; recording scopes "
                f"with CPU time only (on a machine with an NVIDIA GPU: pip install "
                f"'{CUPTI_REQUIREMENT}')")
    return (f"GPU kernels are profiled on Linux only ({what} is not installed here); recording "
            "scopes with CPU time only (profile on a Linux GPU machine, read the file here with "
            "proton-viewer)")


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


@contextlib.contextmanager
def relaxed_capture():
    """The calling thread may make calls that a CUDA graph capture in global mode refuses (an
    allocation, loading a module, a sync of a stream not being captured) until the block ends:
    the profiler's own set-up, made once, inside a user's capture."""
    driver = _driver()
    old = None
    if driver is not None:
        try:
            err, old = driver.cuThreadExchangeStreamCaptureMode(
                driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
            if err != driver.CUresult.CUDA_SUCCESS:
                old = None
        except Exception:  # a binding without it: the calls are tried as they are
            old = None
    try:
        yield
    finally:
        if old is not None:
            driver.cuThreadExchangeStreamCaptureMode(old)


def devices_in_use() -> list[int]:
    """The devices whose primary context exists; none yet (a script that has not touched the
    GPU): the one it will use by default (LOCAL_RANK under torchrun, else 0), whose context
    enter_context then makes, so that PM sampling starts with it."""
    driver = _driver()
    if driver is None:
        return []
    _, count = driver.cuDeviceGetCount()
    used = [d for d in range(count) if _active(driver, d)]
    if used:
        return used
    local = os.environ.get("LOCAL_RANK", "")
    return [int(local) if local.isdigit() and int(local) < count else 0]


def _active(driver, ordinal: int) -> bool:
    err, dev = driver.cuDeviceGet(ordinal)
    if err != driver.CUresult.CUDA_SUCCESS:
        return False
    err, _, active = driver.cuDevicePrimaryCtxGetState(dev)
    return err == driver.CUresult.CUDA_SUCCESS and bool(active)


_retained: dict = {}
"""Device ordinal -> its primary context, retained by enter_context."""


def enter_context(ordinal: int) -> bool:
    """Make the device's primary context (torch and Triton run in it; made now if it does not
    exist) current on this thread, where PM sampling and the range profiler are set up. The
    context is retained once: it stays alive while sampling uses it."""
    driver = _driver()
    if driver is None:
        return False
    ok = driver.CUresult.CUDA_SUCCESS
    ctx = _retained.get(ordinal)
    if ctx is not None:
        return driver.cuCtxSetCurrent(ctx)[0] == ok
    err, dev = driver.cuDeviceGet(ordinal)
    if err != ok:
        return False
    err, ctx = driver.cuDevicePrimaryCtxRetain(dev)  # made here when it does not exist yet
    if err != ok:
        return False
    _retained[ordinal] = ctx
    (err,) = driver.cuCtxSetCurrent(ctx)
    return err == ok


def context_keeper():
    """A function that makes this thread's current context (if any) current again: setting up
    sampling on several devices must not change the device the job's thread works on."""
    driver = _driver()
    if driver is None:
        return lambda: None
    err, ctx = driver.cuCtxGetCurrent()
    if err != driver.CUresult.CUDA_SUCCESS or not int(ctx):
        return lambda: None
    return lambda: driver.cuCtxSetCurrent(ctx)


def current_context() -> int:
    """This thread's current CUcontext as an address (0: none)."""
    driver = _driver()
    if driver is None:
        return 0
    err, ctx = driver.cuCtxGetCurrent()
    return int(ctx) if err == driver.CUresult.CUDA_SUCCESS else 0
