"""--diagnose's step rules (issue 50 item 5) on synthetic profiles: each fires on its case and
not on a near miss; copies are never judged as kernels; `-m mem_peak_bytes` and `gpu_idle/%`
read; the report's flame graph can be coloured by these metrics."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer
from proton.viewer.derive import derive
from proton.viewer.diagnose import diagnose
from proton.viewer.reader import load
from test_html import browse, needs_browser

H100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 5120}
MiB = 1 << 20


def node(name, metrics=None, *children):
    return {"frame": {"name": name, "type": "function"}, "metrics": dict(metrics or {}),
            "children": list(children)}


def kernel(name, ns, count=1, **more):
    return node(name, {"time (ns)": ns, "count": count, "device_id": "0",
                       "device_type": "CUDA", **more})


def copy(kind, ns, count, nbytes):
    """A copy node as the copies item writes them: time, count, bytes beside the kernels."""
    return node(f"memcpy {kind}", {"time (ns)": ns, "count": count, "bytes": nbytes,
                                   "device_id": "0", "device_type": "CUDA"})


def write(tmp_path, *children, name="p") -> str:
    # inclusive metrics carry a 0 on the root; scope_wall, gpu_idle and mem_* are own values
    root = node("ROOT", {"time (ns)": 0, "count": 0, "bytes": 0, "sync_time (ns)": 0,
                         "sync_count": 0}, *children)
    path = tmp_path / f"{name}.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    return str(path)


def found(path) -> dict:
    return {(f.rule, f.kernel): f for f in diagnose(load(path)).findings}


def rules(path) -> set[str]:
    return {f.rule for f in diagnose(load(path)).findings}


BIG = kernel("gemm", 10_000_000, count=100)


# -- pageable copy in a loop -----------------------------------------------------------------

def test_a_pageable_copy_in_a_loop_says_bytes_time_rate_and_the_fix(tmp_path):
    got = found(write(tmp_path, node("step", {}, BIG,
                                     copy("HtoD (pageable)", 2_000_000, 100, 800 * MiB))))
    f = got[("pageable copy in a loop", "memcpy HtoD (pageable)")]
    assert "100 copies from pageable memory, 800.00 MiB in all (8.00 MiB each) in 2.000 ms" \
        in f.evidence
    assert "419.4 GB/s achieved" in f.evidence  # 838,860,800 B / 2,000,000 ns
    assert "pin_memory" in f.advice and "non_blocking=True" in f.advice and not f.info


def test_a_pageable_device_to_host_copy_in_a_loop_is_named_too(tmp_path):
    got = found(write(tmp_path, node("step", {}, BIG,
                                     copy("DtoH (pageable)", 500_000, 50, 50 * MiB))))
    assert "pinned buffer" in got[("pageable copy in a loop", "memcpy DtoH (pageable)")].advice


@pytest.mark.parametrize("kind,count", [("HtoD (pageable)", 1), ("HtoD (pinned)", 100),
                                        ("DtoD", 100)])
def test_a_single_pageable_copy_or_a_pinned_one_is_no_finding(tmp_path, kind, count):
    assert "pageable copy in a loop" not in rules(
        write(tmp_path, node("step", {}, BIG, copy(kind, 2_000_000, count, 800 * MiB))))


def test_copies_are_never_judged_as_kernels(tmp_path):
    """A copy node with a grid-less, flop-less record of much time: no launch-shape, roofline
    or launch-bound finding names it; it is GPU time all the same, what shares are of."""
    c = copy("HtoD (pinned)", 50_000_000, 1000, 10 * 2**30)
    c["metrics"].update({"grid_blocks": 1, "block_threads": 32, "registers_per_thread": 255})
    d = diagnose(load(write(tmp_path, node("step", {}, BIG, c))))
    assert not [f for f in d.findings if f.kernel.startswith("memcpy")]
    assert d.gpu_ns == 60_000_000 and all(f.share <= 1 for f in d.findings)


# -- synchronization in a step ---------------------------------------------------------------

def test_a_sync_every_step_names_the_call_path_and_its_share_of_the_step(tmp_path):
    step = node("step", {"scope_wall (ns)": 100_000_000, "gpu_idle (ns)": 10_000_000}, BIG,
                node("loss_item", {"sync_time (ns)": 30_000_000, "sync_count": 100}))
    f = found(write(tmp_path, step))[("synchronization in a step", "scope loss_item")]
    assert f.path == "ROOT / step"
    assert "waited on the GPU 100 times here, 30.000 ms in all, 30% of the 100.000 ms of " \
           "scope step" in f.evidence
    assert ".item()" in f.advice and "non_blocking" in f.advice


def test_one_sync_or_a_negligible_one_is_no_finding(tmp_path):
    once = node("step", {"scope_wall (ns)": 100_000_000}, BIG,
                node("end", {"sync_time (ns)": 30_000_000, "sync_count": 1}))
    small = node("step", {"scope_wall (ns)": 100_000_000}, BIG,
                 node("poll", {"sync_time (ns)": 1_000_000, "sync_count": 100}))
    assert "synchronization in a step" not in rules(write(tmp_path, once, name="once"))
    assert "synchronization in a step" not in rules(write(tmp_path, small, name="small"))


def test_waits_longer_than_their_scope_are_no_share_of_it(tmp_path):
    """A file whose waits (30 ms) exceed the wall time of the scope around them (20 ms)
    disagrees with itself: the finding gives the waits, never a share over 100%."""
    step = node("step", {"scope_wall (ns)": 20_000_000}, BIG,
                node("loss_item", {"sync_time (ns)": 30_000_000, "sync_count": 100}))
    f = found(write(tmp_path, step))[("synchronization in a step", "scope loss_item")]
    assert f.evidence == "the host waited on the GPU 100 times here, 30.000 ms in all"


# -- idle GPU --------------------------------------------------------------------------------

def test_a_step_whose_gpu_idles_names_the_scope_and_the_share(tmp_path):
    step = node("step", {"scope_wall (ns)": 100_000_000, "gpu_idle (ns)": 38_000_000}, BIG)
    f = found(write(tmp_path, step))[("idle GPU", "scope step")]
    assert "the GPU ran nothing for 38.000 ms of the 100.000 ms the host spent in the scope (38%)" in f.evidence
    assert f.saves_ns == 38_000_000


def test_a_step_idle_under_the_threshold_is_no_finding(tmp_path):
    step = node("step", {"scope_wall (ns)": 100_000_000, "gpu_idle (ns)": 15_000_000}, BIG)
    assert "idle GPU" not in rules(write(tmp_path, step))


def test_gpu_idle_percent_is_idle_over_the_scopes_wall(tmp_path):
    prof = load(write(tmp_path, node("step", {"scope_wall (ns)": 100_000_000,
                                              "gpu_idle (ns)": 38_000_000}, BIG)))
    col = derive(prof, "gpu_idle/%")
    by = {n.frame["name"]: v for n, v in col.values.items()}
    assert by["step"] == pytest.approx(38.0) and by["gemm"] != by["gemm"]  # NaN: no wall
    result = CliRunner().invoke(viewer, ["-l", write(tmp_path, node(
        "s", {"scope_wall (ns)": 1, "gpu_idle (ns)": 1, "mem_peak_bytes": 5}), name="l")])
    assert result.exit_code == 0, result.output
    assert "gpu_idle/%" in result.output and "mem_peak_bytes" in result.output


# -- memory: leak and peak -------------------------------------------------------------------

def mem(alloc, freed, peak, live, first, n, grew, kept=None, keeping=None):
    """A scope's allocator metrics; with `kept`, what its n - 1 entries after the first keep
    (from `keeping` of them), as the history judges them (on a 140 GiB device)."""
    m = {"mem_alloc_bytes": alloc, "mem_freed_bytes": freed, "mem_peak_bytes": peak,
         "mem_live_bytes": live, "mem_live_first_bytes": first, "mem_count": n,
         "mem_grew_count": grew}
    if kept is not None:
        m.update({"mem_kept_bytes": kept, "mem_judged_count": n - 1,
                  "mem_kept_count": n - 1 if keeping is None else keeping,
                  "mem_device_bytes": 140 << 30})
    return m


def leaky_tree(grew=9, leak=4 * MiB, temp_peak=900 * MiB, keeping=None):
    """10 steps: `keep` allocates 4 MiB a step and keeps it, `temp` a 512 MiB temporary; live
    memory grows at every scope's exit, but only keep's own allocations stay."""
    base = 100 * MiB
    keep = node("keep", mem(10 * leak, 0, base + 10 * leak, base + 10 * leak, base + leak, 10,
                            grew, kept=9 * leak, keeping=keeping))
    temp = node("temp", mem(10 * 512 * MiB, 10 * 512 * MiB, temp_peak, base + 10 * leak,
                            base + leak, 10, grew, kept=0, keeping=0))
    step = node("step", mem(10 * (leak + 512 * MiB), 10 * 512 * MiB, temp_peak,
                            base + 10 * leak, base + leak, 10, grew, kept=0, keeping=0),
                BIG, keep, temp)
    return node("train", mem(10 * (leak + 512 * MiB), 10 * 512 * MiB, temp_peak,
                             base + 10 * leak, base + 10 * leak, 1, 0), step)


def test_a_scope_that_keeps_memory_every_step_is_named_a_leak(tmp_path):
    got = found(write(tmp_path, leaky_tree()))
    leaks = [k for (rule, k) in got if rule == "memory leak"]
    assert leaks == ["scope keep"]  # not step, which holds it, nor temp, which frees its own
    f = got[("memory leak", "scope keep")]
    assert "in 9 of its 9 entries after the first it allocated memory still allocated at " \
        "the profile's end: 36.00 MiB, 4.00 MiB per entry" in f.evidence
    assert ".detach()" in f.advice
    assert f.memory_share == pytest.approx(36 * MiB / (140 << 30))


def test_memory_kept_once_or_by_few_entries_is_no_leak(tmp_path):
    assert "memory leak" not in rules(write(tmp_path, leaky_tree(keeping=1), name="once"))
    assert "memory leak" not in rules(write(tmp_path, leaky_tree(keeping=4), name="few"))
    assert "memory leak" not in rules(write(tmp_path, leaky_tree(leak=0), name="flat"))


def test_the_memory_peak_names_the_innermost_scope_it_happened_in(tmp_path):
    f = found(write(tmp_path, leaky_tree()))[("memory peak", "scope temp")]
    assert f.info and f.path == "ROOT / train / step"
    assert "the job's peak, 900.00 MiB allocated at once" in f.evidence


def test_diagnose_command_prints_the_leak_and_the_peak(tmp_path):
    result = CliRunner().invoke(viewer, ["--diagnose", write(tmp_path, leaky_tree())])
    assert result.exit_code == 0, result.output
    assert "[memory leak]" in result.output and "[info: memory peak]" in result.output


def test_memory_metrics_are_shown_by_their_names(tmp_path):
    result = CliRunner().invoke(viewer, ["-m", "mem_peak_bytes,mem_live_bytes",
                                         write(tmp_path, leaky_tree())])
    assert result.exit_code == 0, result.output
    assert "mem_peak_bytes" in result.output and "943,718,400" in result.output.replace(
        "943718400", "943,718,400")


def test_tritons_viewer_opens_a_file_with_copies_waits_idle_and_memory(tmp_path):
    """Issue 50 item 6: Triton's own viewer reads a file holding every new metric (a copy node
    with bytes; waits, idle and allocator metrics on a scope) and shows their values."""
    pytest.importorskip("triton.profiler.viewer")
    tree = leaky_tree()
    step = tree["children"][0]
    step["metrics"].update({"scope_wall (ns)": 100_000_000, "gpu_idle (ns)": 38_000_000,
                            "sync_time (ns)": 2_000_000, "sync_count": 10})
    step["children"].append(copy("HtoD (pageable)", 1_000_000, 10, 40 * MiB))
    path = write(tmp_path, tree)

    def shown(metric: str) -> dict[str, float]:
        run = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m", metric,
                              path], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, (metric, run.stderr[-2000:])
        rows = (line.lstrip("\u2502\u251c\u2514\u2500 ").split(" ", 1)
                for line in run.stdout.splitlines() if line.strip())
        return {name: float(value) for value, name in rows}

    assert shown("time/ms")["step"] == pytest.approx(11.0)  # the gemm's 10 ms and the copy's 1
    assert shown("bytes")["memcpy HtoD (pageable)"] == 40 * MiB
    assert shown("mem_peak_bytes")["step"] == 900 * MiB
    assert shown("sync_count")["step"] == 10


# -- the report: the flame graph coloured by these metrics -----------------------------------

def page_data(path: str) -> dict:
    with open(path) as f:
        text = f.read()
    body = text[text.index('id="data">') + len('id="data">'):]
    return json.loads(body[: body.index("</script>")])


def test_the_report_carries_the_waits_idle_and_memory_columns_to_colour_by(tmp_path):
    tree = leaky_tree()
    tree["children"][0]["metrics"].update({"scope_wall (ns)": 100_000_000,
                                           "gpu_idle (ns)": 38_000_000})
    out = str(tmp_path / "r.html")
    result = CliRunner().invoke(viewer, ["--html", out, write(tmp_path, tree)])
    assert result.exit_code == 0, result.output
    d = page_data(out)
    assert d["columns"][0] == "time (ms)"  # the width stays the chosen metric
    for column in ("gpu_idle/%", "mem_peak_bytes", "mem_live_bytes", "mem_alloc_bytes"):
        assert column in d["columns"]
    idle = d["nodes"]["metrics"][d["columns"].index("gpu_idle/%")]
    assert idle[d["nodes"]["name"].index("step")] == pytest.approx(38.0)


@needs_browser
def test_the_flame_graph_is_coloured_by_the_metric_chosen(tmp_path):
    out = str(tmp_path / "r.html")
    result = CliRunner().invoke(viewer, ["--html", out, "-m", "mem_alloc_bytes",
                                         write(tmp_path, leaky_tree())])
    assert result.exit_code == 0, result.output
    d = page_data(out)
    by_kind = browse(out)
    shaded = browse(out, "shade=mem_peak_bytes")
    fills = lambda dom: {int(m[1]): m[2] for m in re.finditer(  # noqa: E731
        r'<rect data-id="(\d+)"[^>]*? fill="([^"]+)"', dom)}
    kinds, heat = fills(by_kind), fills(shaded)
    temp, keep = d["nodes"]["name"].index("temp"), d["nodes"]["name"].index("keep")
    assert kinds[temp].startswith("hsl(")  # by what a frame is: a scope's blue
    assert heat[temp].startswith("rgb(") and heat[temp] != kinds[temp]  # the hottest peak
    assert heat[keep].startswith("rgb(") and heat[keep] != heat[temp]  # a lower one
    assert '<option value="' + str(d["columns"].index("mem_peak_bytes")) + '" selected' in shaded
