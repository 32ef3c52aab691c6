"""No view shows a figure that cannot be (issue 57 item 1): every view of every profile fixture,
of real recordings and of a seeded sample of the fuzz corpus, is read back as a user reads it
(the tree text, --output json and csv with every metric `-l` lists, --diagnose and its JSON, the
--html report's JSON, a job's ranks merged) and checked against what the quantities are:

  * a share of a whole (`x/%`, `(%)` columns, `% of GPU time`, util, every `N%` --diagnose
    writes) lies in [0, 100%];
  * a rate (tflop*/s, gbyte/s, measured dram/tensor rates, GB/s and TFLOP/s in --diagnose's
    evidence, roofline points) is at most the peak of its GPU (viewer/specs.py; a frame with no
    GPU of its own: the fastest GPU of the device table);
  * an inclusive measurement (time, count, bytes, flops, samples, waits, counters) of a child is
    at most its parent's.

The peaks here are the device's published ones (specs.py's anchors), not what the viewer
computes from them for its own columns. A mutated file may hold any garbage; what the viewer
shows of it must still obey. What hardware counters measure (mode="counters": measured rates
and activities, util and roofline points of kernels with counters; issue 57 item 5, bounded at
its source) is checked by a test of its own.
"""
from __future__ import annotations

import copy
import csv
import io
import json
import os
import random
import re
import sys
import time

import pytest
from click.testing import CliRunner

from proton.viewer.cli import viewer
from proton.viewer.reader import parse
from proton.viewer.specs import PRECISIONS, bandwidth, peak

DATA = os.path.join(os.path.dirname(__file__), "data")
REAL = os.path.join(DATA, "rs")
"""Profiles recorded on H200s by bench/probes/real_shapes.sh (issue 57): `loop` (copies, a
readback, a host sleep, a leak; memory=True), `counters` (mode="counters"), `pcs` (pcsampling
with hook=triton), `ddp2_host` (2 ranks, rank 1 slow on the host) and `ddp4_gpu5` (4 ranks,
rank 3 with a 5% larger batch): the rank files and the job file each job wrote."""
BENCH = os.path.join(os.path.dirname(__file__), "..", "bench")

SINGLE = sorted(os.path.join(DATA, f) for f in os.listdir(DATA) if f.endswith(".hatchet")) + [
    os.path.join(REAL, f) for f in ("loop.hatchet", "counters.hatchet", "pcs.hatchet",
                                    "ddp2_host.rank0.hatchet", "ddp4_gpu5.rank3.hatchet",
                                    "ddp2_host.hatchet", "ddp4_gpu5.hatchet")]
RANKS = [[os.path.join(REAL, f"ddp2_host.rank{r}.hatchet") for r in range(2)],
         [os.path.join(REAL, f"ddp4_gpu5.rank{r}.hatchet") for r in range(4)]]
CASES = [[p] for p in SINGLE] + RANKS

NON_NEGATIVE = re.compile(r"^(time|sync_time|comm_time|counter_ns|dram_bytes|l2_bytes|"
                          r"tensor_flops|count|sync_count|bytes|flops(8|16|32|64)?|num_samples|"
                          r"num_stalled_samples|stalled_\w+|\w+_active_ns|counters_shared_ns)"
                          r"( \((s|ms|us|ns)\))?$")
"""Inclusive measurements of the file format (never negative; a user's metric may be)."""
RATE = re.compile(r"^(?:(?P<measured>dram|l2|tensor)_)?(?P<prefix>[gt]?)"
                  r"(?P<what>flop(?P<width>8|16|32|64)?|byte)/s$")
PREFIX = {"": 1.0, "g": 1e9, "t": 1e12}
STATS = (" min", " mean", " max")
SLACK = 1e-9
"""Float rounding allowed on a bound (a share of exactly 100% is fine)."""

COUNTERS = "[counters] "
"""The mark of a figure the hardware counters measured."""
MEASURED = re.compile(r"^(dram_|l2_|tensor_|issue_active|sm_active|sm_throughput)")
"""Columns of measured figures (derive.py's counter columns)."""
MEASURED_WORDS = re.compile(r"DRAM \d+% of peak|tensor pipe \d+%|issue \d+%|SMs \d+%|"
                            r"\(measured")
"""--diagnose's evidence of measured figures (diagnose._measured, _far)."""


def invoke(args: list[str], strict: bool = True):
    return CliRunner().invoke(viewer, args, catch_exceptions=not strict)


# -- what the views show ---------------------------------------------------------------------

