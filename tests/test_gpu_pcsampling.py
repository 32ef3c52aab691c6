"""Instruction sampling on a GPU (mode="pcsampling"): samples, stall reasons and source lines
under the right kernels and call paths. Run with `pytest -m gpu`."""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys

import pytest

from conftest import find, load, total

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import proton  # noqa: E402
import kernels as kernel_module  # noqa: E402
from kernels import hot_kernel  # noqa: E402

LINE = re.compile(r"(.+):(\d+)@(.+)$")
HOT_LINE = next(i for i, text in enumerate(inspect.getsource(kernel_module).splitlines(), 1)
                if text.rstrip().endswith("# HOT"))


def hot(x, iters=2048):
    hot_kernel[(x.numel() // 1024,)](x, x.numel(), ITERS=iters, BLOCK=1024)


@pytest.fixture
def x():
    assert torch.cuda.is_available()
    return torch.zeros(1 << 20, device="cuda")


def kernel_nodes(node: dict, name: str) -> list[dict]:
    out = []
    for child in node["children"]:
        if child["frame"]["name"] == name:
            out.append(child)
        out.extend(kernel_nodes(child, name))
    return out


def lines(kernel: dict) -> dict[tuple[str, int], dict]:
    out = {}
    for child in kernel["children"]:
        m = LINE.match(child["frame"]["name"])
        assert m, f"unexpected child {child['frame']['name']!r} under a kernel"
        out[m[1], int(m[2])] = child["metrics"]
    return out


def pc_nodes(node: dict):
    if "num_samples" in node["metrics"] and node["frame"]["name"] != "ROOT":
        yield node
    for child in node["children"]:
        yield from pc_nodes(child)


def test_hot_line_gets_most_samples_and_stalls_add_up(profile_path, x):
    name, read = profile_path
    proton.start(name, mode="pcsampling")
    for _ in range(5):
        hot(x)  # compiled after start: its module load is seen
    proton.finalize()
    root, _ = read()
    (kernel,) = kernel_nodes(root, "hot_kernel")
    assert kernel["metrics"]["count"] == 5
    by_line = lines(kernel)
    samples = total(kernel, "num_samples")
    assert samples > 1000
    hot_samples = by_line[kernel_module.__file__, HOT_LINE]["num_samples"]
    assert hot_samples / samples > 0.5, by_line
    assert "no_lines" not in kernel["frame"]
    nodes = list(pc_nodes(root))
    assert len(nodes) == len(by_line) + ("num_samples" in kernel["metrics"])
    for node in nodes:  # each node's stall metrics sum to its stalled samples
        m = node["metrics"]
        stalls = sum(v for k, v in m.items() if k.startswith("stalled_"))
        assert stalls == m["num_stalled_samples"] <= m["num_samples"], node["frame"]
    assert root["metrics"]["num_samples"] == 0 and "stalled_long_scoreboard" in root["metrics"]


def run_script(tmp_path, body: str, *proton_args: str) -> subprocess.CompletedProcess:
    """body in a fresh process (the kernels module importable), optionally under `proton`."""
    script = tmp_path / "work.py"
    script.write_text(f"import sys\nsys.path.insert(0, {os.path.dirname(kernel_module.__file__)!r})\n"
                      + inspect.cleandoc(body))
    cmd = [sys.executable, "-P", *(["-m", "proton", *proton_args] if proton_args else []),
           str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_kernel_compiled_before_start_gets_lines(tmp_path):
    name = tmp_path / "before"
    run_script(tmp_path, f"""
        import torch, proton
        from kernels import hot_kernel
        x = torch.zeros(1 << 20, device="cuda")
        hot_kernel[(1024,)](x, x.numel(), ITERS=1024, BLOCK=1024)  # compiled, loaded, run
        torch.cuda.synchronize()
        proton.start({str(name)!r}, mode="pcsampling")
        for _ in range(5):
            hot_kernel[(1024,)](x, x.numel(), ITERS=1024, BLOCK=1024)
        proton.finalize()
        """)
    root, _ = load(f"{name}.hatchet")
    (kernel,) = kernel_nodes(root, "hot_kernel")
    by_line = lines(kernel)
    assert (kernel_module.__file__, HOT_LINE) in by_line
    on_lines = sum(m["num_samples"] for m in by_line.values())
    assert on_lines > 1000 and on_lines > 0.9 * total(kernel, "num_samples")


def sampled(root: dict, fragment: str) -> int:
    """Samples on the kernel nodes whose name holds `fragment` (lines included)."""
    out = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if fragment in node["frame"]["name"] and "count" in node["metrics"]:
            out += total(node, "num_samples")
        else:
            stack.extend(node["children"])
    return out


def test_sampling_after_a_session_that_ended_under_launches_samples_every_kernel(tmp_path):
    """A capture ends on the capture thread while the job launches on: CUPTI, only
    unsubscribed, then counted a later sampling session's samples of modules loaded before
    as non-user (issue 45: no torch kernel got one)."""
    name = tmp_path / "later"
    proc = run_script(tmp_path, f"""
        import threading, time, torch, proton
        from kernels import hot_kernel
        x = torch.zeros(1 << 20, device="cuda")
        a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
        def work():
            for _ in range(3):
                hot_kernel[(1024,)](x, x.numel(), ITERS=512, BLOCK=1024)
                (a @ a).relu_()
                x.mul_(0.5).add_(1)
            torch.cuda.synchronize()
        work()  # every module loaded before any session
        stop = threading.Event()
        def launch():
            while not stop.is_set():
                (a @ a).relu_()
                x.mul_(0.5).add_(1)
                torch.cuda.synchronize()
        proton.start({str(tmp_path / "earlier")!r})
        thread = threading.Thread(target=launch)
        thread.start()
        time.sleep(0.5)
        proton.finalize()  # while the thread launches
        time.sleep(0.3)
        stop.set()
        thread.join()
        proton.start({str(name)!r}, mode="pcsampling")
        work()
        proton.finalize()
        """)
    root, _ = load(f"{name}.hatchet")
    for kernel in ("hot_kernel", "elementwise_kernel", "nvjet"):
        assert sampled(root, kernel) > 100, (kernel, proc.stderr)
    assert "non-user" not in proc.stderr, proc.stderr


def test_kernel_loaded_between_sessions_gets_lines(tmp_path):
    name = tmp_path / "between"
    run_script(tmp_path, f"""
        import torch, proton
        from kernels import hot_kernel
        x = torch.zeros(1 << 20, device="cuda")
        proton.start({str(tmp_path / "first")!r})
        x.add_(1)
        proton.finalize()
        hot_kernel[(1024,)](x, x.numel(), ITERS=300, BLOCK=1024)  # loaded between sessions
        torch.cuda.synchronize()
        proton.start({str(name)!r}, mode="pcsampling")
        for _ in range(5):
            hot_kernel[(1024,)](x, x.numel(), ITERS=300, BLOCK=1024)
        proton.finalize()
        """)
    (kernel,) = kernel_nodes(load(f"{name}.hatchet")[0], "hot_kernel")
    assert (kernel_module.__file__, HOT_LINE) in lines(kernel)


def test_torch_compile_kernels_compiled_before_the_session_get_lines(tmp_path):
    """torch.compile's static launcher loads Triton's cubin itself (no Triton load hook, no
    CompiledKernel kept): the cubin is found in Triton's cache by the kernel's name."""
    name = tmp_path / "compiled"
    run_script(tmp_path, f"""
        import torch, proton
        @torch.compile
        def f(x, y):
            for _ in range(8):
                x = torch.sin(x) * y + torch.cos(y)
            return x
        x = torch.randn(1 << 24, device="cuda")
        f(x, x); torch.cuda.synchronize()  # compiled and loaded before the session
        proton.start({str(name)!r}, mode="pcsampling")
        for _ in range(5):
            f(x, x)
        proton.finalize()
        """)
    root, _ = load(f"{name}.hatchet")
    compiled = [n for n in pc_nodes(root) if "triton_" in n["frame"]["name"]]
    assert compiled, [n["frame"] for n in pc_nodes(root)]
    on_lines = [n for n in compiled if LINE.match(n["frame"]["name"])]
    assert on_lines, [n["frame"] for n in compiled]
    assert sum(n["metrics"]["num_samples"] for n in on_lines) > \
        0.9 * sum(n["metrics"]["num_samples"] for n in compiled)


@pytest.mark.parametrize("mode", ["pcsampling", "pcsampling:serialize=1"])
def test_same_kernel_under_two_scopes(profile_path, x, mode):
    name, read = profile_path
    proton.start(name, mode=mode)  # the kernel loads in the session (see the test above)
    with proton.scope("a"):
        for _ in range(3):
            hot(x, iters=512)
    with proton.scope("b"):
        hot(x, iters=512)
    proton.finalize()
    root, _ = read()
    a = find(root, "a", "hot_kernel")
    b = find(root, "b", "hot_kernel")
    assert (a["metrics"]["count"], b["metrics"]["count"]) == (3, 1)
    sa, sb = total(a, "num_samples"), total(b, "num_samples")
    assert sa > 0 and sb > 0 and lines(a) and lines(b)
    # a ran three launches to b's one: about three times the samples (split by GPU time in
    # continuous mode, counted per launch in exact mode)
    assert 2.0 < sa / sb < 4.5, (sa, sb)
    assert (kernel_module.__file__, HOT_LINE) in lines(a)


def test_cuda_kernel_without_line_info_keeps_totals_and_says_why(profile_path):
    name, read = profile_path
    a = torch.randn(4096, 4096, device="cuda")
    proton.start(name, mode="pcsampling")
    for _ in range(5):
        a @ a
    proton.finalize()
    root, _ = read()
    sampled = [n for n in pc_nodes(root)]
    assert sampled
    for node in sampled:
        if not LINE.match(node["frame"]["name"]):
            assert node["frame"].get("no_lines"), node["frame"]
            assert node["metrics"]["count"] >= 1


def test_cli_mode_and_interval(tmp_path):
    counts = {}
    for interval in (10, 13):
        out = tmp_path / f"p{interval}"
        run_script(tmp_path, """
            import torch
            from kernels import hot_kernel
            x = torch.zeros(1 << 20, device="cuda")
            for _ in range(3):
                hot_kernel[(1024,)](x, x.numel(), ITERS=1024, BLOCK=1024)
            """, "-n", str(out), "-m", f"pcsampling:interval={interval}")
        root, _ = load(f"{out}.hatchet")
        counts[interval] = total(root, "num_samples")
    # 2**3 times fewer cycles between samples: about 8 times the samples (4..16 allowed)
    assert 4 < counts[10] / counts[13] < 16, counts
    view = subprocess.run([sys.executable, "-P", "-c", "from proton.viewer.cli import main; main()",
                           "--source", "hot_kernel", f"{tmp_path / 'p10'}.hatchet"],
                          capture_output=True, text=True)
    assert view.returncode == 0, view.stderr
    assert "v * 0.9999 + 0.5" in view.stdout


def test_a_second_sampling_session_samples_beside_the_first(profile_path, x):
    """As in Triton's Proton, two mode="pcsampling" sessions coexist on one sampler: each
    profile gets the samples of the kernels run while it was live; another mode beside them
    is refused."""
    name, read = profile_path
    first = proton.start(name, mode="pcsampling")
    hot(x, iters=100)
    second = proton.start(name + "2", mode="pcsampling")
    hot(x, iters=100)
    with pytest.raises(proton.ProtonError, match="different mode"):
        proton.start(name + "3")
    proton.finalize(second)
    proton.finalize(first)
    for path in (name + ".hatchet", name + "2.hatchet"):
        (kernel,) = kernel_nodes(load(path)[0], "hot_kernel")
        assert total(kernel, "num_samples") > 0, path
    (one,) = kernel_nodes(load(name + ".hatchet")[0], "hot_kernel")
    (two,) = kernel_nodes(load(name + "2.hatchet")[0], "hot_kernel")
    assert one["metrics"]["count"] == 2 * two["metrics"]["count"]


def test_sampling_that_cannot_run_leaves_the_time_profile(profile_path, x, capfd, monkeypatch):
    from proton import options

    name, read = profile_path
    # CUPTI itself refuses this period (its range is 5..31; parse_mode stops users before it):
    # a real CUPTI error on the path a missing permission or a busy GPU takes
    monkeypatch.setattr(options, "INTERVALS", range(3, 32))
    proton.start(name, mode="pcsampling:interval=3")
    hot(x, iters=100)
    proton.finalize()
    assert "PC sampling is off" in capfd.readouterr().err
    root, _ = read()
    (kernel,) = kernel_nodes(root, "hot_kernel")
    assert kernel["metrics"]["count"] == 1 and kernel["metrics"]["time (ns)"] > 0
    assert "num_samples" not in kernel["metrics"] and not kernel["children"]
