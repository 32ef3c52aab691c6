"""Captures of a `proton --listen` GPT job (tests/gpt_workload.py) in a given order; for each
pcsampling capture, the samples on its kernels and what the job said (issue 45 item 1).

    python bench/probes/pc_listen_orders.py            (every order, on a GPU)
    python bench/probes/pc_listen_orders.py NAME       (one)
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "..", "..", "tests", "gpt_workload.py")
PC = ["--steps", "3", "-m", "pcsampling"]
ORDERS = {
    "steps_pc": ([], [["--steps", "3"], PC]),
    "pc_steps_pc": ([], [PC, ["--steps", "3"], PC]),
    "duration_pc": ([], [["--duration", "1"], PC]),
    "compile_pc_steps_pc": (["--compile"], [PC, ["--steps", "3"], PC]),
}


def samples(path: str) -> tuple[int, int]:
    """(samples in the file, kernels with time)"""
    doc = json.load(open(path))
    n = k = 0

    def walk(node):
        nonlocal n, k
        n += node["metrics"].get("num_samples", 0)
        k += bool(node["metrics"].get("count"))
        for c in node["children"]:
            walk(c)
    walk(doc[0])
    return n, k


def order(name: str) -> dict:
    flags, captures = ORDERS[name]
    folder = tempfile.mkdtemp()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PROTON_DEBUG": "1"}
    job = subprocess.Popen([sys.executable, "-m", "proton", "--listen", WORKLOAD,
                            "--until-file", "stop", *flags], cwd=folder, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env)
    for line in job.stdout:
        if line.strip() == "measuring":
            break
    out = []
    for i, args in enumerate(captures):
        done = subprocess.run([sys.executable, "-m", "proton", "capture", str(job.pid), *args,
                               "-n", f"cap{i}"], cwd=folder, capture_output=True, text=True,
                              timeout=200)
        files = glob.glob(os.path.join(folder, f"cap{i}*.hatchet"))
        got = samples(files[0]) if files else None
        out.append({"args": " ".join(args), "rc": done.returncode, "samples_kernels": got,
                    "said": [l for l in (done.stdout + done.stderr).splitlines()
                             if "PC sampling" in l][-2:]})
    open(os.path.join(folder, "stop"), "w").close()
    _, err = job.communicate(timeout=120)
    return {"order": name, "captures": out, "rc": job.returncode,
            "job_said": [l[:300] for l in err.splitlines() if "PC sampling" in l
                         or "Traceback" in l or "rror" in l][-8:]}


if __name__ == "__main__":
    for name in sys.argv[1:] or ORDERS:
        t0 = time.monotonic()
        try:
            print(json.dumps(order(name)), flush=True)
        except Exception as exc:
            print(json.dumps({"order": name, "error": repr(exc)}), flush=True)
        print(f"   ({time.monotonic() - t0:.0f} s)", flush=True)
