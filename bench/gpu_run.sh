#!/usr/bin/env bash
# On the GPU machine: install the carried wheels and the project, run the gpu tests and the
# benchmarks, print a short table last. Usage (device tool, carry .whl): bash bench/gpu_run.sh
# Env: PYTEST_ARGS, PYTEST_K (a -k expression, spaces allowed), PYTEST_PATHS (default tests),
# TESTS_SECONDS (tests not begun that many seconds after the start are skipped, so the summary
# prints inside the device's call limit; the full gpu suite takes ~15 min on an H200), BENCH_ARGS (e.g. "--only launch,gpu --rounds 3"), SKIP_TESTS=1,
# SKIP_FIXTURES=1, SKIP_BENCH=1, SKIP_INSTALL=1, PEER=1 (Triton's own Proton tests against Triton's and ours: carry
# .peer, a copy of ../shared/peer-tests/triton-proton; PEER_MODULES, PEER_TIMEOUT, PEER_ARGS),
# PEER39=1 (Triton 3.9's suite the same way: carry .peer with ../shared/peer-tests/triton-proton-3.9
# in it and .whl with the pack t39_pack.py makes in .whl/t39; PEER39_MODULES, PEER39_DEADLINE;
# with PEER=1 too, the two suites run side by side),
# TUTORIALS=1 (Triton's tutorials under both, their trees compared: carry .peer), BENCH_RESULTS (JSON lines to append to; default $OUT/bench.jsonl),
# BASELINE=DIR (an earlier tree: its launch loop against this one's; BASELINE_ROUNDS, _MODES),
# NATIVE_AB=1 (the launch loop and 1M launches with Python's pipeline and the C helper's:
# PROTON_NATIVE=0, 1),
# OVERHEAD=paired,launch,scale,scalepaired,scaletrend,modelpaired,threadstates,bf16step (what the
# profiler costs; ISSUE18=... is the old name of this variable), one part a call to stay under
# 10 minutes each:
#   paired       the launch loop bare and profiled in turn inside each process, every mode,
#                5 rounds, ~5 min
#   launch       the launch loop between processes against CUPTI's floor and Triton's, 5 rounds,
#                ~4 min
#   scale        1M launches, bare, CUPTI's floor, ours and Triton's, ROUNDS (5) rounds, ~7 min;
#                then each tenth, over the tenths the host ran fast in (bench/tenths.py)
#   scalepaired  500k launches bare, profiled and bare again inside each process, floor, ours
#                and Triton's, 5 rounds, ~7 min
#   modelpaired  the model step bare, profiled and bare again inside each process, floor, ours
#                and Triton's, 5 rounds, ~3.5 min
#   scaletrend   1M launches bare, profiled and bare again inside each process, each tenth's
#                time (does a cost grow along the run?), 2 rounds, ~6 min
#   threadstates the python-context model step with and without PROTON_KEEP_THREAD_STATES
#                (`model` is its old name), ~2 min
#   bf16step     a host-bound bf16 GPT training step (bench/step_cost.py, issue 37): rounds of
#                short phases inside each process (bare, CUPTI's floor, ours: shadow, hook=triton,
#                python; the order turning each round), the host's speed around each phase;
#                Triton's Proton in processes of its own with bare and the floor; the census of
#                CUDA calls a step by API (cb-all, once); a verdict table against issue 37's
#                targets. Defaults: --processes 6 --triton-processes 4 --rounds 12 --steps 15
#                --deadline 420 (6 x ~38 s + 4 x ~28 s, ~6 min; no process starts that would end
#                after 420 s); STEP_PROCESSES, STEP_TRITON_PROCESSES, STEP_ROUNDS, STEP_STEPS,
#                STEP_DEADLINE, STEP_PROFILERS
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SITE=/tmp/site
if [ -z "${SKIP_INSTALL:-}" ]; then  # SKIP_INSTALL=1: runs side by side after one install
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl || exit 1
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target $SITE . || exit 1
fi
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton, cupti, pandas; print('torch', torch.__version__, 'triton', triton.__version__, 'pandas', pandas.__version__)"

