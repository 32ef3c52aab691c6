"""A profile from a stranger (issue 46, items 4-7 and 16): what a file of a few KB to a few MB
can make the viewer spend, and the values that used to end in a traceback. Each bomb runs in a
child with bounded address space and time (test_viewer_input.bounded_viewer)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from proton.format_msgpack import packb
from proton.viewer.cli import viewer
from test_viewer_input import bounded_viewer, frame, write

DATA = os.path.join(os.path.dirname(__file__), "data")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import reader_memory  # noqa: E402  (its peak(): a view's peak memory in a child)


def show(*args, input=None):
    return CliRunner().invoke(viewer, list(args), input=input)


def one_line_error(result) -> str:
    """The one `Error: ...` line a bad input gets (exit 2, no traceback)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.startswith("Error: ")
    assert result.output.count("\n") == 1, result.output
    return result.output


def nested_list_text(levels: int) -> str:
    return "[" * levels + "]" * levels


# -- item 6: a deeply nested frame value --------------------------------------------------------

def nested_value_profile(levels: int) -> str:
    """A kernel frame whose extra key holds a list nested `levels` deep (JSON text)."""
    return ('[{"frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 0}, '
            '"children": [{"frame": {"name": "k", "type": "function", "x": '
            + nested_list_text(levels) + '}, "metrics": {"time (ns)": 5}, "children": []}]}, {}]')


def test_a_deeply_nested_frame_value_reads_in_linear_time(tmp_path):
    path = tmp_path / "nested.hatchet"
    path.write_text(nested_value_profile(600_000))  # 1.2 MB
    done, seconds, _ = bounded_viewer(str(path), timeout=30)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "k" in done.stdout and seconds < 30


def test_a_deeply_nested_msgpack_profile_reads_or_gets_one_line(tmp_path):
    value: list = []
    for _ in range(600_000):
        value = [value]
    root = frame("ROOT", **{"time (ns)": 0})
    root["children"].append({"frame": {"name": "k", "type": "function", "x": value},
                             "metrics": {"time (ns)": 5}, "children": []})
    doc = [root, {}]
    path = tmp_path / "nested.hatchet_msgpack"
    path.write_bytes(packb(doc))
    done, seconds, _ = bounded_viewer(str(path), timeout=30)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    # a deep tree too: 5,000 levels, past the msgpack package's own nesting limit
    deep = frame("ROOT", **{"time (ns)": 0})
    node = deep
    for i in range(5_000):
        child = frame(f"s{i}", **{"time (ns)": 1})
        node["children"].append(child)
        node = child
    path.write_bytes(packb([deep, {}]))
    done, _, _ = bounded_viewer(str(path), "-d", "4", timeout=30)  # ROOT, s0, s1, s2
    assert done.returncode == 0 and "s2" in done.stdout, done.stderr[-2000:]


def test_a_non_text_frame_key_in_msgpack_is_read(tmp_path):
    root = frame("ROOT", **{"time (ns)": 0})
    root["children"].append({"frame": {"name": "k", "type": "function", 7: "x", None: 1},
                             "metrics": {"time (ns)": 5, 3: 1}, "children": []})
    root["children"].append(frame("j", **{"time (ns)": 4}))  # siblings are sorted by frame
    path = tmp_path / "keys.hatchet_msgpack"
    path.write_bytes(packb([root, {}]))
    result = show(str(path))
    assert result.exit_code == 0, result.output
    assert "k" in result.output and "Traceback" not in result.output


# -- item 4: a mangled name built to expand exponentially ---------------------------------------

def _sub(i: int) -> str:
    digits, out = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", ""
    while True:
        out, i = digits[i % 36] + out, i // 36
        if i == 0:
            return f"S{out}_"


def bomb_name(levels: int, tag: str = "f") -> str:
    """f<A, B<A, A>, B<B<A, A>, B<A, A>>, ...>(): each level doubles the demangled text
    through back-references (27 levels: ~280 bytes that demangle to ~1.7 GB)."""
    parts, prev, nxt = ["1A"], 0, 1
    for _ in range(levels):
        parts.append(f"1BI{_sub(prev)}{_sub(prev)}E")
        prev, nxt = nxt + 1, nxt + 2
    return f"_Z{len(tag)}{tag}I" + "".join(parts) + "Evv"


