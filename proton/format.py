"""The profile file format: every name and pattern that writers and readers share.

No imports from the rest of Proton (the viewer reads files with this module alone). The layout,
as Triton's Proton writes it and both viewers read it:

    [root node, device table]
    node   = {"frame": {"name": str, "type": "function"[, "no_lines": str]},
              "metrics": {name: number, ...}, "children": [node, ...]}
    root   = a node named "ROOT" that carries a 0 for every inclusive metric; it also has
             JOB_KEY, the writing process (host, pid[, rank, ...]), and a sampled profile's
             root SOURCES_KEY: keys beside frame, metrics and children, which neither hatchet
             nor Triton's viewer reads
    device table = {"CUDA": {"0": {"arch", "num_sms", "clock_rate", "memory_clock_rate",
                                   "bus_width"}, ...}}   ({} when no kernel ran)

A node's metrics are its own (exclusive) values; the viewer sums inclusive ones over subtrees.
"""
from __future__ import annotations

import re

# -- the tree ------------------------------------------------------------------------------------
FRAME_KEY = "frame"
"""A node's frame: {NAME_KEY: ..., TYPE_KEY: FRAME_TYPE, ...}."""
METRICS_KEY = "metrics"
"""A node's own metrics: {name: number, ...}."""
CHILDREN_KEY = "children"
"""A node's child nodes."""
NAME_KEY = "name"
"""A frame's name."""
TYPE_KEY = "type"
"""A frame's type (FRAME_TYPE)."""
ROOT_NAME = "ROOT"
FRAME_TYPE = "function"
"""Every frame's "type" (hatchet's default)."""
RANKS_KEY = "ranks"
"""A job file's node key (written by a job merged in memory, rank_merge.document): {"n": ranks
with the frame, "few": those ranks or null, "stats": {metric: [sum, min, max, max rank, ranks
with it, min rank]}} (a vector metric's under each element's name, "lens[0]"); the root's also has "size" (ranks merged), "lo" (the lowest) and "ranks"
(which; a capture may merge some of a job's ranks)."""
VECTOR_SHOWN = 256
"""Elements of a vector metric ("lens": [3, 5]) the viewer shows, as metrics of their own
("lens[0]", "lens[1]"); a job file gives these elements its RANKS_KEY statistics under those
names (its summed vector is written whole)."""
TREE_EXTENSION = ".hatchet"
TRACE_EXTENSION = ".chrome_trace"
JOB_KEYS = ("rank", "world_size", "local_rank", "host", "pid", "launcher", "script")
"""The writing process, in the root node's JOB_KEY (and in a trace's OTHER_DATA): the
launcher's rank, world size and local rank (a job's ranks only), the host name, the process id
and the profiled script's path."""
JOB_KEY = "job"
"""The root node's {JOB_KEYS: value}. Not in the root frame: hatchet tells frames apart by every
key of their frame, so two runs' roots (another pid) never matched in Triton's `-diff` and every
node read as added or removed. Files written before 2026-11-29 carry them in the root frame."""


def job_of(root: dict) -> dict:
    """The writing process a root node records (JOB_KEY; in older files, its frame's JOB_KEYS);
    the values unchecked."""
    job = root.get(JOB_KEY)
    if isinstance(job, dict):
        return job
    frame = root.get(FRAME_KEY)
    return {k: frame[k] for k in JOB_KEYS if k in frame} if isinstance(frame, dict) else {}


def with_job(root: dict, job: dict) -> dict:
    """`root` recording `job` as its JOB_KEY, placed right after its frame: in a file's first
    bytes, where data/place.py reads who wrote a file it may replace."""
    return {FRAME_KEY: root[FRAME_KEY], JOB_KEY: job,
            **{k: v for k, v in root.items() if k != JOB_KEY}}


RANK_FILE = re.compile(r"\.rank(\d+)\.(hatchet|chrome_trace)$")
"""A rank's file name: NAME.rank<R>.hatchet (or .chrome_trace)."""

# -- the Chrome trace ----------------------------------------------------------------------------
OTHER_DATA = "otherData"
"""A trace's top-level dict of facts (Chrome's trace format): JOB_KEYS and T0_NS."""
T0_NS = "t0_ns"
"""The host clock (ns) at the trace's time 0: ranks' traces are aligned by it when merged."""

