"""Which CUDA calls CUPTI calls the profiler back at (no GPU needed: the collector's choice)."""
import pytest

cupti = pytest.importorskip("cupti.cupti")  # cupti-python: Linux only

from proton.cupti.collector import CollectorSettings, CuptiCollector  # noqa: E402
from proton.cupti.settings import PartAsks  # noqa: E402
from proton.cupti.subscriber import cupti_enum  # noqa: E402


def test_launch_callbacks_are_the_drivers_launch_calls_once_each():
    """A runtime launch (PyTorch's cudaLaunchKernel) makes its driver launch inside it, under
    the same correlation id (bench/step_cost.py counts them): calling back in both domains ran
    the callback, and the python context's Python, twice for every PyTorch launch."""
    collector = CuptiCollector(CollectorSettings(lambda kernels: None))
    enabled = collector.launch_callbacks()
    driver = int(cupti.CallbackDomain.DRIVER_API)
    assert {domain for domain, _ in enabled} == {driver}
    assert len(enabled) == len(set(enabled))
    names = cupti_enum(cupti, "driver_api_trace_cbid", "DriverApiTraceCbid")
    ids = {cbid for domain, cbid in enabled if domain == driver}
    for call in ("cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
                 "cuGraphLaunch"):
        assert int(names[call]) in ids, call
    # none of the calls PyTorch makes thousands of times a step
    for call in ("cuCtxGetDevice_v2", "cuDevicePrimaryCtxGetState"):
        assert int(names[call]) not in ids, call


def test_copy_and_set_calls_are_taken_as_launches_are():
    """Issue 50: the copy and set calls torch and users make (cudaMemcpyAsync, cudaMemcpy,
    cudaMemsetAsync, the driver's cuMemcpy*/cuMemsetD*) are taken with the launches, so their
    MEMCPY and MEMSET records join their call path by correlation id; graph node calls and
    other memory calls are not. The runtime's are taken by the driver calls inside them (one
    callback each, not two); their API records still come where the Python pipeline reads
    them."""
    collector = CuptiCollector(CollectorSettings(lambda kernels: None))
    enabled = set(collector.launch_callbacks())
    driver, runtime = int(cupti.CallbackDomain.DRIVER_API), int(cupti.CallbackDomain.RUNTIME_API)
    names = cupti_enum(cupti, "driver_api_trace_cbid", "DriverApiTraceCbid")
    runtime_names = cupti_enum(cupti, "runtime_api_trace_cbid", "RuntimeApiTraceCbid")
    for call in ("cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyAsync",
                 "cuMemcpyPeerAsync", "cuMemsetD8Async", "cuMemsetD32Async",
                 "cuMemcpyBatchAsync"):
        assert (driver, int(names[call])) in enabled, call
        assert int(names[call]) in collector._driver_cbids
    for call in ("cudaMemcpy_v3020", "cudaMemcpyAsync_v3020", "cudaMemsetAsync_v3020",
                 "cudaMemset_v3020", "cudaMemcpyPeerAsync_v4000"):
        assert (runtime, int(runtime_names[call])) not in enabled, call
        assert int(runtime_names[call]) in collector._runtime_cbids
    for call in ("cuGraphAddMemcpyNode", "cuMemAlloc_v2", "cuMemFree_v2"):
        assert (driver, int(names[call])) not in enabled, call


def test_copies_and_waits_left_out_take_no_callback_and_no_record():
    """PROTON_OFF=copies,waits (the profiler passes copies=False, waits=False): the collector
    enables no copy or set callback and no MEMCPY/MEMSET record kind, and times no call as a
    wait; the launches are taken as before."""
    full = CuptiCollector(CollectorSettings(lambda kernels: None))
    bare = CuptiCollector(CollectorSettings(lambda kernels: None,
                                            parts=PartAsks(copies=False, waits=False)))
    names = cupti_enum(cupti, "driver_api_trace_cbid", "DriverApiTraceCbid")
    enabled = {cbid for _, cbid in bare.launch_callbacks()}
    assert int(names["cuLaunchKernel"]) in enabled
    assert not [n for n in names.__members__ if n.startswith(("cuMemcpy", "cuMemset"))
                and int(names[n]) in enabled]
    assert set(enabled) < {cbid for _, cbid in full.launch_callbacks()}
    assert bare._copy_kinds == [] and len(full._copy_kinds) == 3
    assert bare.sync_cbids == {} and bare.async_copy_cbids == {}
    assert all(full.sync_cbids.values())


def test_what_a_sessions_parts_ask_of_the_collector_is_one_settings_object(monkeypatch):
    """The collector is made from one CollectorSettings; what a session's parts ask of it
    (pcsampling's options, the idle tracker's sinks, PROTON_OFF's copies and waits, the
    buffer fan-out) is its PartAsks, filled by the parts alone."""
    from proton.options import parse_options
    from proton.runtime.parts import Parts
    from proton.runtime.profiler import profiler

    parts = Parts(profiler)  # parts of their own: the profiler's are left as they are
    monkeypatch.setenv("PROTON_OFF", "copies,idle")
    sampling = parse_options("x", mode="pcsampling")
    asks = parts.collector_asks(sampling)
    assert asks.pc == sampling.pc and asks.buffered == parts.buffered
    assert (asks.copies, asks.waits, asks.busy, asks.launched) == (False, True, None, None)
    monkeypatch.delenv("PROTON_OFF")
    asks = parts.collector_asks(parse_options("x"))
    assert asks.pc is None and asks.copies and asks.waits
    assert asks.busy is not None and asks.launched is not None  # the idle tracker's
    bare = CuptiCollector(CollectorSettings(lambda kernels: None,
                                            parts=PartAsks(copies=False, waits=False)))
    assert bare.sync_cbids == {} and bare.shaper is not None