def listed(paths: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(inclusive, exclusive, derived) as `proton-viewer -l` lists them."""
    result = invoke(["-l", *paths], strict=False)
    assert result.exit_code == 0, result.output
    got = {}
    for line in result.stdout.splitlines():
        label, _, names = line.partition(":")
        if label.strip() in ("inclusive", "exclusive", "derived"):
            got[label.strip()] = [n.strip() for n in names.split(", ")
                                  if n.strip() and n.strip() != "(none)"]
    return got.get("inclusive", []), got.get("exclusive", []), got.get("derived", [])


def specs_of(paths: list[str]) -> list[str]:
    """Every derived metric -l lists, the inclusive measurements by name, and the device of
    each kernel (to judge its rates against its own GPU)."""
    inclusive, exclusive, derived = listed(paths)
    extra = [m for m in inclusive if NON_NEGATIVE.match(m)]
    device = ["device_id"] if "device_id" in exclusive and len(paths) == 1 else []
    return [s for s in dict.fromkeys(derived + extra + device) if "," not in s]


def text_rows(text: str, headers: list[str]) -> list[dict]:
    """The tree text's cells under each header (right-justified columns, two spaces apart)."""
    lines = text.splitlines()
    head, ends, at = lines[0], [], 0
    for h in headers:
        at = head.index(h, at) + len(h)
        ends.append(at)
    out = []
    for line in lines[1:1 + sum(1 for _ in lines)]:
        if not line.strip() or len(line) < ends[-1] or line[ends[-1]:ends[-1] + 2] != "  ":
            break  # the rows end where the notes begin
        starts = [0] + ends[:-1]
        out.append({h: _number(line[s:e]) for h, s, e in zip(headers, starts, ends)})
    return out


def _number(cell) -> float | None:
    if cell is None:
        return None
    if isinstance(cell, (int, float)):
        return float(cell)
    cell = str(cell).strip().replace(",", "")
    if not cell:
        return None
    try:
        return float(cell)
    except ValueError:
        return None


def parents_of(depths: list[int]) -> list[int]:
    """Each row's parent row (-1 for the root), from the rows' depths in tree order."""
    out, stack = [], []
    for i, d in enumerate(depths):
        del stack[d:]
        out.append(stack[-1] if stack else -1)
        stack.append(i)
    return out


class Peaks:
    """A device table's roofs: the fastest rate a GPU (or any GPU of the table) can reach."""

    def __init__(self, paths: list[str]) -> None:
        self.gpus: dict = {}
        for path in paths:
            try:
                devices = parse(path).devices
            except Exception:  # noqa: BLE001 - the view said why; no peaks to judge by
                continue
            gpus = devices.get("CUDA", {}) if isinstance(devices, dict) else {}
            self.gpus.update({str(k): v for k, v in gpus.items() if isinstance(v, dict)})

    def flops(self, gpu: dict, width: str | None, measured: bool) -> float | None:
        names = (["16-bit tensor"] if measured else
                 PRECISIONS[int(width)] if width else [n for p in PRECISIONS.values() for n in p])
        roofs = [peak(gpu, n) for n in names]
        return max((r for r in roofs if r), default=None)

    def of(self, header: str, device) -> float | None:
        """The peak rate of `header` (a RATE column) on GPU `device` (None: any GPU)."""
        m = RATE.match(header)
        if m is None:
            return None
        key = None if device is None else str(int(device)) if isinstance(device, float) \
            else str(device)
        gpus = [self.gpus[key]] if key in self.gpus else list(self.gpus.values())
        if m["measured"] == "l2":
            return None  # no L2 roof in specs.py
        if m["what"] == "byte":
            roofs = [bandwidth(g) for g in gpus]
        else:
            roofs = [self.flops(g, m["width"], m["measured"] == "tensor") for g in gpus]
        known = [r for r in roofs if r]
        return max(known) if known and len(known) == len(roofs) else None


def base_of(header: str) -> str | None:
    """The metric a column shows: a merged view's `X min/mean/max` is X's; None for the rank
    of the max and max/mean (no share, rate or sum)."""
    if header.endswith((" max rank", " max/mean")):
        return None
    for stat in STATS:
        if header.endswith(stat):
            return header[: -len(stat)]
    return header


def check_rows(where: str, rows: list[dict], parents: list[int], peaks: Peaks,
               measured: bool = False) -> list[str]:
    """Shares in [0, 100], util in [0, 1], rates under their GPU's peak, inclusive measures of
    a child under its parent's. measured: the profile has counters (util is theirs)."""
    bad = []
    for i, row in enumerate(rows):
        name = " / ".join(row.get("path") or []) or f"row {i}"
        device = row.get("device_id")
        for header, value in row.items():
            base = base_of(header) if isinstance(header, str) else None
            v = _number(value) if header not in ("path", "depth") else None
            if base is None or v is None or v != v:
                continue
            mark = COUNTERS if MEASURED.match(base) or measured and base.startswith("util") \
                else ""
            where_ = mark + where
            if base.endswith("%") or base.endswith("(%)"):
                if not -SLACK <= v <= 100 * (1 + SLACK):
                    bad.append(f"{where_}: {name}: {header} {v:g} is not a share (0-100%)")
            elif base == "util":
                if not -SLACK <= v <= 1 + SLACK:
                    bad.append(f"{where_}: {name}: util {v:g} is not a share (0-1)")
            elif RATE.match(base):
                m = RATE.match(base)
                top = peaks.of(base, device)
                per_s = v * PREFIX[m["prefix"]]
                if top is not None and per_s > top * (1 + SLACK):
                    bad.append(f"{where_}: {name}: {header} {v:g} over the GPU's peak "
                               f"{top / PREFIX[m['prefix']]:g}")
            elif NON_NEGATIVE.match(base):
                if v < 0:
                    bad.append(f"{where_}: {name}: {header} {v:g} is negative")
                parent = parents[i]
                up = _number(rows[parent].get(header)) if parent >= 0 else None
                if up is not None and up == up and v > up + abs(up) * SLACK:
                    bad.append(f"{where_}: {name}: {header} {v:g} over its parent's {up:g}")
    return bad


PERCENT = re.compile(r"(?<![\w.])(-?\d[\d,]*(?:\.\d+)?)%")
OF_RATE = re.compile(r"([\d,]+(?:\.\d+)?) of ([\d,]+(?:\.\d+)?) GB/s")
ROOF = re.compile(r"([\d,]+(?:\.\d+)?) TFLOP/s and ([\d,]+(?:\.\d+)?) GB/s at .*?peak "
                  r"([\d,]+(?:\.\d+)?) TFLOP/s, ([\d,]+) GB/s")


def check_words(where: str, text: str) -> list[str]:
    """Every `N%` in a text is a share of a whole (0-100%); `A of B GB/s` has A <= B; a roofline
    finding's TFLOP/s under its peak."""
    bad = []
    for line in text.splitlines():
        mark = COUNTERS if MEASURED_WORDS.search(line) else ""
        for m in PERCENT.finditer(line):
            v = float(m[1].replace(",", ""))
            if not 0 <= v <= 100:
                bad.append(f"{mark}{where}: {m[0]} in {line.strip()[:160]!r}")
        for m in OF_RATE.finditer(line):
            a, b = (float(x.replace(",", "")) for x in m.groups())
            if a > b:
                bad.append(f"{mark}{where}: {m[0]} in {line.strip()[:160]!r}")
        for m in ROOF.finditer(line):
            flops, top = float(m[1].replace(",", "")), float(m[3].replace(",", ""))
            if flops > top:
                bad.append(f"{where}: {flops} TFLOP/s over the peak {top} in "
                           f"{line.strip()[:120]!r}")
    return bad


def check_diagnosis(where: str, data: dict) -> list[str]:
    bad = []
    for kind in ("groups", "findings"):
        for item in data.get(kind, []):
            share = item.get("share")
            if share is not None and not -SLACK <= share <= 1 + SLACK:
                bad.append(f"{where}: {kind[:-1]} {item.get('kernel')!r} share {share:g}")
    for f in data.get("findings", []):
        bad += check_words(f"{where} evidence", str(f.get("evidence", "")))
    return bad


def html_data(text: str) -> dict:
    body = text[text.index('id="data">') + len('id="data">'):]
    return json.loads(body[: body.index("</script>")])


def check_html(where: str, data: dict, peaks: Peaks, measured: bool = False) -> list[str]:
    """The report's frames (as the tree), kernels table, roofline and findings."""
    nodes, columns = data["nodes"], data["columns"]
    depths, parents = [], nodes["parent"]
    for p in parents:
        depths.append(0 if p < 0 else depths[p] + 1)
    rows = [{"path": [nodes["name"][i]], **{c: col[i] for c, col in zip(columns,
                                                                           nodes["metrics"])}}
            for i in range(len(parents))]
    bad = check_rows(f"{where} frames", rows, parents, peaks, measured)
    for i, value in enumerate(nodes["value"]):  # the flame graph: a frame within its parent
        p = parents[i]
        if p >= 0 and value is not None and nodes["value"][p] is not None \
                and value > nodes["value"][p] * (1 + SLACK):
            bad.append(f"{where} flame: {nodes['name'][i]} wider than its parent")
    kernels = data["kernels"]
    heads = kernels["columns"][2:]
    table = [{"path": [nodes["name"][r[0][0]]], **dict(zip(heads, r[2:]))} for r in kernels["rows"]]
    bad += check_rows(f"{where} kernels", table, [-1] * len(table), peaks, measured)
    points = data["roofline"]["points"]
    roofs = {r["kind"]: r["peak"] for r in data["roofline"]["roofs"]}
    for i, (y, frac) in enumerate(zip(points.get("y") or [], points.get("frac") or [])):
        mark = COUNTERS if points["sources"][points["s"][i]] != "declared" else ""
        if frac is not None and not 0 <= frac <= 1 + SLACK:
            bad.append(f"{mark}{where} roofline: point {i} at {frac:g} of its roof")
        kind = points["kinds"][points["roof"][i]]
        tops = [roofs[k] for k in kind.split(", ") if k in roofs]
        if tops and y > max(tops) * (1 + 1e-5):
            bad.append(f"{mark}{where} roofline: point {i} at {y:g} FLOP/s over its roof "
                       f"{max(tops):g}")
    bad += check_diagnosis(f"{where} findings", {"groups": data["findings"]["groups"],
                                                 "findings": data["findings"]["items"]})
    return bad


def violations(paths: list[str], *, strict: bool = True) -> list[str]:
    """What every view of `paths` shows that cannot be. strict: each view must succeed (a
    fixture); else a view that refuses the file (exit 2, one line) is skipped (a mutated one)."""
    name = "+".join(os.path.basename(p) for p in paths)
    peaks = Peaks(paths)
    bad: list[str] = []

    def run(view: str, args: list[str]):
        result = invoke([*args, *paths], strict)
        if result.exit_code != 0:  # a mutated file refused (one line), or a crash: the
            assert not strict, f"{name} {view}: {result.output[-500:]}"  # fuzzer's to find
            return None
        return result.stdout

    try:
        specs = specs_of(paths)
    except AssertionError:
        if strict:
            raise
        return bad
    measured = any(MEASURED.match(s) for s in specs)
    metrics = ["-m", ",".join(specs)] if specs else []
    out = run("json", ["--output", "json", *metrics])
    if out is not None:
        rows = json.loads(out)
        parents = parents_of([r["depth"] for r in rows])
        bad += check_rows(f"{name} json", rows, parents, peaks, measured)
        text = run("tree", metrics)
        if text is not None and rows:
            headers = [k for k in rows[0] if k not in ("path", "depth")]
            if " merged: each metric" in text.split("\n", 1)[0]:
                text = text.split("\n", 1)[1]  # a job's ranks: the line that says so
            shown = text_rows(text, headers)
            for r, s in zip(rows, shown):
                s["path"] = r["path"]
            bad += check_rows(f"{name} tree", shown, parents[:len(shown)], peaks, measured)
        table = run("csv", ["--output", "csv", *metrics])
        if table is not None and table.strip():
            got = list(csv.DictReader(io.StringIO(table)))
            for r in got:
                r["path"] = r["path"].split(" / ")
            bad += check_rows(f"{name} csv", got, parents_of([int(r["depth"]) for r in got]),
                              peaks, measured)
    text = run("diagnose", ["--diagnose"])
    if text is not None:
        bad += check_words(f"{name} --diagnose", text)
    out = run("diagnose json", ["--diagnose", "--output", "json"])
    if out is not None:
        bad += check_diagnosis(f"{name} --diagnose json", json.loads(out))
    page = run("html", ["--html", "-", *metrics])
    if page is not None:
        bad += check_html(f"{name} --html", html_data(page), peaks, measured)
    return bad


# -- the fixtures and the real recordings ----------------------------------------------------

_FOUND: dict[str, list[str]] = {}


def found(key: str, make) -> list[str]:
    """Violations of a case, computed once for the tests that split them by origin (FOUND_ONCE
    keeps those tests in one process under xdist)."""
    if key not in _FOUND:
        _FOUND[key] = make()
    return _FOUND[key]


def named(paths: list[str]) -> str:
    return "+".join(os.path.basename(p) for p in paths)


FOUND_ONCE = pytest.mark.xdist_group("invariants")
"""The tests that read `found`: one xdist worker runs them all (the fuzz corpus alone takes up
to FUZZ_SECONDS; made on two workers, it would take that twice)."""


@FOUND_ONCE
@pytest.mark.parametrize("paths", CASES, ids=[named(c) for c in CASES])
def test_every_view_of_every_fixture_shows_only_figures_that_can_be(paths):
    got = found(named(paths), lambda: violations(paths))
    assert [v for v in got if not v.startswith(COUNTERS)] == []


# -- what a file says that cannot be, shown ----------------------------------------------------

H100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 5120}


