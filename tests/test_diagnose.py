"""`proton-viewer --diagnose` rules on synthetic profiles with known answers, the occupancy
arithmetic against the CUDA occupancy calculator, and no alarm on healthy matmuls."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer
from proton.viewer.diagnose import diagnose, render
from proton.viewer.occupancy import occupancy
from proton.viewer.reader import load

DATA = os.path.join(os.path.dirname(__file__), "data")
H100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 5120}
PEAK16 = 132 / 114 * 1980000 / 1755e3 * 1513e12 / 2  # viewer/specs.py's sm90 16-bit peak
BW = 2 * 5120 * 2619000 * 1e3 / 8


# The CUDA occupancy calculator's numbers for these launches (blocks per SM, occupancy, limit)
@pytest.mark.parametrize("arch,threads,regs,shared,blocks,fraction,limiter", [
    ("80", 256, 32, 0, 8, 1.0, "warps"),
    ("80", 256, 64, 0, 4, 0.5, "registers"),
    ("80", 128, 0, 48 * 1024, 3, 0.1875, "shared memory"),
    ("90", 128, 168, 160 * 1024, 1, 0.0625, "shared memory"),
    ("90", 1024, 0, 0, 2, 1.0, "warps"),
    ("86", 512, 40, 0, 3, 1.0, "warps"),
    ("90", 32, 16, 0, 32, 0.5, "blocks"),
])
def test_occupancy_matches_the_cuda_occupancy_calculator(arch, threads, regs, shared, blocks,
                                                         fraction, limiter):
    occ = occupancy(arch, threads, regs, shared)
    assert (occ.blocks, occ.fraction, occ.limiter) == (blocks, pytest.approx(fraction), limiter)


def test_occupancy_of_what_cannot_run_or_is_unknown():
    assert occupancy("90", 128, 0, 300 * 1024) is None  # more shared memory than an SM has
    assert occupancy("42", 128, 32, 0) is None


def kernel(name, ns, *, count=1, grid=None, threads=None, regs=None, shared=None, flops=None,
           nbytes=None, width=16):
    m = {"time (ns)": ns, "count": count, "device_id": "0", "device_type": "CUDA"}
    for key, v in (("grid_blocks", grid), ("block_threads", threads),
                   ("registers_per_thread", regs), ("shared_memory_bytes", shared),
                   (f"flops{width}", flops), ("bytes", nbytes)):
        if v is not None:
            m[key] = v
    return {"frame": {"name": name, "type": "function"}, "metrics": m, "children": []}


def profile(tmp_path, *children, name="p") -> str:
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "bytes": 0,
                        **{f"flops{w}": 0 for w in (8, 16, 32, 64)}},
            "children": list(children)}
    path = tmp_path / f"{name}.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    return str(path)


def findings(path) -> dict:
    return {(f.rule, f.kernel): f for f in diagnose(load(path)).findings}


def test_too_few_programs(tmp_path):
    got = findings(profile(tmp_path, kernel("small_grid", 1e6, grid=16, threads=128, regs=32)))
    f = got[("too few programs", "small_grid")]
    assert "16 blocks on 132 SMs: 116 SMs idle" in f.evidence and not f.info


def test_tail_effect(tmp_path):
    # 256 threads at 64 registers: 4 blocks per SM, 528 at once; 581 blocks = 1.10 waves
    got = findings(profile(tmp_path, kernel("tail", 1e6, grid=581, threads=256, regs=64),
                           kernel("whole", 1e6, grid=5280, threads=256, regs=64)))
    f = got[("tail effect", "tail")]
    assert "1.10 waves of 528" in f.evidence and "45% idle" in f.evidence
    assert "multiple of 528 blocks" in f.advice
    assert not [k for k in got if k[1] == "whole"]


def test_low_occupancy_is_a_warning_only_far_from_the_roof(tmp_path):
    slow = 2 * 4096 ** 3 / (0.1 * PEAK16)  # ns at 10% of the 16-bit peak
    fast = 2 * 4096 ** 3 / (0.7 * PEAK16)
    got = findings(profile(
        tmp_path,
        kernel("slow", slow * 1e9, grid=1024, threads=128, regs=168, shared=160 * 1024,
               flops=2 * 4096 ** 3, nbytes=3 * 2 * 4096 ** 2),
        kernel("fast", fast * 1e9, grid=1024, threads=128, regs=168, shared=160 * 1024,
               flops=2 * 4096 ** 3, nbytes=3 * 2 * 4096 ** 2)))
    low = got[("low occupancy", "slow")]
    assert "theoretical occupancy 6% (1 block of 4 warps per SM), limited by 163,840 B shared" \
           in low.evidence and not low.info
    assert got[("low occupancy", "fast")].info
    assert "10% of the compute roof" in got[("far from the roofline", "slow")].evidence
    assert ("far from the roofline", "fast") not in got


def test_memory_bound_kernel_far_from_its_roof(tmp_path):
    nbytes = 1e9
    ns = nbytes / (0.2 * BW) * 1e9  # moving bytes at 20% of the bandwidth
    got = findings(profile(tmp_path, kernel("copy", ns, flops=1e8, nbytes=nbytes)))
    f = got[("far from the roofline", "copy")]
    assert "20% of the memory roof" in f.evidence and "move fewer bytes" in f.advice


def test_launch_bound_scope(tmp_path):
    def scope(name, cpu_ns, *kids):
        node = {"frame": {"name": name, "type": "function"}, "metrics": {}, "children": list(kids)}
        if cpu_ns:
            node["metrics"]["cpu_time (ns)"] = cpu_ns
        return node

    path = profile(tmp_path,
                   scope("idle_gpu", 20e6, kernel("add", 3e6, count=1000)),
                   scope("busy_gpu", 4e6, kernel("mul", 3e6, count=1000)),
                   scope("untimed", None, kernel("sub", 3e6, count=1000)))
    got = findings(path)
    f = got[("launch-bound", "scope idle_gpu")]
    assert "busy 15% of the scope's 20.000 ms: 1,000 kernels averaging 3.0 us" in f.evidence
    assert "CUDA graphs" in f.advice
    assert ("launch-bound", "scope busy_gpu") not in got
    untimed = got[("launch-bound", "scope untimed")]  # short kernels, idle GPU unknown
    assert untimed.info and "cpu_timed_scope" in untimed.evidence
    assert not f.info


def test_stall_dominated_lines_in_words():
    got = diagnose(load(os.path.join(DATA, "pcsampling.hatchet"))).findings
    lines = [f for f in got if f.rule == "stalled line" and f.kernel == "matmul_kernel"]
    assert lines[0].evidence.startswith("line 18 of pc_kernel_source.py: 65% of the kernel's "
                                        "samples, 60% stalled, mostly math_pipe_throttle (64%)")
    assert "math pipe is busy" in lines[0].evidence and lines[0].path.startswith("2 call paths")
    assert all("selected" not in f.evidence for f in got)


def test_healthy_matmuls_get_no_warning(tmp_path):
    """A tuned 4096^3 fp16 Triton matmul on an H100 (128x256 tiles, 8 warps, ~200 KB of shared
    memory: 1 block per SM, at 70% of the peak) and a cuBLAS one (no flops metadata)."""
    tuned = 2 * 4096 ** 3 / (0.7 * PEAK16) * 1e9
    got = diagnose(load(profile(
        tmp_path,
        kernel("matmul_kernel", tuned, grid=512, threads=256, regs=168, shared=200 * 1024,
               flops=2 * 4096 ** 3, nbytes=3 * 2 * 4096 ** 2),
        kernel("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64", tuned, grid=264,
               threads=384, regs=168, shared=200 * 1024)))).findings
    assert got and all(f.info for f in got), [(f.rule, f.kernel, f.evidence) for f in got]


def test_what_could_not_be_checked_is_said():
    """example_gpu.hatchet (re-recorded on an H200) has launch configurations but no flops, bytes
    or PC samples; recorded.hatchet (an H100, before launch configurations) has none of them."""
    text = " | ".join(diagnose(load(os.path.join(DATA, "example_gpu.hatchet"))).notes)
    assert "no kernel has flops and bytes" in text
    assert "no PC samples" in text and "tensor cores: does not apply" in text
    assert "no launch configuration" not in text
    old = " | ".join(diagnose(load(os.path.join(DATA, "recorded.hatchet"))).notes)
    assert "too few programs, tail effect, occupancy: not checked; the profile has no launch " \
        "configuration" in old


def test_tensor_cores_do_not_apply_to_library_kernels_and_are_not_checked_without_sass(
        tmp_path):
    """A profile of cuBLAS/CUTLASS/ATen kernels alone: the rule reads Triton's tl.dot, so it
    does not apply (it read as "not checked", a failure); a Triton kernel with no machine code
    counted is what "not checked" means."""
    lib = diagnose(load(os.path.join(DATA, "example_gpu.hatchet"))).notes
    assert any(n.startswith("tensor cores: does not apply; the kernels here are libraries'")
               for n in lib)
    assert not any(n.startswith("tensor cores: not checked") for n in lib)
    mixed = diagnose(load(profile(tmp_path, kernel("_ZN2at6native6kernelEv", 1e6),
                                  kernel("matmul_kernel", 1e6)))).notes
    assert any(n.startswith("tensor cores: not checked") for n in mixed)


def test_tensor_cores_from_the_machine_code(tmp_path):
    def dot(name, variants=1, none=0, sync=0, **sass):
        k = kernel(name, 1e6)
        k["metrics"].update({"tl_dot": variants, "tl_dot_no_tensor_cores": none,
                             "tl_dot_no_wgmma": sync,
                             **{f"sass_{op}": sass.get(op, 0)
                                for op in ("hgmma", "hmma", "imma", "ffma")}})
        return k

    got = findings(profile(tmp_path, dot("fp32_ieee", 2, none=1, ffma=4096, hgmma=8),
                           dot("small_tile", sync=1, hmma=128), dot("tuned", hgmma=8, ffma=12)))
    evidence = got[("no tensor cores", "fp32_ieee")].evidence
    assert evidence.startswith("1 of its 2 compiled variants: the tl.dot runs on the FMA")
    assert "4,096 FFMA" in evidence
    assert "uses mma.sync (HMMA)" in got[("no wgmma", "small_tile")].evidence
    assert not [k for k in got if k[1] == "tuned"]


def test_the_command(tmp_path):
    path = profile(tmp_path, kernel("small_grid", 1e6, grid=16, threads=128, regs=32))
    result = CliRunner().invoke(viewer, ["--diagnose", path])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        "1. small_grid: 1.000 ms of GPU time (100%); fixing it could save up to 0.879 ms\n"
        "   at ROOT\n   [too few programs] 16 blocks on 132 SMs")
    assert ("\nGPU time: what ran on the GPU (kernels, copies, sets), a scope's what ran under "
            "it; 1.000 ms in all, the whole each % of GPU time is of. Could save: of the run's "
            "wall time, at most, less what findings inside the same frame claim.\nnote: ") \
        in result.output
    assert "     try: more programs" in result.output
    data = json.loads(CliRunner().invoke(viewer, ["--diagnose", "--output", "json", path]).stdout)
    assert data["findings"][0]["rule"] == "too few programs" and data["notes"]


def test_triton_viewer_opens_a_file_with_launch_configuration(tmp_path):
    pytest.importorskip("triton.profiler.viewer")
    path = profile(tmp_path, kernel("k", 1e6, grid=16, threads=128, regs=32, shared=1024,
                                    flops=1e9, nbytes=1e6))
    run = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m", "time/us,util",
                          path], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "1000.000" in run.stdout


def test_diagnose_html_and_source_exclude_each_other(tmp_path):
    result = CliRunner().invoke(viewer, ["--diagnose", "--html", str(tmp_path / "r.html"),
                                         os.path.join(DATA, "example_gpu.hatchet")])
    assert result.exit_code == 2 and "each replace the tree; give one" in result.output


def test_rules_on_a_profile_recorded_on_an_h200():
    """tests/data/diagnose_recorded.hatchet: tests/diagnose_workload.py (a bad kernel per scope,
    healthy matmuls) under -m pcsampling and the Triton launch hook on an H200, 2026-11-29;
    every rule reads real launch configurations, machine code counts, PC samples, launch
    metadata and per-step GPU time here."""
    import diagnose_workload

    got = diagnose(load(os.path.join(DATA, "diagnose_recorded.hatchet")))
    findings = got.findings
    assert got.notes == []
    assert diagnose_workload.problems(findings) == []  # each rule fires on its scope
    # the healthy matmuls: cuBLAS's 19% occupancy and the Triton matmul's load and barrier
    # stalls are worth knowing, not problems (it reaches 68% of its roof)
    healthy = [f for f in findings if f.path.split(" / ")[-1] in diagnose_workload.HEALTHY]
    assert healthy and all(f.info for f in healthy)
    assert {f.rule for f in healthy} == {"low occupancy", "stalled line"}
    # the launch-bound scope (the GPU busy 1.8 ms of its 75.7 ms) and the 400 tiny launches'
    # scope (the GPU waits on the host 7.3 ms of its 12.6 ms) before the kernels of 6 ms
    assert [g.kernel for g in got.groups[:4]] == ["scope launch_bound", "scope too_few_programs",
                                                  "ieee_dot", "strided_copy"]
    assert got.groups[0].saves_ns == pytest.approx(75.729e6 - 1.765e6, rel=1e-3)
    assert [f.rule for f in got.groups[1].findings if not f.info] == ["idle GPU"]
    first = next(f for f in findings if f.kernel == "ieee_dot")
    assert (first.rule, round(first.share, 2)) == ("low occupancy", 0.37)
    assert first.evidence.startswith("theoretical occupancy 19% (3 blocks of 4 warps per SM), "
                                     "limited by 65,536 B shared memory per block")
    tail = next(f for f in findings if f.rule == "tail effect")
    assert tail.evidence.startswith("2,323 blocks = 1.10 waves of 2,112 (132 SMs x 16 resident)")
    # short kernels in scopes with no CPU time: worth a look, not a warning
    untimed = [f for f in findings if f.rule == "launch-bound" and f.info]
    assert {f.kernel for f in untimed} == {"scope mma_sync", "scope too_few_programs",
                                           "scope tail_effect"}


# H100 SXM peaks as NVIDIA's datasheet states them (dense), which specs.py's scaled H100 PCIe
# figures must come within 1% of
SXM_PEAKS = {8: 1979e12, 16: 989.4e12, 32: 67e12, 64: 34e12}


@pytest.mark.parametrize("width,precision", [(8, "8-bit tensor"), (16, "16-bit tensor"),
                                             (32, "fp32"), (64, "fp64")])
def test_each_kernel_is_judged_against_the_roof_of_its_precision(tmp_path, width, precision):
    """At 1024 FLOP/byte, past the ridge of every roof (the 8-bit one's is 590 FLOP/byte on an
    H100), running at 10% of its own precision's peak."""
    flops, peak = 2 * 1024 ** 3, SXM_PEAKS[width]
    ns = flops / (0.1 * peak) * 1e9
    got = findings(profile(tmp_path, kernel("k", ns, flops=flops, nbytes=flops / 1024,
                                            width=width)))
    evidence = got[("far from the roofline", "k")].evidence
    frac, rest = evidence.split(" of the ", 1)
    assert int(frac.rstrip("%")) == pytest.approx(10, abs=1)
    assert rest.startswith("compute roof") and f"({precision} peak " in rest
    shown = float(rest.split(" peak ")[1].split(" TFLOP/s")[0].replace(",", ""))
    assert shown * 1e12 == pytest.approx(peak, rel=0.01)


