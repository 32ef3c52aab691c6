"""A job's ranks: each process's file named by its rank, never overwritten by another process,
and merged by the viewer (sum, min/mean/max, imbalance, frames some ranks lack, traces)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from conftest import load

from proton import triton_version
from proton.data import job as jobs
from proton.data import place, writer
from proton.viewer.cli import viewer
from proton.format import job_of

LAUNCHERS = [
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, (3, 4, 1, "torchrun")),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}, (5, 8, 1, "slurm")),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, (1, 2, 1, "openmpi")),
    ({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0"}, (2, 3, 0, "mpich")),
    # torchrun under srun: torch's RANK is the process's rank
    ({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
     (1, 2, None, "torchrun")),
]


@pytest.mark.parametrize("env,want", LAUNCHERS)
def test_each_launchers_variables_name_the_rank(env, want):
    job = jobs.detect(env)
    assert (job.rank, job.world_size, job.local_rank, job.launcher) == want
    assert job.pid == os.getpid() and job.host == socket.gethostname()
    assert jobs.ranked_path("/x/run1.hatchet", job) == f"/x/run1.rank{want[0]}.hatchet"
    assert jobs.ranked_path("/x/run1.chrome_trace", job) == f"/x/run1.rank{want[0]}.chrome_trace"


@pytest.mark.parametrize("env", [{}, {"RANK": "0", "WORLD_SIZE": "1"},
                                 {"SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
                                 {"RANK": "x", "WORLD_SIZE": "2"}, {"RANK": "-1"}])
def test_a_single_process_keeps_its_plain_name(env):
    job = jobs.detect(env)
    assert not job.ranked
    assert jobs.ranked_path("/x/run1.hatchet", job) == "/x/run1.hatchet"


SCRIPT = """
import proton
proton.start("ddp")
with proton.scope("step", {"n": 1}):
    pass
