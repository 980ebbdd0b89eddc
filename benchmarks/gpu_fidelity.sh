#!/usr/bin/env bash
# The fidelity matrix and the test-evaluation batching on one accelerator, in one go, under a
# fixed wall-clock budget. Installs nothing from the network; JSON under $OUT (else results/gpu-fidelity).
#
#   1. evalbatch.json - `cifar10-paper`, FeLiX on `mobiperf`, EVAL_S seconds of wall time each with
#                       eval_batch=1 (a test-set evaluation, and a host sync, per aggregation) and
#                       eval_batch=16: virtual hours and aggregations reached, evaluation calls. The two
#                       runs follow the same trajectory (batching changes no result), so the one that
#                       got further in the same wall time is the faster.
#   2. fidelity/      - benchmarks/paper_matrix.py on `cifar10-fidelity` at its 35% target, WORKERS
#                       cells at a time sharing the device, each cut after CELL_S seconds (stop reason
#                       wall_budget: "not reached by" the virtual time it got to), no cell started after
#                       MATRIX_S seconds; seeds SEEDS, regimes REGIMES, ablations ABLATIONS.
#   3. longhorizon/   - the long-horizon matrix (cifar10-longhorizon's fleet, traces and start offset) at the
#                       paper's CNN (LH_MODEL, cifar_cnn): its target by the preset's own rule, the mean over
#                       seeds 0-2 of a centralized reference's accuracy after one epoch over the subset
#                       (benchmarks/centralized_reference.py, written to longhorizon-target.json before any
#                       federated run), LH_HOURS virtual hours per cell (6), LH_CELL_S seconds each, seeds
#                       LH_SEEDS; main strategies on the four regimes, felix-no-eval, felix-no-tierfuse,
#                       felix-oracle and oort-async-step-matched on 50% and MobiPerf, the oracle's
#                       departure both ways on MobiPerf. SKIP_LH=1 skips it.
#   4. paper-paper/, paper-paper_code/ - the paper's own setting (PAPER_PRESET, cifar10-paper: its CNN, full
#                       CIFAR-10, the 70% target) in both readings (docs/readings.md): PAPER_STRATEGIES on
#                       PAPER_REGIMES, seeds PAPER_SEEDS, PAPER_CELL_S seconds and PAPER_HOURS virtual hours
#                       per cell. SKIP_PAPER=1 skips it.
#   5. speech/        - the speech comparison (speech-longhorizon's fleet: 100 clients, Dirichlet 0.1, MobiPerf
#                       at the speech runs' 3x time scale) at the paper's speech ResNet (SPEECH_MODEL,
#                       speech_resnet, 7.24M parameters): its target by the preset's rule on a centralized
#                       reference (one epoch, seeds 0-2, written to speech-target.json before any federated
#                       run), the main strategies and felix-no-eval / felix-no-tierfuse on MobiPerf, seeds
#                       SPEECH_SEEDS (0), SPEECH_CELL_S seconds and SPEECH_HOURS virtual hours (8) per cell.
#                       Runs before step 4 when SPEECH_FIRST=1; SKIP_SPEECH=1 skips it.
#   6. ladder/        - benchmarks/learner_ladder.py: cifar10-longhorizon's fleet at cifar_cnn_tiny, cifar_cnn_narrow
#                       and the paper's cifar_cnn, each at its committed target (benchmarks/learner_ladder/
#                       targets.json, fixed before any federated cell), FeLiX, OORT+Async* and OORT* on MobiPerf
#                       and 50%, both readings, seeds 0-2, WORKERS cells at a time, none started after LADDER_S
#                       seconds (default MATRIX_S); resumable (cells snapshot every 10 minutes). SKIP_LADDER=1
#                       skips it; LADDER_FIRST=1 runs it before step 1.
#   7. attribution/   - benchmarks/attribution.py: the as-run measurement one change at a time (cifar10-longhorizon
#                       on 250 and on all 10,000 test images from the same runs, then cifar10-paperdata), FeLiX,
#                       OORT+Async* and OORT* on MobiPerf then 50%, seeds 0-4, WORKERS cells at a time, none started
#                       after ATTRIBUTION_S seconds (default MATRIX_S); resumable. SKIP_ATTRIBUTION=1 skips it;
#                       ATTRIBUTION_FIRST=1 runs it before step 1.
#
# Needs CIFAR-10 and Speech Commands in the data home (FELIX_JAX_DATA, or `felix-jax data fetch` once each). Settings (environment): OUT, PYTHON,
# EVAL_S (45), WORKERS (8), CELL_S (75), MATRIX_S (270), SEEDS (0,1), MAX_HOURS (1.0), REGIMES,
# ABLATIONS, STRATEGIES, EVAL_PRESET (cifar10-paper), EVAL_AVAIL (mobiperf), WARMUP_S (0: none; a first
# run of that long fills the compilation cache, which a cold process spends ~45 s on), SKIP_EVAL=1,
# SKIP_MATRIX=1.
#
#     OUT=/tmp/gf FELIX_JAX_DATA=/path/to/data bash benchmarks/gpu_fidelity.sh
set -uo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT=${OUT:-results/gpu-fidelity}
EVAL_S=${EVAL_S:-45}
WORKERS=${WORKERS:-8}
CELL_S=${CELL_S:-75}
MATRIX_S=${MATRIX_S:-270}
SEEDS=${SEEDS:-0,1}
MAX_HOURS=${MAX_HOURS:-1.0}
REGIMES=${REGIMES:-ref:syn_50,ref:mobiperf_3st_50,ref:syn_0,ref:syn_20}
ABLATIONS=${ABLATIONS-felix-no-eval,oort-async-step-matched}
STRATEGIES=${STRATEGIES:-felix,oort-oracle,oort-async-oracle,oort-async,refl}
# processes share the device: none may take most of its memory up front
export XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$OUT"
"$PYTHON" -c "import jax, json, sys; json.dump({'jax': jax.__version__, 'backend': jax.default_backend(),
'devices': [d.device_kind for d in jax.devices()]}, open(sys.argv[1], 'w'))" "$OUT/env.json"
cat "$OUT/env.json"; echo

