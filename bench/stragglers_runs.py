"""Stragglers named over many runs of jobs in real shapes (issue 57, item 4): N runs of each
configuration of tests/straggler_job.py (DDP or FSDP2 on 2, 4 or 8 GPUs, one rank slow on its
host or its GPU by a share of a step, or none), each run a Proton session of its own whose job
file `--diagnose` judges. Prints each run as it ends and, last, the table: runs named / runs
tried, false alarms.

    python3 bench/stragglers_runs.py [--runs 10] [--share 0.05] [--configs ddp-host@4,...]

A configuration is KIND-PLANT@WORLD: KIND ddp or fsdp; PLANT host (the last rank's host sleeps
--share of a step in scope data, before its forward), gpu (it trains on --share more rows a
step, an extra micro-batch: DDP) or balanced (no rank planted). A run is named when its one
straggler finding names the planted rank and cause; a false alarm is a straggler finding that
names another rank or cause, or in a balanced run any straggler or imbalance finding. One
launch a configuration (~15 s of NCCL and torch start-up), its runs in it (~2 to 4 s each: a
model built, wrapped and warmed up at ROOT, then --steps steps in scopes). Each run's measures
go to OUT/stragglers_runs.jsonl.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from contextlib import redirect_stdout
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "straggler_job.py")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from straggler_words import read  # noqa: E402 - the finding's words, as the tests read them
CONFIGS = "ddp-host@4,ddp-gpu@4,ddp-balanced@4,ddp-host@2,fsdp-host@4,fsdp-balanced@4"
WIDE = "ddp-host@8,ddp-gpu@8,ddp-balanced@8"
"""Added where the machine has 8 GPUs."""
LAUNCH_S, RUN_S = 120, 30
"""A launch's time allowed: start-up, then each run (a run takes 2 to 4 s)."""
SIZES = {"ddp": [], "fsdp": ["--dim", "4096", "--batch", "2048"]}
"""FSDP's step made GPU-bound (a small one is host-bound: its ranks take turns being last)."""



@dataclass(slots=True)
class Config:
    name: str
    kind: str
    plant: str
    world: int
    runs: list[dict] = field(default_factory=list)

    @property
    def cause(self) -> str:
        return {"host": "host", "gpu": "GPU"}.get(self.plant, "")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--share", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--configs", default="", help=f"default: {CONFIGS} (and {WIDE} on 8 GPUs)")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    return p.parse_args()


def gpus() -> int:
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())
    except (OSError, subprocess.SubprocessError):
        return 0


def configs(spec: str, have: int) -> list[Config]:
    spec = spec or CONFIGS + ("," + WIDE if have >= 8 else "")
    out = []
    for name in filter(None, (s.strip() for s in spec.split(","))):
        found = re.fullmatch(r"(ddp|fsdp)-(host|gpu|balanced)@(\d+)", name)
        if not found:
            sys.exit(f"configuration {name!r} is not KIND-PLANT@WORLD, e.g. ddp-host@4")
        if found[1] == "fsdp" and found[2] == "gpu":
            sys.exit(f"{name}: the GPU plant is DDP's (an extra micro-batch under no_sync)")
        out.append(Config(name, found[1], found[2], int(found[3])))
    return out


def diagnose(path: str) -> list[dict]:
    """--diagnose --output json of a job file, in this process (one start-up for all)."""
    from proton.viewer.cli import viewer

    text = io.StringIO()
    with redirect_stdout(text):
        viewer.main(["--diagnose", "--output", "json", path], standalone_mode=False)
    return json.loads(text.getvalue())["findings"]


def judge(cfg: Config, path: str, ranks: list[dict]) -> dict:
    """One run's verdict against what was planted, with the job's own measures."""
    slow = ranks[-1]
    row: dict = {"config": cfg.name, "run": ranks[0]["run"], "named": False, "false_alarm": False,
                 "sleep_ms": slow["sleep_ms"], "before_ms": slow["before_ms"],
                 "lost_ms": slow["step_ms"] - slow["before_ms"]}
    if slow["compute_ms"] is not None:
        others = [r["compute_ms"] for r in ranks[:-1]]
        row["gpu_excess_ms"] = slow["compute_ms"] - sum(others) / len(others)
        row["compute_ms"] = sum(others) / len(others)
    try:
        findings = diagnose(path)
    except Exception as exc:  # noqa: BLE001 - a run the viewer cannot read is a miss, said
        row["error"] = f"{type(exc).__name__}: {exc}"
        return row
    late = [f["evidence"] for f in findings if f["rule"] == "straggler"]
    row["findings"] = late + [f["evidence"] for f in findings if f["rule"] == "imbalance"]
    for evidence in late:
        got = read(evidence) or {}
        if cfg.plant != "balanced" and got.get("rank") == slow["rank"] \
                and got.get("cause") == cfg.cause and not row["named"]:
            row.update(named=True, **got)
        else:
            row["false_alarm"] = True
    if cfg.plant == "balanced" and row["findings"]:
        row["false_alarm"] = True
    return row


