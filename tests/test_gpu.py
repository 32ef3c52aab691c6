"""The real path on a GPU: CUPTI records, attribution, files. Run with `pytest -m gpu`."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from conftest import find, kernels, load, run_threads, total

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import proton  # noqa: E402
from proton.format import GPU_IDLE, GPU_IDLE_EXCLUDED, SCOPE_WALL, STEP_METRICS  # noqa: E402
from kernels import add_kernel  # noqa: E402


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


@pytest.fixture(scope="module")
def xy():
    assert torch.cuda.is_available()
    x = torch.randn(1 << 20, device="cuda")
    add(x, x)  # compile outside the profiles
    torch.cuda.synchronize()
    return x, x


def test_torch_matmul_and_softmax_under_nested_scopes(profile_path):
    name, read = profile_path
    a = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    proton.start(name)
    with proton.scope("model"):
        with proton.scope("matmul"):
            for _ in range(3):
                c = a @ a
        with proton.scope("softmax"):
            torch.softmax(c, dim=-1)
    proton.finalize()
    root, devices = read()
    mm = kernels(find(root, "model", "matmul"))
    sm = kernels(find(root, "model", "softmax"))
    assert sum(k["metrics"]["count"] for k in mm) == 3
    assert sum(k["metrics"]["count"] for k in sm) == 1
    assert all(k["metrics"]["time (ns)"] > 0 for k in mm + sm)
    assert "softmax" in sm[0]["frame"]["name"].lower()
    assert kernels(root) == mm + sm  # nothing landed elsewhere
    assert root["metrics"] == {"count": 0, "time (ns)": 0}
    dev = devices["CUDA"]["0"]
    assert dev["arch"] == "".join(map(str, torch.cuda.get_device_capability()))
    assert dev["num_sms"] == torch.cuda.get_device_properties(0).multi_processor_count
    assert dev["clock_rate"] > 0 and dev["memory_clock_rate"] > 0 and dev["bus_width"] > 0


def test_every_triton_launch_is_counted(profile_path, xy):
    name, read = profile_path
    proton.start(name)
    with proton.scope("loop"):
        for _ in range(1000):
            add(*xy)
    proton.finalize()
    root, _ = read()
    (node,) = kernels(find(root, "loop"))
    assert node["frame"]["name"] == "add_kernel"
    assert node["metrics"]["count"] == 1000
    assert node["metrics"]["device_id"] == "0" and node["metrics"]["device_type"] == "CUDA"


def test_kernel_time_matches_cuda_events_within_3_percent(profile_path):
    name, read = profile_path
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    a @ a
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(10)]
    proton.start(name)
    with proton.scope("warmup"):  # first launches after CUPTI attaches run slower
        for _ in range(3):
            a @ a
    with proton.scope("gemm"):
        for start, end in events:
            start.record()
            a @ a
            end.record()
    proton.finalize()
    torch.cuda.synchronize()
    per_launch = [s.elapsed_time(e) * 1e6 for s, e in events]
    root, _ = read()
    node = find(root, "gemm")
    gemms = kernels(node)  # without the memset cuBLAS may make beside each (a node of its own)
    assert sum(k["metrics"]["count"] for k in gemms) == 10
    assert sum(k["metrics"]["time (ns)"] for k in gemms) == pytest.approx(sum(per_launch),
                                                                           rel=0.03), \
        (per_launch, find(root, "warmup"))


def test_user_metrics_inclusive_and_exclusive(profile_path, xy):
    name, read = profile_path
    proton.start(name)
    with proton.scope("fwd", {"tokens": 4096, "flops (exc)": 2.5}):
        add(*xy)
    with proton.scope("fwd", {"tokens": 4096}):
        add(*xy)
    proton.finalize()
    root, _ = read()
    fwd = find(root, "fwd")
    # the user's metrics, beside what the profiler measures of every scope (its wall and idle)
    # and of every step (a main-thread scope with none open around it: the step breakdown)
    measured = {GPU_IDLE, SCOPE_WALL, GPU_IDLE_EXCLUDED, *STEP_METRICS}
    assert {k: v for k, v in fwd["metrics"].items() if k not in measured} == {
        "tokens": 8192, "flops": 2.5}
    assert root["metrics"]["tokens"] == 0 and "flops" not in root["metrics"]
    assert find(fwd, "add_kernel")["metrics"]["count"] == 2


def test_deactivated_region_is_not_recorded(profile_path, xy):
    name, read = profile_path
    sid = proton.start(name)
    with proton.scope("a"):
        add(*xy)
    proton.deactivate(sid)
    with proton.scope("b"):
        for _ in range(5):
            add(*xy)
    proton.activate(sid)
    with proton.scope("a"):
        add(*xy)
    proton.finalize()
    root, _ = read()
    assert [c["frame"]["name"] for c in root["children"]] == ["a"]
    assert find(root, "a", "add_kernel")["metrics"]["count"] == 2


def test_two_sessions_each_with_own_file(tmp_path, xy):
    s1 = proton.start(str(tmp_path / "one"))
    with proton.scope("both"):
        add(*xy)
    s2 = proton.start(str(tmp_path / "two"))
    with proton.scope("both"):
        add(*xy)
    proton.deactivate(s1)
    with proton.scope("only_two"):
        add(*xy)
    assert proton.start(str(tmp_path / "one")) == s1  # same name resumes
    proton.finalize(s2)
    with proton.scope("after"):
        add(*xy)
    proton.finalize(s1)
    one, _ = load(tmp_path / "one.hatchet")
    two, _ = load(tmp_path / "two.hatchet")
    assert total(find(one, "both"), "count") == 2
    assert total(find(two, "both"), "count") == 1
    assert [c["frame"]["name"] for c in two["children"]] == ["both", "only_two"]
    assert [c["frame"]["name"] for c in one["children"]] == ["after", "both"]


def test_threads_kernels_land_under_their_own_scopes(profile_path, xy):
    name, read = profile_path
    proton.start(name)
    barrier = threading.Barrier(3)

    def work(tag, n):
        torch.cuda.set_device(0)
        with proton.scope(f"thread_{tag}"):
            barrier.wait()
            for _ in range(n):
                add(*xy)

    threads = [threading.Thread(target=work, args=(i, 50 * (i + 1))) for i in range(3)]
    run_threads(threads)
    proton.finalize()
    root, _ = read()
    for i in range(3):
        assert find(root, f"thread_{i}", "add_kernel")["metrics"]["count"] == 50 * (i + 1)
    assert total(root, "count") == 300


def test_cuda_graph_kernels_are_attributed(profile_path):
    name, read = profile_path
    x = torch.randn(4096, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            y = (x * 2).sin()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = (x * 2).sin()
    torch.cuda.synchronize()
    proton.start(name)
    with proton.scope("replay"):
        for _ in range(4):
            graph.replay()
    proton.finalize()
    root, _ = read()
    assert total(find(root, "replay"), "count") == 8


def test_graph_replays_show_where_their_kernels_were_captured(profile_path, capfd):
    from proton.examples.matmul import matmul

    name, read = profile_path
    x = torch.randn(4096, device="cuda")
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # compiled and warm before the capture
        for _ in range(2):
            y = (x * 2).sin()
            matmul(a, a, c)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    proton.start(name, hook="triton")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with proton.scope("captured_region"):
            y = (x * 2).sin()
            matmul(a, a, c)  # launch_metadata: flops16 and bytes, given once, at the capture
    with proton.scope("graph_replay"):
        for _ in range(4):
            graph.replay()
    proton.finalize()
    root, _ = read()
    region = find(root, "graph_replay", "<captured_at>", "captured_region")
    assert total(region, "count") == 4 * 3
    op = find(region, "matmul_256x256x256")
    assert op["metrics"]["count"] == 4 and op["metrics"]["flops16"] == 4 * 2 * 256 ** 3
    # nothing ran where the capture was made: its kernels ran (and count) in the replays
    outside = [c for c in root["children"] if c["frame"]["name"] == "captured_region"]
    assert all(total(c, "count") == 0 for c in outside)
    assert "no kernel record" not in capfd.readouterr().err  # captured launches: not waited for


def test_gpu_tensor_metrics_need_no_sync_even_inside_a_graph_capture(profile_path):
    name, read = profile_path
    x = torch.ones(4, device="cuda")
    proton.start(name)
    for _ in range(2):
        with proton.scope("eager", {"v": x * 2, "s": x.sum(), "tile (pty)": x[:1] * 7}):
            pass
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 3
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # .item() here would raise: a capture may not synchronise
        with proton.scope("captured", {"s": (x * 3).sum()}):
            y = x * 3
    graph.replay()
    torch.cuda.synchronize()
    proton.finalize()
    root, _ = read()
    eager = find(root, "eager")["metrics"]
    assert eager["v"] == [4.0] * 4 and eager["s"] == 8.0 and eager["tile"] == 7.0
    # counted at the replay (launched outside any scope), as Triton 3.9 counts it
    assert find(root, "<captured_at>", "captured")["metrics"]["s"] == 12.0
    assert y.sum().item() == 12.0


SCRIPT = """
import sys, torch, proton
x = torch.randn(1000, device="cuda")
sid = proton.start("ignored")
with proton.scope("work"):
    y = x * 2
    torch.cuda.synchronize()
    if sys.argv[1] == "raise":
        raise RuntimeError("boom")
    sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("arg,status", [("raise", 1), ("3", 3), ("0", 0)])
