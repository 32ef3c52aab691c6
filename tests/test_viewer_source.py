"""proton-viewer on PC-sampling profiles: --source KERNEL beside its code, the tree's notes on
kernels without lines, PC metrics in -l/-m, and Triton's viewer on the same file.

The profile is tests/data/pcsampling.hatchet (written by tests/data/make_pcsampling.py); its line
frames hold SOURCE_DIR where the folder of tests/data/pc_kernel_source.py goes.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest
from click.testing import CliRunner

from conftest import viewer_in_terminal
from proton.viewer.cli import viewer
from proton.viewer.errors import listing
from proton.viewer.reader import load
from proton.viewer.render import fold as render_fold
from proton.viewer.source import KernelSamples, LineSamples, Samples, find_kernel, source_files
from proton.viewer.source_roots import SourceRoots
from proton.viewer.source_view import window

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
FIXTURE = os.path.join(DATA, "pcsampling.hatchet")
SOURCE = os.path.join(DATA, "pc_kernel_source.py")
NO_LINE_INFO = "the cubin has no line info (compile with -lineinfo)"
RECORDED = os.path.join(DATA, "pcsampling_recorded.hatchet")
"""`proton -m pcsampling` on an H200, of pc_recorded_source.py run as /tmp/mm.py."""


def _generator():
    spec = importlib.util.spec_from_file_location("make_pcsampling",
                                                  os.path.join(DATA, "make_pcsampling.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def in_checkout(monkeypatch):
    """As a user in their checkout: the kernels' source is under the current folder (the
    viewer shows source only there, beside the profile, or under a --source-root)."""
    monkeypatch.chdir(os.path.dirname(DATA))


@pytest.fixture
def profile(tmp_path) -> str:
    """The fixture with its line frames pointing at this checkout's pc_kernel_source.py."""
    path = tmp_path / "pc.hatchet"
    with open(FIXTURE) as f:
        path.write_text(f.read().replace(_generator().SOURCE_DIR, DATA))
    return str(path)


def show(*args):
    return CliRunner().invoke(viewer, list(args))


def line_samples(doc: list, line: int) -> int:
    """num_samples of pc_kernel_source.py:LINE summed over every node of the file."""
    total, stack = 0, [doc[0]]
    while stack:
        node = stack.pop()
        if node["frame"]["name"].endswith(f"pc_kernel_source.py:{line}@matmul_kernel"):
            total += node["metrics"]["num_samples"]
        stack.extend(node["children"])
    return total


def test_fixture_is_what_its_generator_writes():
    gen = _generator()
    with open(FIXTURE) as f:
        assert json.load(f) == json.loads(json.dumps(gen.build(gen.SOURCE_DIR)))


def test_hot_line_is_marked_with_its_samples_share_and_stalls(profile):
    result = show("--source", "matmul_kernel", "--width", "120", profile)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    with open(profile) as f:
        hot = line_samples(json.load(f), 18)
    assert hot == 652  # 400 under forward + 252 under backward
    assert f"▶     {hot}  65.2%  math_pipe_throttle 64%, wait 36%        18 │         acc += " \
           "tl.dot(a, b)" in lines
    marked = [line for line in lines if line.startswith("▶")]
    assert [m.split("│")[0].split()[-1] for m in marked] == ["16", "17", "18"]  # top 3, >= 5%
    assert "       30   3.0%  lg_throttle 60%, drain 40%              20 │     tl.store(" \
           "c_ptr + rm[:, None] * N + rn[None, :], c)" in lines  # 3%: not marked


def test_summary_sums_both_call_paths_and_counts_unmapped_samples(profile):
    result = show("--source", "matmul", profile)  # a regex naming one kernel
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:2] == [
        "matmul_kernel: 1,000 samples, 69.1% stalled (math_pipe_throttle 36%, wait 28%, "
        "long_scoreboard 25%), 2 call paths, 20 samples not mapped to a line",
        "not mapped to a line: some of its PCs have no line in the cubin's line info"]
    k = find_kernel(load(profile), "matmul_kernel")
    assert k.paths == 2 and k.unmapped == 20 and k.total.samples == 1000
    by_line = {(os.path.basename(ls.file), ls.line): ls.counts for ls in k.lines}
    assert by_line[("pc_kernel_source.py", 16)].samples == 160  # 120 + 40
    assert by_line[("pc_kernel_source.py", 16)].stalls == {"long_scoreboard": 110,
                                                           "lg_throttle": 20, "wait": 10}
    assert k.lines[0].line == 18
    # "selected" is a warp issuing, not stalled (as Nsight Compute counts it)
    hot = by_line[("pc_kernel_source.py", 18)]
    assert "selected" not in hot.stalls and hot.stalled == 250 + 140 == sum(hot.stalls.values())