def node(name, *children, **metrics):
    return {"frame": {"name": name, "type": "function"}, "metrics": metrics,
            "children": list(children)}


def gpu_kernel(name, ns, **more):
    return node(name, **{"time (ns)": ns, "count": 1, "device_id": "0", "device_type": "CUDA",
                         **more})


def write(tmp_path, *children, name="p") -> str:
    root = node("ROOT", *children, **{"time (ns)": 0, "count": 0, "flops16": 0, "bytes": 0})
    path = tmp_path / f"{name}.hatchet"
    path.write_text(json.dumps([root, {"CUDA": {"0": H100}}]))
    return str(path)


def test_a_negative_time_is_left_out_and_said_not_summed_into_its_parent(tmp_path):
    """A kernel of -5 ms beside one of 2 ms: ROOT read -3 ms and the 2 ms kernel -67% of it."""
    path = write(tmp_path, node("step", gpu_kernel("a", 2e6), gpu_kernel("b", -5e6)))
    result = CliRunner().invoke(viewer, ["--output", "json", "-m", "time/ms,time/%", path])
    rows = {r["path"][-1]: r for r in json.loads(result.stdout)}
    assert rows["ROOT"]["time (ms)"] == 2.0 and rows["a"]["time/%"] == 100.0
    assert rows["b"]["time (ms)"] is None
    assert "1 value of 'time (ns)' left out: negative, infinite, not a number" in result.stderr