proton.finalize()
"""


def run(tmp_path, args, env=None, script=SCRIPT) -> subprocess.CompletedProcess:
    (tmp_path / "s.py").write_text(script)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(
        ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_", "OMPI_", "PMI_"))}
    return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**clean, **(env or {})})


@pytest.mark.parametrize("form", [["s.py"], ["-m", "proton", "-n", "ddp", "s.py"]])
def test_each_rank_writes_its_own_file_with_its_identity(tmp_path, form):
    for rank in (0, 1):
        done = run(tmp_path, form, {"RANK": str(rank), "WORLD_SIZE": "2",
                                    "LOCAL_RANK": str(rank)})
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.hatchet")) == ["ddp.rank0.hatchet",
                                                                  "ddp.rank1.hatchet"]
    for rank in (0, 1):
        frame = job_of(load(tmp_path / f"ddp.rank{rank}.hatchet")[0])
        assert frame["rank"] == rank and frame["world_size"] == 2
        assert frame["local_rank"] == rank and frame["launcher"] == "torchrun"
        assert frame["host"] == socket.gethostname() and isinstance(frame["pid"], int)


def test_a_single_process_records_host_and_pid_and_keeps_its_name(tmp_path):
    done = run(tmp_path, ["s.py"])
    assert done.returncode == 0, done.stderr
    frame = job_of(load(tmp_path / "ddp.hatchet")[0])
    assert frame["host"] == socket.gethostname() and "rank" not in frame


def test_a_ranks_trace_names_its_processes_and_records_time_zero(tmp_path):
    done = run(tmp_path, ["s.py"], {"RANK": "1", "WORLD_SIZE": "2"},
               script=SCRIPT.replace('proton.start("ddp")',
                                     'proton.start("ddp", data="trace")').replace(
                   'proton.scope("step", {"n": 1})', 'proton.cpu_timed_scope("step")'))
    assert done.returncode == 0, done.stderr
    doc = load(tmp_path / "ddp.rank1.chrome_trace")
    assert doc["otherData"]["rank"] == 1 and isinstance(doc["otherData"]["t0_ns"], int)
    # Triton 3.6's layout: the pid names it; 3.9's trace of scopes alone names no process
    # (its one process is "rank 1 Trace" once it holds kernels: tests/test_trace_lanes.py)
    want = 0 if triton_version.after_3_6() else "rank 1 host"
    assert {e["pid"] for e in doc["traceEvents"]} == {want}
    assert not [e for e in doc["traceEvents"] if e["ph"] == "M"]


def doc_of(pid: int, host: str | None = None, layout: str = "frame") -> list:
    """A profile of process `pid`: its host and pid in the root frame (files written before
    2026-11-29), or in the root's "job" (since), over a chain of frames deeper than the
    writer's DEEP (written by its own encoder) and longer than the first 4 KiB, which is all
    place.py reads of a file to know its writer."""
    job = {"host": host or socket.gethostname(), "pid": pid}
    frame = {"name": "ROOT", "type": "function", **(job if layout == "frame" else {})}
    root = {"frame": frame, **({"job": job} if layout == "job" else {}), "metrics": {},
            "children": []}
    node = root
    for i in range(writer.DEEP + 10):
        node["children"].append({"frame": {"name": f"f{i}", "type": "function"},
                                 "metrics": {"count": 1}, "children": []})
        node = node["children"][0]
    return [root, {}]


@pytest.mark.parametrize("layout", ["frame", "job"])
def test_another_live_processs_profile_is_not_overwritten(tmp_path, capfd, layout):
    path = str(tmp_path / "run.hatchet")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        writer.write(doc_of(other.pid, layout=layout), path)
        written = writer.write(doc_of(os.getpid()), path, since=time.time() + 3600)
    finally:
        other.kill()
        other.wait()
    assert written == str(tmp_path / f"run.pid{os.getpid()}.hatchet")
    assert job_of(load(path)[0])["pid"] == other.pid  # untouched
    assert job_of(load(written)[0])["pid"] == os.getpid()
    err = capfd.readouterr().err
    assert f"process {other.pid}" in err and "still running" in err and written in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.hatchet",
                                                          f"run.pid{os.getpid()}.hatchet"]


def test_a_profile_written_while_this_one_ran_is_not_overwritten(tmp_path, capfd):
    path = str(tmp_path / "run.hatchet")
    began = time.time() - 5
    writer.write(doc_of(2 ** 22 + 17, host="elsewhere"), path)  # a process that has ended
    written = writer.write(doc_of(os.getpid()), path, since=began)
    assert written.endswith(f"run.pid{os.getpid()}.hatchet")
    assert "while this one ran" in capfd.readouterr().err


@pytest.mark.parametrize("owner", ["ended", "mine", "triton"])
def test_an_earlier_runs_or_this_processs_profile_is_replaced(tmp_path, owner):
    path = str(tmp_path / "run.hatchet")
    old = doc_of(os.getpid() if owner == "mine" else 2 ** 22 + 17)
    if owner == "triton":
        del old[0]["frame"]["host"], old[0]["frame"]["pid"]
    writer.write(old, path)
    if owner != "mine":
        os.utime(path, (time.time() - 60, time.time() - 60))
    new = doc_of(os.getpid())
    new[0]["metrics"] = {"x": 1}
    assert writer.write(new, path, since=time.time() - 10) == path
    assert load(path)[0]["metrics"] == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.hatchet"]  # no temp left


# -- the viewer's merge ----------------------------------------------------------------------
H100 = {"arch": "90", "num_sms": 132, "clock_rate": 1980000, "memory_clock_rate": 2619000,
        "bus_width": 5120}


def kernel(name: str, ns: float, count: int = 1, device: int = 0, **more) -> dict:
    return {"frame": {"name": name, "type": "function"},
            "metrics": {"time (ns)": ns, "count": count, "device_id": str(device),
                        "device_type": "CUDA", **more}, "children": []}


def scope(name: str, *children) -> dict:
    return {"frame": {"name": name, "type": "function"}, "metrics": {}, "children": list(children)}


def rank_file(folder, rank: int, world: int, *children, devices=None, name="ddp") -> str:
    root = {"frame": {"name": "ROOT", "type": "function", "host": "h", "pid": 100 + rank,
                      "rank": rank, "world_size": world, "local_rank": rank},
            "metrics": {"time (ns)": 0, "count": 0, "flops16": 0}, "children": list(children)}
    path = os.path.join(folder, f"{name}.rank{rank}.hatchet")
    with open(path, "w") as f:
        json.dump([root, {"CUDA": devices or {str(rank): H100}}], f)
    return path


def rows(*args) -> dict[str, dict]:
    result = CliRunner().invoke(viewer, ["--output", "json", *args])
    assert result.exit_code == 0, result.output
    return {" / ".join(r["path"]): r for r in json.loads(result.stdout)}


@pytest.fixture
def job(tmp_path):
    """Rank 1 does twice rank 0's matmul time and an extra matmul; both all-reduce; rank 2
    lacks the step's second kernel."""
    for rank, (mm, extra, allreduce) in enumerate([(100, 0, 40), (200, 50, 30), (150, 0, 35)]):
        step = [kernel("matmul", mm * 1000, 2, rank, flops16=2e12)]
        if extra:
            step.append(kernel("matmul_extra", extra * 1000, 1, rank))
        step.append(kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", allreduce * 1000, 1, rank))
        rank_file(tmp_path, rank, 3, scope("step", *step))
    return tmp_path


def test_merged_ranks_sum_each_metric_and_give_min_mean_max_and_imbalance(job):
    got = rows("-m", "time/us,count", *sorted(map(str, job.glob("*.hatchet"))))
    mm = got["ROOT / step / matmul"]
    assert mm["time (us)"] == pytest.approx(450)
    assert (mm["time (us) min"], mm["time (us) mean"], mm["time (us) max"]) == \
        pytest.approx((100, 150, 200))
    assert mm["time (us) max rank"] == 1
    assert mm["time (us) max/mean"] == pytest.approx(200 / 150)
    assert mm["count"] == 6 and mm["count min"] == 2 == mm["count max"]
    step = got["ROOT / step"]
    assert step["time (us)"] == pytest.approx(140 + 280 + 185)
    assert step["time (us) max"] == pytest.approx(280) and step["time (us) max rank"] == 1


def test_a_frame_on_some_ranks_only_is_marked_and_counts_zero_elsewhere(job):
    got = rows("-m", "time/us", str(job))  # a folder stands for its files
    extra = got["ROOT / step / matmul_extra [rank 1 only]"]
    assert extra["time (us)"] == pytest.approx(50)
    assert (extra["time (us) min"], extra["time (us) mean"]) == pytest.approx((0, 50 / 3))
    assert extra["time (us) max/mean"] == pytest.approx(3)  # all its work is on one rank of 3


def test_communication_share_per_rank(job):
    got = rows("-m", "comm/%,comm_time/us", str(job))
    step = got["ROOT / step"]
    shares = [40 / 140, 30 / 280, 35 / 185]
    assert step["comm/%"] == pytest.approx(105 / 605 * 100)
    assert step["comm/% min"] == pytest.approx(min(shares) * 100)
    assert step["comm/% max"] == pytest.approx(max(shares) * 100)
    assert step["comm/% max rank"] == 0
    assert step["comm_time (us)"] == pytest.approx(105)


def test_rates_use_each_ranks_own_device(tmp_path):
    """Rank 1's GPU has half the SMs: the same work is twice the share of its peak."""
    half = dict(H100, num_sms=66)
    rank_file(tmp_path, 0, 2, kernel("mm", 1e6, 1, 0, flops16=0.4e12))  # 40% of its peak
    rank_file(tmp_path, 1, 2, kernel("mm", 1e6, 1, 1, flops16=0.4e12), devices={"1": half})
    got = rows("-m", "util,tflop16/s", str(tmp_path))["ROOT / mm"]
    assert got["util max"] == pytest.approx(2 * got["util min"])
    assert got["util max rank"] == 1
    assert got["util"] == pytest.approx((got["util min"] + got["util max"]) / 2)  # equal times
    assert got["tflop16/s"] == pytest.approx(400)  # 0.8e12 flop over 2 ms
    assert got["tflop16/s min"] == pytest.approx(400) == got["tflop16/s max"]


def test_one_rank_alone(job):
    got = rows("-m", "time/us", "--rank", "1", str(job))
    assert got["ROOT / step / matmul"]["time (us)"] == pytest.approx(200)
    assert "time (us) min" not in got["ROOT / step / matmul"]
    result = CliRunner().invoke(viewer, ["--rank", "7", str(job)])
    assert result.exit_code == 2 and "no file of rank 7" in result.output
    assert "ranks 0-2" in result.output


def test_sorted_view_and_csv_of_the_merged_ranks(job):
    result = CliRunner().invoke(viewer, ["-m", "time/us", "--print-sorted", str(job)])
    assert result.exit_code == 0, result.output
    assert "3 ranks (0-2) merged" in result.output
    table = result.output.split("Frames sorted by")[1].splitlines()[2:]
    assert table[0].split()[-1] == "step" and table[1].split()[-1] == "matmul"
    csv = CliRunner().invoke(viewer, ["-m", "time/us", "--output", "csv", str(job)]).stdout
    assert csv.splitlines()[0] == ("path,depth,time (us),time (us) min,time (us) mean,"
                                   "time (us) max,time (us) max rank,time (us) max/mean")


def test_a_bad_file_is_named_and_the_others_still_merge(job):
    (job / "ddp.rank3.hatchet").write_text('[{"frame": {"name": "ROOT"}, "metr')
    result = CliRunner().invoke(viewer, ["-m", "time/us", "--output", "json", str(job)])
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "ddp.rank3.hatchet" in errors[0] and "not valid JSON" in errors[0]
    got = {" / ".join(r["path"]): r for r in json.loads(result.stdout)}
    assert got["ROOT / step / matmul"]["time (us)"] == pytest.approx(450)


def test_missing_ranks_and_clashing_ranks_are_said(job):
    os.remove(job / "ddp.rank2.hatchet")
    result = CliRunner().invoke(viewer, ["-m", "time/us", str(job)])
    assert "note: 2 of the job's 3 ranks merged; missing rank 2" in result.stderr
    assert result.exit_code == 0  # every file given was read
    os.mkdir(job / "again")
    rank_file(job / "again", 0, 3, scope("other"))  # ddp.rank0.hatchet of another run
    result = CliRunner().invoke(viewer, [str(job / "ddp.rank0.hatchet"),
                                         str(job / "again" / "ddp.rank0.hatchet")])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "Error: the 2 files are not one job's ranks: several files say they are rank 0 "
        f"({job / 'ddp.rank0.hatchet'}, {job / 'again' / 'ddp.rank0.hatchet'}); give one "
        "file, or the NAME.rank<R>.hatchet files of one run\n")


