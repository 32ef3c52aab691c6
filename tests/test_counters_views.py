"""Hardware counters (mode="counters", issue 48) in the views: the measured metrics of -m and
-l, util and the roofline from measurements (every kernel with counters drawn, marked measured;
a declared Triton kernel marked declared), --diagnose's memory-, compute- and latency-bound
verdicts with their numbers, and Triton's viewer opening the same file.

The profile is a GPT-like step as our writer lays it out: the counters on kernel nodes only,
ROOT carrying a 0 for each inclusive metric."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from proton.format import (COUNTER_METRICS, COUNTER_NS, COUNTERS_SHARED_NS,
                           COUNTERS_UNRESOLVED_NS, DRAM_BYTES, ISSUE_ACTIVE_NS, L1_THROUGHPUT_NS,
                           L2_BYTES, L2_THROUGHPUT_NS, SM_ACTIVE_NS, TENSOR_ACTIVE_NS,
                           TENSOR_FLOPS)
from proton.viewer.cli import viewer
from proton.viewer.derive import NOMINAL_INTENSITY, derive, kernel_roofs
from proton.viewer.diagnose import diagnose
from proton.viewer.reader import load

H100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 5120}
PEAK16 = 132 / 114 * 1980000 / 1755e3 * 1513e12 / 2  # viewer/specs.py's sm90 16-bit peak
BW = 2 * 5120 * 2619000 * 1e3 / 8  # 3.35 TB/s

MATMUL = "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT"
SMALL_MATMUL = "nvjet_hsh_64x8_64x16_2x1_v_bz_TNN"
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
               "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const"
               "::{lambda()#1}::operator()() const::{lambda(c10::BFloat16)#1}, "
               "std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl"
               "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const"
               "::{lambda()#1}::operator()() const::{lambda(c10::BFloat16)#1}, "
               "std::array<char*, 2ul>)")
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(float)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
TRITON = "triton_poi_fused_add_mul_0"


def measured(name: str, ns: float, *, covered: float = 0.9, dram: float = 0.0,
             tensor: float = 0.0, issue: float = 0.1, sm: float = 0.95, tflops: float = 0.0,
             l2: float = 3.0, shared: float = 0.0, count: int = 1) -> dict:
    """A kernel node with counters: `ns` of GPU time, `covered` of it sampled; `dram` the DRAM
    bandwidth fraction it reached, `tensor`, `issue` and `sm` its activity fractions, `tflops`
    its tensor FLOP/s as a fraction of the 16-bit peak, `l2` its L2 bytes over DRAM's."""
    c = ns * covered
    nbytes = dram * BW * c * 1e-9
    return {"frame": {"name": name, "type": "function"},
            "metrics": {"time (ns)": ns, "count": count, "device_id": "0", "device_type": "CUDA",
                        COUNTER_NS: c, DRAM_BYTES: nbytes, L2_BYTES: l2 * nbytes + 1e6,
                        TENSOR_FLOPS: tflops * PEAK16 * c * 1e-9, TENSOR_ACTIVE_NS: tensor * c,
                        ISSUE_ACTIVE_NS: issue * c, SM_ACTIVE_NS: sm * c,
                        COUNTERS_SHARED_NS: shared * c},
            "children": []}


def scope(name: str, *children: dict) -> dict:
    return {"frame": {"name": name, "type": "function"}, "metrics": {},
            "children": list(children)}