ladder_step() {
echo "== 6. the learner ladder (tiny, narrow, the paper's CNN at their committed targets), both readings"
"$PYTHON" benchmarks/learner_ladder.py --workers "$WORKERS" --budget-s "${LADDER_S:-$MATRIX_S}" --out "$OUT/ladder" \
  --json "$OUT/ladder.json" 2>&1 | grep -v "^\[" | tail -40
}
[ "${SKIP_LADDER:-0}" != 1 ] && [ "${LADDER_FIRST:-0}" = 1 ] && ladder_step
attribution_step() {
echo "== 7. the attribution: 250 / 10,000 test images, then the paper's data (as run, seeds 0-4)"
"$PYTHON" benchmarks/attribution.py --workers "$WORKERS" --budget-s "${ATTRIBUTION_S:-$MATRIX_S}" \
  --out "$OUT/attribution" --json "$OUT/attribution.json" --cells "$OUT/attribution-cells" 2>&1 | grep -v "^\[" | tail -40
}
[ "${SKIP_ATTRIBUTION:-0}" != 1 ] && [ "${ATTRIBUTION_FIRST:-0}" = 1 ] && attribution_step

EVAL_PRESET=${EVAL_PRESET:-cifar10-paper}
EVAL_AVAIL=${EVAL_AVAIL:-mobiperf}
if [ "${WARMUP_S:-0}" != 0 ]; then
  # a first run fills the persistent compilation cache (a cold first flush compiles ~120 programs)
  echo "== 0. warm-up: $EVAL_PRESET FeLiX/$EVAL_AVAIL for ${WARMUP_S}s"
  "$PYTHON" -m felix_jax.cli run --preset "$EVAL_PRESET" --set strategy=felix --set availability="$EVAL_AVAIL" \
    --wall-budget-s "$WARMUP_S" --out "$OUT/warmup" --quiet --overwrite >"$OUT/warmup.log" 2>&1
