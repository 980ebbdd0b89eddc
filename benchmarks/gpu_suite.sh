#!/usr/bin/env bash
# GPU measurements for BENCHMARKS.md ("GPU"), in one go. Installs nothing from the network.
#
# Assumes jax with CUDA, flax, optax and chex are installed, and felix-jax importable (if it
# is not, this runs `pip install --no-deps --no-build-isolation -e .` from the repository,
# with the package index switched off). Writes JSON under $OUT if set, else ./results/gpu,
# and prints a short table at the end:
#   1. plans.json   - the paper CNN (5 steps x batch 32 per task) at 32..512 tasks: vmap and
#                     lax.map plans, the per-client loop, centralized training, forward-only eval
#   2. devices.json - the sharded cohort on 1, 2, 4, ... and all GPUs (skipped on one GPU)
#   3. run/         - the `cifar10-paper` preset, FeLiX on the `mobiperf` trace, on all GPUs,
#                     under a wall-clock budget (SIGINT when it is spent: the run stops after
#                     the event in progress and writes summary.json): virtual hours reached per
#                     wall second, and the time to the 70% target if it is reached in time.
#                     Needs CIFAR-10 in the data home (skipped without it).
#   4. sweep.json   - sweep batches (benchmarks/sweep_batching.py): N = 1, 8, 32, 60 experiments
#                     of the quickstart shape in one process, SWEEP_AGGS aggregations each:
#                     training tasks per device call, calls per experiment-aggregation, host ms
#                     per event, compilations, wall time.
#
# Settings (environment): OUT, PYTHON (default python), SIZES (default 32,64,128,256,512),
# REPS (default 3), RUN_BUDGET_S (default 300), SKIP_RUN=1 to leave out step 3, SWEEP_NS (default
# 1,8,32,60), SWEEP_AGGS (default 30), SKIP_SWEEP=1 to leave out step 4.
#
#     OUT=/tmp/gpu FELIX_JAX_DATA=/path/to/data bash benchmarks/gpu_suite.sh
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT=${OUT:-results/gpu}
SIZES=${SIZES:-32,64,128,256,512}
REPS=${REPS:-3}
RUN_BUDGET_S=${RUN_BUDGET_S:-300}
SWEEP_NS=${SWEEP_NS:-1,8,32,60}
SWEEP_AGGS=${SWEEP_AGGS:-30}
mkdir -p "$OUT"

if ! (cd / && "$PYTHON" -c "import felix_jax") 2>/dev/null; then
  PIP_NO_INDEX=1 "$PYTHON" -m pip install --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1
fi

"$PYTHON" - "$OUT/env.json" <<'EOF'
import json, platform, sys
import jax
info = {"jax": jax.__version__, "python": platform.python_version(), "backend": jax.default_backend(),
        "devices": [str(d.device_kind) for d in jax.devices()]}
json.dump(info, open(sys.argv[1], "w"), indent=2)
print("environment:", info, flush=True)
if info["backend"] != "gpu":
    print("warning: jax sees no GPU; the figures below are for", info["backend"], file=sys.stderr)
EOF
NUM_DEVICES=$("$PYTHON" -c "import jax; print(jax.device_count())")

echo "== 1. plans and baselines at $SIZES tasks"
"$PYTHON" benchmarks/cohort_throughput.py --sizes "$SIZES" --plans vmap,map --reps "$REPS" \
  --json "$OUT/plans.json" | tee "$OUT/plans.txt"

if [ "$NUM_DEVICES" -gt 1 ]; then
  COUNTS=$("$PYTHON" -c "n = $NUM_DEVICES; c = [1 << i for i in range(n.bit_length()) if 1 << i < n]; print(','.join(map(str, c + [n])))")
  echo "== 2. sharded cohort on $COUNTS GPUs"
  "$PYTHON" benchmarks/cohort_throughput.py --skip-baselines --device-counts "$COUNTS" --sizes "$SIZES" \
    --reps "$REPS" --json "$OUT/devices.json" | tee "$OUT/devices.txt"
else
  echo "== 2. sharded cohort: one GPU only, skipped"
fi