def gpt_step(tmp_path, name: str = "step") -> str:
    """A GPT-like step: cuBLAS matmuls (tensor work), PyTorch elementwise and reduction
    kernels (none), an NCCL all-reduce, and one Triton kernel that declared flops16 and bytes
    through launch_metadata and has no counters."""
    attention = scope("attention",
                      measured(MATMUL, 2e6, dram=0.2, tensor=0.8, issue=0.35, tflops=0.7),
                      measured(ELEMENTWISE, 1e6, dram=0.85, issue=0.2))
    mlp = scope("mlp",
                measured(SMALL_MATMUL, 5e5, dram=0.1, tensor=0.12, issue=0.25, sm=0.4,
                         tflops=0.08, count=10),
                {"frame": {"name": TRITON, "type": "function"},
                 "metrics": {"time (ns)": 4e5, "count": 1, "device_id": "0",
                             "device_type": "CUDA", "flops16": 2e9, "bytes": 6e8},
                 "children": []})
    backward = scope("backward",
                     measured(MATMUL, 3e6, dram=0.25, tensor=0.75, issue=0.3, tflops=0.65,
                              shared=0.25),
                     measured(REDUCE, 6e5, dram=0.35, issue=0.2, sm=0.9))
    comm = scope("allreduce", measured(NCCL, 8e5, dram=0.05, issue=0.05, sm=0.2))
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "bytes": 0, "flops16": 0,
                        **{m: 0 for m in COUNTER_METRICS}},
            "children": [scope("step", scope("forward", attention, mlp), backward, comm)]}
    path = tmp_path / f"{name}.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    return str(path)


def node_of(prof, *path: str):
    """The hatchet node at a path of names under ROOT."""
    node = prof.gf.graph.roots[0]
    for name in path:
        node = next(c for c in node.children if c.frame["name"] == name)
    return node


def kernels_under(prof, node) -> list:
    out, todo = [], list(node.children)
    while todo:
        n = todo.pop()
        if n.children:
            todo += n.children
        else:
            out.append(n)
    return out


def show(*args):
    return CliRunner().invoke(viewer, list(args))


MEASURED_SPECS = ["dram_byte/s", "dram_gbyte/s", "dram_tbyte/s", "l2_byte/s", "l2_gbyte/s",
                  "l2_tbyte/s", "tensor_flop/s", "tensor_gflop/s", "tensor_tflop/s",
                  "tensor_flop/byte", "tensor_active", "issue_active", "sm_active",
                  "sm_throughput", "dram_throughput"]


# -- -l and -m ---------------------------------------------------------------------------------

def test_list_names_the_measured_metrics_only_for_a_profile_with_counters(tmp_path):
    listed = show("-l", gpt_step(tmp_path)).output
    derived = next(line for line in listed.splitlines() if line.startswith("derived:"))
    for spec in MEASURED_SPECS:
        assert f" {spec}," in derived + ",", spec
    plain = show("-l", os.path.join(os.path.dirname(__file__), "data", "example_gpu.hatchet"))
    assert "dram_gbyte/s" not in plain.output and "sm_throughput" not in plain.output


def test_a_kernels_measured_rates_and_activities(tmp_path):
    prof = load(gpt_step(tmp_path))
    k = node_of(prof, "step", "forward", "attention", MATMUL)
    seconds = 2e6 * 0.9 * 1e-9

    def value(spec):
        return derive(prof, spec).values[k]

    assert value("dram_gbyte/s") == pytest.approx(0.2 * BW / 1e9)
    assert value("dram_throughput") == pytest.approx(20.0)
    assert value("l2_gbyte/s") == pytest.approx((3 * 0.2 * BW * seconds + 1e6) / seconds / 1e9)
    assert value("tensor_tflop/s") == pytest.approx(0.7 * PEAK16 / 1e12)
    assert value("tensor_flop/byte") == pytest.approx(0.7 * PEAK16 / (0.2 * BW))
    assert value("tensor_active") == pytest.approx(80.0)
    assert value("issue_active") == pytest.approx(35.0)
    assert value("sm_active") == pytest.approx(95.0)
    assert value("sm_throughput") == pytest.approx(80.0)  # the busier of tensor and issue
    assert derive(prof, "tensor_active").header == "tensor_active (%)"
    e = node_of(prof, "step", "forward", "attention", ELEMENTWISE)
    assert derive(prof, "sm_throughput").values[e] == pytest.approx(20.0)  # issue, no tensor
    assert derive(prof, "tensor_tflop/s").values[e] == 0.0


