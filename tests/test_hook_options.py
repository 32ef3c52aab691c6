"""hook="triton[:options]" parsing and the compiler's kernel record, without a GPU."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import stand_in_collector

import proton
from proton.cli import proton as proton_cmd
from proton.compiler.kernels import from_metadata_group
from proton.errors import SessionError
from proton.options import parse_hook as parse
from proton.runtime.profiler import profiler


def test_options_parse_into_config_constexprs_and_filters():
    assert parse("triton") == parse("triton:")
    assert not parse("triton").config
    opts = parse("triton:config=BLOCK_M,BLOCK_N:include=matmul|attn:exclude=_bwd")
    assert opts.config and opts.constexprs == ("BLOCK_M", "BLOCK_N")
    assert opts.include.pattern == "matmul|attn" and opts.exclude.pattern == "_bwd"
    assert parse("triton:config").constexprs == ()
    assert parse("triton:config=*").constexprs is None  # every declared constexpr
    assert parse("triton:include=a:b").include.pattern == "a:b"  # ':' inside a regex


@pytest.mark.parametrize("spec,message", [
    ("triton:colour", "hook option 'colour'"),
    ("triton:include=(", "not a valid regular expression"),
    ("triton:include", "hook option 'include'"),
    ("nvtx", "hook='nvtx' is not supported"),
])
def test_bad_hook_options_are_refused_before_anything_starts(spec, message, tmp_path):
    with pytest.raises(SessionError, match=message):
        proton.start(str(tmp_path / "p"), hook=spec)
    assert not profiler.sessions
    result = CliRunner().invoke(proton_cmd, ["-k", spec, "script.py"])
    assert result.exit_code == 2


def test_kernel_record_from_tritons_cache_files(tmp_path):
    meta = {"name": "matmul_kernel", "num_warps": 8, "num_stages": 3, "num_ctas": 1,
            "shared": 65536, "cluster_dims": [1, 1, 1],
            "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}
    (tmp_path / "matmul_kernel.json").write_text(json.dumps(meta))
    (tmp_path / "matmul_kernel.cubin").write_bytes(b"\x7fELF-cubin")
    group = {name: str(tmp_path / name) for name in ("matmul_kernel.json", "matmul_kernel.cubin")}
    info = from_metadata_group("matmul_kernel", 0x1234, group, "abc")
    assert (info.function, info.num_warps, info.num_stages, info.shared) == (0x1234, 8, 3, 65536)
    assert info.target == "cuda:90" and info.cluster_dims == (1, 1, 1)
    assert info.cubin() == b"\x7fELF-cubin"
    assert from_metadata_group("k", None, group, "abc") is None  # not loaded: no handle yet


def test_a_kernel_the_hook_skips_never_takes_the_op_of_a_launch_that_raised(tmp_path):
    """The hook's enter, as Triton calls it, with a stand-in for the collector's id stack: a
    launch that raised leaves its op pushed (its exit hook never ran); the next launch, one the
    hook excludes, must find it gone and go under its scope."""
    from proton.context.stack import per_thread
    from proton.data.paths import paths
    from proton.hooks import triton_hook

    def metadata(name):
        return type("Metadata", (), {"data": {"name": name, "function": None}, "extras": False})

    proton.start(str(tmp_path / "p"), hook="triton:exclude=skip")
    try:
        with stand_in_collector() as ids:
            with proton.scope("S"):
                (scope_id,) = ids.ids
                triton_hook._enter(metadata("matmul_kernel"))  # the launch then raised
                assert paths.names(ids.ids[-1]) == ["S", "matmul_kernel"]
                triton_hook._enter(metadata("skip_kernel"))
                assert ids.ids == [scope_id] and per_thread.stacks.op_path is None
                triton_hook._enter(metadata("matmul_kernel"))
                triton_hook._exit(metadata("matmul_kernel"))
                assert ids.ids == [scope_id] and per_thread.stacks.op_path is None
            assert ids.ids == []
    finally:
        proton.finalize()


def test_launch_metadata_values_become_numbers_and_vectors_and_the_rest_is_skipped():
    torch = pytest.importorskip("torch")
    from proton.hooks.triton_hook import _metrics

    got = _metrics({"name": "k", "flops16": 2e9, "bytes": torch.tensor(4096),
                    "shape": "128x64", "lens": [1, 2], "ok": True, "count": 3})
    assert got == {"flops16": 2e9, "bytes": 4096, "lens": [1, 2]}


@pytest.mark.parametrize("newer", [False, True], ids=["triton3.6", "triton3.9"])
def test_launch_metadata_runs_under_the_state_its_kernels_sit_right_under(tmp_path, monkeypatch,
                                                                           newer):
    """A kernel launch_metadata itself launches (x.sum().item()) goes right under the state
    the installed Triton's Proton runs it in, in both contexts: `__proton_launch_metadata`
    under Triton 3.6, `__proton_launch_metadata` -> the launched kernel's name ("foo") after
    (Triton 3.9's test_hook_launch_context); the op is named after, outside them."""
    from proton import triton_version
    from proton.context.frames import launch_parent
    from proton.data.paths import paths
    from proton.hooks import triton_hook

    monkeypatch.setattr(triton_version, "after_3_6", lambda: newer)
    state = ["__proton_launch_metadata", "foo"] if newer else ["__proton_launch_metadata"]

    for context in ("shadow", "python"):
        where = []

        class Metadata:
            data = {"name": "foo", "function": None}
            extras = True

            @staticmethod
            def get():
                where.append(paths.names(launch_parent()))  # as a kernel launched here
                return {"name": "foo_test", "bytes": 4.0}

        proton.start(str(tmp_path / context), hook="triton", context=context)
        try:
            with stand_in_collector() as ids:
                with proton.scope("test0"):
                    triton_hook._enter(Metadata)
                    op = paths.names(per_thread_op())
                    triton_hook._exit(Metadata)
        finally:
            proton.finalize()
        (inside,) = where
        assert inside[-len(state):] == state and "test0" in inside, (context, inside)
        assert op[-1] == "foo_test" and "__proton_launch_metadata" not in op, (context, op)
        if context == "shadow":
            assert inside == ["test0", *state] and op == ["test0", "foo_test"]
        assert ids.ids == []


def per_thread_op() -> int:
    from proton.context.stack import per_thread

    return per_thread.stacks.op_path


def test_every_counted_launch_gets_its_own_id_on_its_thread(tmp_path):
    """proton.hooks.launch.id (Triton's ContextVar): a new id at each launch the hook counts,
    read by the launching thread; two threads' 100 launches each give 200 ids."""
    import threading

    from proton.hooks import launch, triton_hook

    metadata = type("Metadata", (), {"data": {"name": "k", "function": None}, "extras": False})
    seen: list[int] = []

    def launches():
        for _ in range(100):
            triton_hook._enter(metadata)
            seen.append(launch.id.get())
            triton_hook._exit(metadata)

    mine = launch.id.get()
    proton.start(str(tmp_path / "ids"), hook="triton")
    try:
        with stand_in_collector():
            threads = [threading.Thread(target=launches) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        proton.finalize()
    assert len(seen) == 200 and len(set(seen)) == 200 and None not in seen
    assert launch.id.get() == mine  # this thread launched nothing meanwhile