def test_idle_time_over_the_scopes_wall_time_is_left_out(tmp_path):
    path = write(tmp_path, node("step", gpu_kernel("a", 2e6),
                                **{"scope_wall (ns)": 10e6, "gpu_idle (ns)": 30e6}))
    result = CliRunner().invoke(viewer, ["--output", "json", "-m", "gpu_idle/%", path])
    assert [r["gpu_idle/%"] for r in json.loads(result.stdout)] == [None, None, None]
    assert "over its 'scope_wall (ns)'" in result.stderr
    assert "[idle GPU]" not in CliRunner().invoke(viewer, ["--diagnose", path]).stdout


def test_a_step_part_over_the_steps_window_is_left_out(tmp_path):
    """A step of 10 ms whose file says the host sat in a sync for 1e30 ns (a stranger's file,
    the fuzz corpus's f94): the part is left out and said, and --diagnose's step line and
    idle finding give no share of over 100%."""
    path = write(tmp_path, node("step", gpu_kernel("a", 2e6),
                                **{"step_wall (ns)": 10e6, "step_count": 1,
                                   "step_compute (ns)": 2e6, "step_idle_host (ns)": 8e6,
                                   "step_idle_sync (ns)": 1e30}))
    result = CliRunner().invoke(viewer, ["--diagnose", path])
    assert "over its 'step_wall (ns)'" in result.stderr
    shares = [int(p) for p in re.findall(r"\((\d+)%\)", result.stdout)]
    assert shares and max(shares) <= 100, result.stdout
    assert "host in a sync" not in result.stdout