def test_a_scopes_measured_metrics_are_its_kernels_sums(tmp_path):
    prof = load(gpt_step(tmp_path))
    df = prof.gf.dataframe
    for path in [("step",), ("step", "forward"), ("step", "backward"),
                 ("step", "forward", "attention")]:
        node = node_of(prof, *path)
        kernels = kernels_under(prof, node)
        for metric in (COUNTER_NS, DRAM_BYTES, TENSOR_FLOPS, TENSOR_ACTIVE_NS):
            want = sum(float(df.at[k, metric]) for k in kernels if df.at[k, metric] == df.at[k, metric])
            assert derive(prof, metric).values[node] == pytest.approx(want), (path, metric)
        ns = sum(float(df.at[k, COUNTER_NS]) for k in kernels if df.at[k, COUNTER_NS] > 0)
        dram = sum(float(df.at[k, DRAM_BYTES]) for k in kernels if df.at[k, DRAM_BYTES] > 0)
        busy = sum(float(df.at[k, ISSUE_ACTIVE_NS]) for k in kernels
                   if df.at[k, ISSUE_ACTIVE_NS] > 0)
        assert derive(prof, "dram_gbyte/s").values[node] == pytest.approx(dram / ns)
        assert derive(prof, "issue_active").values[node] == pytest.approx(busy / ns * 100)
    # the declared kernel has no counters: blank, not 0
    t = node_of(prof, "step", "forward", "mlp", TRITON)
    assert math.isnan(derive(prof, "dram_gbyte/s").values[t])


def test_table_and_json_output_carry_the_measured_columns(tmp_path):
    result = show("-m", "time/ms,dram_gbyte/s,tensor_active,sm_throughput", "--output",
                  "json", gpt_step(tmp_path))
    assert result.exit_code == 0, result.output
    rows = {tuple(r["path"]): r for r in json.loads(result.output)}
    attention = rows[("ROOT", "step", "forward", "attention")]
    assert set(attention) >= {"dram_gbyte/s", "tensor_active (%)", "sm_throughput (%)"}
    assert 0 < attention["tensor_active (%)"] < 100


def test_an_unknown_metric_still_lists_the_measured_ones(tmp_path):
    result = show("-m", "dram_gbs", gpt_step(tmp_path))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: unknown metric 'dram_gbs'")
    assert "dram_gbyte/s" in lines[0] and "sm_throughput" in lines[0]


# -- util and the roofline ---------------------------------------------------------------------

def test_util_is_measured_where_counters_are_and_declared_elsewhere(tmp_path):
    prof = load(gpt_step(tmp_path))
    util = derive(prof, "util").values
    k = node_of(prof, "step", "forward", "attention", MATMUL)
    assert util[k] == pytest.approx(0.7)  # tensor FLOP/s over the 16-bit peak beats DRAM's 20%
    e = node_of(prof, "step", "forward", "attention", ELEMENTWISE)
    assert util[e] == pytest.approx(0.85)  # no tensor work: its DRAM bandwidth fraction
    t = node_of(prof, "step", "forward", "mlp", TRITON)
    assert util[t] == pytest.approx(max(2e9 / PEAK16, 6e8 / BW) / 4e-4)


def html_data(tmp_path, path: str) -> dict:
    out = str(tmp_path / "r.html")
    result = CliRunner().invoke(viewer, ["--html", out, path])
    assert result.exit_code == 0, result.output
    with open(out) as f:
        text = f.read()
    body = text[text.index('id="data">') + len('id="data">'):]
    return json.loads(body[: body.index("</script>")])


def points(d: dict) -> list[dict]:
    p = d["roofline"]["points"]
    names = d["nodes"]["name"]
    return [{"name": names[p["i"][k]] if p["i"][k] >= 0 else p["name"][str(k)],
             "x": p["x"][k], "y": p["y"][k], "frac": p["frac"][k],
             "roof": p["kinds"][p["roof"][k]], "source": p["sources"][p["s"][k]]}
            for k in range(len(p["x"]))]