def test_window_is_the_sampled_span_with_context(profile):
    out = show("--source", "matmul_kernel", profile).output
    assert "@triton.jit" in out and "import triton" not in out  # lines 6.. of 1..20
    code = [line.split(" │ ", 1)[1] for line in out.splitlines() if " │ " in line]
    with open(SOURCE) as f:
        assert code[1:] == f.read().splitlines()[5:20]  # after the "source" header, piped:
    # one output line per source line, however long


def test_long_unsampled_runs_are_elided():
    assert window([10, 40], 100) == [7, 8, 9, 10, 11, 12, 13, None, 37, 38, 39, 40, 41, 42, 43]
    assert window([2, 12], 13) == list(range(1, 14))  # a short run stays
    assert window([5], 6) == [2, 3, 4, 5, 6]
    assert window([0, 2], 9) == [0, 1, 2, 3, 4, 5]  # line 0 (no line) still drawn


def test_kernel_file_comes_before_hotter_helper_files(tmp_path):
    kernel_file, helper = tmp_path / "k.py", tmp_path / "helpers.py"
    kernel_file.write_text("def add_kernel(x):\n    return x\n")
    helper.write_text("def inlined(x):\n    return x * 2\n")
    lines = [LineSamples(str(helper), 2, "add_kernel", Samples(90.0)),
             LineSamples(str(kernel_file), 2, "add_kernel", Samples(10.0))]
    kernel = KernelSamples("add_kernel", 1, Samples(100.0), 0.0, lines, [])
    roots = SourceRoots((str(tmp_path),))
    assert [sf.path for sf in source_files(kernel, roots)] == [str(kernel_file), str(helper)]


def test_missing_source_file_prints_its_lines_without_code(profile):
    result = show("--source", "softmax_kernel", "--width", "100", "--source-root", "/", profile)
    assert result.exit_code == 0, result.output
    assert result.output == (
        "softmax_kernel: 80 samples, 68.8% stalled (long_scoreboard 73%, wait 27%), 1 call path, "
        "0 samples \nnot mapped to a line\n"
        "\n"
        "/gone/softmax.py: 80 samples (100.0% of the kernel)\n"
        "source file not found on this machine, nor by its name under a source root; add "
        "--source-root DIR or\n--source-map /gone=DIR (DIR: where it is here); the sampled lines "
        "only\n"
        "  samples      %  top stalls                     line\n"
        "▶      60  75.0%  long_scoreboard 80%, wait 20%     7\n"
        "▶      20  25.0%  wait 100%                         9\n")
    matmul = show("--source", "matmul_kernel", "--source-root", "/", profile).output
    assert matmul.index(SOURCE + ":") < matmul.index("/gone/helpers.py: 20 samples (2.0% of")


def test_kernel_without_lines_says_why_and_shows_its_stalls(profile):
    result = show("--source", "elementwise", profile)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:] == [
        f"no source lines: {NO_LINE_INFO}",
        "stall reasons (share of the stalled samples):",
        "  20   66.7%  wait",
        "  10   33.3%  long_scoreboard"]
    assert "50 samples, 60.0% stalled (wait 67%, long_scoreboard 33%)" in result.output


def test_kernel_with_samples_but_no_line_children_and_no_reason(tmp_path):
    path = tmp_path / "p.hatchet"
    path.write_text(json.dumps([{"frame": {"name": "ROOT"}, "metrics": {"num_samples": 0},
                                 "children": [{"frame": {"name": "k"}, "children": [],
                                               "metrics": {"num_samples": 7}}]}, {}]))
    result = show("--source", "k", str(path))
    assert result.exit_code == 0, result.output
    assert "no source lines: no line children in this profile" in result.output
    assert "k: 7 samples, 0.0% stalled, 1 call path, 7 samples not mapped" in result.output