def test_declared_work_past_the_gpus_peak_is_left_blank_and_said(tmp_path):
    """1e12 fp16 FLOPs in 1 ms is 1,000 TFLOP/s on an H100 SXM (988 at most): the declared
    flops overstate the work, so neither its rate nor its util is a figure; 4e11 in 1 ms is
    40% of the peak and shown."""
    path = write(tmp_path, gpu_kernel("over", 1e6, flops16=1e12, bytes=1e6),
                 gpu_kernel("fine", 1e6, flops16=4e11, bytes=1e6))
    result = CliRunner().invoke(viewer, ["--output", "json", "-m", "tflop16/s,util", path])
    rows = {r["path"][-1]: r for r in json.loads(result.stdout)}
    assert rows["over"]["tflop16/s"] is None and rows["over"]["util"] is None
    assert rows["fine"]["tflop16/s"] == 400.0
    assert rows["fine"]["util"] == pytest.approx(400 / 988.2, rel=0.01)
    assert "tflop16/s: 1 frame left blank" in result.stderr
    assert "util: 1 kernel left out" in result.stderr
    page = html_data(CliRunner().invoke(viewer, ["--html", "-", path]).stdout)
    assert len(page["roofline"]["points"]["x"]) == 1
    assert "1 kernel not drawn: declared flops or bytes" in page["roofline"]["note"]