def test_the_roofline_shows_every_kernel_with_counters_marked_measured(tmp_path):
    path = gpt_step(tmp_path)
    got = points(html_data(tmp_path, path))
    prof = load(path)
    with_counters = [n for n, ns in prof.gf.dataframe[COUNTER_NS].items()
                     if ns > 0 and n.frame["name"] != "ROOT"]
    assert len(with_counters) == 6
    by = {}
    for p in got:
        by.setdefault(p["name"], []).append(p)
    assert len(got) == 7  # the 6 with counters and the declared Triton kernel
    assert [p["source"] for p in by["nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT"]] == \
        ["measured", "measured"]
    assert by[TRITON][0]["source"] == "declared"
    assert by[TRITON][0]["x"] == pytest.approx(2e9 / 6e8, rel=1e-5)
    matmul = by["nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_TNT"]
    forward = next(p for p in matmul if p["y"] == pytest.approx(0.7 * PEAK16, rel=1e-5))
    assert forward["x"] == pytest.approx(0.7 * PEAK16 / (0.2 * BW), rel=1e-5)
    assert forward["roof"] == "16-bit tensor" and forward["frac"] == pytest.approx(0.7, rel=1e-5)
    note = html_data(tmp_path, path)["roofline"]["note"]
    assert "6 measured by hardware counters" in note and "1 declared" in note


def test_a_kernel_without_tensor_work_sits_under_the_memory_roof_by_its_dram_fraction(tmp_path):
    got = {p["name"]: p for p in points(html_data(tmp_path, gpt_step(tmp_path)))}
    names = {"gelu": next(n for n in got if "vectorized_elementwise_kernel" in n),
             "reduce": next(n for n in got if "reduce_kernel" in n),
             "nccl": next(n for n in got if n.startswith("ncclDevKernel"))}
    for key, fraction in (("gelu", 0.85), ("reduce", 0.35), ("nccl", 0.05)):
        p = got[names[key]]
        assert p["source"] == "no tensor work"
        assert p["x"] == pytest.approx(NOMINAL_INTENSITY)
        # the memory roof at x is BW * x: the point lies under it by its DRAM fraction
        assert p["y"] / (BW * p["x"]) == pytest.approx(fraction, rel=1e-5)
        assert p["frac"] == pytest.approx(fraction, rel=1e-5)


def test_kernel_roofs_prefer_measurements_to_a_declaration(tmp_path):
    """A kernel with both counters and launch_metadata flops is placed by its counters."""
    k = measured("matmul_kernel", 1e6, dram=0.5, tensor=0.3, issue=0.3, tflops=0.25)
    k["metrics"].update({"flops16": 1e9, "bytes": 1e9})
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, "bytes": 0, "flops16": 0,
                        **{m: 0 for m in COUNTER_METRICS}}, "children": [k]}
    path = tmp_path / "both.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    (roof,) = kernel_roofs(load(str(path))).values()
    assert roof.source == "measured" and roof.precisions == ["16-bit tensor"]
    assert roof.flops == pytest.approx(0.25 * PEAK16 * 0.9e-3)


# -- --diagnose --------------------------------------------------------------------------------

def verdicts(path: str) -> dict:
    out = {}
    for f in diagnose(load(path), "raw").findings:
        if f.rule in ("memory-bound", "compute-bound", "latency-bound"):
            out.setdefault(f.kernel, []).append(f)
    return out