@pytest.mark.parametrize("kernel,message", [
    ("kernel", "--source 'kernel' matches 5 kernels: matmul_kernel, memcpy_kernel, "
               "softmax_kernel, void at::native::elementwise_kernel<128, 2>"),
    ("nope", "no kernel named or matching 'nope'; kernels in this profile: matmul_kernel, "),
    ("memcpy_kernel", "kernel 'memcpy_kernel' has no PC samples, though 4 other kernels here "
                      "have them: its 10 launches ran 0.020 ms in all, less than any sampled "
                      "kernel here (the least, 0.030 ms): too little for the sampler"),
    ("(", "neither a kernel's name nor a valid regular expression"),
])
def test_unknown_ambiguous_or_unsampled_kernel_is_one_line_and_status_2(profile, kernel,
                                                                         message):
    result = show("--source", kernel, profile)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_source_with_tree_options_is_refused(profile):
    result = show("--source", "matmul", "-m", "time/ms", profile)
    assert result.exit_code == 2 and "--source shows one kernel's source lines" in result.output


def test_width_folds_code_and_keeps_every_character(profile):
    result = show("--source", "matmul_kernel", "--width", "80", profile)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    code = "".join(line.split(" │ ", 1)[1] for line in lines if " │ " in line)
    with open(SOURCE) as f:
        assert code == "source" + "".join(f.read().splitlines()[5:20])
    assert "▶     652  65.2%  math_pipe_throttle 64%    18 │" in result.output  # one reason


def test_terminal_output_is_highlighted_and_hot_lines_coloured(profile):
    text = viewer_in_terminal("--source", "matmul", "--width", "120", profile)
    hot = next(line for line in text.splitlines() if "acc +=" in line)
    assert hot.startswith("\x1b[1;31m▶")  # the mark, bold red
    assert "\x1b[94" in text  # keywords (def, for) coloured by the Python lexer
    assert "\x1b" not in show("--source", "matmul", profile).output  # piped: plain


def test_tree_notes_name_the_kernels_with_samples_but_no_lines(profile):
    result = show(profile)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [
        "1 kernel (matmul_kernel) has samples not mapped to a source line: some of its PCs "
        "have no line in the cubin's line info",  # under backward: lines, and 8 without
        "2 kernels (void at::native::elementwise_kernel<128, 2>(int, at::native::Op), "
        "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp)) have samples but no "
        f"source lines: {NO_LINE_INFO}"]
    assert "no source lines" not in show(os.path.join(DATA, "recorded.hatchet")).output
    # the recorder writes its reason of one kernel ("its cubin ..."); of two, it is each one's
    last = show(os.path.join(DATA, "diagnose_recorded.hatchet")).output.splitlines()[-1]
    assert last.startswith("2 kernels (") and " have samples but no source lines: each one's " \
        "cubin has no line table" in last, last


def test_pc_metrics_are_listed_and_shown(profile):
    listed = show("-l", profile).output
    assert "num_samples" in listed and "stalled_long_scoreboard" in listed
    assert "num_samples/%" in listed
    result = show("-m", "num_samples,stalled_long_scoreboard,num_samples/%", "--output", "json",
                  profile)
    assert result.exit_code == 0, result.output
    rows = {tuple(r["path"][1:]): r for r in json.loads(result.output)}
    matmul = rows[("forward", "matmul_kernel")]
    assert matmul["num_samples"] == 700 and matmul["stalled_long_scoreboard"] == 130
    assert matmul["num_samples/%"] == pytest.approx(700 / 1155 * 100)
    assert rows[()]["num_samples/%"] == pytest.approx(100)
    assert rows[("forward", "matmul_kernel", f"{SOURCE}:18@matmul_kernel")]["num_samples"] == 400


@pytest.mark.parametrize("path", [FIXTURE, RECORDED])
@pytest.mark.parametrize("metrics", ["num_samples,num_stalled_samples",
                                     "num_samples/%,stalled_wait"])
def test_tritons_viewer_reads_the_file_with_our_numbers(path, metrics):
    pytest.importorskip("triton.profiler.viewer")
    from test_triton_viewer import ours, same, theirs

    expected = theirs(path, "-m", metrics)
    got = ours(path, "-m", metrics)
    assert ("ROOT", "forward", "matmul_kernel") in expected and len(expected) >= 15
    assert set(got) == set(expected)
    for path, values in expected.items():
        assert all(same(a, b) for a, b in zip(got[path], values)), (path, got[path], values)