@pytest.mark.parametrize("make,why", [
    (lambda d: [rank_file(d, 0, 2, scope("a")), rank_file(d, 1, 2, scope("a"), name="other")],
     "their NAME differs (ddp: ddp.rank0.hatchet; other: other.rank1.hatchet)"),
    (lambda d: [rank_file(d, 0, 2, scope("a")), rank_file(d, 1, 4, scope("a"))],
     "their world size differs (2: ddp.rank0.hatchet; 4: ddp.rank1.hatchet)"),
])
def test_files_of_different_runs_are_refused_not_merged(tmp_path, make, why):
    result = CliRunner().invoke(viewer, make(tmp_path))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (f"Error: the 2 files are not one job's ranks: {why}; give one "
                             "file, or the NAME.rank<R>.hatchet files of one run\n")


def test_a_folder_of_unrelated_profiles_is_refused_in_one_line():
    data = os.path.join(os.path.dirname(__file__), "data")
    result = CliRunner().invoke(viewer, [data])
    assert result.exit_code == 2 and "merged" not in result.output
    profiles = sorted(n for n in os.listdir(data) if n.endswith(".hatchet"))
    first = ", ".join(profiles[:4])
    assert result.stderr == (f"Error: the {len(profiles)} files are not one job's ranks: "
                             f"{first} and {len(profiles) - 4} more record no rank; give one "
                             "file, or the NAME.rank<R>.hatchet files of one run\n")


