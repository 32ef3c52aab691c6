"""What a profile from anyone can make the viewer's reader spend, and what reaches stderr (issue
59, items 10, 13, 25 and 26): memory within max(128 MiB, 25x the file) for every kind of frame,
job files included (docs/safety.md); an open file read within the size cap; MessagePack's
timestamp refused in one line; no pandas or numpy warning with its source line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

import msgpack
import pytest
from click.testing import CliRunner

from proton.viewer import deep, reader, triton_api
from proton.viewer.cli import viewer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import reader_memory  # noqa: E402  (the kinds of file bench/reader_memory.py measures)

def peak(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    """proton-viewer ARGS in a child: the run and its peak resident MiB."""
    done, mb, _ = reader_memory.peak(*args)
    return done, mb


@pytest.fixture(scope="module")
def base_mb(tmp_path_factory) -> float:
    """The viewer's own peak, showing a profile of one frame."""
    path = tmp_path_factory.mktemp("base") / "one.hatchet"
    path.write_text(reader_memory._root(""))
    return peak("-d", "1", str(path))[1]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM (Linux)")
@pytest.mark.parametrize("kind,msgpack_form", [
    ("flat", False), ("flat", True), ("frame-keys", False), ("job", True),
    ("empty-maps", True)])
def test_memory_stays_within_the_bound_for_every_kind_of_frame(tmp_path, base_mb, kind,
                                                               msgpack_form):
    """Item 10: 22 MB of frames without metrics took 1.58 GB (75x) as JSON, 14 MB 1.53 GB
    (114x) as MessagePack, where docs/safety.md promised about 25x. Files of ~6 MB of each
    kind (past the 128 MiB floor at 25x) now read within max(128 MiB, 25x) or are refused in
    one line, having taken no more."""
    path = reader_memory.write(kind, 6.5, str(tmp_path), msgpack_form)
    size = os.path.getsize(path)
    done, top = peak("-d", "1", path)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    if done.returncode:
        assert done.returncode == 2 and done.stderr.startswith("Error: ") \
            and done.stderr.count("\n") == 2, done.stderr  # the error, and hwm_kb
    assert (top - base_mb) * 2**20 <= max(128 << 20, 25 * size), (kind, top, base_mb, size)


def test_a_realistic_profile_of_many_frames_still_reads(tmp_path):
    """What the bound must not refuse: bench/viewer_scale.py's profile, as JSON and as
    MessagePack (~130 bytes a frame), with its memory's estimate well inside the bound."""
    for form in (False, True):
        path = reader_memory.write("realistic", 1.5, str(tmp_path), form)
        assert reader_memory.estimate(path) * 2**20 < reader.memory_allowed(
            os.path.getsize(path)) / 2
        done = CliRunner().invoke(viewer, ["-d", "1", path])
        assert done.exit_code == 0, done.output


def test_a_refusal_names_what_costs_most_in_one_line(tmp_path):
    path = tmp_path / "flat.hatchet"
    path.write_text(reader_memory.flat(300_000))
    done = CliRunner().invoke(viewer, [str(path)])
    assert done.exit_code == 2 and done.output.count("\n") == 1, done.output
    assert done.output.startswith(f"Error: {str(path)!r} holds more than ") and " frames: " in \
        done.output and "where the viewer takes up to 157 MiB for a file of 6,600,087 bytes " \
        "(25x its size, at least 128 MiB)" in done.output, done.output


def test_messagepack_whose_header_bytes_overcount_still_reads(tmp_path):
    """Map and array header bytes also occur inside strings (here: Cyrillic names, whose
    UTF-8 second bytes are 0x90..0x9f): too many to trust, the reader counts the maps and
    lists themselves as they are made, and the profile reads."""
    kids = [{"frame": {"name": "Б" * 600 + f"Я{i}", "type": "function"},
             "metrics": {"time (ns)": i}, "children": []} for i in range(2000)]
    doc = [{"frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 0},
            "children": kids}, {}]
    data = msgpack.packb(doc)
    counted = reader._containers(data, True)
    assert (counted["maps"] * reader.COSTS["maps"] + counted["lists"] * reader.COSTS["lists"]
            > reader.memory_allowed(len(data)))  # what the header bytes alone would say
    path = tmp_path / "names.hatchet_msgpack"
    path.write_bytes(data)
    done = CliRunner().invoke(viewer, ["-d", "2", str(path)])
    assert done.exit_code == 0 and "Я1999" in done.output, done.output[-500:]


# -- item 13: an open file is read within the cap -------------------------------------------------