# -- metrics -------------------------------------------------------------------------------------
TIME = "time (ns)"
"""GPU time of a kernel node, summed over its launches."""
COUNT = "count"
"""Launches of a kernel node."""
DEVICE_ID = "device_id"
"""Written as a string ("0"); the key of the device table entry."""
DEVICE_TYPE = "device_type"
CUDA = "CUDA"
"""The device type of NVIDIA GPUs, and the device table's key."""
CPU_TIME = "cpu_time (ns)"
"""A CPU-timed scope's wall time on the host, its children's included (a node's own value, as
hatchet reads it: never summed up the tree)."""
CPU_COUNT = "cpu_count"
"""How many times a CPU-timed scope was entered and left (a node's own value, like CPU_TIME):
what avg_cpu_time divides by."""
SYNC_TIME = "sync_time (ns)"
"""Time the CPU spent blocked on the GPU in a synchronizing call (a stream, event or device
synchronization, a synchronous copy; torch's `.item()` and `print(tensor)` wait in
cudaStreamSynchronize), from the call's enter to its exit, on the node of the scope (or
call path) that made it; summed up the tree like TIME."""
SYNC_COUNT = "sync_count"
"""How many synchronizing calls SYNC_TIME sums (inclusive, like COUNT)."""
GPU_IDLE = "gpu_idle (ns)"
"""A scope's own value (never summed up the tree): of its entries' wall time (SCOPE_WALL), the
time in which no kernel (or copy) ran on any GPU of the process; with several streams busy
time is their union. Scopes entered on the main thread only. The viewer's `gpu_idle/%` is
GPU_IDLE over SCOPE_WALL."""
SCOPE_WALL = "scope_wall (ns)"
"""A scope's own value (never summed up the tree): its entries' wall time on CUPTI's clock,
what GPU_IDLE is a part of."""
GPU_IDLE_EXCLUDED = "gpu_idle_excluded (ns)"
"""A scope's own value: of its entries' wall time, the time the GPU ran nothing while the host
was in Proton's own work (start, activate, flushes) or in a launch call that held the host
STEP_SLOW_LAUNCH or more (a slow launch call: a kernel's first load, or CUPTI's work inside the
launch under the profiler); left out of GPU_IDLE, so GPU_IDLE + GPU_IDLE_EXCLUDED + busy = SCOPE_WALL."""

# -- a step's GPU time by what the GPU did (own values of a step's node) -------------------------
# A step is an entry of a scope opened on the main thread with no main-thread scope open around
# it. Its window runs from its start to the next step's start when the next is an entry of the
# same scope (a loop), else until the GPU finished every record launched before its exit (past
# the next step's start: the next window then begins there; windows never overlap). Every instant
# of a window is counted once, in the first of these that holds: a compute kernel ran (any
# stream, any GPU of the process), an NCCL kernel ran, a copy or set ran; else the GPU was idle
# and the main thread was in Proton's own work, in a long launch call, blocked in a
# synchronizing call, or running (the host had not launched the next work). The parts sum to
# STEP_WALL. Kernels that run after the host left the step (asynchronous launches, an
# all-reduce waiting for another rank) are counted in the window they ran in.
STEP_WALL = "step_wall (ns)"
"""The step windows' length, summed over the step's entries."""
STEP_COUNT = "step_count"
"""How many step windows STEP_WALL sums."""
STEP_COMPUTE = "step_compute (ns)"
"""Time a kernel other than NCCL's ran."""
STEP_COMM = "step_comm (ns)"
"""Time an NCCL kernel ran and no compute kernel did (communication not hidden by compute;
an NCCL kernel also runs while it waits for the other ranks)."""
STEP_COPY = "step_copy (ns)"
"""Time a copy or set ran and no kernel did."""
STEP_IDLE_HOST = "step_idle_host (ns)"
"""GPU idle while the main thread ran (its own code, a data loader's wait, a sleep): the GPU
waited for the host to launch work (HTA's host wait)."""
STEP_IDLE_SYNC = "step_idle_sync (ns)"
"""GPU idle while the main thread was blocked in a synchronizing call (it waited for the GPU,
which waited on something else: a pageable copy's staging, another device, a host callback)."""
STEP_IDLE_LAUNCH = "step_idle_launch (ns)"
"""GPU idle while a launch call held its thread STEP_SLOW_LAUNCH or more: a kernel's first
launch (CUDA's lazy loading of a kernel never run before, or CUPTI setting up a kernel's first
launch under the profiler); a one-time cost, not the job's steady state."""
STEP_IDLE_PROFILER = "step_idle_profiler (ns)"
"""GPU idle while the main thread was in Proton's own work (start, activate, deactivate,
flushes): the profiler's, never the job's."""
STEP_PARTS = (STEP_COMPUTE, STEP_COMM, STEP_COPY, STEP_IDLE_HOST, STEP_IDLE_SYNC,
              STEP_IDLE_LAUNCH, STEP_IDLE_PROFILER)