def test_proton_command_writes_profile_when_script_fails(tmp_path, arg, status):
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    run = subprocess.run([sys.executable, "-m", "proton", "-n", "cli", str(script), arg],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == status, run.stderr
    assert not (tmp_path / "ignored.hatchet").exists()
    root, _ = load(tmp_path / "cli.hatchet")
    assert total(find(root, "work"), "count") == 1
    if arg == "raise":
        assert "RuntimeError: boom" in run.stderr


def test_another_cupti_profiler_gives_clear_error(tmp_path):
    code = (
        "import torch, proton\n"
        "x = torch.randn(10, device='cuda')\n"
        "with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):\n"
        "    x * 2\n"
        "    try:\n"
        "        proton.start('p')\n"
        "    except proton.ProfilerConflictError as e:\n"
        "        print('CONFLICT', e)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert "CONFLICT another profiler" in run.stdout, run.stdout + run.stderr
    assert "Traceback" not in run.stderr


def _profile_add_in_subprocess(tmp_path, module: str, name: str) -> str:
    code = (
        f"import torch, triton, triton.language as tl, {module} as prof\n"
        "@triton.jit\n"
        "def add_kernel(x, y, out, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(out + offs, tl.load(x + offs) + tl.load(y + offs))\n"
        "x = torch.randn(4096, device='cuda'); out = torch.empty_like(x)\n"
        f"prof.start({name!r})\n"
        "with prof.scope('outer'):\n"
        "    for _ in range(7):\n"
        "        add_kernel[(4,)](x, x, out, 4096, BLOCK=1024)\n"
        "prof.finalize()\n"
    )
    script = tmp_path / f"{name}.py"  # @triton.jit needs its source in a file
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return str(tmp_path / f"{name}.hatchet")


def test_triton_viewer_reads_our_file(tmp_path):
    path = _profile_add_in_subprocess(tmp_path, "proton", "ours")
    run = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m", "count", path],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "add_kernel" in run.stdout and "outer" in run.stdout
    (outer,) = [line for line in run.stdout.splitlines() if line.endswith(" outer")]
    assert "7.000" in outer, run.stdout


def test_our_viewer_reads_triton_file_with_same_numbers(tmp_path):
    from proton.viewer.derive import derive
    from proton.viewer.reader import load as load_profile

    path = _profile_add_in_subprocess(tmp_path, "triton.profiler", "theirs")
    prof = load_profile(path)
    counts = derive(prof, "count").values
    names = prof.gf.dataframe["name"]
    by_name = {names[node]: counts[node] for node in counts.index}
    assert by_name["outer"] == 7 and by_name["add_kernel"] == 7
    raw, _ = load(path)
    time_ms = derive(prof, "time/ms").values
    assert time_ms.iloc[0] == pytest.approx(find(raw, "outer", "add_kernel")["metrics"]["time (ns)"] / 1e6)


@pytest.mark.parametrize("native", ["1", "0"])
def test_autograd_backward_kernels_land_under_the_backward_scope(profile_path, monkeypatch,
                                                                 native):
    """With the C helper (1) the autograd thread's launches are logged under the main
    thread's scope and joined in C, none left to Python; without it (0) Python places them
    from the main thread's timeline: the same tree."""
    monkeypatch.setenv("PROTON_NATIVE", native)
    from proton.runtime.profiler import profiler

    name, read = profile_path
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU()).cuda()
    x = torch.randn(64, 512, device="cuda")
    model(x).sum().backward()  # warm up
    torch.cuda.synchronize()
    proton.start(name)
    for _ in range(2):
        with proton.scope("forward"):
            loss = model(x).square().mean()
        with proton.scope("backward"):
            loss.backward()  # runs on PyTorch's autograd thread, which has no scope
    collector = profiler.collector
    proton.finalize()
    root, _ = read()
    assert sorted(c["frame"]["name"] for c in root["children"]) == ["backward", "forward"]
    assert total(find(root, "backward"), "count") >= 2 * 3  # GEMMs for weights and input, GELU'
    in_python = collector.attributor.launches
    assert in_python == 0 if native == "1" else in_python == collector.launches > 0


def test_autograd_launches_go_under_the_scope_the_session_started_in(profile_path):
    """proton.start inside an open scope: the autograd thread's launches go under that scope
    from the start, not to the root until the main thread's scope next changes."""
    name, read = profile_path
    model = torch.nn.Linear(256, 256).cuda()
    x = torch.randn(32, 256, device="cuda")
    model(x).sum().backward()  # warm up
    torch.cuda.synchronize()
    loss = model(x).square().mean()
    with proton.scope("step"):
        proton.start(name)
        loss.backward()  # on PyTorch's autograd thread
        torch.cuda.synchronize()
    proton.finalize()
    root, _ = read()
    assert [c["frame"]["name"] for c in root["children"]] == ["step"]
    assert total(find(root, "step"), "count") >= 2  # the weight and bias gradients at least


def _flops_metadata(grid, metadata, args):
    n = args["n"]
    return {"name": f"add_{n}", "flops32": n, "bytes": 12 * n, "launches": 1}


@triton.jit(launch_metadata=_flops_metadata)
def add_md_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def test_triton_hook_names_ops_and_adds_launch_metadata(profile_path, xy):
    from proton.viewer.derive import derive
    from proton.viewer.reader import load as load_profile

    name, read = profile_path
    # three distinct 256 MiB arrays: the 12 bytes an element the metadata claims all move
    # through DRAM (1M elements of one array stay in the L2, past DRAM's peak, and the viewer
    # leaves a rate past the peak blank)
    x = torch.randn(1 << 26, device="cuda")
    y = torch.randn_like(x)
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 1024),)
    add_md_kernel[grid](x, y, out, n, BLOCK=1024)  # compile first
    add(x, y)
    proton.start(name, hook="triton")
    with proton.scope("ops"):
        for _ in range(10):
            add_md_kernel[grid](x, y, out, n, BLOCK=1024)
        add(x, y)  # a Triton kernel without launch_metadata keeps its own name
        torch.relu(x)  # not a Triton kernel: untouched
    proton.finalize()
    root, _ = read()
    op = find(root, "ops", f"add_{n}")
    assert op["metrics"]["count"] == 10 and op["children"] == []
    assert op["metrics"]["flops32"] == 10 * n and op["metrics"]["bytes"] == 120 * n
    assert op["metrics"]["launches"] == 10
    assert find(root, "ops", "add_kernel")["metrics"]["count"] == 1
    assert total(find(root, "ops"), "count") == 12
    assert root["metrics"]["flops32"] == 0  # inclusive for the viewer
    prof = load_profile(name + ".hatchet")
    gbps = derive(prof, "gbyte/s").values
    node = [k for k in gbps.index if k.frame["name"] == f"add_{n}"][0]
    assert gbps[node] == pytest.approx(120 * n / (op["metrics"]["time (ns)"]))