def test_diagnose_says_what_bounds_each_kernel_with_counters_from_its_numbers(tmp_path):
    got = verdicts(gpt_step(tmp_path))
    assert {k: [f.rule for f in fs] for k, fs in got.items()} == {
        MATMUL: ["compute-bound", "compute-bound"],  # forward and backward call paths
        ELEMENTWISE: ["memory-bound"],
        SMALL_MATMUL: ["latency-bound"],
        REDUCE: ["latency-bound"],
        NCCL: ["latency-bound"]}
    gelu = got[ELEMENTWISE][0]
    assert "DRAM 85% of peak" in gelu.evidence and "2,849 of 3,352 GB/s" in gelu.evidence
    assert gelu.info  # at the GPU's limit: worth knowing, nothing to tune in the kernel
    mm = got[MATMUL][0]
    assert "tensor pipe 80% active" in mm.evidence or "tensor pipe 75% active" in mm.evidence
    small = got[SMALL_MATMUL][0]
    assert not small.info
    assert "DRAM 10% of peak" in small.evidence and "tensor pipe 12% active" in small.evidence
    assert "issue 25%" in small.evidence and "SMs 40% active" in small.evidence
    assert got[NCCL][0].info and "communication" in got[NCCL][0].advice
    shared = [f for f in got[MATMUL] if "backward" in f.path][0]
    assert "25% of it beside another kernel" in shared.evidence


def test_diagnose_judges_the_roofline_from_measurements_and_says_so(tmp_path):
    path = gpt_step(tmp_path)
    found = diagnose(load(path), "raw")
    assert "far from the roofline" in found.ran
    assert not any("not checked" in n and "roofline" in n for n in found.notes)
    far = {f.kernel: f for f in found.findings if f.rule == "far from the roofline"}
    # the small matmul: 8% of the 16-bit peak at an intensity where its roof is memory's
    assert far[SMALL_MATMUL].evidence.startswith(
        "10% of the DRAM bandwidth, its nearest roof (measured, each level against its own "
        "roof: DRAM 10%, L2 7%; DRAM 335 GB/s, L2 1,008 GB/s, 79.06 tensor TFLOP/s)")
    # at their limits: the matmul (70% of the tensor roof), gelu (85% of DRAM bandwidth);
    # NCCL's waits on its peers, its DRAM bytes say nothing of it
    assert set(far) == {SMALL_MATMUL}


def test_a_profile_of_counters_alone_is_judged_against_the_roofline(tmp_path):
    """No launch_metadata flops anywhere: before counters this said 'not checked'."""
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, **{m: 0 for m in COUNTER_METRICS}},
            "children": [measured("copy_kernel", 1e6, dram=0.1, issue=0.05, sm=0.9),
                         measured(MATMUL, 1e6, dram=0.1, tensor=0.9, tflops=0.85)]}
    path = tmp_path / "counters.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    found = diagnose(load(str(path)), "raw")
    assert "far from the roofline" in found.ran
    assert not [n for n in found.notes if "roofline" in n], found.notes
    far = [f for f in found.findings if f.rule == "far from the roofline"]
    assert [f.kernel for f in far] == ["copy_kernel"]
    assert "10% of the DRAM bandwidth" in far[0].evidence


def test_diagnose_without_counters_runs_no_bound_rule(tmp_path):
    path = os.path.join(os.path.dirname(__file__), "data", "example_gpu.hatchet")
    found = diagnose(load(path))
    assert not {"memory-bound", "compute-bound", "latency-bound"} & set(found.ran)
    assert not [n for n in found.notes if "bound" in n]
    assert {"memory-bound", "compute-bound", "latency-bound"} <= set(
        diagnose(load(gpt_step(tmp_path))).ran)


# -- Triton's viewer ---------------------------------------------------------------------------

def test_tritons_viewer_opens_it_and_sums_the_counters_as_we_do(tmp_path):
    pytest.importorskip("triton.profiler.viewer")
    path = gpt_step(tmp_path)
    run = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m",
                          "counter_ns,dram_bytes", path], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    theirs = {}
    for line in run.stdout.splitlines():
        body = line.lstrip("│ ├└─")
        parts = body.split(" ", 2)
        if len(parts) == 3 and parts[2] in ("step", "forward", "backward", "attention", "ROOT"):
            theirs[parts[2]] = (float(parts[0]), float(parts[1]))
    prof = load(path)
    ns, dram = derive(prof, COUNTER_NS).values, derive(prof, DRAM_BYTES).values
    for name, path_ in (("ROOT", ()), ("step", ("step",)), ("forward", ("step", "forward")),
                        ("backward", ("step", "backward")),
                        ("attention", ("step", "forward", "attention"))):
        node = node_of(prof, *path_)
        assert theirs[name] == (pytest.approx(ns[node], rel=1e-3),
                                pytest.approx(dram[node], rel=1e-3)), name