def progress(cfg: Config, row: dict, total: int) -> str:
    head = f"{cfg.name} run {row['run'] + 1}/{total}:"
    if "error" in row:
        return f"{head} the viewer failed: {row['error']}"
    if row["named"]:
        nan = float("nan")
        cost = f"{row.get('cost_ms', nan):.3f}" + (f" to {row['high_ms']:.3f}"
                                                   if "high_ms" in row else "")
        said = (f"rank {row['rank']} {row['cause']} in {row.get('scope', '?')}, "
                f"+{row.get('excess_ms', nan):.3f} ms there, costs {cost} ms a step")
    else:
        said = "not named" if cfg.plant != "balanced" else "no finding"
    if row["false_alarm"]:
        said += "; FALSE ALARM: " + " | ".join(f[:160] for f in row["findings"])
    truth = f"step {row['before_ms']:.2f} ms, lost {row['lost_ms']:+.3f} ms"
    if cfg.plant == "host":
        truth += f", slept {row['sleep_ms']:.3f} ms"
    if cfg.plant == "gpu" and "gpu_excess_ms" in row:
        truth += f", GPU +{row['gpu_excess_ms']:.3f} ms"
    return f"{head} {said} ({truth})"


def run_config(cfg: Config, args: argparse.Namespace) -> None:
    folder = os.path.join(args.out, "stragglers")
    os.makedirs(folder, exist_ok=True)
    prefix = os.path.join(folder, cfg.name.replace("@", "_"))
    plant = {"host": ["--host", str(args.share)], "gpu": ["--gpu", str(args.share)]}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(cfg.world),
               "--master-port", str(29500 + random.randrange(2000)), JOB, "--kind", cfg.kind,
               "--runs", str(args.runs), "--steps", str(args.steps), "--out", prefix,
               *SIZES[cfg.kind], *plant.get(cfg.plant, [])]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PROTON_")},
           "PROTON_RANK_FILES": "job", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    print(f"== {cfg.name}: {args.runs} runs, {' '.join(command[3:])}", flush=True)
    pending: dict[int, list[dict]] = {}
    with open(prefix + ".log", "w") as log, open(os.path.join(args.out, "stragglers_runs.jsonl"),
                                                 "a") as jsonl:
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                               cwd=folder, start_new_session=True)
        assert job.stdout is not None
        limit = LAUNCH_S + RUN_S * args.runs  # a hung collective ends the launch, not the bench
        watchdog = threading.Timer(limit, os.killpg, (job.pid, signal.SIGKILL))
        watchdog.start()
        for line in job.stdout:
            log.write(line)
            if not line.startswith('{"job"'):
                continue
            rank = json.loads(line)
            got = pending.setdefault(rank["run"], [])
            got.append(rank)
            if len(got) < cfg.world:
                continue
            ranks = sorted(pending.pop(rank["run"]), key=lambda r: r["rank"])
            row = judge(cfg, f"{prefix}.run{rank['run']}.hatchet", ranks)
            cfg.runs.append(row)
            jsonl.write(json.dumps(row) + "\n")
            print(progress(cfg, row, args.runs), flush=True)
        rc = job.wait()
        watchdog.cancel()
    print(f"== {cfg.name}: exit {rc}, {len(cfg.runs)} runs judged in "
          f"{time.monotonic() - started:.0f} s" + ("" if rc == 0 else f"; see {prefix}.log"),
          flush=True)


def table(done: list[Config], share: float) -> str:
    rows = [f"{'configuration':<16} {'named / tried':>13} {'false alarms':>12}  "
            f"{'planted a step (median)':<38} cost a step named (median)"]
    for cfg in done:
        tried = len(cfg.runs)
        named = sum(r["named"] for r in cfg.runs)
        alarms = sum(r["false_alarm"] for r in cfg.runs)
        hits = [r for r in cfg.runs if r["named"]]

        def med(key: str, of: list[dict]) -> float:
            values = [r[key] for r in of if key in r]
            return statistics.median(values) if values else float("nan")

        planted, cost = "-", "-"
        if cfg.plant == "host":
            planted = (f"sleep {med('sleep_ms', cfg.runs):.3f} ms ({share:.0%}), "
                       f"lost {med('lost_ms', cfg.runs):.3f} ms")
        elif cfg.plant == "gpu":
            excess = med("gpu_excess_ms", cfg.runs)
            planted = f"GPU +{excess:.3f} ms ({excess / med('compute_ms', cfg.runs):.1%})"
        if hits:
            cost = f"{med('cost_ms', hits):.3f}" + (
                f" to {med('high_ms', hits):.3f}" if cfg.plant == "gpu" else "") + " ms"
        named_text = f"{named}/{tried}" if cfg.plant != "balanced" else f"-/{tried}"
        rows.append(f"{cfg.name:<16} {named_text:>13} {alarms:>12}  {planted:<38} {cost}")
    return "\n".join(rows)


def main() -> None:
    args = parse()
    have = gpus()
    todo = configs(args.configs, have)
    done = []
    started = time.monotonic()
    for cfg in todo:
        if cfg.world > have:
            print(f"== {cfg.name}: needs {cfg.world} GPUs, found {have}: skipped", flush=True)
            continue
        run_config(cfg, args)
        done.append(cfg)
    print(f"\nstragglers over {args.runs} runs a configuration, the slow rank {args.share:.0%} "
          f"of a step late ({time.monotonic() - started:.0f} s):")
    print(table(done, args.share))


if __name__ == "__main__":
    main()