"""The parts of STEP_WALL, in the order they are shown."""
STEP_METRICS = (STEP_WALL, STEP_COUNT, *STEP_PARTS)
STEP_SLOW_LAUNCH = 200_000
"""ns: a launch call that held its thread this long is a slow one (a kernel's first load, or
CUPTI's work inside it: a DDP rank's held 1.2 ms a step under Proton, none under
torch.profiler); a launch takes a few microseconds otherwise."""
COMM_KERNEL = re.compile(r"^(?:_Z\d+)?(?:nccl|rccl)", re.IGNORECASE)
"""Communication kernels: NCCL's (ncclDevKernel_AllReduce_..., ncclKernel_SendRecv_...), by
their name as CUPTI gives it (mangled C++: _Z39ncclDevKernel_AllReduce_...)."""
EXCLUSIVE = "(exc)"
"""Suffix of a user metric that belongs to its node only; dropped when written."""
PROPERTY = "(pty)"
"""Suffix of a user metric that is a property of its node (a tile size, a dtype code): the last
value given is kept, not summed over entries, nor into parents; dropped when written."""
TABLE_COLUMNS = ("node", "name")
"""Columns of hatchet's data frame besides the metrics (the frame's node and its name): a metric
may not take these names (the viewer reads such a metric of an older file as "NAME (metric)")."""
BYTES = "bytes"
FLOPS_WIDTHS = (8, 16, 32, 64)
"""The operand widths in bits a flops metric may name (Triton's metric.FLOPS_WIDTHS)."""
FLOPS = re.compile(rf"flops({'|'.join(map(str, FLOPS_WIDTHS))})?")
"""launch_metadata's floating-point operations, by operand width in bits (none: unspecified)."""
CAPTURED_AT = "<captured_at>"
"""Under a CUDA graph's launch: the call path where each of its kernels was captured (Triton's
Proton's frame name)."""
METRIC_FRAME = "<metric>"
"""Under a scope's or a launch's LAUNCH_METADATA state: the profiler's copies of the metrics
given there (a GPU tensor's copy; inside a CUDA graph capture, the metric kernel each replay
runs), with their time and count (Triton's Proton's frame name)."""
# -- copies and sets (CUPTI's MEMCPY, MEMCPY2 and MEMSET records) --------------------------------
MEMCPY_HTOD_PAGEABLE = "memcpy HtoD (pageable)"
MEMCPY_HTOD_PINNED = "memcpy HtoD (pinned)"
MEMCPY_DTOH_PAGEABLE = "memcpy DtoH (pageable)"
MEMCPY_DTOH_PINNED = "memcpy DtoH (pinned)"
MEMCPY_DTOD = "memcpy DtoD"
MEMCPY_PTOP = "memcpy PtoP"
MEMCPY_HTOH = "memcpy HtoH"
MEMCPY_OTHER = "memcpy other"
MEMSET = "memset"
COPY_NAMES = (MEMCPY_HTOD_PAGEABLE, MEMCPY_HTOD_PINNED, MEMCPY_DTOH_PAGEABLE, MEMCPY_DTOH_PINNED,
              MEMCPY_DTOD, MEMCPY_PTOP, MEMCPY_HTOH, MEMCPY_OTHER, MEMSET)
"""A copy or set node's frame name: a child of the call path that issued it, beside its
kernels, with time (ns), count and bytes. Pageable or pinned is the host side's memory (the
source of HtoD, the destination of DtoH); HtoA, AtoD and the other array copies are "other".
In cupti/records.CopyName's order."""
COPY_FRAME = re.compile(r"^(memcpy|memset)( |$)")
"""A frame that is a copy or a set, never a kernel: no occupancy, roofline or launch-shape
rule applies to it."""
PAGEABLE = "(pageable)"
"""The end of a copy node's name whose host side was pageable memory (staged, synchronous)."""
LAUNCH_METADATA = "__proton_launch_metadata"
"""The state a launch_metadata function runs under: the kernels it launches sit right under it
(viewers hide it)."""
LAUNCH_METADATA_PREFIX = LAUNCH_METADATA + ":"
"""Triton 3.9's prefix for a metadata state named after its kernel (its
COMPUTE_METADATA_SCOPE_PREFIX)."""