def test_a_share_of_a_metric_with_negative_parts_is_left_blank(tmp_path):
    """A user metric of +5 and -3 (say a loss change): 5 is not 250% of anything."""
    path = write(tmp_path, node("a", gpu_kernel("k", 1e6), **{"delta (exc)": 5}),
                 node("b", gpu_kernel("j", 1e6), **{"delta (exc)": -3}))
    result = CliRunner().invoke(viewer, ["--output", "json", "-m", "delta/%", path])
    assert result.exit_code == 0, result.output
    assert [r["delta/%"] for r in json.loads(result.stdout)] == [None] * 5
    assert "delta/%: 2 frames left blank" in result.stderr


# -- the fuzz corpus -------------------------------------------------------------------------

FUZZ_FILES = 300
FUZZ_SECONDS = 150.0
"""A seeded sample of bench/fuzz_viewer.py's mutations of the fixtures and the real single-rank
recordings (its tree mutator, in this process), as many as fit in this time: what the viewer
shows of a mutated file obeys the same bounds. (Job files are left out: their ranks' statistics
under mutation are reported to the job-file reader's owner.)"""
SEEDS = [p for p in SINGLE if ".rank" in p or os.path.dirname(p) == DATA
         or os.path.basename(p) in ("loop.hatchet", "counters.hatchet", "pcs.hatchet")]


def fuzz_docs(n: int, seed: int) -> list[str]:
    """n mutated fixtures as JSON text (made with a deep stack: a mutation may nest a value
    200,000 lists deep)."""
    from proton.viewer import deep

    return deep.call(_fuzz_docs, n, seed)


def _fuzz_docs(n: int, seed: int) -> list[str]:
    sys.path.insert(0, BENCH)
    try:
        import fuzz_viewer
    finally:
        sys.path.remove(BENCH)
    rng = random.Random(seed)
    seeds = []
    for path in SEEDS:
        with open(path) as f:
            seeds.append(json.load(f))
    out = []
    while len(out) < n:
        doc = copy.deepcopy(rng.choice(seeds))
        fuzz_viewer.mutate_tree(rng, doc)
        try:  # the bombs and 200,000-deep values the fuzzer also makes are its own business
            text = json.dumps(doc, allow_nan=True)
        except (ValueError, RecursionError):
            continue
        if len(text) < 400_000 and "1BI" not in text:
            out.append(text)
    return out


def fuzz_violations(folder) -> tuple[int, list[str]]:
    def make() -> list[str]:
        start, bad, seen = time.monotonic(), [], 0
        for i, text in enumerate(fuzz_docs(FUZZ_FILES, seed=57)):
            if time.monotonic() - start > FUZZ_SECONDS:
                break
            path = os.path.join(folder, f"f{i}.hatchet")
            with open(path, "w") as f:
                f.write(text)
            bad += violations([path], strict=False)
            seen += 1
        return [f"{seen}"] + bad
    got = found("fuzz", make)
    return int(got[0]), got[1:]


@FOUND_ONCE
def test_the_fuzz_corpus_shows_only_figures_that_can_be(tmp_path_factory):
    seen, got = fuzz_violations(tmp_path_factory.mktemp("fuzz"))
    assert seen >= 50, f"only {seen} mutated files in {FUZZ_SECONDS:g} s"
    bad = [v for v in got if not v.startswith(COUNTERS)]
    assert bad == [], f"{len(bad)} impossible figures in {seen} mutated files:\n" + \
        "\n".join(bad[:40])


# -- hardware counters -----------------------------------------------------------------------

@FOUND_ONCE
def test_hardware_counters_never_read_past_the_hardware(tmp_path_factory):
    """Measured rates, activities, util and roofline points of every fixture and of the fuzz
    corpus, bounded as every other figure."""
    got = [v for c in CASES for v in found(named(c), lambda c=c: violations(c))]
    got += fuzz_violations(tmp_path_factory.mktemp("fuzz"))[1]
    assert [v for v in got if v.startswith(COUNTERS)] == []