def test_traces_of_different_runs_are_refused(tmp_path):
    trace_file(tmp_path, 0, 0, [])
    os.rename(trace_file(tmp_path, 1, 0, []), tmp_path / "other.rank1.chrome_trace")
    result = CliRunner().invoke(viewer, ["--output", "trace", str(tmp_path)])
    assert result.exit_code == 2 and result.stdout == ""
    assert "Error: the 2 traces are not one job's ranks: their NAME differs (ddp: " \
           "ddp.rank0.chrome_trace; other: other.rank1.chrome_trace)" in result.stderr


def test_options_that_read_one_profile_ask_for_a_rank(job):
    for option in (["-diff", str(job / "ddp.rank0.hatchet")], ["--source", "matmul"]):
        result = CliRunner().invoke(viewer, [*option, str(job)])
        assert result.exit_code == 2 and "choose one with --rank R" in result.output


def test_a_folder_without_profiles_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(viewer, [str(tmp_path)])
    assert result.exit_code == 2 and "holds no .hatchet file" in result.output


def test_triton_viewer_opens_a_rank_file(tmp_path):
    """Its util walks the device table: the rank's identity is in the root frame instead."""
    pytest.importorskip("triton.profiler.viewer")
    path = rank_file(tmp_path, 1, 2, scope("step", kernel("mm", 2e5, 1, 1, flops16=2e12,
                                                          bytes=1e9)))
    run = subprocess.run([sys.executable, "-m", "triton.profiler.viewer", "-m", "time/us,util",
                          path], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "mm" in run.stdout and "200.000" in run.stdout


def trace_file(folder, rank: int, t0: int, events: list) -> str:
    doc = {"otherData": {"host": "h", "pid": 10 + rank, "rank": rank, "world_size": 2,
                         "t0_ns": t0},
           "traceEvents": [{"name": "process_name", "ph": "M", "pid": rank,
                            "args": {"name": f"rank {rank} GPU {rank}"}}] + events}
    path = os.path.join(folder, f"ddp.rank{rank}.chrome_trace")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def test_traces_merge_onto_one_clock_with_a_process_per_rank_and_gpu(tmp_path):
    ev = {"name": "ncclDevKernel_AllReduce", "cat": "kernel", "ph": "X", "tid": 7, "dur": 5.0}
    trace_file(tmp_path, 0, 1_000_000, [dict(ev, pid=0, ts=10.0)])
    trace_file(tmp_path, 1, 1_004_000, [dict(ev, pid=1, ts=6.0)])  # started 4 us later
    result = CliRunner().invoke(viewer, ["--output", "trace", str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["name"] == "process_name"}
    assert sorted(names.values()) == ["rank 0 GPU 0", "rank 1 GPU 1"]
    kernels = {names[e["pid"]]: e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X"}
    assert kernels == {"rank 0 GPU 0": 10.0, "rank 1 GPU 1": 10.0}  # the same instant
    assert doc["otherData"] == {"ranks": [0, 1], "t0_ns": 1_000_000}


def test_traces_whose_pids_name_their_processes_merge_under_those_names(tmp_path):
    """Our traces (and Triton's) name a process by its pid, with no metadata events."""
    for rank in (0, 1):
        path = trace_file(tmp_path, rank, 1_000_000, [])
        doc = load(path)
        doc["traceEvents"] = [{"name": "k", "cat": "kernel", "ph": "X", "pid": f"rank {rank} GPU 0",
                               "tid": 7, "ts": 1.0, "dur": 1.0},
                              {"name": "s", "cat": "add", "ph": "X", "pid": "add Core3 CTA0",
                               "tid": "warp 0 (line 0)", "ts": 1.5, "dur": 0.1}]
        with open(path, "w") as f:
            json.dump(doc, f)
    result = CliRunner().invoke(viewer, ["--output", "trace", str(tmp_path)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["name"] == "process_name"}
    assert sorted(names.values()) == ["rank 0 GPU 0", "rank 0 add Core3 CTA0", "rank 1 GPU 0",
                                      "rank 1 add Core3 CTA0"]


def test_a_rank_of_over_a_thousand_processes_shares_no_process_with_the_next(tmp_path):
    """The merged ids were 1000 per file apart: rank 0's 1000th process was rank 1's first."""
    ev = {"name": "k", "ph": "X", "tid": 0, "ts": 1.0, "dur": 1.0}
    trace_file(tmp_path, 0, 1_000, [dict(ev, pid=f"p{i}") for i in range(1001)])
    trace_file(tmp_path, 1, 1_000, [dict(ev, pid="GPU 1")])
    result = CliRunner().invoke(viewer, ["--output", "trace", str(tmp_path)])
    assert result.exit_code == 0, result.output
    names: dict = {}
    for e in json.loads(result.stdout)["traceEvents"]:
        if e["name"] == "process_name":
            names.setdefault(e["pid"], []).append(e["args"]["name"])
    assert len(names) == 1004 and all(len(n) == 1 for n in names.values())


def test_trace_merge_names_a_file_that_is_not_a_trace(tmp_path):
    trace_file(tmp_path, 0, 0, [])
    (tmp_path / "ddp.rank1.chrome_trace").write_text('{"x": 1}')
    result = CliRunner().invoke(viewer, ["--output", "trace", str(tmp_path)])
    assert result.exit_code == 2 and "not a Chrome trace" in result.stderr
    assert json.loads(result.stdout)["otherData"]["ranks"] == [0]


def test_a_live_processs_msgpack_profile_is_not_overwritten_either(tmp_path):
    path = str(tmp_path / "run.hatchet_msgpack")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        writer.write(doc_of(other.pid), path, encoding="msgpack")
        assert place.other_writer(path, None) == f"process {other.pid} on " \
                                                  f"{socket.gethostname()}, still running"
        written = writer.write(doc_of(os.getpid()), path, encoding="msgpack")
    finally:
        other.kill()
        other.wait()
    assert written.endswith(f"run.pid{os.getpid()}.hatchet_msgpack")


def test_mangled_nccl_kernels_are_communication(tmp_path):
    """CUPTI names NCCL's C++ kernels mangled."""
    name = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"
    rank_file(tmp_path, 0, 1, scope("step", kernel(name, 30e3), kernel("mm", 70e3)))
    got = rows("-m", "comm/%", str(tmp_path / "ddp.rank0.hatchet"))
    assert got["ROOT / step"]["comm/%"] == pytest.approx(30)


def test_merged_ranks_keep_each_kernels_launch_configuration(tmp_path):
    """Ranks on cuda:0 and cuda:1 with the same kernel: the merged tree's launch facts are not
    added up, and its device stays one of theirs, so --diagnose still judges it."""
    for rank in (0, 1):
        k = kernel("small_grid", 1e6, 1, rank)
        k["metrics"].update({"grid_blocks": 16, "block_threads": 128,
                             "registers_per_thread": 32})
        rank_file(tmp_path, rank, 2, k)
    result = CliRunner().invoke(viewer, ["--diagnose", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "1. small_grid: " in result.output and "[too few programs]" in result.output
    assert "16 blocks on 132 SMs" in result.output


def test_a_trace_without_its_time_zero_is_merged_and_said(tmp_path):
    trace_file(tmp_path, 0, 1_000_000, [])
    (tmp_path / "ddp.rank1.chrome_trace").write_text(json.dumps(
        {"traceEvents": [{"name": "k", "ph": "X", "pid": 0, "tid": 1, "ts": 1.0, "dur": 1.0}]}))
    result = CliRunner().invoke(viewer, ["--output", "trace", str(tmp_path)])
    assert result.exit_code == 0 and "note: " in result.stderr
    assert "record no t0_ns" in result.stderr
    assert [e["ts"] for e in json.loads(result.stdout)["traceEvents"] if e["ph"] == "X"] == [1.0]


def test_a_vector_metric_over_ranks_is_one_merged_column_per_element(tmp_path):
    for rank in (0, 1):
        (tmp_path / f"j.rank{rank}.hatchet").write_text(json.dumps([
            {"frame": {"name": "ROOT", "rank": rank, "world_size": 2}, "metrics": {},
             "children": [{"frame": {"name": "fwd"}, "children": [],
                           "metrics": {"lens": [1 + rank, 2]}}]}, {}]))
    result = CliRunner().invoke(viewer, ["-m", "lens", "--output", "json",
                                             str(tmp_path / "j.rank0.hatchet"),
                                             str(tmp_path / "j.rank1.hatchet")])
    assert result.exit_code == 0, result.output
    fwd = next(r for r in json.loads(result.stdout) if r["path"] == ["ROOT", "fwd"])
    assert (fwd["lens[0] min"], fwd["lens[0] max"], fwd["lens[0] max rank"]) == (1, 2, 1)
    assert fwd["lens[1] mean"] == 2


def test_a_trace_nested_past_pythons_limit_is_one_line_and_the_others_merge(tmp_path):
    trace_file(tmp_path, 0, 1_000_000, [])
    (tmp_path / "ddp.rank1.chrome_trace").write_text(
        '{"traceEvents": [' + "[" * 5000 + "]" * 5000 + "]}")
    result = CliRunner().invoke(viewer, ["--output", "trace", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"Error: {str(tmp_path / 'ddp.rank1.chrome_trace')!r} is not a "
                             "trace: it nests too deep or holds a number too long to read\n")
    assert json.loads(result.stdout)["otherData"]["ranks"] == [0]


def test_trace_times_and_process_ids_of_the_wrong_kind_merge_without_a_traceback(tmp_path):
    ev = {"name": "k", "ph": "X", "tid": 1, "dur": 1.0}
    trace_file(tmp_path, 0, 1_000_000, [dict(ev, pid=[1], ts=10 ** 400),
                                        {"name": "process_name", "ph": "M", "pid": {"a": 1},
                                         "args": "x"}])
    trace_file(tmp_path, 1, 10 ** 30, [dict(ev, pid=1, ts=1.0)])  # a clock past 64 bits
    result = CliRunner().invoke(viewer, ["--output", "trace", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ddp.rank1.chrome_trace record no t0_ns" in result.stderr
    assert len(json.loads(result.stdout)["traceEvents"]) > 4


def test_one_readable_rank_of_a_job_is_one_rank_not_one_ranks(tmp_path):
    rank_file(tmp_path, 0, 2, scope("step", kernel("matmul", 1000, 1, 0)))
    (tmp_path / "ddp.rank1.hatchet").write_text('[{"frame": {"name": "ROOT"}, "metr')
    result = CliRunner().invoke(viewer, ["-m", "time/us", str(tmp_path)])
    assert "1 rank (0) merged" in result.stdout, result.output


def test_the_page_of_one_readable_rank_says_1_rank(tmp_path):
    rank_file(tmp_path, 0, 2, scope("step", kernel("matmul", 1000, 1, 0)))
    (tmp_path / "ddp.rank1.hatchet").write_text('[{"frame": {"name": "ROOT"}, "metr')
    page = tmp_path / "r.html"
    CliRunner().invoke(viewer, ["--html", str(page), str(tmp_path)])
    with open(page) as f:
        text = f.read()
    assert "1 rank merged" in text and "1 ranks" not in text


def test_merged_rank_files_list_their_metrics_as_the_job_file_and_one_rank_do():
    """Rank files merged (rank_merge.Frames, frames met in pre-order), the job's own file and
    one rank file list their own (exclusive) metrics in the same order."""
    data = os.path.join(os.path.dirname(__file__), "data", "rs")
    files = [os.path.join(data, f"ddp2_host.rank{r}.hatchet") for r in (0, 1)]
    shown = [CliRunner().invoke(viewer, ["-l", *paths])
             for paths in (files, [os.path.join(data, "ddp2_host.hatchet")], files[:1])]
    assert all(s.exit_code == 0 for s in shown), [s.output for s in shown]
    own = [next(line for line in s.output.splitlines() if line.startswith("exclusive:"))
           for s in shown]
    assert own[0].startswith("exclusive: device_id, device_type, grid_blocks"), own
    assert own[0] == own[1] == own[2]
