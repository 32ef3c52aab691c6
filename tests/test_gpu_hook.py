"""hook="triton" on a GPU: launch_metadata metrics against CUDA events, configuration names for
autotuned variants and for kernels compiled before the session, include/exclude, torch.compile."""
from __future__ import annotations

import pytest

from conftest import find, kernels

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import proton  # noqa: E402
from proton.examples.matmul import event_timed, matmul  # noqa: E402


def test_matmul_tflops_in_the_viewer_matches_flops_over_cuda_event_time(profile_path):
    from proton.viewer.derive import derive
    from proton.viewer.reader import load

    name, read = profile_path
    size = 4096
    a, b = (torch.randn(size, size, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty_like(a)
    matmul(a, b, c)
    assert torch.allclose(c.float(), (a @ b).float(), atol=0.5, rtol=0.02)
    proton.start(name, hook="triton")
    with proton.scope("warmup"):
        for _ in range(3):
            matmul(a, b, c)
        # the ten launches queue behind this while the GPU sleeps: the events then time the
        # kernels back to back, not the host's launch latency (hook="triton" runs Python per launch)
        torch.cuda._sleep(50_000_000)
    with proton.scope("mm"):
        seconds = event_timed(lambda: matmul(a, b, c), 10)
    proton.finalize()
    expected = 10 * 2 * size**3 / seconds / 1e12
    op = find(read()[0], "mm", f"matmul_{size}x{size}x{size}")
    assert op["metrics"]["count"] == 10 and op["metrics"]["flops16"] == 10 * 2 * size**3
    prof = load(name + ".hatchet")
    tflops, util = derive(prof, "tflop16/s").values, derive(prof, "util").values
    node = next(n for n in tflops.index if n.frame["name"] == f"matmul_{size}x{size}x{size}"
                and n.parents[0].frame["name"] == "mm")
    assert tflops[node] == pytest.approx(expected, rel=0.05), (tflops[node], expected)
    assert 0.05 < util[node] <= 1.0  # a fair share of the GPU's fp16 peak, never above it


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def config_name(kernel, grid: int, **constexprs) -> str:
    md = kernel.metadata
    name = (f"add_kernel_<grid:{grid}x1x1>_<warps:{md.num_warps}>_<stages:{md.num_stages}>"
            f"_<shared:{md.shared}>")
    return name + "".join(f"_<{k}:{v}>" for k, v in constexprs.items())


def test_config_names_for_kernels_compiled_before_and_after_start(profile_path):
    from proton.compiler.kernels import kernels as table

    name, read = profile_path
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    before = add_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)  # loaded before the session
    torch.cuda.synchronize()
    proton.start(name, hook="triton:config=BLOCK")
    info = table.get(int(before.function))  # found in Triton's caches when the session started
    assert info is not None and info.constexprs == {"BLOCK": 1024}
    assert info.source_file == __file__ and info.cubin()[:4] == b"\x7fELF"
    with proton.scope("v"):
        for _ in range(3):
            add_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)
        after = add_kernel[(n // 256,)](x, x, out, n, BLOCK=256, num_warps=2)  # compiled now
    proton.finalize()
    v = find(read()[0], "v")
    assert find(v, config_name(before, n // 1024, BLOCK=1024))["metrics"]["count"] == 3
    assert find(v, config_name(after, n // 256, BLOCK=256))["metrics"]["count"] == 1
    assert "<warps:2>" in config_name(after, n // 256) and len(v["children"]) == 2


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2),
                          triton.Config({"BLOCK": 1024}, num_warps=4)], key=["n"])
@triton.jit
def add_tuned(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def test_autotuned_variants_separate_in_the_tree(profile_path):
    name, read = profile_path
    n = 1 << 20
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    proton.start(name, hook="triton:config=*")
    with proton.scope("tune"):  # the autotuner runs both configs here
        add_tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, x, out, n)
    proton.finalize()
    names = [k["frame"]["name"] for k in kernels(find(read()[0], "tune"))]
    small = [s for s in names if s.startswith("add_tuned_<grid:4096x1x1>_<warps:2>")]
    large = [s for s in names if s.startswith("add_tuned_<grid:1024x1x1>_<warps:4>")]
    assert len(small) == 1 and small[0].endswith("_<BLOCK:256>"), names
    assert len(large) == 1 and large[0].endswith("_<BLOCK:1024>"), names


_metadata_calls = []


def _counting_metadata(grid, metadata, args):
    _metadata_calls.append(1)
    return {"flops32": args["n"]}


@triton.jit(launch_metadata=_counting_metadata)
def add_md_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


def _summing_metadata(grid, metadata, args):
    x = args["x"]
    return {"bytes": 8 * args["n"], "nonzero": int((x != 0).sum().item())}  # launches kernels


@triton.jit(launch_metadata=_summing_metadata)
def add_sum_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@pytest.mark.parametrize("newer", [False, True], ids=["triton3.6", "triton3.9"])
def test_kernels_a_launch_metadata_launches_sit_right_under_its_state(profile_path, monkeypatch,
                                                                      newer):
    """As the installed Triton's hook: launch_metadata runs under the state
    __proton_launch_metadata (then, after Triton 3.6, the launched kernel's name: Triton 3.9's
    test_hook_launch_context), so the kernels it launches (a reduction here) sit right under
    it, apart from the op's."""
    monkeypatch.setattr("proton.triton_version.after_3_6", lambda: newer)
    name, read = profile_path
    n = 1 << 16
    x = torch.ones(n, device="cuda")
    out = torch.empty_like(x)
    add_sum_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    proton.start(name, hook="triton")
    with proton.scope("f"):
        for _ in range(3):
            add_sum_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)
    proton.finalize()
    root = read()[0]
    op = find(root, "f", "add_sum_kernel")
    assert op["metrics"]["count"] == 3 and op["metrics"]["nonzero"] == 3 * n
    state = find(root, "f", "__proton_launch_metadata", *["add_sum_kernel"] * newer)
    assert state["children"] and all("count" in k["metrics"] for k in state["children"]), state
    assert sum(k["metrics"].get("count", 0) for k in state["children"]) >= 3, state


@pytest.mark.parametrize("spec,named", [("triton:include=md", True),
                                        ("triton:exclude=md", False)])
def test_include_exclude_choose_the_kernels_the_hook_names(profile_path, spec, named):
    name, read = profile_path
    n = 1 << 16
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    add_md_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)
    add_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    _metadata_calls.clear()
    proton.start(name, hook=spec)
    with proton.scope("f"):
        for _ in range(2):
            add_md_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)
        add_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)
    proton.finalize()
    node = find(read()[0], "f", "add_md_kernel")
    assert node["metrics"]["count"] == 2
    assert node["metrics"].get("flops32") == (2 * n if named else None)
    assert len(_metadata_calls) == (2 if named else 0)  # an excluded kernel's is never run
    assert find(read()[0], "f", "add_kernel")["metrics"]["count"] == 1