def test_recorded_profile_marks_its_hottest_lines_summed_over_both_scopes(tmp_path):
    """A real file: a Triton matmul under two scopes, cuBLAS and torch kernels without lines."""
    with open(RECORDED) as f:
        text = f.read()
    per_line: dict[int, int] = {}
    stack = [json.loads(text)[0]]
    while stack:
        node = stack.pop()
        name = node["frame"]["name"]
        if name.startswith("/tmp/mm.py:") and name.endswith("@matmul_kernel"):
            n = int(name.split(":")[1].split("@")[0])
            per_line[n] = per_line.get(n, 0) + node["metrics"]["num_samples"]
        stack.extend(node["children"])
    path = tmp_path / "rec.hatchet"
    path.write_text(text.replace("/tmp/mm.py", os.path.join(DATA, "pc_recorded_source.py")))
    result = show("--source", "matmul_kernel", str(path))
    assert result.exit_code == 0, result.output
    total = sum(per_line.values())
    assert result.output.startswith(f"matmul_kernel: {total:,} samples, ")
    assert ", 2 call paths, 0 samples not mapped to a line" in result.output.splitlines()[0]
    marked = {int(row.split("│")[0].split()[-1]): row for row in result.output.splitlines()
              if row.startswith("▶")}
    hottest = sorted(per_line, key=per_line.get, reverse=True)[:3]
    assert set(marked) == set(hottest) and "acc += tl.dot(a, b)" in marked[13]
    for n, row in marked.items():
        assert row.split()[1:3] == [f"{per_line[n]:,}", f"{per_line[n] / total:.1%}"], row
    cublas = show("--source", "nvjet", str(path))
    assert cublas.exit_code == 0, cublas.output
    assert "no source lines: its cubin has no line info (compile with -lineinfo)" in \
        cublas.output


def test_unknown_kernel_error_cuts_long_kernel_names_shown_demangled():
    result = show("--source", "relu", RECORDED)
    assert result.exit_code == 2
    assert "at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace..., " \
           in result.output and "matmul_kernel, nvjet_sm90_" in result.output
    assert len(result.output) < 400 and len(result.output.strip().splitlines()) == 1


# -- which files a profile may make the viewer read --------------------------------------------

def sampled_profile(tmp_path, *files: str) -> str:
    """A profile whose kernel `k` has 10 samples on line 1 of each of `files`."""
    lines = [{"frame": {"name": f"{file}:1@k"}, "children": [],
              "metrics": {"num_samples": 10, "num_stalled_samples": 10, "stalled_wait": 10}}
             for file in files]
    path = tmp_path / "p.hatchet"
    path.write_text(json.dumps([{"frame": {"name": "ROOT"}, "metrics": {"num_samples": 0},
                                 "children": [{"frame": {"name": "k"}, "children": lines,
                                               "metrics": {"num_samples": 0}}]}, {}]))
    return str(path)


def html_source(tmp_path, *args: str) -> dict:
    """The source heat of `--html`'s page: {shown path: its lines' code}."""
    page = str(tmp_path / "r.html")
    result = show("--html", page, *args)
    assert result.exit_code == 0, result.output
    with open(page) as f:
        text = f.read()
    body = text[text.index('id="data">') + len('id="data">'):]
    data = json.loads(body[:body.index("</script>")])
    return {f["path"] + (f" ({f['missing']})" if f["missing"] else ""):
            "".join(line.get("code", "") for line in f["lines"])
            for k in data["source"] for f in k["files"]}