# -- launch configuration of a kernel node (exclusive metrics: a node's own) --------------------
GRID_BLOCKS = "grid_blocks"
"""Blocks (programs) in the grid: x * y * z."""
BLOCK_THREADS = "block_threads"
"""Threads per block: x * y * z (Triton: num_warps * 32)."""
REGISTERS = "registers_per_thread"
SHARED_MEMORY = "shared_memory_bytes"
"""Static plus dynamic shared memory per block."""
LAUNCH_CONFIGS = "launch_configs"
"""Written when a node's launches differed: how many configurations; the four above are then
those of the one with the most GPU time."""
LAUNCH_METRICS = (GRID_BLOCKS, BLOCK_THREADS, REGISTERS, SHARED_MEMORY)

# -- a Triton kernel's machine code (exclusive metrics of its kernel node) ---------------------
TL_DOT = "tl_dot"
"""Compiled variants of the kernel (one name, several specialisations) whose Triton IR does a
tl.dot; the SASS counts below are summed over those variants."""
SASS_PREFIX = "sass_"
"""`sass_hgmma`, `sass_hmma`, `sass_imma`, `sass_ffma`: those instructions in the code."""
DOT_NO_TENSOR_CORES = "tl_dot_no_tensor_cores"
"""Of those variants, the ones whose code has no HMMA, HGMMA or IMMA (the dot ran on FFMA)."""
DOT_NO_WGMMA = "tl_dot_no_wgmma"
"""Of those variants, the ones with mma.sync (HMMA/IMMA) but no warpgroup MMA (HGMMA)."""

# -- instruction sampling (mode="pcsampling"), with Triton's Proton's names ---------------------
NUM_SAMPLES = "num_samples"
NUM_STALLED = "num_stalled_samples"
STALLED_PREFIX = "stalled_"
"""`stalled_<reason>`: stalled samples by reason; over a node they sum to NUM_STALLED."""
NO_LINES = "no_lines"
"""The frame key of a kernel whose samples could not all be mapped to source lines: why."""
SOURCES_KEY = "sources"
"""The root node's key (beside "frame", "metrics", "children": hatchet and Triton's viewer read
only those three) in a sampled profile: {file path: its text} of the files its source-line
frames name, as the recording machine read them at write time, so a viewer anywhere shows
the code (PROTON_EMBED_SOURCE=0 leaves it out). Bounded by SOURCE_FILE_BYTES a file and
SOURCE_TOTAL_BYTES in all (UTF-8), on writing and on reading."""
SOURCE_FILE_BYTES = 1 << 20
"""The largest file a profile carries (a Triton kernel's module is a few KB to ~100 KB)."""
SOURCE_TOTAL_BYTES = 8 << 20
"""All the text one profile carries."""
SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp",
                   ".hxx", ".inl")
"""Source files a kernel's lines come from (Triton's Python, CUDA C++): the only files a
profile carries and the viewer reads."""
NEVER_READ = ("/proc", "/dev", "/sys")
"""Kernel interfaces (a process's environment, memory): never read as source, whatever names
them."""

# -- frame names -----------------------------------------------------------------------------------
PYTHON_FRAME = re.compile(r"^(?P<file>.+):(?P<line>\d+)@(?P<function>.+)$")
"""`file:line@function`: a python frame (context="python") or a kernel's source line."""
LIBRARY_FILE = re.compile(r"/(site|dist)-packages/|/lib/python3\.\d+/|^<frozen |^<string>$")
"""Files of installed packages (torch, triton, ...) and of the standard library."""


def frame_name(file: str, line: int, function: str) -> str:
    """The name of a python frame or a source line: `file:line@function`."""
    return f"{file}:{line}@{function}"

