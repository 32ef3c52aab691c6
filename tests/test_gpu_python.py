"""context="python" on the GPU: each kernel under the Python call path that launched it.
Run with `pytest -m gpu`."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest

from conftest import find, load, run_threads, total

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

import proton  # noqa: E402
from kernels import add_kernel  # noqa: E402
from proton.context.python import own_files  # noqa: E402
from proton.format import LIBRARY_FILE, PYTHON_FRAME  # noqa: E402

HERE = os.path.abspath(__file__)


def line_of(marker: str) -> int:
    with open(HERE) as f:
        for number, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# {marker}"):
                return number
    raise AssertionError(marker)


def here(marker: str, function: str) -> str:
    """The frame name of this file's line marked `marker`, in `function`."""
    return f"{HERE}:{line_of(marker)}@{function}"


def paths_to(root: dict, leaf: str) -> list[tuple[list[str], dict]]:
    """(names from the root's child down, node) of every node named `leaf`."""
    out = []

    def visit(node, trail):
        for child in node["children"]:
            names = trail + [child["frame"]["name"]]
            if names[-1] == leaf:
                out.append((names, child))
            visit(child, names)

    visit(root, [])
    return out


def only_path(root: dict, leaf: str) -> tuple[list[str], dict]:
    found = paths_to(root, leaf)
    assert len(found) == 1, [p for p, _ in found]
    return found[0]


def between(names: list[str], first: str, last: str) -> list[str]:
    return names[names.index(first) + 1:names.index(last)]


def library_only(names: list[str]) -> bool:
    """Every name is a python frame of an installed package or the standard library."""
    return all((m := PYTHON_FRAME.match(n)) and LIBRARY_FILE.search(m["file"]) for n in names)


def add(x):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, x, out, x.numel(), BLOCK=1024)  # L-add
    return out


@pytest.fixture(scope="module")
def x():
    x = torch.randn(1 << 16, device="cuda")
    add(x)  # compile outside the profiles
    torch.cuda.synchronize()
    return x


def inner(x, a):
    for _ in range(5):
        add(x)  # L-inner-add
    return a @ a  # L-inner-mm


def outer(x, a):
    return inner(x, a)  # L-outer


def test_nested_functions_torch_and_triton_kernels(profile_path, x, capfd):
    name, read = profile_path
    a = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    proton.start(name, context="python")
    outer(x, a)  # L-test-nested
    proton.finalize()
    root, _ = read()
    test = here("L-test-nested", "test_nested_functions_torch_and_triton_kernels")
    names, node = only_path(root, "add_kernel")
    assert node["metrics"]["count"] == 5
    assert names[names.index(test):names.index(test) + 4] == [
        test, here("L-outer", "outer"), here("L-inner-add", "inner"), here("L-add", "add")]
    machinery = between(names, here("L-add", "add"), "add_kernel")
    assert machinery and library_only(machinery), machinery  # Triton's launch path
    mm = find(root, *names[:names.index(test) + 2], here("L-inner-mm", "inner"))["children"]
    assert mm and all(c["metrics"]["device_type"] == "CUDA" and not c["children"] for c in mm)
    assert sum(total(c, "count") for c in mm) >= 1  # torch's GEMM kernels, right under the line
    # no frame of the profiler; every launch registered once and matched by its kernels (a
    # launch registered twice, by the runtime call and the driver call inside it, would wait
    # for a kernel that never comes, and finalize would say so)
    files = {PYTHON_FRAME.match(n)["file"] for n, _ in _all_names(root) if PYTHON_FRAME.match(n)}
    assert not files & own_files()
    assert total(root, "count") == 5 + sum(total(c, "count") for c in mm)
    assert "no kernel record" not in capfd.readouterr().err


def _all_names(root):
    out = []

    def visit(node):
        for c in node["children"]:
            out.append((c["frame"]["name"], c))
            visit(c)

    visit(root)
    return out


def scoped_step(a):
    with proton.scope("step"):  # L-step
        b = a @ a
        with proton.scope("softmax"):
            return torch.softmax(b, dim=-1)


def test_a_scope_inside_a_call_sits_at_its_place_in_the_path(profile_path):
    name, read = profile_path
    a = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    proton.start(name, context="python")
    for _ in range(3):
        with proton.cpu_timed_scope("iteration"):  # L-iteration
            scoped_step(a)
    proton.finalize()
    root, _ = read()
    test = here("L-iteration", "test_a_scope_inside_a_call_sits_at_its_place_in_the_path")
    # a frame that opened a scope stays at the `with` line, so the scope's own metrics (here
    # its CPU time) sit on its node; its kernels go under the lines that launched them
    names, step = only_kernel_parent(root, "step")
    assert names[-4:] == [test, "iteration", here("L-step", "scoped_step"), "step"]
    iteration = find(root, *names[:-2])
    assert iteration["metrics"]["cpu_time (ns)"] > 0
    softmax = find(step, "softmax")
    assert total(softmax, "count") == 3
    assert total(step, "count") - total(softmax, "count") >= 3  # the GEMM
    assert total(root, "count") == total(step, "count")