def test_triton_hook_chains_with_a_users_hook(profile_path, xy):
    from triton import knobs

    from proton.hooks import triton_hook

    name, read = profile_path
    seen = []
    user_hook = lambda metadata: seen.append(metadata.data["name"])  # noqa: E731
    knobs.runtime.launch_enter_hook.add(user_hook)
    try:
        proton.start(name, hook="triton")
        for _ in range(3):
            add(*xy)
        proton.finalize()
        add(*xy)
        assert seen == ["add_kernel"] * 4
        assert triton_hook._enter not in knobs.runtime.launch_enter_hook.calls
        assert user_hook in knobs.runtime.launch_enter_hook.calls
    finally:
        knobs.runtime.launch_enter_hook.remove(user_hook)
    root, _ = read()
    assert find(root, "add_kernel")["metrics"]["count"] == 3


def test_trace_holds_every_launch_in_order(tmp_path, xy, monkeypatch):
    """Triton 3.6's layout (tests/test_gpu_trace.py: Triton 3.9's)."""
    monkeypatch.setattr("proton.triton_version.after_3_6", lambda: False)
    sid = proton.start(str(tmp_path / "tr"), data="trace")
    with proton.scope("s"):
        for _ in range(5):
            add(*xy)
    proton.finalize(sid)
    doc = load(tmp_path / "tr.chrome_trace")
    events = doc["traceEvents"]  # the kernels alone: the pid names the process
    assert {(e["ph"], e["pid"]) for e in events} == {("X", "GPU 0")}
    assert [e["args"]["call_stack"] for e in events] == [["ROOT", "s", "add_kernel"]] * 5
    assert events[0]["ts"] == 0.0 and doc["otherData"]["t0_ns"] > 0  # CUPTI's clock at 0
    assert all(b["ts"] >= a["ts"] + a["dur"] for a, b in zip(events, events[1:]))


