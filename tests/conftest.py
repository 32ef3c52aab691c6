from __future__ import annotations

import ctypes
import itertools
import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

from proton.format import COPY_FRAME


SANITIZE_ENV = "PROTON_TEST_SANITIZE"
"""Set (by test_native's test_the_c_join_is_clean_under_the_sanitizers): every C helper the
tests build is built with AddressSanitizer and UndefinedBehaviorSanitizer, which abort on
any error they find."""
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
            "-g")


def pytest_xdist_auto_num_workers(config) -> int | None:
    """`-n auto` (the README's test command): a worker per CPU this run may use, and one more,
    at most 8 (a worker holds 0.5-0.7 GB). About a fifth of the suite's test time is waiting
    (ranks' merge timeouts, subprocesses, the browser): on 2 cores a third worker fills it
    (the whole suite 5:13 against 5:31 with two, the same checkout and hour; four: 5:27).
    xdist's own count takes psutil's physical cores where psutil is installed: 1 on a 2-vCPU
    machine, which would run the suite serially."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist reads it
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return max(1, min(8, (len(usable) if usable else os.cpu_count() or 1) + 1))


def pytest_configure(config) -> None:
    """`-n` with no `--dist` of the user's: xdist's loadgroup, not load. Load hands each worker
    a run of consecutive tests up front, so the slow ones can queue behind each other on one
    worker while the other idles at the end; loadgroup hands out one test (or one
    `xdist_group`, run on one worker: tests that share a computation) at a time, in the order
    pytest_collection_modifyitems leaves, the slowest first."""
    if any(arg.startswith("--dist") for arg in config.invocation_params.args):
        return
    if hasattr(config, "workerinput"):  # a worker: it names each test by its group
        config.option.loadgroup = True
    elif getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"


SLOW_FIRST = (
    "test_invariants.py::",  # one xdist group (the fuzz corpus, up to 150 s, and its neighbours)
    "test_native.py::test_the_c_join_is_clean_under_the_sanitizers",
    "test_job_merge.py::test_the_job_file_shows_the_rank_files_numbers_to_the_last_digit",
    "test_job_merge.py::test_a_rank_missing_at_finalize_leaves_every_other_ranks_file",
    "test_step_cost.py::test_dry_run_on_cpu_measures_bare_phases",
    "test_readme.py::test_the_metrics_the_readme_lists_for_a_cpu_profile_are_the_ones_listed",
    "test_job_merge.py::test_a_folder_with_the_job_file_and_its_rank_files_merges",
    "test_job_merge.py::test_the_job_option_writes_the_job_file_alone",
    "test_job_merge.py::test_a_capture_of_all_ranks_writes_the_job_file",
    "test_step_rules.py::test_tritons_viewer_opens_a_file_with_copies_waits_idle_and_memory",
    "test_job_file_input.py::test_many_same_named_siblings_read_in_linear_time",
    "test_job_merge.py::test_merging_rank_files_costs_little_over_reading_them",
    "test_job_merge.py::test_the_command_form_merges_before_the_script_destroys_its_group",
    "test_html.py::test_screenshots_of_each_view",
    "test_capture_tokens.py::test_a_job_killed_during_a_capture",
    "test_native.py::test_the_c_join_gives_each_kernel_where_the_attributor_does",
    "test_html_views.py::test_a_large_graph_draws_no_hairlines",
    "test_typing.py::test_mypy_passes_on_the_package",
    "test_triton_text.py::test_text_is_tritons_byte_for_byte_on_every_option",
    "test_job_merge.py::test_bad_merge_settings_are_said_once_at_start",
    "test_job_merge.py::test_each_periodic_snapshot_of_a_job_is_merged_too",
    "test_install.py::test_the_gpu_runtimes_dependencies_install_on_linux_only",
    "test_full_disk.py::test_a_full_disk_under_the_viewers_output",
    "test_viewer_bombs.py::",
    "test_idle_steps.py::test_step_parts_match_a_brute_force_timeline",
    "test_job_file_input.py::test_a_small_job_file_claiming_many_ranks",
    "test_reader_bounds.py::",
    "test_fuzz_viewer.py::",
)
"""The slowest tests (file::name prefixes), slowest first: 20-230 s each in the suite on 2
loaded cores (--durations). Started first, they run beside the many short tests instead of
last, alone (the invariants' shared group goes first of all: loadgroup sends the largest
group first)."""


def pytest_collection_modifyitems(config, items) -> None:
    """Under xdist (each worker collects, the same order), the SLOW_FIRST tests first, in its
    order; the rest as collected. A run in one process keeps the collected order."""
    if not hasattr(config, "workerinput"):
        return

    def rank(item) -> int:
        name = item.nodeid.rpartition("/")[2]
        return next((i for i, p in enumerate(SLOW_FIRST) if name.startswith(p)), len(SLOW_FIRST))

    items.sort(key=rank)  # stable: each file's own order kept


DEADLINE_ENV = "PROTON_TEST_DEADLINE"
"""Seconds since the epoch (bench/gpu_run.sh sets it): tests not begun by then are skipped, so
a run on the GPU machine ends with its summary inside the device's per-call limit."""