def test_a_demangler_bomb_stays_raw_in_bounded_time_and_page_size(tmp_path):
    kernels = [frame(bomb_name(27, f"k{i}"), **{"time (ns)": 10 + i, "count": 1})
               for i in range(3)]
    kernels.append(frame("_ZN2at6native6kernelIfEEvT_", **{"time (ns)": 5, "count": 1}))
    path = write(tmp_path, frame("ROOT", *kernels, **{"time (ns)": 0, "count": 0}))
    assert os.path.getsize(path) < 2000
    done, seconds, _ = bounded_viewer(path, "--names", "full", timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert seconds < 20 and len(done.stdout) < 20_000
    assert all(bomb_name(27, f"k{i}")[:30] in done.stdout for i in range(3))  # raw, not 1.7 GB
    assert "at::native::kernel<float>(float)" in done.stdout  # a real name still demangles
    page = str(tmp_path / "r.html")
    done, seconds, _ = bounded_viewer("--html", page, path, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert seconds < 20 and os.path.getsize(page) < 1 << 20


def wide_name(i: int) -> str:
    """A name within every per-name bound (145 bytes, 3,113 characters demangled): T<...>
    of 10 arguments, written 24 times by back-reference."""
    return (f"_Z6f{i:05d}IN10aaaaaaaaaa10bbbbbbbbbbE1TI{'S0_' * 10}E{'S3_' * 24}Evv")


def test_many_names_each_within_bounds_make_a_page_bounded_by_the_names(tmp_path,
                                                                      monkeypatch):
    """Issue 59, item 12: 20,000 such names made a 5.5 MB profile an 81 MB page in 26 s;
    the names on a page now take at most 8x the file's names (past a 4 MiB floor, set to 0
    here to keep the test small), and the page says how many it left mangled."""
    from proton.viewer import demangle, html

    monkeypatch.setattr(html, "TOTAL_FLOOR", 0, raising=False)
    monkeypatch.setattr(demangle._worker, "balance", 0.0, raising=False)
    kernels = [frame(wide_name(i), **{"time (ns)": 10 + i, "count": 1}) for i in range(1000)]
    path = write(tmp_path, frame("ROOT", *kernels, **{"time (ns)": 0, "count": 0}))
    page = tmp_path / "r.html"
    result = show("--html", str(page), path)
    assert result.exit_code == 0, result.output
    text = page.read_text()
    body = text[text.index('id="data">') + len('id="data">'):]
    data = json.loads(body[: body.index("</script>")].replace("<\\/", "</"))
    names = sum(map(len, data["nodes"]["name"])) + sum(map(len, data["nodes"]["full"].values()))
    raw = sum(len(wide_name(i)) for i in range(1000)) + len("ROOT")
    assert names < 9 * raw, (names, raw)  # each name's own bound allowed 3.7 MB here
    kept = sum(n.startswith("_Z") for n in data["nodes"]["name"])
    assert 0 < kept < 1000 and data["summary"].endswith(
        f"{kept:,} C++ names shown as the file has them (mangled): the demangled names "
        "together reached their bound, 8x the names' own length")
    assert "f00000<aaaaaaaaaa::bbbbbbbbbb, T<" in data["nodes"]["full"]["1"]  # the first shows


def test_the_tree_says_how_many_names_it_left_mangled(tmp_path, monkeypatch):
    from proton.viewer import demangle

    monkeypatch.setattr(demangle._worker, "balance", 0.0, raising=False)
    kernels = [frame(wide_name(i), **{"time (ns)": 10 + i, "count": 1}) for i in (7000, 7001)]
    result = show(write(tmp_path, frame("ROOT", *kernels, **{"time (ns)": 0, "count": 0})))
    assert result.exit_code == 0, result.output
    assert "f07000<aaaaaaaaaa::bbbbbbbbbb, T<…>" in result.stdout  # the first pays for itself
    assert wide_name(7001) in result.stdout and result.stdout.endswith(
        "1 C++ name shown as the file has it (mangled): the demangled names together reached "
        "their bound, 8x the names' own length\n")


# -- item 16: values that ended in a traceback --------------------------------------------------

def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as JSON itself (and Perfetto) does."""
    def refuse(word):
        raise ValueError(f"{word} is not JSON")
    return json.loads(text, parse_constant=refuse)


def trace_file(tmp_path, name: str, facts: dict, ts=1.0) -> str:
    doc = {"traceEvents": [{"name": "k", "ph": "X", "ts": ts, "dur": 1.0, "pid": "GPU 0",
                            "tid": 0}], "otherData": facts}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("size", [[1, 2], {"a": 1}, 2.5, True])
def test_a_trace_whose_world_size_is_no_number_merges(tmp_path, size):
    files = [trace_file(tmp_path, f"t.rank{r}.chrome_trace",
                        {"rank": r, "world_size": size, "t0_ns": 1000 + r}) for r in (0, 1)]
    result = show("--output", "trace", *files)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    doc = strict_json(result.stdout)
    assert doc["otherData"]["ranks"] == [0, 1]


def test_the_merged_trace_is_json_without_nan(tmp_path):
    files = [trace_file(tmp_path, "t.rank0.chrome_trace", {"rank": 0, "t0_ns": 1000},
                        ts=float("nan")),
             trace_file(tmp_path, "t.rank1.chrome_trace", {"rank": 1, "t0_ns": 2000},
                        ts=float("inf")),
             trace_file(tmp_path, "t.rank2.chrome_trace", {"rank": 2, "t0_ns": 3000},
                        ts=1.7e308)]
    result = show("--output", "trace", *files)
    assert result.exit_code == 0, result.output
    events = [e for e in strict_json(result.stdout)["traceEvents"] if e["name"] == "k"]
    assert len(events) == 3 and events[2]["ts"] == 1.7e308


def infinite_counts(tmp_path, fixture: str) -> str:
    with open(os.path.join(DATA, fixture)) as f:
        doc = json.load(f)
    stack = list(doc[0]["children"])
    while stack:
        node = stack.pop()
        if "count" in node["metrics"]:
            node["metrics"]["count"] = float("inf")
        stack.extend(node["children"])
    path = tmp_path / fixture
    path.write_text(json.dumps(doc))  # Infinity, as json writes it
    return str(path)


def test_an_infinite_count_in_diagnose_and_source(tmp_path):
    path = infinite_counts(tmp_path, "pcsampling.hatchet")
    for args in (["--diagnose", path], ["--source", "softmax_kernel", path],
                 ["--source", "matmul_kernel", path]):
        result = show(*args)
        assert "Traceback" not in result.output and not isinstance(
            result.exception, (OverflowError, ValueError)), (args, result.output)
        assert result.exit_code in (0, 2), (args, result.output)
        if result.exit_code == 2:
            one_line_error(result)


@pytest.mark.parametrize("given", ["9" * 20, "1" * 400, "-5", "0", "many", str(1 << 21)])
def test_a_read_limit_past_reason_is_one_line(tmp_path, monkeypatch, given):
    path = write(tmp_path, frame("ROOT", **{"time (ns)": 0}))
    monkeypatch.setenv("PROTON_VIEWER_MAX_MB", given)
    text = one_line_error(show(path))
    assert "PROTON_VIEWER_MAX_MB" in text


# -- item 5: memory bounded by what is read -----------------------------------------------------

def peak_mb(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    """proton-viewer ARGS in a child: the run and its peak resident MiB (bench/reader_memory)."""
    done, mb, _ = reader_memory.peak(*args)
    return done, mb


def vectors_file(tmp_path, name: str, frames: int, kinds: int) -> str:
    """`frames` kernels, each with a 256-element vector metric under one of `kinds` names."""
    kids = [frame(f"k{i}", **{"time (ns)": i, f"v{i % kinds}": [1] * 256}) for i in range(frames)]
    path = tmp_path / name
    path.write_text(json.dumps([frame("ROOT", *kids, **{"time (ns)": 0}), {}],
                               separators=(",", ":")))
    return str(path)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM (Linux)")
def test_memory_stays_within_25x_what_is_read(tmp_path):
    """docs/safety.md's figure: a profile takes up to ~25x its size beyond the viewer's own memory;
    one whose frames x metrics would take more is refused in one line."""
    _, base = peak_mb(write(tmp_path, frame("ROOT", **{"time (ns)": 0})))
    for kinds, frames in ((1, 9000), (8, 4500)):  # 5.2 MB; 2.6 MB over 2,048 metrics
        path = vectors_file(tmp_path, f"v{kinds}.hatchet", frames, kinds)
        mb = os.path.getsize(path) / 2**20
        done, peak = peak_mb(path, "-d", "1")
        assert "Traceback" not in done.stderr, done.stderr[-2000:]
        if done.returncode:
            assert done.stderr.startswith("Error: ") and "cells" in done.stderr
        assert peak - base < 25 * mb, (kinds, peak, base, mb)
    assert done.returncode == 2  # 9.2 million cells from 2.6 MB: more than it may take


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM (Linux)")
def test_a_trace_merge_writes_as_it_goes_within_10x_what_is_read(tmp_path):
    """Issue 59, item 11: --output trace held the merged trace whole, 121x its input (46x
    here); now the files' text, one event at a time and an entry per process (measured 4.6x)."""
    tiny = tmp_path / "tiny.chrome_trace"
    tiny.write_text('{"traceEvents": []}')
    _, base = peak_mb("--output", "trace", str(tiny))
    path = tmp_path / "many.chrome_trace"  # each event its own process: the most it writes
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "pid": i, "ts": i}
                                                for i in range(100_000)]}))
    done, peak = peak_mb("--output", "trace", str(path))
    assert done.returncode == 0, done.stderr[-2000:]
    events = json.loads(done.stdout)["traceEvents"]
    assert len(events) == 300_000 and len({e["pid"] for e in events}) == 100_000
    assert peak - base < 10 * os.path.getsize(path) / 2**20, (peak, base)