def test_torch_compile_kernels_land_under_the_users_scopes(profile_path):
    name, read = profile_path
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 256), torch.nn.LayerNorm(256)).cuda()
    x = torch.randn(64, 256, device="cuda")
    proton.start(name, hook="triton")  # before compiling: inductor's launchers call the hook
    compiled = torch.compile(model)
    with proton.scope("first"):
        compiled(x)
    with proton.scope("steps"):
        for _ in range(5):
            compiled(x)
    proton.finalize()
    steps = kernels(find(read()[0], "steps"))
    generated = [k for k in steps if k["frame"]["name"].startswith("triton_")]
    assert generated, [k["frame"]["name"] for k in steps]
    assert all(k["metrics"]["count"] == 5 for k in generated)
    assert sum(k["metrics"]["count"] for k in steps) >= 5 * (len(generated) + 2)  # + 2 GEMMs


def test_a_triton_launch_that_raises_leaves_no_op_behind(profile_path):
    """A launch that raises after the hook's enter (a grid the driver refuses: 65,536 blocks in
    y, one over the limit) never reaches its exit: the kernels launched after its scope closed
    must not land under that scope. (CPU tensors do not raise where the GPU can reach host
    memory (HMM, H200 with driver 580): the kernel ran and faulted, and the process's CUDA
    context with it, for every later test.)"""
    name, read = profile_path
    n = 1 << 16
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    add_kernel[(n // 1024,)](x, x, out, n, BLOCK=1024)
    proton.start(name, hook="triton")
    with proton.scope("failing"):
        with pytest.raises(Exception):
            add_kernel[(1, 65536)](x, x, out, n, BLOCK=1024)
    with proton.scope("after"):
        torch.relu(x)
    torch.relu(x)  # no scope: the root
    proton.finalize()
    root = read()[0]
    assert [k["frame"]["name"] for k in kernels(find(root, "after"))] and \
        len(kernels(find(root, "after"))) == 1
    failing = [c for c in root["children"] if c["frame"]["name"] == "failing"]
    assert not failing or not kernels(failing[0])
    assert sum(k["metrics"]["count"] for k in kernels(root)) == 2


class _TritonDouble(torch.autograd.Function):
    """y = 2x, its backward a Triton launch: PyTorch runs it on its autograd thread."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()  # sum()'s gradient is one element expanded (stride 0): the
        # kernel reads n elements from its pointer, past the end of that one (a fault)
        out = torch.empty_like(grad)
        n = grad.numel()
        add_kernel[(triton.cdiv(n, 1024),)](grad, grad, out, n, BLOCK=1024)
        return out


def test_a_triton_launch_on_the_autograd_thread_goes_under_the_main_threads_scope(profile_path):
    """The hook's op for a Triton kernel launched in backward (autograd's thread, no scope of its
    own) sits under the scope the main thread is in, with its kernel, not under the root."""
    name, read = profile_path
    x = torch.randn(1 << 16, device="cuda", requires_grad=True)
    _TritonDouble.apply(x).sum().backward()  # compiles add_kernel
    torch.cuda.synchronize()
    proton.start(name, hook="triton")
    with proton.scope("step"):
        loss = _TritonDouble.apply(x).sum()
        with proton.scope("backward"):
            loss.backward()
    proton.finalize()
    root = read()[0]
    assert [c["frame"]["name"] for c in root["children"]] == ["step"]
    added = [k for k in kernels(find(root, "step", "backward"))
             if k["frame"]["name"] == "add_kernel"]
    assert len(added) == 1 and added[0]["metrics"]["count"] == 1


class NamingHook(proton.hooks.Hook):
    """A user's hook (Triton 3.9 takes one in start(hook=...)): notes each launch's kernel."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.exited = 0

    def enter(self, metadata) -> None:
        self.entered.append(metadata.get()["name"])

    def exit(self, metadata) -> None:
        self.exited += 1


def test_a_users_hook_is_told_of_each_launch_while_its_session_is_active(profile_path):
    name, read = profile_path
    x = torch.rand(4096, device="cuda")
    out = torch.empty_like(x)
    add_kernel[(4,)](x, x, out, x.numel(), BLOCK=1024)  # compiled before the session
    hook = NamingHook()
    sid = proton.start(name, hook=hook)
    for _ in range(3):
        add_kernel[(4,)](x, x, out, x.numel(), BLOCK=1024)
    proton.deactivate(sid)
    add_kernel[(4,)](x, x, out, x.numel(), BLOCK=1024)  # paused: not told
    proton.finalize()
    torch.testing.assert_close(out, x + x)
    assert hook.entered == ["add_kernel"] * 3 and hook.exited == 3
    assert sum(n["metrics"]["count"] for n in kernels(read()[0])
               if n["frame"]["name"] == "add_kernel") == 3