tests_rc=0
export PROTON_MATRIX_OUT=$OUT/matrix.jsonl  # the real-workload matrix's cells (test_gpu_matrix.py)
rm -f "$PROTON_MATRIX_OUT"
if [ -z "${SKIP_TESTS:-}" ]; then
  [ -n "${TESTS_SECONDS:-}" ] && export PROTON_TEST_DEADLINE=$(( $(date +%s) + TESTS_SECONDS ))
  python3 -P -m pytest -m gpu ${PYTEST_PATHS:-tests} -q -rfE -p no:cacheprovider ${PYTEST_K:+-k "$PYTEST_K"} ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/gpu_tests.log"
  tests_rc=${PIPESTATUS[0]}
fi
peer36() {
  # Triton's own Proton tests against Triton's and ours, side by side (issue 44): the suite is a
  # copy of ../shared/peer-tests/triton-proton carried in .peer/ (carry .peer); the machine's
  # python (torch, triton), with ours on PYTHONPATH
  suite=${PEER_SUITE:-$PWD/.peer/triton-proton}
  PEER_WORK=/tmp/peer VENV=$(python3 -c 'import sys; print(sys.prefix)') PROJECT=$PWD IMPLS="triton project_l2" TIMEOUT=${PEER_TIMEOUT:-400} \
    MODULES=${PEER_MODULES:-"test_api test_profile test_cmd test_instrumentation test_viewer test_lib test_override"} \
    bash "$suite/run_gpu.sh" ${PEER_ARGS:-} > "$OUT/peer.log" 2>&1
  cp /tmp/peer/results_gpu/compare.txt "$OUT/peer_compare.txt" 2>/dev/null
  (cd /tmp/peer/results_gpu && tar czf "$OUT/peer_logs.tgz" *.txt)
  python3 bench/peer_table.py /tmp/peer/results_gpu/compare.txt | tee "$OUT/peer_table.txt"
}
peer39() {
  # Triton 3.9's own Proton tests (issue 58), the same way, under triton 3.9.0 rebuilt from the
  # pack in .whl/t39 (../shared/peer-tests/triton-proton-3.9/t39_pack.py) and the machine's
  # 3.6.0; the suite is a copy of ../shared/peer-tests/triton-proton-3.9 in .peer/
  suite39=${PEER39_SUITE:-$PWD/.peer/triton-proton-3.9}
  if PYTHONPATH= python3 "$suite39/t39_unpack.py" .whl/t39 /tmp/t39site > /tmp/t39env.sh 2> "$OUT/t39_unpack.log"; then
    . /tmp/t39env.sh
    # run_gpu.sh copies the adapted trees into PEER_WORK but runs Triton's from there too
    rm -rf /tmp/peer39/triton && mkdir -p /tmp/peer39 && cp -r "$suite39/triton" /tmp/peer39/triton
    PEER_WORK=/tmp/peer39 VENV=$(python3 -c 'import sys; print(sys.prefix)') PROJECT=$PWD TRITON_SITE=/tmp/t39site \
      IMPLS="triton project" TIMEOUT=${PEER_TIMEOUT:-400} DEADLINE=${PEER39_DEADLINE:-0} \
      MODULES=${PEER39_MODULES:-"test_api test_profile test_cmd test_instrumentation test_viewer test_lib test_override"} \
      bash "$suite39/run_gpu.sh" ${PEER_ARGS:-} > "$OUT/peer39.log" 2>&1
    cp /tmp/peer39/results_gpu/compare.txt "$OUT/peer39_compare.txt" 2>/dev/null
    (cd /tmp/peer39/results_gpu && tar czf "$OUT/peer39_logs.tgz" *.txt)
    python3 bench/peer_table.py /tmp/peer39/results_gpu/compare.txt bench/peer_differences_39.txt \
      | tee "$OUT/peer39_table.txt"
  else
    echo "triton 3.9.0 could not be rebuilt from .whl/t39: see t39_unpack.log" | tee "$OUT/peer39_table.txt"
  fi
}
# both suites side by side when both are asked for (one CUPTI subscriber per process: each
# test runs in its own pytest process; ~220 s on an H200 against ~400 s in turn)
if [ -n "${PEER:-}" ] && [ -n "${PEER39:-}" ]; then
  peer36 & peer39 & wait
elif [ -n "${PEER:-}" ]; then
  peer36
elif [ -n "${PEER39:-}" ]; then
  peer39
fi
if [ -n "${TUTORIALS:-}" ]; then  # Triton's tutorials under Triton's and ours (carry .peer)
  bash bench/peer_tutorials.sh "${PEER_SUITE:-$PWD/.peer/triton-proton}" 2>&1 | tee "$OUT/tutorials.txt"
  (cd /tmp/tut && tar czf "$OUT/tutorials_logs.tgz" $(find . -name '*.log' -o -name log))