def pytest_runtest_setup(item) -> None:
    deadline = os.environ.get(DEADLINE_ENV)
    if deadline and time.time() > float(deadline):
        pytest.skip(f"past {DEADLINE_ENV}: not begun in this run's time")


@pytest.fixture(autouse=True)
def sanitized_helper(monkeypatch):
    """Under the sanitizer run, the C helpers are built (and cached apart) with SANITIZE."""
    if os.environ.get(SANITIZE_ENV):
        from proton.cupti import c_loader

        if SANITIZE[0] not in c_loader.FLAGS:
            monkeypatch.setattr(c_loader, "FLAGS", c_loader.FLAGS + SANITIZE)


def pytest_runtest_teardown(item) -> None:
    """A gpu test that leaves the process's CUDA context faulted (an illegal address is sticky:
    every later CUDA call in the process fails) errors itself, not the next test that happens to
    synchronize. The profiler's own flush does not raise the job's CUDA errors."""
    torch = sys.modules.get("torch")
    if item.get_closest_marker("gpu") is None or torch is None \
            or not torch.cuda.is_initialized():
        return
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any CUDA error is this test's
        pytest.fail(f"this test left CUDA faulted: {str(exc).splitlines()[0]}", pytrace=False)


def load(path) -> list:
    with open(path) as f:
        return json.load(f)


def find(tree: dict, *names: str) -> dict:
    """The node reached from `tree` by following child names."""
    node = tree
    for name in names:
        matches = [c for c in node["children"] if c["frame"]["name"] == name]
        assert matches, f"no child {name!r} under {node['frame']['name']!r}: " \
                        f"{[c['frame']['name'] for c in node['children']]}"
        node = matches[0]
    return node


def default_signals() -> None:
    """A `preexec_fn`: the child starts with Ctrl-C, hang-up, quit and terminate at their
    defaults, as a job started from a terminal does. A test run started in the background
    (`pytest &` from a script) ignores SIGINT, and under nohup SIGHUP; children inherit that,
    and a job that was started ignoring a signal keeps ignoring it."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def kernels(node: dict) -> list[dict]:
    """Every node below `node` that carries kernel metrics; copies and sets (format.COPY_FRAME:
    a large cuBLAS matmul makes a memset) are not kernels."""
    out = []
    for child in node["children"]:
        if "device_type" in child["metrics"] and not COPY_FRAME.match(child["frame"]["name"]):
            out.append(child)
        out.extend(kernels(child))
    return out


def total(node: dict, metric: str) -> float:
    return node["metrics"].get(metric, 0) + sum(total(c, metric) for c in node["children"])


def viewer_in_terminal(*args: str) -> str:
    """proton-viewer's output with a real terminal as its stdout (colours on)."""
    main, child = pty.openpty()
    run = subprocess.Popen([sys.executable, "-m", "proton.viewer.cli", *args], stdout=child,
                           stderr=subprocess.PIPE,
                           env={**{k: v for k, v in os.environ.items() if k != "NO_COLOR"},
                                "TERM": "xterm-256color"})
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the viewer closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    return out.decode()


class IdStack:
    """Stands in for the collector's CUPTI external-id stack (push/pop) in the shadow context,
    to see what scopes and the hook push, on the CPU."""

    pushes_ids = True

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.main: list[int] = []
        """The main thread's innermost scope each time it changed."""

    def push(self, path: int) -> None:
        self.ids.append(path)

    def pop(self) -> None:
        self.ids.pop()

    def timestamp(self) -> int:
        return 0

    def main_path(self, path: int) -> None:
        self.main.append(path)

    def push_main(self, path: int) -> None:
        self.push(path)
        self.main_path(path)

    def pop_main(self, path: int) -> None:
        self.pop()
        self.main_path(path)