def test_proc_dev_and_sys_are_never_read_even_through_a_symlink_or_a_root(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("PROTON_TEST_TOKEN", "tok-8f3a")
    link = tmp_path / "env.py"
    link.symlink_to("/proc/self/environ")
    path = sampled_profile(tmp_path, "/proc/self/environ", str(link), "/dev/zero",
                           "/proc/self/cwd/tests/data/pc_kernel_source.py")
    result = show("--source", "k", "--source-root", "/", path)
    assert result.exit_code == 0, result.output
    assert "tok-8f3a" not in result.output and "@triton.jit" not in result.output
    assert result.output.count("not shown: files under /proc, /dev and /sys are never read; "
                               "the sampled lines only") == 4
    pages = html_source(tmp_path, "--source-root", "/", path)
    assert set(pages.values()) == {""}
    assert all(p.endswith(" (Not shown: files under /proc, /dev and /sys are never read; the "
                          "sampled lines only)") for p in pages)


def test_file_outside_the_profiles_folder_and_the_current_one_is_shown_only_when_allowed(
        tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.py").write_text("TOKEN = 'tok-8f3a'\n")
    (tmp_path / "run").mkdir()
    path = sampled_profile(tmp_path / "run", str(elsewhere / "secret.py"))
    result = show("--source", "k", path)
    assert result.exit_code == 0, result.output
    assert "tok-8f3a" not in result.output
    assert (f"not shown: not under the profile's folder, the current folder or a --source-root; "
            f"add --source-root {elsewhere} to show it; the sampled lines only") in result.output
    assert "tok-8f3a" not in "".join(html_source(tmp_path, path).values())
    allowed = show("--source", "k", "--source-root", str(elsewhere), path)
    assert "TOKEN = 'tok-8f3a'" in allowed.output
    assert "TOKEN = 'tok-8f3a'" in html_source(tmp_path, "--source-root", str(elsewhere), path)[
        str(elsewhere / "secret.py")]


def test_source_beside_the_profile_is_shown_but_hidden_folders_and_other_files_are_not(
        tmp_path):
    (tmp_path / "kernel.py").write_text("def k(): pass  # beside the profile\n")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id.py").write_text("KEY = 'key-1'\n")
    (tmp_path / "id_rsa").write_text("KEY = 'key-2'\n")
    path = sampled_profile(tmp_path, str(tmp_path / "kernel.py"), str(tmp_path / ".ssh/id.py"),
                           str(tmp_path / "id_rsa"))
    out = show("--source", "k", path).output
    assert "# beside the profile" in out and "key-" not in out
    assert (f"not shown: in a hidden folder or file; add --source-root {tmp_path / '.ssh'} to "
            "show it") in out
    assert "not shown: not a source file (the viewer shows .py, .cu," in out
    assert "KEY = 'key-1'" in show("--source", "k", "--source-root", str(tmp_path / ".ssh"),
                                   path).output


def test_a_fifo_named_as_source_is_not_opened(tmp_path):
    os.mkfifo(tmp_path / "k.py")  # opening it to read would wait for a writer for ever
    result = show("--source", "k", sampled_profile(tmp_path, str(tmp_path / "k.py")))
    assert result.exit_code == 0, result.output
    assert "not shown: not a regular file; the sampled lines only" in result.output


DIAGNOSED = os.path.join(DATA, "diagnose_recorded.hatchet")
"""Recorded on an H200 in a checkout at /work/main: its lines name /work/main/tests/..."""
FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
ADD = ("at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
       "std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, "
       "std::array<char*, 2ul>)")


@pytest.mark.parametrize("name", [
    ADD,  # as --names full prints it
    "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<…>, "
    "std::array<…>>(…)",  # as the tree prints it (folded)
    r"CUDAFunctorOnSelf_add<float>",  # a regex over the demangled name
    r"CUDAFunctorOnSelf_addIfE",  # a regex over the raw one
])
def test_source_finds_a_kernel_by_its_demangled_name_or_a_regex_over_either(name):
    result = show("--source", name, DIAGNOSED)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<…>, "
        "std::array<…>>(…): 2,630 samples")  # the header shows it as the tree does
    full = show("--source", name, "--names", "full", DIAGNOSED)
    assert full.output.startswith(ADD + ": 2,630 samples")


CXXFILT = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add"
           "<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, "
           "std::array<char*, 2ul>)")
"""What `c++filt` prints for the ADD kernel's raw name: its return type, its parameters."""


@pytest.mark.parametrize("name", [
    CXXFILT,  # the whole of c++filt's output
    CXXFILT.replace("> >", ">>"),  # as LLVM's demangler spaces it
    "\n".join(render_fold(ADD, 40)),  # copied from a tree row folded over several lines
    "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<...>, "
    "std::array<...>>(...)",  # the folded name typed with ASCII dots
    listing(["at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add"
             "<…>, std::array<…>>(…)"], longest=80),  # cut short, as an error lists it
])
def test_source_takes_a_shown_or_cxxfilt_name_literally(name):
    result = show("--source", name, "--names", "full", DIAGNOSED)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(ADD + ": 2,630 samples")


CLAMP_CXXFILT = (
    'void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::lau'
    'nch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::'
    'ClampLimits)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::{lambd'
    'a(c10::Half)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::launch'
    '_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::Cla'
    'mpLimits)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::{lambda(c'
    '10::Half)#1}, std::array<char*, 2ul>)'
)
"""c++filt's output for the clamp kernel of pcsampling_recorded.hatchet (the issue's case)."""