if [ "${SKIP_RUN:-0}" != 1 ]; then
  echo "== 3. cifar10-paper, FeLiX on mobiperf, ${RUN_BUDGET_S}s of wall time, $NUM_DEVICES GPU(s)"
  rm -rf "$OUT/run"
  start=$(date +%s.%N)
  set +e  # the budget ends the run with SIGINT (timeout then exits 124): expected
  timeout --signal=INT --kill-after=120 "$RUN_BUDGET_S" "$PYTHON" -m felix_jax.cli run --preset cifar10-paper \
    --set strategy=felix --set availability=mobiperf --out "$OUT/run" --quiet >"$OUT/run.log" 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  echo "exit $rc (124: stopped by the budget); log: $OUT/run.log"
  if [ ! -f "$OUT/run/summary.json" ]; then
    tail -5 "$OUT/run.log"
  fi
  "$PYTHON" - "$OUT" "$start" "$end" <<'EOF' || true
import json, sys
from pathlib import Path
out, start, end = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
summary_path = out / "run" / "summary.json"
if not summary_path.exists():
    sys.exit("no summary.json (missing data or a failure: see run.log)")
s = json.loads(summary_path.read_text())
wall = end - start
virtual_h = (s["end_time_s"] or 0) / 3600
res = {"wall_s": wall, "host_seconds": s["host_seconds"], "virtual_hours": virtual_h,
       "virtual_hours_per_wall_s": virtual_h / wall, "aggregations": s["aggregations"],
       "best_accuracy": s["best_accuracy"], "time_to_target_h": s["time_to_target_h"],
       "stop_reason": s["stop_reason"], "flush_tasks_mean": s.get("flush_tasks_mean"), "cohort": s["cohort"]}
(out / "run.json").write_text(json.dumps(res, indent=2))
EOF
fi

if [ "${SKIP_SWEEP:-0}" != 1 ]; then
  echo "== 4. sweep batches: N = $SWEEP_NS experiments of the quickstart shape (paper CNN) in one process"
  # separate processes are left out (SWEEP_SEPARATE=0): on one GPU they would queue on the device
  "$PYTHON" benchmarks/sweep_batching.py --preset quickstart --ns "$SWEEP_NS" --set "max_aggregations=$SWEEP_AGGS" \
    --separate-workers "${SWEEP_SEPARATE:-0}" --json "$OUT/sweep.json" | tee "$OUT/sweep.txt"
fi

echo
echo "== summary ($OUT)"
"$PYTHON" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
env = json.loads((out / "env.json").read_text())
print(f"{len(env['devices'])} x {env['devices'][0]}, jax {env['jax']}")
p = json.loads((out / "plans.json").read_text())
sizes = p["sizes"]
print("samples/s  " + " ".join(f"{k:>8}" for k in sizes) + "  (tasks)")
# JSON object keys are strings: rows map str(tasks) -> samples/s
rows = [(f"plan {name}", row) for name, row in p["plans"].items()]
rows.append(("loop(best)", {k: max(p["loop_shift"][k], p["loop_flax"][k]) for k in p["loop_shift"]}))
rows.append(("central", p["central"]))
if (out / "devices.json").exists():
    d = json.loads((out / "devices.json").read_text())
    rows += [(f"{n} GPU(s)", r["samples_per_s"]) for n, r in d["by_devices"].items()]
for name, row in rows:
    print(f"{name:<10} " + " ".join(f"{row[str(k)]:>8.0f}" for k in sizes))
if (out / "run.json").exists():
    r = json.loads((out / "run.json").read_text())
    ttt = "not reached" if r["time_to_target_h"] is None else f"{r['time_to_target_h']:.2f} virtual h"
    print(f"cifar10-paper FeLiX/mobiperf: {r['virtual_hours']:.2f} virtual h in {r['wall_s']:.0f} s wall "
          f"({r['virtual_hours_per_wall_s']:.4f} virtual h per wall s), {r['aggregations']} aggregations, "
          f"best accuracy {r['best_accuracy']}, target 70%: {ttt} ({r['stop_reason']})")
if (out / "sweep.json").exists():
    for r in json.loads((out / "sweep.json").read_text())["rows"]:
        print(f"sweep N={r['n']:>2}: {r['train_tasks_per_call']:.1f} training tasks per call, "
              f"{r['calls_per_experiment_aggregation']:.2f} calls per experiment-aggregation, "
              f"{r['host_ms_per_event']:.2f} host ms/event, {r['compilations']} compilations, {r['wall_s']:.0f} s")
EOF