# -- the page, drawn ---------------------------------------------------------------------------

MARKS_DRAWN = """
  const svg = doc.getElementById("roofsvg"), b = svg.getBoundingClientRect();
  const ctx = doc.getElementById("roofdots").getContext("2d"), ratio = win.devicePixelRatio || 1;
  const D = JSON.parse(doc.getElementById("data").textContent), P = D.roofline.points;
  const px = (x, y) => [...ctx.getImageData((x - b.left) * ratio, (y - b.top) * ratio, 1, 1).data];
  const dots = [];
  for (const name of new Set(P.i.map(i => D.nodes.name[i]))) {
    win.location.hash = "view=roofline&kernel=" + encodeURIComponent(name); await sleep(30);
    for (const c of doc.querySelectorAll("#roofsvg circle.sel")) {
      const k = +c.dataset.k, r = c.getBoundingClientRect(), x = (r.left + r.right) / 2, y = (r.top + r.bottom) / 2;
      const radius = +c.getAttribute("r");
      dots.push({name, src: P.sources[P.s[k]], centre: px(x, y),
                 corner: px(x + 0.85 * radius, y + 0.85 * radius)});
    }
  }
  return {dots, key: [...doc.querySelectorAll("#roofkey .key")].map(k => k.textContent)};"""


def test_the_page_draws_measured_dots_filled_declared_hollow_and_no_tensor_work_square(tmp_path):
    from test_html import BROWSER
    from test_html_views import drive

    if BROWSER is None:
        pytest.skip("no headless Chromium: `apt-get install chromium` (.ci/run does)")

    out = str(tmp_path / "r.html")
    assert CliRunner().invoke(viewer, ["--html", out, gpt_step(tmp_path)]).exit_code == 0
    got = drive(tmp_path, out, "view=roofline", MARKS_DRAWN)
    assert len(got["dots"]) == 7
    for dot in got["dots"]:
        alpha, corner = dot["centre"][3], dot["corner"][3]
        if dot["src"] == "declared":
            assert alpha < 60, dot  # hollow: a faint fill inside its ring
        else:
            assert alpha > 150, dot  # filled
        # a square fills its corners; a circle leaves them empty
        assert corner > 150 if dot["src"] == "no tensor work" else corner < 60, dot
    assert "measured by hardware counters" in got["key"]
    assert "declared by launch_metadata" in got["key"]
    assert ("no tensor work: placed at a nominal intensity (0.125 FLOP/byte); its distance to "
            "the memory roof (DRAM solid, L2 dashed) is its measured bandwidth fraction "
            "there") in got["key"]


def test_a_latency_bound_kernel_of_a_launch_bound_scope_is_only_worth_knowing(tmp_path):
    """3,000 launches of 1 us in a scope whose GPU is busy 10% of its CPU time: the host costs
    the time, not the kernel's latency."""
    loop = {"frame": {"name": "loop", "type": "function"}, "metrics": {"cpu_time (ns)": 30e6},
            "children": [measured("tiny_add", 3e6, count=3000, dram=0.05, issue=0.05, sm=0.3)]}
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, **{m: 0 for m in COUNTER_METRICS}},
            "children": [loop, measured(SMALL_MATMUL, 3e6, dram=0.1, tensor=0.1, tflops=0.05)]}
    path = tmp_path / "loop.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    got = verdicts(str(path))
    assert got["tiny_add"][0].info and "launch-bound" in got["tiny_add"][0].advice
    assert not got[SMALL_MATMUL][0].info  # outside it, a warning