def raw_metrics_in_a_child(opened: str, **env: str) -> subprocess.CompletedProcess:
    """get_raw_metrics(<opened>) in a child of 2 GB of address space, printing its error."""
    code = ("import resource, subprocess, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.RLIM_INFINITY))\n"
            "from proton.viewer import triton_api\n"
            "from proton.viewer.errors import ViewerError\n"
            f"opened = {opened}\n"
            "try:\n"
            "    triton_api.get_raw_metrics(opened)\n"
            "except ViewerError as exc:\n"
            "    print(exc)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


@pytest.mark.parametrize("mode", ["r", "rb"])
def test_get_raw_metrics_of_an_open_device_is_one_line_at_once(mode):
    """get_raw_metrics(open("/dev/zero")) read until a MemoryError."""
    done = raw_metrics_in_a_child(f"open('/dev/zero', {mode!r})")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "'/dev/zero' is a device, not a profile; give the .hatchet file a " \
                          "profile wrote\n"


def test_get_raw_metrics_of_an_endless_pipe_stops_at_the_cap():
    """An open pipe that never ends is read up to PROTON_VIEWER_MAX_MB."""
    done = raw_metrics_in_a_child(
        "subprocess.Popen([sys.executable, '-c', 'import sys\\nwhile True: "
        "sys.stdout.buffer.write(bytes(65536))'], stdout=subprocess.PIPE).stdout",
        **{reader.MAX_MB_ENV: "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "holds more than 1 MiB, the most the viewer reads; to read it anyway set " \
           "PROTON_VIEWER_MAX_MB to more MiB" in done.stdout, done.stdout


# -- item 25: MessagePack's timestamp extension -----------------------------------------------------

@pytest.mark.parametrize("where", ["frame value", "metric value", "map key"])
def test_a_messagepack_timestamp_is_one_line(tmp_path, where):
    """msgpack reads its timestamp extension (type -1) itself, without the extension hook
    that refused every other: it was taken as a profile's value."""
    stamp = msgpack.Timestamp(1_700_000_000, 0)
    kernel = {"frame": {"name": "k", "type": "function"}, "metrics": {"time (ns)": 5},
              "children": []}
    if where == "frame value":
        kernel["frame"]["at"] = stamp
    elif where == "metric value":
        kernel["metrics"]["at"] = stamp
    else:
        kernel["metrics"] = {stamp: 5}
    doc = [{"frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 0},
            "children": [kernel]}, {}]
    path = tmp_path / "stamp.hatchet_msgpack"
    path.write_bytes(msgpack.packb(doc))
    done = CliRunner().invoke(viewer, [str(path)])
    assert done.exit_code == 2 and done.output.count("\n") == 1, done.output
    assert "extension type -1 (a timestamp), not one of the JSON kinds" in done.output


# -- item 26: no library warning reaches stderr ---------------------------------------------------

def many_metrics(tmp_path, name: str, rank: int) -> str:
    metrics = {f"m{i}": i + rank for i in range(150)}
    doc = [{"frame": {"name": "ROOT", "type": "function"},
            "metrics": {"time (ns)": 0, **{m: 0 for m in metrics}},
            "children": [{"frame": {"name": "k", "type": "function"},
                          "metrics": {"time (ns)": 10 + rank, "count": 1, "device_id": "0",
                                      "device_type": "CUDA", **metrics}, "children": []}]}, {}]
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("args", [[], ["--output", "triton"]])
def test_a_profile_of_many_metrics_diffs_without_pandas_warnings(tmp_path, args):
    """pandas warned (PerformanceWarning, with hatchet's source line) that a table of 150
    metrics was fragmented, at -diff; --output triton printed it as a note."""
    a, b = many_metrics(tmp_path, "a.hatchet", 0), many_metrics(tmp_path, "b.hatchet", 1)
    done = subprocess.run([sys.executable, "-m", "proton.viewer.cli", *args, "-m", "time/ms",
                           "-diff", b, a], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "fragmented" not in done.stderr, done.stderr


def test_the_triton_api_derives_on_many_metrics_without_pandas_warnings(tmp_path):
    gf, inclusive, exclusive, devices = triton_api.read(many_metrics(tmp_path, "a.hatchet", 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        triton_api.derive_metrics(gf, ["time/ms", "m3/%"], inclusive, exclusive, devices)


def test_numpy_arithmetic_on_blank_values_is_not_printed(tmp_path):
    """numpy's divide-by-zero and invalid-value warnings (with the viewer's source line)
    reached stderr; the views show such values blank, and say why in their notes."""
    from proton.viewer import cli

    code = ("import numpy as np, warnings\n"
            "from proton.viewer import cli\n"
            "with warnings.catch_warnings():\n"
            "    cli._ignore_library_noise()\n"
            "    np.array([1.0, 0.0]) / np.array([0.0, 0.0])\n"
            "    np.nanmean(np.array([np.nan]))\n"
            "    np.array([1e308]) * 10\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert cli.LIBRARY_NOISE  # what the command ignores, and only that


def test_a_warp_timeline_deep_in_a_tree_reads_in_linear_time(tmp_path):
    """A timeline's call path was built for every frame on the way to it (a tuple per frame
    as long as its depth): one timeline under 50,000 nested scopes took 22 s, 100,000 ~90."""
    timeline = json.dumps({"device": 0, "clock_khz": 1_755_000, "warps": 1, "scopes": ["k"],
                           "sm": [0], "cta": [0], "warp": [0], "scope": [0],
                           "start_ns": [0.0], "cycles": [100]})
    levels = 100_000
    parts = ['[{"frame":{"name":"ROOT","type":"function"},"metrics":{"time (ns)":0},"children":[']
    parts += ['{"frame":{"name":"s%d","type":"function"},"metrics":{"time (ns)":1},"children":['
              % i for i in range(levels)]
    parts.append('{"frame":{"name":"k","type":"function","warp_timeline":%s},"metrics":'
                 '{"time (ns)":1},"children":[]}' % json.dumps(timeline))
    parts.append("]}" * levels + "]}, {}]")
    path = tmp_path / "deep.hatchet"
    path.write_text("".join(parts))
    start = time.process_time()
    prof = deep.call(reader.load, str(path))
    assert time.process_time() - start < 15
    (found,) = prof.timelines
    assert len(found["path"]) == levels + 1 and found["path"][:2] == ["s0", "s1"] \
        and found["path"][-1] == "k"