def test_an_fp32_dot_on_the_tensor_cores_is_judged_against_the_tf32_roof(tmp_path):
    """flops32 is TF32 when the kernel's machine code has HMMA/HGMMA, or when it runs faster
    than the FMA units can (here 2x the fp32 peak, with no machine code at hand)."""
    flops = 2 * 4096 ** 3
    dot = kernel("tf32_dot", flops / 100e12 * 1e9, flops=flops, nbytes=flops / 256, width=32)
    dot["metrics"].update({"sass_hgmma": 8, "sass_hmma": 0})
    fast = kernel("fast", flops / 134e12 * 1e9, flops=flops, nbytes=flops / 256, width=32)
    got = findings(profile(tmp_path, dot, fast))
    assert "(tf32 tensor peak 493.8 TFLOP/s" in got[("far from the roofline", "tf32_dot")].evidence
    assert "(tf32 tensor peak" in got[("far from the roofline", "fast")].evidence


def test_the_recorded_fp32_dot_is_compute_bound_under_the_fp32_roof():
    """ieee_dot does fp32 FMAs at 32 FLOP/byte: past the fp32 ridge (14 FLOP/byte on this
    H200), so the advice is the tensor cores, not moving fewer bytes."""
    got = diagnose(load(os.path.join(DATA, "diagnose_recorded.hatchet"))).findings
    far = next(f for f in got if f.rule == "far from the roofline" and f.kernel == "ieee_dot")
    assert far.evidence == ("2% of the compute roof: 1.27 TFLOP/s and 39.7 GB/s at 32.00 "
                            "FLOP/byte (fp32 peak 66.6 TFLOP/s, 4,814 GB/s, ridge 14 FLOP/byte)")
    assert far.advice.startswith("use the tensor cores") and "fewer bytes" not in far.advice


