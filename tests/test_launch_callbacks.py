"""Which CUDA calls CUPTI calls the profiler back at (no GPU needed: the collector's choice)."""
import pytest

cupti = pytest.importorskip("cupti.cupti")  # cupti-python: Linux only

from proton.cupti.collector import CuptiCollector  # noqa: E402
from proton.cupti.subscriber import cupti_enum  # noqa: E402


def test_launch_callbacks_are_the_drivers_launch_calls_once_each():
    """A runtime launch (PyTorch's cudaLaunchKernel) makes its driver launch inside it, under
    the same correlation id (bench/step_cost.py counts them): calling back in both domains ran
    the callback, and the python context's Python, twice for every PyTorch launch."""
    collector = CuptiCollector(lambda kernels: None)
    enabled = collector.launch_callbacks()
    assert {domain for domain, _ in enabled} == {int(cupti.CallbackDomain.DRIVER_API)}
    assert len(enabled) == len(set(enabled))
    names = cupti_enum(cupti, "driver_api_trace_cbid", "DriverApiTraceCbid")
    ids = {cbid for _, cbid in enabled}
    for call in ("cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
                 "cuGraphLaunch"):
        assert int(names[call]) in ids, call
    # none of the calls PyTorch makes thousands of times a step
    for call in ("cuCtxGetDevice_v2", "cuDevicePrimaryCtxGetState", "cuMemsetD8Async"):
        assert int(names[call]) not in ids, call