class CollectorStandIn:
    """A running collector as the profiler and the frames see it (set as profiler.collector
    before start()), recording nothing: its clock (CUPTI's timestamps, the kernels') is `now`,
    set by the test; its wait log hands back `waits`; kernels are given to the router."""

    pushes_ids = False
    wait_events_dropped = 0

    def __init__(self) -> None:
        self.now = 0
        self.waits: list[tuple[int, int, int, int]] = []

    def timestamp(self) -> int:
        return self.now

    def push(self, path: int) -> None:
        pass

    def pop(self) -> None:
        pass

    def main_path(self, path: int) -> None:
        pass

    push_main = pop_main = main_path

    def flush(self, timeout_s: float = 0, until: int | None = None) -> int:
        return 0

    def take_syncs(self) -> tuple[list, list, list]:
        return [], [], []

    def wait_events(self, on: bool) -> None:
        pass

    def take_wait_events(self) -> list:
        waits, self.waits = self.waits, []
        return waits

    def watermark(self) -> int:
        return 0

    def stop(self) -> None:
        pass

    def finish(self, until: int | None = None) -> int:
        return 0

    def dropped_records(self) -> int:
        return 0


@contextmanager
def stand_in_collector() -> Iterator[IdStack]:
    """The running session's collector replaced by an IdStack until the block ends."""
    from proton.runtime.profiler import profiler

    ids = IdStack()
    saved, profiler.collector = profiler.collector, ids
    try:
        yield ids
    finally:
        profiler.collector = saved


def run_threads(threads: list[threading.Thread]) -> None:
    """Start them all, then wait for them all."""
    for t in threads:
        t.start()
    for t in threads:
        t.join()


@pytest.fixture(autouse=True, scope="session")
def private_endpoint_folder(tmp_path_factory) -> Iterator[str]:
    """Every job the tests start (and the test process itself) listens here, not in the user's
    /tmp/proton-<uid>, where stale sockets would stay and `proton capture --all` would reach
    the developer's own jobs (and they the tests')."""
    folder = str(tmp_path_factory.getbasetemp() / "endpoints")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROTON_SOCKET_DIR", folder)
        yield folder


@pytest.fixture
def profile_path(tmp_path):
    """Session name inside a temporary folder, and a loader for the file it writes."""
    name = str(tmp_path / "prof")
    return name, lambda: load(name + ".hatchet")


# -- replaying CUPTI's activity buffers ----------------------------------------------------------
NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.POINTER(ctypes.c_void_p))
"""cuptiActivityGetNextRecord's signature."""


def fake_next(sizes: list[int]):
    """cuptiActivityGetNextRecord over records of `sizes` bytes laid end to end: 0 and the next
    record, or CUPTI's MAX_LIMIT_REACHED (14) after the last."""
    starts = list(itertools.accumulate([0, *sizes[:-1]])) if sizes else []
    following = dict(zip(starts, starts[1:] + [None]))

    def step(buffer, valid, record):
        if not starts:
            return 14
        at = following.get(record[0] - buffer) if record[0] else starts[0]
        if at is None or at >= valid:
            return 14
        record[0] = buffer + at
        return 0

    return NEXT(step)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The C helper built afresh in a cache of this test's own."""
    from proton.cupti import native

    monkeypatch.setenv("PROTON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PROTON_NATIVE", raising=False)
    native.HELPER.built.clear()  # built again: with SANITIZE under the sanitizer run (above)
    yield tmp_path
    native.HELPER.built.clear()


@pytest.fixture(scope="session")
def built_helpers(tmp_path_factory) -> dict[str, str]:
    """{cache file name: the C helper compiled once this session with that source and flags}."""
    return {}


@pytest.fixture
def helper_cache(sanitized_helper, cache, built_helpers, tmp_path_factory):
    """`cache` holding the C helper already: a copy of one compiled once this session with the
    same source and flags (SANITIZE under the sanitizer run). A copy, not a link: the test loads
    its own library, with its own C globals, as a fresh build gives. Compiling costs seconds
    (ten times that with the sanitizers): the tests of the cache itself build theirs (`cache`),
    the tests of what the helper computes take this."""
    import shutil

    from proton.cupti import c_loader, native
    from proton.files import private_dir

    path = native.library_path()
    name = os.path.basename(path)
    if name not in built_helpers:
        out = tmp_path_factory.mktemp("helper") / name
        try:
            native.HELPER.compile_to(str(out))
        except c_loader.BuildError:
            return cache  # helper() says why, as it would with an empty cache
        built_helpers[name] = str(out)
    private_dir(os.path.dirname(path))
    shutil.copyfile(built_helpers[name], path)
    return cache