fi
if [ "${SKIP_EVAL:-0}" != 1 ]; then
  echo "== 1. $EVAL_PRESET FeLiX/$EVAL_AVAIL, ${EVAL_S}s each, eval_batch 1 and 16"
  for b in 1 16; do
    "$PYTHON" -m felix_jax.cli run --preset "$EVAL_PRESET" --set strategy=felix --set availability="$EVAL_AVAIL" \
      --set eval_batch=$b --wall-budget-s "$EVAL_S" --out "$OUT/evalbatch-$b" --quiet --overwrite \
      >"$OUT/evalbatch-$b.log" 2>&1
  done
  "$PYTHON" - "$OUT" "$EVAL_S" <<'EOF'
import json, sys
from pathlib import Path
out, budget = Path(sys.argv[1]), float(sys.argv[2])
res = {"wall_budget_s": budget}
for b in (1, 16):
    p = out / f"evalbatch-{b}" / "summary.json"
    if not p.exists():
        print(f"eval_batch={b}: no summary (see evalbatch-{b}.log)")
        continue
    s = json.loads(p.read_text())
    res[b] = {k: s.get(k) for k in ("aggregations", "end_time_s", "test_eval_calls", "host_seconds",
                                     "best_accuracy", "stop_reason", "xla_compilations")}
    print(f"eval_batch={b:>2}: {s['aggregations']} aggregations, {s['end_time_s'] / 3600:.3f} virtual h, "
          f"{s['test_eval_calls']} test-eval calls, host {s['host_seconds']:.1f} s ({s['stop_reason']})")
(out / "evalbatch.json").write_text(json.dumps(res, indent=2))
EOF
fi

if [ "${SKIP_MATRIX:-0}" != 1 ]; then
echo "== 2. cifar10-fidelity matrix: seeds $SEEDS, $WORKERS at a time, ${CELL_S}s per cell, none started after ${MATRIX_S}s"
"$PYTHON" benchmarks/paper_matrix.py --seeds "$SEEDS" --regimes "$REGIMES" --strategies "$STRATEGIES" --ablations "$ABLATIONS" \
  --ablation-regimes ref:syn_50,ref:mobiperf_3st_50 --workers "$WORKERS" --cell-budget-s "$CELL_S" \
  --budget-s "$MATRIX_S" --set max_virtual_hours="$MAX_HOURS" --out "$OUT/fidelity" \
  --json "$OUT/fidelity.json" 2>&1 | grep -v "^\[" | tail -60
fi

# A preset's target by its rule, before any federated run: the mean over seeds 0-2 of a centralized
# reference's test accuracy after one epoch (STEPS batches) at MODEL; writes NAME-cref-S.json and
# NAME-target.json under $OUT and prints the target. Arguments: PRESET MODEL STEPS NAME.
reference_target() {
  for s in 0 1 2; do
    "$PYTHON" benchmarks/centralized_reference.py --preset "$1" --model "$2" --steps "$3" --eval-every "$3" \
      --seed $s --json "$OUT/$4-cref-$s.json" >"$OUT/$4-cref-$s.log" 2>&1
  done
  "$PYTHON" - "$OUT" "$4" <<'EOF'
import json, sys
from pathlib import Path
out, name = Path(sys.argv[1]), sys.argv[2]
acc = [json.loads((out / f"{name}-cref-{s}.json").read_text())["rows"][-1]["accuracy"] for s in range(3)]
target = round(sum(acc) / 3, 2)
(out / f"{name}-target.json").write_text(json.dumps({"one_epoch_accuracy": acc, "target": target}))
print(target)
EOF
}

if [ "${SKIP_LH:-0}" != 1 ]; then
LH_MODEL=${LH_MODEL:-cifar_cnn}
LH_HOURS=${LH_HOURS:-6}
LH_CELL_S=${LH_CELL_S:-240}
LH_SEEDS=${LH_SEEDS:-0}
echo "== 3. long horizon at $LH_MODEL: target from a centralized reference (one epoch, seeds 0-2)"
# a learner of the ladder has its target committed (the same rule on cifar10-fidelity's 500 test images)
TARGET=$("$PYTHON" -c "import json, sys; print(json.load(open('benchmarks/learner_ladder/targets.json'))['targets']
[sys.argv[1]]['target_accuracy'])" "$LH_MODEL" 2>/dev/null || reference_target cifar10-fidelity "$LH_MODEL" 375 longhorizon)
echo "target $TARGET"
"$PYTHON" benchmarks/paper_matrix.py --scenario cifar10-longhorizon --seeds "$LH_SEEDS" --regimes "$REGIMES" \
  --strategies "$STRATEGIES" --ablations felix-no-eval,felix-no-tierfuse,felix-oracle,oort-async-step-matched \
  --ablation-regimes ref:syn_50,ref:mobiperf_3st_50 \
  --extra-cell oort-async-oracle@oracle_departure=free_slot ref:mobiperf_3st_50 \
  --extra-cell felix-oracle@oracle_departure=free_slot ref:mobiperf_3st_50 \
  --workers "$WORKERS" --cell-budget-s "$LH_CELL_S" --budget-s "$MATRIX_S" --set model="$LH_MODEL" \
  --set target_accuracy="$TARGET" --set max_virtual_hours="$LH_HOURS" --out "$OUT/longhorizon" \
  --json "$OUT/longhorizon.json" 2>&1 | grep -v "^\[" | tail -80