fi
if [ -z "${SKIP_FIXTURES:-}" ]; then
  # fixtures for the CPU tests: a real session's CUPTI records and profile, the example's profile
  PROTON_RECORD_CUPTI=$OUT/cupti_records.json python3 tests/data/record_session.py && cp tests/data/recorded.hatchet "$OUT/"
  python3 tests/data/record_session.py triton && cp tests/data/triton_recorded.hatchet "$OUT/"
  for mode in python triton-python; do python3 tests/data/record_session.py $mode; done
  cp tests/data/python_recorded.hatchet tests/data/triton_python_recorded.hatchet "$OUT/"
  # the analyzer's fixture: a bad kernel per --diagnose rule, and its report
  python3 tests/diagnose_workload.py tests/data/diagnose_recorded && cp tests/data/diagnose_recorded.hatchet "$OUT/"
  # ours by module: the machine's venv has Triton's `proton`/`proton-viewer` on PATH too (the
  # 2026-11-29 run's fixture reports were Triton's viewer refusing --diagnose)
  viewer() { python3 -m proton.viewer.cli "$@"; }
  viewer --diagnose tests/data/diagnose_recorded.hatchet > "$OUT/diagnose.txt" 2>&1
  (ex=$PWD/proton/examples/mlp.py; cd /tmp && python3 -m proton -n example_gpu "$ex" --steps 3 2>&1 | tail -1; cp example_gpu.hatchet "$OUT/"; viewer example_gpu.hatchet)
  # a training-ish job recorded every way the viewer reads (issue 60): launch configurations,
  # copies, idle, waits; counters; warps (instrumentation); PC samples carrying their source
  python3 tests/data/record_fixtures.py "$OUT" 2>&1 | tee "$OUT/record_fixtures.log"
  for f in train_gpu train_counters train_warps train_pc; do
    [ -f "$OUT/$f.hatchet" ] && viewer --diagnose "$OUT/$f.hatchet" > "$OUT/$f.diagnose.txt" 2>&1
  done
fi
if [ -n "${BASELINE:-}" ]; then
  # the same launch benchmarks for an earlier tree of the project (e.g. `git archive REV`),
  # interleaved with this one round by round (ABBA) so drift hits both alike
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade \
    --target /tmp/site_base "$BASELINE" || exit 1
  modes=${BASELINE_MODES:-"none;proton;proton --context python;proton --hook triton"}
  for round in $(seq "${BASELINE_ROUNDS:-3}"); do
    order="base ours"; [ $((round % 2)) = 0 ] && order="ours base"  # ABBA: no order bias
    for which in $order; do
      site=$SITE; [ $which = base ] && site=/tmp/site_base:$SITE
      PYTHONPATH=$site python3 bench/run.py --only launch --rounds 1 --modes "$modes" \
        --results "$OUT/launch_$which.jsonl" > /dev/null 2>>"$OUT/bench.log"
    done
  done
  for which in base ours; do
    echo "== launch loop, $which"
    python3 bench/run.py --table-only --results "$OUT/launch_$which.jsonl" | grep -E "^\| (workload|launch)"
  done | tee -a "$OUT/bench.log"
fi
if [ -n "${NATIVE_AB:-}" ]; then
  # 0: Python's pipeline (walk, numpy reads, Python join); 1: the C helper's (the default)
  for round in $(seq "${NATIVE_ROUNDS:-3}"); do
    for n in 0 1; do
      PROTON_NATIVE=$n python3 bench/run.py --only ${NATIVE_ONLY:-launch,scale} --rounds 1 \
        --modes "${NATIVE_MODES:-none;proton}" --results "$OUT/native_$n.jsonl" \
        > /dev/null 2>>"$OUT/bench.log"
    done
  done
  for n in 0 1; do
    echo "== C helper PROTON_NATIVE=$n"
    python3 bench/run.py --table-only --results "$OUT/native_$n.jsonl" | grep -E "^\| (workload|launch-bound, shadow|scale|1M)"
  done | tee -a "$OUT/bench.log"