def test_source_takes_cxxfilts_output_for_a_sampled_kernel_with_lambdas_and_namespaces():
    result = show("--source", CLAMP_CXXFILT, RECORDED)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("at::native::vectorized_elementwise_kernel<8, at::native::"
                                    "(anonymous namespace)::launch_clamp_scalar(…)")
    assert "samples" in result.output.splitlines()[0]


def unsampled_fill(tmp_path) -> str:
    """diagnose_recorded.hatchet with the FillFunctor kernel's PC samples left out, as a
    sampler that missed it writes it: its one 0.8 us launch drew 2 samples in the H200
    recording of 2026-11-29 and none in the H100 one of 2026-11-23."""
    with open(DIAGNOSED) as f:
        doc = json.load(f)
    (fill,) = [k for scope in doc[0]["children"] for k in scope["children"]
               if k["frame"]["name"] == FILL]
    fill["metrics"] = {k: v for k, v in fill["metrics"].items()
                       if k not in ("num_samples", "num_stalled_samples")
                       and not k.startswith("stalled_")}
    path = tmp_path / "unsampled_fill.hatchet"
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_kernel_too_short_to_be_sampled_is_said_so_in_a_sampled_profile(tmp_path):
    path = unsampled_fill(tmp_path)
    result = show("--source", "FillFunctor", path)
    assert result.exit_code == 2 and "pcsampling`" not in result.output
    assert result.output == (
        "Error: kernel 'at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<…>, "
        "std::array<…>>(…)' has no PC samples, though 7 other kernels here have them: its 1 "
        "launch ran 0.001 ms in all, less than any sampled kernel here (the least, 0.704 ms): "
        "too little for the sampler, which samples each SM once every 2**N cycles; sample more "
        "often (-m pcsampling:interval=N, N under the default 10) or run it longer\n")
    assert show("--source", FILL, path).output == result.output  # the raw name, as before


def test_a_copy_or_set_is_no_kernel_to_read_the_source_of():
    """The recording's cuBLAS matmul sets memory (5 memsets, 4.6 us): PC sampling samples
    kernels' instructions only, so a set or copy has no samples for a reason of its own."""
    result = show("--source", "memset", DIAGNOSED)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: 'memset' is a copy or set, not a kernel: PC sampling "
                                    "samples kernels' instructions only; kernels in this "
                                    "profile: ")
    assert "CUPTI gave none" not in result.output and "square_dot" in result.output


def test_a_profile_without_samples_says_to_sample(tmp_path):
    result = show("--source", "sgemm_128x64", os.path.join(DATA, "example_gpu.hatchet"))
    assert result.exit_code == 2
    assert "the profile has no PC samples (kernel " in result.output
    assert "profile with `proton -m pcsampling`" in result.output


def test_tree_shows_samples_by_default_and_orders_lines_by_number():
    """Source lines named as the --html page names them (-f short)."""
    result = show("-e", "backward", FIXTURE)
    assert result.exit_code == 0, result.output
    tree = result.output.split("\n1 kernel")[0]
    assert tree == """\
time (ms)  num_samples  name
    1.800        1,155  ROOT
    1.000          780  └─ forward
    0.900          700     ├─ matmul_kernel
                     8     │  ├─ matmul_kernel (pc_kernel_source.py:9)
                   120     │  ├─ matmul_kernel (pc_kernel_source.py:16)
                   110     │  ├─ matmul_kernel (pc_kernel_source.py:17)
                   400     │  ├─ matmul_kernel (pc_kernel_source.py:18)
                    30     │  ├─ matmul_kernel (pc_kernel_source.py:20)
                    20     │  └─ matmul_kernel (helpers.py:40)
    0.100           80     └─ softmax_kernel
                    60        ├─ softmax_kernel (softmax.py:7)
                    20        └─ softmax_kernel (softmax.py:9)"""


# -- a profile read on another machine (issue 60) ----------------------------------------------

@pytest.fixture
def uncarried(tmp_path) -> str:
    """DIAGNOSED without the source text it carries, as PROTON_EMBED_SOURCE=0 writes it: only
    the files found on this machine can show its code."""
    with open(DIAGNOSED) as f:
        doc = json.load(f)
    assert doc[0].pop("sources")  # the recording carries its sampled files' text
    path = tmp_path / "uncarried.hatchet"
    path.write_text(json.dumps(doc))
    return str(path)