fi

speech_step() {
SPEECH_MODEL=${SPEECH_MODEL:-speech_resnet}
SPEECH_SEEDS=${SPEECH_SEEDS:-0}
SPEECH_CELL_S=${SPEECH_CELL_S:-240}
SPEECH_HOURS=${SPEECH_HOURS:-8}
echo "== 5. speech at $SPEECH_MODEL: target from a centralized reference (one epoch, seeds 0-2)"
SPEECH_TARGET=$(reference_target speech-longhorizon "$SPEECH_MODEL" 123 speech)
echo "target $SPEECH_TARGET"
"$PYTHON" benchmarks/paper_matrix.py --scenario speech-longhorizon --seeds "$SPEECH_SEEDS" \
  --regimes ref:mobiperf_3st_50 --strategies "$STRATEGIES" --ablations felix-no-eval,felix-no-tierfuse \
  --ablation-regimes ref:mobiperf_3st_50 --workers "$WORKERS" --cell-budget-s "$SPEECH_CELL_S" \
  --budget-s "$MATRIX_S" --set model="$SPEECH_MODEL" --set target_accuracy="$SPEECH_TARGET" \
  --set max_virtual_hours="$SPEECH_HOURS" --out "$OUT/speech" --json "$OUT/speech.json" 2>&1 | grep -v "^\[" | tail -30
}
[ "${SKIP_SPEECH:-0}" != 1 ] && [ "${SPEECH_FIRST:-0}" = 1 ] && speech_step

if [ "${SKIP_PAPER:-0}" != 1 ]; then
PAPER_PRESET=${PAPER_PRESET:-cifar10-paper}
PAPER_REGIMES=${PAPER_REGIMES:-ref:syn_0,ref:mobiperf_3st_50}
PAPER_STRATEGIES=${PAPER_STRATEGIES:-felix,oort-async-oracle,oort-oracle}
PAPER_CELL_S=${PAPER_CELL_S:-240}
PAPER_HOURS=${PAPER_HOURS:-24}
PAPER_SEEDS=${PAPER_SEEDS:-0}
for sem in paper paper_code; do
  echo "== 4. $PAPER_PRESET (the paper's CNN, full CIFAR-10, 70%) in the reading semantics=$sem"
  "$PYTHON" benchmarks/paper_matrix.py --scenario "$PAPER_PRESET" --seeds "$PAPER_SEEDS" --regimes "$PAPER_REGIMES" \
    --strategies "$PAPER_STRATEGIES" --ablations "" --workers "$WORKERS" --cell-budget-s "$PAPER_CELL_S" \
    --budget-s "$MATRIX_S" --set semantics=$sem --set max_virtual_hours="$PAPER_HOURS" --out "$OUT/paper-$sem" \
    --json "$OUT/paper-$sem.json" 2>&1 | grep -v "^\[" | tail -30
done
fi
[ "${SKIP_SPEECH:-0}" != 1 ] && [ "${SPEECH_FIRST:-0}" != 1 ] && speech_step
[ "${SKIP_LADDER:-0}" != 1 ] && [ "${LADDER_FIRST:-0}" != 1 ] && ladder_step
[ "${SKIP_ATTRIBUTION:-0}" != 1 ] && [ "${ATTRIBUTION_FIRST:-0}" != 1 ] && attribution_step
exit 0