def test_a_torch_op_right_inside_a_scope_sits_under_its_launch_line(profile_path):
    """torch.ones(...) straight from the `with` block's own code: the kernel's parent is the
    `file:line@function` of that line, inside the scope (as Triton's files have it)."""
    name, read = profile_path
    proton.start(name, context="python")
    with proton.scope("test"):  # L-ones-scope
        torch.ones((2, 2), device="cuda")  # L-ones
    proton.finalize()
    root, _ = read()
    test = "test_a_torch_op_right_inside_a_scope_sits_under_its_launch_line"
    kernels = [(p, n) for p, n in paths_to(root, "test") if total(n, "count")]
    assert len(kernels) == 1
    (path, scope), = kernels
    assert path[-2:] == [here("L-ones-scope", test), "test"]
    line, = scope["children"]
    assert line["frame"]["name"] == here("L-ones", test)
    kernel, = line["children"]
    assert "elementwise_kernel" in kernel["frame"]["name"] and kernel["metrics"]["count"] == 1


def only_kernel_parent(root, frame_name):
    """(path, node) of the one node named `frame_name` that has kernels below it."""
    found = [(p, n) for p, n in paths_to(root, frame_name) if total(n, "count")]
    assert len(found) == 1, [p for p, _ in found]
    return found[0]


def worker_a(x, n):
    torch.cuda.set_device(0)
    for _ in range(n):
        add(x)  # L-worker-a


def worker_b(x, n):
    torch.cuda.set_device(0)
    with proton.scope("b-scope"):  # L-worker-b
        for _ in range(n):
            add(x)


def test_two_threads_each_under_its_own_path(profile_path, x):
    name, read = profile_path
    proton.start(name, context="python")
    with proton.scope("main-only"):
        threads = [threading.Thread(target=worker_a, args=(x, 30)),
                   threading.Thread(target=worker_b, args=(x, 40))]
        run_threads(threads)
    proton.finalize()
    root, _ = read()
    a_names, a = only_kernel_parent(root, here("L-worker-a", "worker_a"))
    b_names, b = only_kernel_parent(root, "b-scope")
    assert total(a, "count") == 30 and total(b, "count") == 40
    for names in (a_names, b_names):
        assert names[0].endswith("@_bootstrap") and "main-only" not in names
    assert b_names[-2:] == [here("L-worker-b", "worker_b"), "b-scope"]
    assert total(root, "count") == 70


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 256)

    def forward(self, x):
        return torch.relu(self.fc(x))  # L-forward


def test_a_torch_modules_forward_and_its_backward(profile_path):
    name, read = profile_path
    net = Net().cuda()
    x = torch.randn(64, 256, device="cuda")
    net(x).sum().backward()
    torch.cuda.synchronize()
    proton.start(name, context="python")
    for _ in range(2):
        loss = net(x).sum()  # L-test-net
        with proton.scope("backward"):  # L-test-backward
            loss.backward()
    proton.finalize()
    root, _ = read()
    test = "test_a_torch_modules_forward_and_its_backward"
    fwd_names, fwd = only_kernel_parent(root, here("L-forward", "forward"))
    call = here("L-test-net", test)
    assert call in fwd_names
    assert library_only(between(fwd_names, call, here("L-forward", "forward")))  # nn.Module's
    assert total(fwd, "count") >= 2 * 2  # the GEMM (+bias) and the relu, twice
    # backward runs on PyTorch's autograd thread, with no Python frames: its kernels go under
    # the main thread's innermost scope, at its place in the main thread's path
    bwd_names, bwd = only_kernel_parent(root, "backward")
    assert bwd_names[-2:] == [here("L-test-backward", test), "backward"]
    assert total(bwd, "count") >= 2 * 2
    assert total(root, "count") == total(find(root, *fwd_names[:fwd_names.index(call) + 1]),
                                         "count") + total(bwd, "count")


def test_triton_hook_names_ops_under_python_paths(profile_path, x):
    name, read = profile_path
    proton.start(name, context="python", hook="triton")
    for _ in range(4):
        add(x)  # L-test-hook
    proton.finalize()
    root, _ = read()
    names, node = only_path(root, "add_kernel")
    assert node["metrics"]["count"] == 4
    assert here("L-test-hook", "test_triton_hook_names_ops_under_python_paths") in names
    assert here("L-add", "add") in names


SCRIPT = """
import torch, proton

def step(x):
    return x * 2

x = torch.randn(1000, device="cuda")
with proton.scope("work"):
    step(x)
torch.cuda.synchronize()
"""


def test_proton_command_python_context_and_both_viewers(tmp_path):
    script = tmp_path / "main.py"
    script.write_text(SCRIPT)
    run = subprocess.run([sys.executable, "-m", "proton", "-c", "python", "-n", "cli",
                          str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    path = str(tmp_path / "cli.hatchet")
    root, _ = load(path)
    # the path starts at the script: no frame of the proton command, click or runpy above it
    assert [c["frame"]["name"] for c in root["children"]] == [f"{script}:7@<module>",
                                                              f"{script}:8@<module>"]
    assert total(find(root, f"{script}:7@<module>"), "count") == 1  # torch.randn
    names, node = only_kernel_parent(root, f"{script}:5@step")
    assert names == [f"{script}:8@<module>", "work", f"{script}:5@step"]
    assert total(node, "count") == 1
    for fmt, expected in (("function_line", "5@step"), ("file_function_line", "main.py:5@step"),
                          ("file_function", "main.py@step")):
        for viewer in (["-m", "proton.viewer.cli"], ["-m", "triton.profiler.viewer"]):
            shown = subprocess.run([sys.executable, *viewer, "-m", "count", "-f", fmt, path],
                                   capture_output=True, text=True, timeout=300, cwd=tmp_path)
            assert shown.returncode == 0, shown.stderr
            assert re.search(rf"\b{re.escape(expected)}\b", shown.stdout), (viewer, shown.stdout)