def test_kernels_whose_counters_measured_no_dram_are_still_on_the_roofline(tmp_path):
    """An L2-resident matmul (no DRAM bytes, L2 bytes) is drawn against the L2 roof (dashed)
    by its L2 bytes; a short kernel whose fitted shares came to zero at both levels is drawn
    at the floor, and the note says how many of each."""
    from proton.viewer.derive import DRAM_FLOOR

    reduce = measured(REDUCE, 1e5, dram=0.0)
    reduce["metrics"][L2_BYTES] = 0.0
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, **{m: 0 for m in COUNTER_METRICS}},
            "children": [scope("step", measured(MATMUL, 1e6, dram=0.0, tensor=0.8, tflops=0.5),
                               reduce)]}
    path = tmp_path / "floor.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    d = html_data(tmp_path, str(path))
    got = {p["name"]: p for p in points(d)}
    assert set(got) == {MATMUL, REDUCE}
    assert got[REDUCE]["y"] == pytest.approx(NOMINAL_INTENSITY * DRAM_FLOOR, rel=1e-5)
    assert got[MATMUL]["x"] == pytest.approx(0.5 * PEAK16 * 0.9e-3 / 1e6, rel=1e-5)
    note = d["roofline"]["note"]
    assert "1 drawn against the L2 roof (dashed)" in note
    assert "1 with under 0.1 GB/s of memory traffic measured" in note
    assert any(r["level"] == "L2" for r in d["roofline"]["roofs"])


# -- issue 57: counters that never pass the hardware, a hierarchical roofline ------------------
H200_RUN = os.path.join(os.path.dirname(__file__), "data", "counters_h200.hatchet")
"""bench/probes/real_shapes.py's `counters` job on an H200 (main at 44bba74): warm-up adds and a
cuBLAS warm-up outside scopes, 64M adds, a 256 MiB copy, 200 adds of 1M fp32 (12 MiB, in L2),
short kernels, bf16 matmuls."""
ADD = "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<…>, std::array<…>>(…)"


def test_adds_that_live_in_l2_are_judged_against_the_l2_not_told_to_fix_dram():
    """The 200 L2-resident adds of the H200 run moved 7.6 TB/s through the L2 and 13% of the
    DRAM bandwidth: Nsight Compute's hierarchical roofline judges each level by its own roof,
    so they are judged by the L2's (15.4 TB/s on an H200, the GPU's own measure: specs.py),
    49% of it, not "far from the roofline: 13% of the DRAM bandwidth", and nothing tells them
    to fix DRAM traffic (the H200 run that sampled the L2's share itself read 45%: latency-bound
    there too, 2.3 us kernels)."""
    found = diagnose(load(H200_RUN))
    mine = [f for f in found.findings if f.path == "ROOT / l2_adds"]
    assert [f.rule for f in mine] == ["latency-bound"], [(f.rule, f.evidence) for f in mine]
    assert mine[0].evidence.startswith("L2 49% of its peak (7,609 GB/s), DRAM 13% of peak")
    assert "DRAM" not in mine[0].advice and "fuse" not in mine[0].advice
    # the adds that stream from DRAM are still judged by DRAM
    big = [f for f in found.findings if f.path == "ROOT / add64M" and f.rule == "memory-bound"]
    assert big and big[0].evidence.startswith("DRAM 93% of peak")