def test_sessions_started_and_ended_inside_open_scopes(tmp_path, xy):
    with proton.scope("outer"):
        with proton.scope("inner"):
            proton.start(str(tmp_path / "a"))  # CUPTI starts with two scopes open
            add(*xy)
        add(*xy)  # back in "outer", which opened before collecting began
        proton.finalize()  # and "outer" stays open past the end of the session
    proton.start(str(tmp_path / "b"))
    add(*xy)
    proton.finalize()
    a, _ = load(tmp_path / "a.hatchet")
    assert find(a, "outer", "inner", "add_kernel")["metrics"]["count"] == 1
    assert find(a, "outer", "add_kernel")["metrics"]["count"] == 1
    b, _ = load(tmp_path / "b.hatchet")
    assert [c["frame"]["name"] for c in b["children"]] == ["add_kernel"]  # not under "outer"


def test_exception_in_a_scope_leaves_attribution_intact(profile_path, xy):
    name, read = profile_path
    proton.start(name)
    with pytest.raises(RuntimeError):
        with proton.scope("failing"):
            add(*xy)
            raise RuntimeError("x")
    add(*xy)
    proton.finalize()
    root, _ = read()
    assert find(root, "failing", "add_kernel")["metrics"]["count"] == 1
    assert find(root, "add_kernel")["metrics"]["count"] == 1