STORE_LINE = "tl.store(c + r[:, None] * BM + r[None, :], tl.dot(x, x))"
"""Line 40 of tests/diagnose_workload.py, square_dot's hottest."""


def test_source_root_finds_the_profiles_file_by_the_end_of_its_path(tmp_path, monkeypatch,
                                                                    uncarried):
    monkeypatch.chdir(tmp_path)  # elsewhere: only the root given may show it
    tests = os.path.dirname(DATA)
    assert STORE_LINE not in show("--source", "square_dot", uncarried).output
    found = show("--source", "square_dot", "--source-root", tests, uncarried)
    assert found.exit_code == 0, found.output
    assert STORE_LINE in found.output and "the sampled lines only" not in found.output
    pages = html_source(tmp_path, "--source-root", tests, uncarried)
    assert STORE_LINE in pages["/work/main/tests/diagnose_workload.py"]


def test_source_map_reads_the_recording_machines_folder_from_this_one(tmp_path, monkeypatch,
                                                                      uncarried):
    monkeypatch.chdir(tmp_path)
    checkout = os.path.dirname(os.path.dirname(DATA))
    found = show("--source", "square_dot", "--source-map", f"/work/main={checkout}", uncarried)
    assert found.exit_code == 0, found.output
    assert STORE_LINE in found.output
    assert STORE_LINE in html_source(tmp_path, "--source-map", f"/work/main={checkout}",
                                     uncarried)["/work/main/tests/diagnose_workload.py"]


@pytest.mark.parametrize("value,says", [
    ("/work/main", "is not OLD=NEW"), ("work=/tmp", "is not an absolute path"),
    ("/work/main=/no/such/folder", "is not a folder on this machine")])
def test_a_bad_source_map_is_one_line_and_status_2(value, says):
    result = show("--source", "square_dot", "--source-map", value, DIAGNOSED)
    assert result.exit_code == 2 and says in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_an_ending_found_under_a_root_keeps_every_rule(tmp_path, monkeypatch):
    """The ending found is read as a path the profile named: hidden folders and files that are
    no source stay unread, and `..` never climbs out of a root."""
    root = tmp_path / "proj"
    (root / ".venv").mkdir(parents=True)
    monkeypatch.chdir(root)
    (root / ".venv" / "k.py").write_text("KEY = 'key-1'\n")
    (tmp_path / "above.py").write_text("KEY = 'key-2'\n")
    (root / "notes.txt").write_text("KEY = 'key-3'\n")
    path = sampled_profile(tmp_path / "proj", "/ci/build/.venv/k.py", "/ci/../above.py",
                           "/ci/build/notes.txt")
    out = show("--source", "k", "--source-root", str(root), path).output
    assert "key-" not in out
    assert f"in a hidden folder or file; add --source-root {root / '.venv'}" in out


def test_a_file_named_by_another_machines_path_says_how_to_find_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = show("--source", "k", sampled_profile(tmp_path, "/ci/build/kern.py")).output
    assert ("source file not found on this machine, nor by its name under a source root; add "
            "--source-root DIR or --source-map /ci/build=DIR") in " ".join(out.split())


def test_the_header_says_which_file_here_the_text_was_read_from(tmp_path, monkeypatch,
                                                                uncarried):
    """The profile names the recording machine's path; the text shown is another file's (found
    by its ending under a root): the header says which, so a stale copy is not taken for it."""
    monkeypatch.chdir(tmp_path)
    here = tmp_path / "proj" / "tests"
    here.mkdir(parents=True)
    shutil.copy(os.path.join(os.path.dirname(DATA), "diagnose_workload.py"), here)
    found = show("--source", "square_dot", "--source-root", str(tmp_path / "proj"), uncarried)
    assert found.exit_code == 0, found.output
    assert f"its text read from {here / 'diagnose_workload.py'} on this machine" in found.output
    assert "/work/main/tests/diagnose_workload.py: " in found.output  # the profile's name first


def test_the_header_says_when_the_text_is_the_one_the_profile_carries(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = show("--source", "scale_add", os.path.join(DATA, "train_pc.hatchet"))
    assert found.exit_code == 0, found.output
    assert "its text as the profile carries it (the code that ran)" in found.output