def test_no_view_of_the_h200_run_shows_a_rate_past_the_peak():
    """The H200 run's 64M adds read 101% SM active (sampled cycles at a changing clock): within
    format.PEAK_SLACK they read as 100% in -m and in --diagnose; no kernel's measured share of
    any peak is over 100% in any of them."""
    prof = load(H200_RUN)
    for spec in ("sm_active", "dram_throughput", "tensor_active", "issue_active",
                 "sm_throughput"):
        values = derive(prof, spec).values.dropna()
        assert (values <= 100).all(), (spec, values.max())
    add = node_of(prof, "add64M", next(c.frame["name"] for c in node_of(prof, "add64M").children))
    assert derive(prof, "sm_active").values[add] == 100
    rates = derive(prof, "dram_byte/s").values.dropna()
    assert (rates <= 2 * 6016 * 3201000 * 1e3 / 8).all()
    for f in diagnose(load(H200_RUN)).findings:
        for pct in (int(p) for p in __import__("re").findall(r"(\d+)% (?:active|of (?:its )?peak)",
                                                               f.evidence)):
            assert pct <= 100, f.evidence


def past_peak(tmp_path) -> str:
    """Warm-up adds read 126% SM active and 114% of the DRAM bandwidth (as a file written
    before the writer checked), a kernel the writer marked not measured, a healthy matmul."""
    warm = measured(ELEMENTWISE, 5.5e5, covered=1.0, dram=1.14, sm=1.26, issue=0.06)
    short = {"frame": {"name": REDUCE, "type": "function"},
             "metrics": {"time (ns)": 3e5, "count": 20, "device_id": "0", "device_type": "CUDA",
                         COUNTERS_UNRESOLVED_NS: 2.9e5}, "children": []}
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, **{m: 0 for m in COUNTER_METRICS}},
            "children": [warm, scope("step", short, measured(MATMUL, 2e6, dram=0.2, tensor=0.8,
                                                            issue=0.3, tflops=0.7))]}
    path = tmp_path / "past.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    return str(path)


def test_a_kernel_measured_past_the_peak_is_shown_as_not_measured_with_how_to_measure_it(
        tmp_path):
    """126% SM active is no measurement: -m leaves its rates blank, --diagnose judges it by no
    counter and says which kernels were not measured and how to measure them (a longer run, a
    smaller interval, counters:scopes=, Nsight Compute); so does the --html roofline."""
    path = past_peak(tmp_path)
    prof = load(path)
    warm = node_of(prof, ELEMENTWISE)
    for spec in ("sm_active", "dram_throughput", "dram_gbyte/s"):
        assert math.isnan(derive(prof, spec).values[warm]), spec
    found = diagnose(prof, "raw")
    assert not [f for f in found.findings if f.kernel == ELEMENTWISE]
    note = next(n for n in found.notes if "not measured by the counters" in n)
    assert note.startswith("2 kernels (0.840 ms sampled) not measured")
    for how in ("longer run", "counters:interval=US", "counters:scopes=NAME", "Nsight Compute"):
        assert how in note
    assert MATMUL in verdicts(path)  # the matmul beside them is judged as before
    d = html_data(tmp_path, path)
    assert "Not drawn: 2 kernels" in d["roofline"]["note"]
    assert {p["name"] for p in points(d)} == {MATMUL}


def test_a_kernel_at_the_l1_data_pipes_roof_is_memory_bound_there():
    """A shared-memory-heavy kernel: 20% of DRAM, 15% of the L2, its L1 data pipe 85% of its
    peak (l1_throughput_ns). At a roof (L1), not far from the roofline nor latency-bound."""
    k = measured("smem_transpose", 2e6, dram=0.2, issue=0.3, sm=0.95)
    c = k["metrics"][COUNTER_NS]
    k["metrics"].update({L1_THROUGHPUT_NS: 0.85 * c, L2_THROUGHPUT_NS: 0.15 * c})
    root = {"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, "count": 0, **{m: 0 for m in COUNTER_METRICS}},
            "children": [k]}
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "l1.hatchet")
        with open(path, "w") as f:
            json.dump([root, {"CUDA": {"0": H100}}], f)
        found = diagnose(load(path), "raw").findings
    assert [f.rule for f in found] == ["memory-bound"]
    assert found[0].evidence.startswith("L1 data pipe 85% of its peak, DRAM 20% of peak")
    assert "L1/shared-memory data pipe" in found[0].advice