NVTX_SCRIPT = """
import torch, proton
x = torch.randn(1 << 16, device="cuda")
torch.cuda.synchronize()
proton.start("nvtx")
torch.cuda.nvtx.range_push("train_step")
with proton.scope("forward"):
    torch.cuda.nvtx.range_push("attention")
    y = (x * 2).sin()
    torch.cuda.nvtx.range_pop()
torch.cuda.nvtx.range_pop()
with torch.cuda.nvtx.range("backward"):
    z = x.cos()
torch.cuda.synchronize()
proton.finalize()
"""


@pytest.mark.parametrize("enable", ["1", "0"])
def test_nvtx_ranges_become_scopes_unless_turned_off(tmp_path, enable):
    (tmp_path / "main.py").write_text(NVTX_SCRIPT)
    env = {**os.environ, "TRITON_ENABLE_NVTX": enable}
    env.pop("NVTX_INJECTION64_PATH", None)
    run = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    root, _ = load(tmp_path / "nvtx.hatchet")
    if enable == "1":
        assert total(find(root, "train_step", "forward", "attention"), "count") == 2
        assert total(find(root, "backward"), "count") == 1
    else:
        assert total(find(root, "forward"), "count") == 2
        assert not any(c["frame"]["name"] in ("train_step", "backward")
                       for c in root["children"])