def test_a_short_kernel_of_a_launch_bound_scope_is_not_also_too_few_programs(tmp_path):
    """The GPU waits on the host there: a 1 us kernel's single block is not what costs time."""
    loop = {"frame": {"name": "loop", "type": "function"}, "metrics": {"cpu_time (ns)": 30e6},
            "children": [kernel("tiny", 3e6, count=3000, grid=1, threads=128, regs=16)]}
    got = findings(profile(tmp_path, loop, kernel("small_grid", 3e6, grid=16, threads=128)))
    assert ("launch-bound", "scope loop") in got
    assert ("too few programs", "tiny") not in got
    assert ("too few programs", "small_grid") in got  # outside it, the rule still fires


def test_no_findings_names_the_rules_that_ran_and_their_thresholds():
    """recorded.hatchet: a small H100 run with no launch configuration, flops or PC samples."""
    result = CliRunner().invoke(viewer, ["--diagnose", os.path.join(DATA, "recorded.hatchet")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:2] == [
        "no findings: nothing crosses a threshold of the 1 rule that ran (on kernels and "
        "scopes with 1%+ of the GPU time):",
        "  launch-bound: a scope of 100+ kernels averaging under 10 us, the GPU busy under 50% "
        "of its time"]
    assert "--help" not in result.output
    assert len([line for line in lines if "not checked" in line]) == 4
    assert len([line for line in lines if line.startswith("note: ")]) == 4
    data = json.loads(CliRunner().invoke(viewer, ["--diagnose", "--output", "json",
                                                  os.path.join(DATA, "recorded.hatchet")]).stdout)
    assert data["rules_run"] == ["launch-bound"]


@pytest.mark.parametrize("output", ["csv", "trace"])
def test_diagnose_refuses_outputs_it_does_not_write(output):
    result = CliRunner().invoke(viewer, ["--diagnose", "--output", output,
                                         os.path.join(DATA, "example_gpu.hatchet")])
    assert result.exit_code == 2
    assert result.output == (f"Error: --diagnose writes its findings as text, or as JSON with "
                             f"--output json; --output {output} does not apply to it\n")


def test_list_offers_no_share_of_a_kernels_launch_configuration_or_machine_code():
    result = CliRunner().invoke(viewer, ["-l", os.path.join(DATA, "diagnose_recorded.hatchet")])
    derived = result.output.split("derived:")[1]
    for fact in ("registers_per_thread/%", "grid_blocks/%", "sass_ffma/%", "tl_dot/%"):
        assert fact not in derived
    assert "time/%" in derived and "cpu_time/%" in derived
    refused = CliRunner().invoke(viewer, ["-m", "grid_blocks/%",
                                          os.path.join(DATA, "diagnose_recorded.hatchet")])
    assert refused.exit_code == 2 and "unknown metric 'grid_blocks/%'" in refused.output


def test_a_kernel_whose_flops_name_no_precision_is_left_unjudged_and_said(tmp_path):
    flops = 2 * 1024 ** 3
    got = diagnose(load(profile(tmp_path, kernel("k", flops / 1e12 * 1e9, flops=flops,
                                                 nbytes=flops / 1024, width=""))))
    assert not [f for f in got.findings if f.rule == "far from the roofline"]
    assert ("far from the roofline: 1 kernel with flops and bytes not judged; their flops name "
            "no precision (launch_metadata gives flops8, flops16, flops32 or flops64)") \
        in got.notes


def test_findings_are_grouped_by_kernel_and_ranked_by_what_fixing_them_saves(tmp_path):
    """A launch-bound scope of 62 ms wall (its 300 kernels 0.3 ms of GPU time) ranks above a
    3 ms kernel far from its roof; the kernel's findings come as one group, whose text
    names it once, with GB/s beside FLOP/s."""
    loop = {"frame": {"name": "loop", "type": "function"}, "metrics": {"cpu_time (ns)": 62e6},
            "children": [kernel("tiny", 0.3e6, count=300, grid=1, threads=128, regs=16)]}
    nbytes = 1e9
    slow = kernel("slow_copy", nbytes / (0.2 * BW) * 1e9, grid=16, threads=128, regs=32,
                  flops=1e8, nbytes=nbytes)
    path = profile(tmp_path, loop, slow)
    got = diagnose(load(path))
    assert [g.kernel for g in got.groups] == ["scope loop", "slow_copy"]
    # 116 of 132 SMs idle (88% to gain) before 20% of the memory roof (80%)
    assert [f.rule for f in got.groups[1].findings] == ["too few programs",
                                                        "far from the roofline"]
    text = CliRunner().invoke(viewer, ["--diagnose", path]).output
    numbered = [line for line in text.splitlines() if line[:1].isdigit()]
    assert numbered[0].startswith("1. scope loop: 62.000 ms of wall time, 0.300 ms of GPU time")
    assert "could save up to 61.700 ms" in numbered[0]
    assert numbered[1].startswith("2. slow_copy: ") and len(numbered) == 2
    assert "20% of the memory roof: 0.07 TFLOP/s and 670.5 GB/s at 0.10 FLOP/byte" in text
    data = json.loads(CliRunner().invoke(viewer, ["--diagnose", "--output", "json",
                                                  path]).stdout)
    assert [g["kernel"] for g in data["groups"]] == ["scope loop", "slow_copy"]
    assert [data["findings"][i]["rule"] for i in data["groups"][1]["findings"]] == [
        "too few programs", "far from the roofline"]


# -- one definition for every figure (issue 57 item 1) ----------------------------------------

def scope(name, *children, **metrics):
    return {"frame": {"name": name, "type": "function"},
            "metrics": {f"{k} (ns)": v for k, v in metrics.items()}, "children": list(children)}


def copy_node(kind, ns, count=10):
    return {"frame": {"name": f"memcpy {kind}", "type": "function"},
            "metrics": {"time (ns)": ns, "count": count, "bytes": count * 32 * 2**20,
                        "device_id": "0", "device_type": "CUDA"}, "children": []}


def gpu_time_under(tree: dict) -> float:
    """The kernels', copies' and sets' time at or under a node of the file: what ran."""
    own = tree["metrics"].get("time (ns)", 0) if "device_id" in tree["metrics"] else 0
    return own + sum(gpu_time_under(c) for c in tree["children"])


def test_a_scopes_headline_is_its_gpu_time_with_copies_never_its_idle_time(tmp_path):
    """A step of 100 ms wall whose GPU idles 60 ms: its 10 ms kernel and 30 ms of pageable
    copies are its GPU time, 100% of the profile's; the 60 ms are said as idle, in the
    finding."""
    step = scope("step", kernel("gemm", 10e6, count=10), copy_node("HtoD (pageable)", 30e6),
                 scope_wall=100e6, gpu_idle=60e6)
    got = diagnose(load(profile(tmp_path, step)))
    assert got.gpu_ns == 40e6  # kernels, copies and sets
    group = next(g for g in got.groups if g.kernel == "scope step")
    assert (group.time_ns, group.share, group.wall_ns) == (40e6, 1.0, 100e6)
    copies = next(g for g in got.groups if g.kernel == "memcpy HtoD (pageable)")
    assert copies.share == pytest.approx(0.75)  # 30 of the 40 ms that ran, not 300% of 10
    idle = next(f for f in group.findings if f.rule == "idle GPU")
    assert "ran nothing for 60.000 ms of the 100.000 ms the host spent in the scope (60%)" \
        in idle.evidence
    text = render(got)
    assert "1. scope step: 100.000 ms of wall time, 40.000 ms of GPU time (100%); fixing it " \
           "could save up to 45.000 ms besides the 15.000 ms the findings inside it claim" in text
    assert "memcpy HtoD (pageable): 30.000 ms of GPU time (75%)" in text


def test_findings_inside_a_frame_claim_their_saving_once(tmp_path):
    """step idles 40 ms, 30 of them in its child `wait`: step's finding claims the other 10;
    when its children claim all of it (`load`'s 45 ms), step's finding goes and a note says
    so. The savings together never exceed the step's wall time."""
    inner = scope("wait", kernel("k", 1e6), scope_wall=35e6, gpu_idle=30e6)
    path = profile(tmp_path, scope("step", kernel("gemm", 20e6), inner, scope_wall=80e6,
                                   gpu_idle=40e6), name="kept")
    got = diagnose(load(path))
    step = next(f for f in got.findings if f.kernel == "scope step")
    assert (step.saves_ns, step.inside_ns) == (10e6, 30e6)
    assert next(f for f in got.findings if f.kernel == "scope wait").saves_ns == 30e6
    assert sum(g.saves_ns for g in got.groups) <= 80e6
    data = json.loads(CliRunner().invoke(viewer, ["--diagnose", "--output", "json",
                                                  path]).stdout)
    assert data["gpu_time_ns"] == 21e6
    assert next(g for g in data["groups"] if g["kernel"] == "scope step")["inside_ns"] == 30e6

    load_ = scope("load", kernel("k", 1e6), scope_wall=50e6, gpu_idle=45e6)
    path = profile(tmp_path, scope("step", kernel("gemm", 20e6), load_, scope_wall=80e6,
                                   gpu_idle=40e6), name="dropped")
    got = diagnose(load(path))
    assert [g.kernel for g in got.groups] == ["scope load"]
    assert ("1 finding left out, all of what it could save claimed by findings inside its "
            "frame: scope step (idle GPU)") in got.notes


def test_the_real_loops_figures_are_what_ran_and_claim_no_more_than_the_step_took():
    """tests/data/rs/loop.hatchet (an H200, issue 57): main read `scope step: 208.612 ms of
    wall time, 161.176 ms on the GPU, 4543% of GPU time` and its findings claimed 381 ms of a
    208.6 ms step. Each group's GPU time is the file's kernels, copies and sets under it; the
    savings of all groups together fit in the step's wall time."""
    path = os.path.join(DATA, "rs", "loop.hatchet")
    with open(path) as f:
        doc = json.load(f)
    step = doc[0]["children"][0]
    under = {c["frame"]["name"]: gpu_time_under(c) for c in step["children"]}
    got = diagnose(load(path))
    by = {g.kernel: g for g in got.groups}
    for name in ("copy", "idle", "readback"):
        assert by[f"scope {name}"].time_ns == pytest.approx(under[name]), name
    assert got.gpu_ns == pytest.approx(gpu_time_under(doc[0]))  # 47.436 ms, copies included
    assert all(0 <= g.share <= 1 for g in got.groups)
    assert all(0 <= f.share <= 1 for f in got.findings)
    assert sum(g.saves_ns for g in got.groups) <= step["metrics"]["scope_wall (ns)"]
    assert by["scope idle"].time_ns < 0.1e6  # 49 us of kernels: its 143.8 ms are idle
    idle = next(f for f in by["scope idle"].findings if f.rule == "idle GPU")
    assert "ran nothing for 143.788 ms" in idle.evidence