# -- intra-kernel scopes (backend="instrumentation", proton.language), Triton's names -----------
CYCLES = "cycles"
"""A kernel scope's clock cycles, summed over every warp, CTA and launch that ran it."""
NORMALIZED_CYCLES = "normalized_cycles"
"""CYCLES divided, per launch, by the warps times the CTAs of that launch (Triton's
normalisation: the cycles one warp would have spent on average)."""
WARP_CYCLES = ("warp_cycles_min", "warp_cycles_median", "warp_cycles_max")
"""A kernel scope's cycles per warp event (one warp's one pass through it), across warps and
CTAs: the spread proton-viewer --warps shows (properties: never summed into parents)."""
WARP_EVENTS = "warp_events"
"""How many warp events the scope's cycles sum over."""
WARP_TIMELINE = "warp_timeline"
"""A kernel frame's key (tree files): its latest launch's kernel scopes per warp, as JSON text
(a frame key: hatchet keeps it and Triton's viewer ignores it; ours reads it for --html):
{"device", "clock_khz", "warps", "scopes": [name, ...], and per warp event the columns "sm",
"cta", "warp", "scope" (index into scopes), "start_ns" (from the launch's first CTA), "cycles"}."""
TIMELINE_COLUMNS = ("sm", "cta", "warp", "scope", "start_ns", "cycles")
"""A warp timeline's per-event columns."""

# -- hardware counters (mode="counters"): PM samples joined to the kernels that ran in them -----
# Sums over a kernel node's launches, inclusive like TIME (a scope holds its kernels' sums).
COUNTER_NS = "counter_ns"
"""GPU time of the node's kernels that PM samples covered: what the counters below are over."""
DRAM_BYTES = "dram_bytes"
"""DRAM bytes read and written (dram__bytes_read.sum + dram__bytes_write.sum)."""
L2_BYTES = "l2_bytes"
"""Bytes through the L2 (lts__t_bytes.sum)."""
TENSOR_FLOPS = "tensor_flops"
"""Tensor-pipe work as FLOPs at the 16-bit dense rate: sm__pipe_tensor_cycles_active.sum times
the GPU's 16-bit FLOPs per sub-partition cycle (fp8 work reads as half its FLOPs, tf32 double)."""
TENSOR_ACTIVE_NS = "tensor_active_ns"
"""Time-weighted tensor-pipe activity: sum of (pct_of_peak_sustained_elapsed / 100) x ns; over
COUNTER_NS it is the tensor pipe's active fraction."""
ISSUE_ACTIVE_NS = "issue_active_ns"
"""As TENSOR_ACTIVE_NS, for sm__issue_active (cycles an SM issued an instruction)."""
SM_ACTIVE_NS = "sm_active_ns"
"""As TENSOR_ACTIVE_NS, for sm__cycles_active (cycles an SM had a warp resident)."""
L2_THROUGHPUT_NS = "l2_throughput_ns"
"""As TENSOR_ACTIVE_NS, for the L2's bytes as a share of the L2's own peak
(lts__t_bytes.sum.pct_of_peak_sustained_elapsed): over COUNTER_NS, the L2 bandwidth fraction."""
L1_THROUGHPUT_NS = "l1_throughput_ns"
"""As TENSOR_ACTIVE_NS, for the L1/shared-memory data pipe (l1tex__data_pipe_lsu_wavefronts.sum
.pct_of_peak_sustained_elapsed: global, local and shared-memory wavefronts of the LSU path)."""
COUNTERS_SHARED_NS = "counters_shared_ns"
"""Of COUNTER_NS, the time another kernel ran at once in the same sample (another stream): the
sample's counts were split between them by time."""
COUNTERS_UNRESOLVED_NS = "counters_unresolved_ns"
"""GPU time of the node's kernels that PM samples covered but could not measure: the samples
they ran in hold other work too much for their own rates to be told apart (or what they would
be given is more than the GPU can do). Such a node carries this instead of the counters above."""
COUNTER_METRICS = (COUNTER_NS, DRAM_BYTES, L2_BYTES, TENSOR_FLOPS, TENSOR_ACTIVE_NS,
                   ISSUE_ACTIVE_NS, SM_ACTIVE_NS, L2_THROUGHPUT_NS, L1_THROUGHPUT_NS,
                   COUNTERS_SHARED_NS, COUNTERS_UNRESOLVED_NS)
