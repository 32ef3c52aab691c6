"""hook="triton[:options]" parsing and the compiler's kernel record, without a GPU."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

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