# -- item 7: the page's Warps tab and search, bounded whatever the file says --------------------

def timeline(events: int, ctas: int, clock_khz: float = 1_755_000.0) -> dict:
    return {"device": 0, "clock_khz": clock_khz, "warps": 1, "scopes": ["k"],
            "sm": [i % 132 for i in range(events)], "cta": [i % ctas for i in range(events)],
            "warp": [0] * events, "scope": [0] * events,
            "start_ns": [float(i % 97) for i in range(events)], "cycles": [1000] * events}


def test_a_timeline_with_no_gpus_clock_is_left_out_with_a_note():
    from proton.viewer.timelines import check
    for clock in (1e-300, 5e-324, 0.5):
        assert check(json.dumps(timeline(4, 2, clock))) == "device or clock_khz is not a GPU's"
    assert isinstance(check(json.dumps(timeline(4, 2))), dict)


NODE = __import__("shutil").which("node")
PAGE_JS = os.path.join(os.path.dirname(__file__), "..", "viewer", "page.js")


def page_helpers(script: str) -> dict:
    """Run `script` in node after page.js's block of bounded helpers; what it prints (JSON)."""
    with open(PAGE_JS) as f:
        js = f.read()
    start = js.index("// -- bounded helpers")
    block = js[start:js.index("// -- end of bounded helpers", start)]
    done = subprocess.run([NODE, "-e", block + "\n" + script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.skipif(NODE is None, reason="no node to run the page's JavaScript")
def test_the_pages_search_axis_and_rows_are_bounded():
    got = page_helpers("""
      const t = Date.now(), name = "a".repeat(5000) + "!";
      const bomb = searchPattern("(a+)+$"), hit = bomb.test(name), literal = bomb.test("x(a+)+$");
      const slow = [".*.*.*.*.*.*x", "(a|a)(a|a)(a|a)(a|a)(a|a)(a|a)(a|a)(a|a)(a|a)(a|a)(a|a)(a|a)!",
                    "a{1,99}a{1,99}a{1,99}$", "(?=a*a*a*a*a*b)"].map(p => searchPattern(p).test(name));
      const regex = ["^k11", "gemm|softmax", "k1[0-2]$"].map(p => searchPattern(p) instanceof RegExp);
      const k = searchPattern("^k11");
      const cta = new Array(1000000).fill(0).map((_, i) => 999999 - i);
      const T = {cta, sm: cta.map(c => c % 132)}, t2 = Date.now(), rows = ctaRows(T, 512);
      console.log(JSON.stringify({hit, literal, slow, regex, k11: [k.test("K110"), k.test("xk11")],
        search_ms: t2 - t, rows_ms: Date.now() - t2, rows: rows.rows.length, total: rows.total,
        first: rows.rows[0], inf: axisTicks(Infinity), tiny: axisTicks(5e-324).length,
        nan: axisTicks(NaN), big: axisTicks(1e300).length, usual: axisTicks(8000)}));
    """)
    assert got["hit"] is False and got["literal"] is True and got["slow"] == [False] * 4
    assert got["regex"] == [True] * 3 and got["k11"] == [True, False]
    assert got["search_ms"] < 2000 and got["rows_ms"] < 5000
    assert got["rows"] == 512 and got["total"] == 1_000_000 and got["first"] == {"c": 0, "sm": 0}
    assert got["inf"] == [0] and got["nan"] == [0] and got["tiny"] <= 11 and got["big"] <= 11
    assert got["usual"] == [0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000]


def timeline_profile(tmp_path, t: dict) -> str:
    from proton.format import WARP_TIMELINE
    kernel = frame("k", **{"time (ns)": 5, "count": 1, "device_id": "0", "device_type": "CUDA"})
    kernel["frame"][WARP_TIMELINE] = json.dumps(t)
    return write(tmp_path, frame("ROOT", kernel, **{"time (ns)": 0, "count": 0}),
                 name="t.hatchet")


def test_a_search_link_that_backtracks_forever_is_plain_text_in_the_page(tmp_path):
    from test_html import BROWSER, browse, data, node, rects, write as html
    if BROWSER is None:
        pytest.skip("no headless Chromium")
    names = ["a" * 40 + "!", "x(a+)+$y", "gemm"]
    kids = [frame(n, **{"time (ns)": 10 + i}) for i, n in enumerate(names)]
    page = html(tmp_path, write(tmp_path, frame("ROOT", *kids, **{"time (ns)": 0})))
    found = rects(browse(page, "search=(a%2B)%2B%24"))  # a link's (a+)+$: hung the page
    matched = {r["id"] for r in found if r["match"]}
    d = data(page)
    assert matched == {node(d, "x(a+)+$y")}  # as text
    found = rects(browse(page, "search=gem|!$"))  # no group, no repetition: a regex still
    assert {r["id"] for r in found if r["match"]} == {node(d, "gemm"), node(d, names[0])}


def test_the_warps_tab_draws_a_bounded_number_of_rows(tmp_path):
    from test_html import BROWSER, write as html
    from test_html_views import drive
    if BROWSER is None:
        pytest.skip("no headless Chromium")
    page = html(tmp_path, timeline_profile(tmp_path, timeline(100_000, 100_000)))
    got = drive(tmp_path, page, "view=warps", """
      const c = doc.getElementById("warpspans");
      return {labels: doc.querySelectorAll("#warpsvg text.cta").length, height: c.height,
              note: doc.getElementById("warpnote").textContent,
              ticks: doc.querySelectorAll("#warpsvg text.tick").length};""")
    assert got["labels"] == 512 and got["height"] <= 32_000 * 4
    assert "The first 512 of 100,000 CTAs (by SM) are drawn." in got["note"]
    assert 2 <= got["ticks"] <= 11


def test_a_metric_named_like_the_tables_own_columns_reads(tmp_path):
    """The fuzz's find: a metric "node" or "name" took the table's own column (the tree then
    failed comparing a number with a frame); such a metric is left out of the table."""
    a = frame("a", **{"time (ns)": 5, "node": 3})
    a["metrics"]["name"] = "x"
    kids = [a, frame("b", **{"time (ns)": 4})]
    result = show(write(tmp_path, frame("ROOT", *kids, **{"time (ns)": 0})))
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "a" in result.output and "b" in result.output