PEAK_SLACK = 0.05
"""A measured rate up to this share over the GPU's peak (DRAM bandwidth, 100% active, the tensor
pipe's cycles) is at the peak within what the samples can tell, and reads as the peak; a kernel
measured beyond it is not measured (the writer marks it COUNTERS_UNRESOLVED_NS; the viewer
leaves such a rate out)."""
EXACT = "exact_"
"""mode="counters:scopes=A,B": a listed scope's own counts from CUPTI's range profiler (every
kernel between its enter and exit on the main thread, counted, not sampled), written as the
scope node's own values (never summed into parents): EXACT + "dram_bytes", "l2_bytes",
"tensor_flops", "gpu_ns" (GPU time the range spanned), "tensor_active", "issue_active",
"sm_active" (% of that time) and "ranges" (how many times it was counted)."""
EXACT_METRICS = tuple(EXACT + m for m in ("dram_bytes", "l2_bytes", "tensor_flops", "gpu_ns",
                                          "tensor_active", "issue_active", "sm_active",
                                          "ranges"))

# -- the caching allocator per scope (proton.start(memory=True)): a scope node's own values ----
MEM_ALLOC = "mem_alloc_bytes"
"""Bytes torch's CUDA caching allocator handed out while the scope was open, over its entries."""
MEM_FREED = "mem_freed_bytes"
"""Bytes given back to it while the scope was open, over its entries."""
MEM_PEAK = "mem_peak_bytes"
"""The most bytes allocated at once (the whole device's, not the scope's alone) while the scope
was open, over its entries: the highest is where the job's peak happened."""
MEM_LIVE = "mem_live_bytes"
"""Bytes allocated (the device's) at the scope's last exit."""
MEM_LIVE_FIRST = "mem_live_first_bytes"
"""Bytes allocated at the scope's first exit: with MEM_LIVE and MEM_COUNT, its growth per entry."""
MEM_COUNT = "mem_count"
"""Entries of the scope measured."""
MEM_GREW = "mem_grew_count"
"""Exits at which more bytes were allocated than at the scope's exit before (a leak grows at
most of them; a cache filled once grows at one)."""
MEM_KEPT = "mem_kept_bytes"
"""Bytes the scope itself allocated (inside none of its child scopes) in its judged entries
(MEM_JUDGED) and still allocated when the phase was written: what it keeps. From torch's
allocator history, each allocation labelled with the main thread's innermost open scope entry."""
MEM_KEPT_COUNT = "mem_kept_count"
"""Of its judged entries, those that left at least one allocation allocated (a leak keeps at
most of them; a cache filled once at one)."""
MEM_JUDGED = "mem_judged_count"
"""Entries of the scope judged for what they keep: those after its first (a workspace or cache
allocated once is no leak) while the allocator's history was recorded. Absent: not judged."""
MEM_DEVICE = "mem_device_bytes"
"""The device's memory (torch's total_memory), beside MEM_JUDGED: what a leak is measured
against."""
KEPT_METRICS = (MEM_KEPT, MEM_KEPT_COUNT, MEM_JUDGED, MEM_DEVICE)
"""Written when a phase is judged (its end), not at each entry as the others."""
MEMORY_METRICS = (MEM_ALLOC, MEM_FREED, MEM_PEAK, MEM_LIVE, MEM_LIVE_FIRST, MEM_COUNT, MEM_GREW,
                  *KEPT_METRICS)

# -- amounts: what can only be a duration, a count, bytes, operations or samples ---------------
AMOUNTS = (TIME, COUNT, CPU_TIME, CPU_COUNT, SYNC_TIME, SYNC_COUNT, GPU_IDLE, SCOPE_WALL, BYTES,
           NUM_SAMPLES, NUM_STALLED, GPU_IDLE_EXCLUDED, *STEP_METRICS, *COUNTER_METRICS,
           *EXACT_METRICS)
"""Measurements that are never negative and always finite, with FLOPS and STALLED_PREFIX
names: a value that is not such a number is no measurement (the viewer leaves it out)."""


PART_OF = {GPU_IDLE: SCOPE_WALL, GPU_IDLE_EXCLUDED: SCOPE_WALL,
           **{part: STEP_WALL for part in STEP_PARTS}}
"""A node's measurement that is a part of another of the same node (idle time of the wall time,
a step's part of the step): never more than it."""


def is_amount(metric: str) -> bool:
    """Whether `metric` is one of the AMOUNTS, a flops<width> or a stall reason's count."""
    return metric in AMOUNTS or metric.startswith(STALLED_PREFIX) or bool(FLOPS.fullmatch(metric))