fi
OVERHEAD=${OVERHEAD:-${ISSUE18:-}}
if [ -n "$OVERHEAD" ]; then
  part() { case ",$OVERHEAD," in *",$1,"*) return 0;; esac; return 1; }
  part paired && python3 bench/run.py --only paired --rounds 5 --results "$OUT/overhead.jsonl" \
    > /dev/null 2>>"$OUT/bench.log"
  part launch && python3 bench/run.py --only launch --rounds 5 --results "$OUT/overhead.jsonl" \
    --modes "none;cupti;proton;triton;proton --context python;triton --context python" \
    > /dev/null 2>>"$OUT/bench.log"
  if part scale; then  # then each tenth, and the tenths the host ran fast in (bench/tenths.py)
    python3 bench/run.py --only scale --rounds "${ROUNDS:-5}" --results "$OUT/scale.jsonl" \
      > /dev/null 2>>"$OUT/bench.log"
    cat "$OUT/scale.jsonl" >> "$OUT/overhead.jsonl"
    python3 bench/tenths.py "$OUT/scale.jsonl"
  fi
  part scalepaired && python3 bench/run.py --only scale_paired --rounds 5 \
    --results "$OUT/overhead.jsonl" > /dev/null 2>>"$OUT/bench.log"
  if part scaletrend; then  # 1M launches bare / profiled / bare in one process, per tenth
    for round in 1 2; do
      for m in cupti proton triton; do
        python3 bench/workloads.py scale_paired $m 2>>"$OUT/bench.log" | tail -1 >> "$OUT/trend.jsonl"
      done
    done
    python3 bench/tenths.py "$OUT/trend.jsonl"
  fi
  part modelpaired && python3 bench/run.py --only model_paired --rounds 5 \
    --results "$OUT/overhead.jsonl" > /dev/null 2>>"$OUT/bench.log"
  if part threadstates || part model; then
    for keep in 0 1; do
      PROTON_KEEP_THREAD_STATES=$keep python3 bench/run.py --only model --rounds 2 \
        --modes "none;proton --context python" --results "$OUT/keep_$keep.jsonl" \
        > /dev/null 2>>"$OUT/bench.log"
    done
  fi
  if part bf16step; then
    python3 bench/step_cost.py --processes "${STEP_PROCESSES:-6}" \
      --triton-processes "${STEP_TRITON_PROCESSES:-4}" --rounds "${STEP_ROUNDS:-12}" \
      --steps "${STEP_STEPS:-15}" --deadline "${STEP_DEADLINE:-420}" \
      --results "$OUT/step_cost.jsonl" ${STEP_PROFILERS:+--profilers "$STEP_PROFILERS"} \
      > "$OUT/step_cost.txt" 2>>"$OUT/bench.log"
    cat "$OUT/step_cost.txt" | tee -a "$OUT/bench.log"
  fi
  { [ -f "$OUT/overhead.jsonl" ] && python3 bench/run.py --table-only --results "$OUT/overhead.jsonl" \
      | grep -E "^\| (workload|launch|scale|model step, paired)"
    for keep in 0 1; do
      [ -f "$OUT/keep_$keep.jsonl" ] || continue
      echo "== PROTON_KEEP_THREAD_STATES=$keep"
      python3 bench/run.py --table-only --results "$OUT/keep_$keep.jsonl" | grep -E "python context"
    done; } | tee -a "$OUT/bench.log"
fi
[ -z "${SKIP_BENCH:-}" ] && python3 bench/run.py --results "${BENCH_RESULTS:-$OUT/bench.jsonl}" ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench.log"

echo
echo "== summary ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
[ -f "$OUT/gpu_tests.log" ] && grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -1
[ -f "$OUT/peer_table.txt" ] && head -3 "$OUT/peer_table.txt"
[ -f "$OUT/peer39_table.txt" ] && head -3 "$OUT/peer39_table.txt"
[ -f "$OUT/tutorials.txt" ] && sed -n '/^== tutorials/,$p' "$OUT/tutorials.txt"
[ -f "$PROTON_MATRIX_OUT" ] && python3 bench/matrix_table.py "$PROTON_MATRIX_OUT"
[ -f "$OUT/bench.log" ] && sed -n '/^== launch loop\|^| workload/,$p' "$OUT/bench.log" | tail -40
# the device tool brings back at most 8 files from $OUT: more are packed into one archive
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 8 ]; then
  (cd "$OUT" && tar czf out.tgz --remove-files $(find . -maxdepth 1 -type f ! -name out.tgz ! -name gpu_tests.log -printf '%P\n'))
fi
exit $tests_rc
