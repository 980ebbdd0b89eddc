#!/usr/bin/env bash
# The attribution's cells (benchmarks/attribution.py) on one accelerator lent for minutes, in one go.
# Installs nothing from the network; what comes back is a handful of files under $OUT (else
# results/gpu-attribution):
#
#   env.json         jax's version, backend and devices
#   warmup.log       a first short cell of each strategy (a throwaway seed), run side by side: it fills the
#                    persistent compilation cache, so the cells that follow load their programs instead of
#                    each compiling all of them at once (a cold process spends ~45 s compiling on a GPU, and
#                    several starting together on shared cores far longer)
#   attribution.log  the cells: seeds SEEDS on REGIMES, folders FOLDERS, STRATEGIES, WORKERS processes at
#                    once sharing the device, each cut after CELL_S seconds of wall time (the table names
#                    every cut cell and the virtual hours it reached), then the table
#   attribution.json, attribution.md   the table (benchmarks/attribution.py's)
#   cells.tar.gz     the compact cells (benchmarks/attribution/cells/ holds them in the repository) and
#                    each cell's config.json, summary.json and metrics.csv
#   dmon.txt         the device's utilisation every 5 s while the cells ran (nvidia-smi dmon), if present
#
# Needs CIFAR-10 in the data home (FELIX_JAX_DATA, or `felix-jax data fetch cifar10` once; the traces ship). Settings (environment): OUT, PYTHON, WORK
# (scratch, /tmp/felix-gpu-attribution), WORKERS (15), CELL_S (340: on one H200, 15 long-horizon cells reach
# 3 virtual hours in ~190 s and 15 paper-data cells ~2.1 h in 290 s), WARMUP_S (50), SEEDS (0,1,2,3,4),
# REGIMES (ref:mobiperf_3st_50), FOLDERS (longhorizon), STRATEGIES (felix,oort-async-oracle,oort-oracle),
# TIMEOUT_S (CELL_S + 150: the cells' command is killed after it, so the packing step always runs), START_S
# (TIMEOUT_S - CELL_S - 60: no cell starts after it, so the cells that ran are kept compact before the timeout).
#
#     OUT=/tmp/ga FELIX_JAX_DATA=/path/to/data bash benchmarks/gpu_attribution.sh
set -uo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
OUT=${OUT:-results/gpu-attribution}
WORK=${WORK:-/tmp/felix-gpu-attribution}
WORKERS=${WORKERS:-15}
CELL_S=${CELL_S:-340}
WARMUP_S=${WARMUP_S:-50}
SEEDS=${SEEDS:-0,1,2,3,4}
REGIMES=${REGIMES:-ref:mobiperf_3st_50}
FOLDERS=${FOLDERS:-longhorizon}
STRATEGIES=${STRATEGIES:-felix,oort-async-oracle,oort-oracle}
TIMEOUT_S=${TIMEOUT_S:-$((CELL_S + 150))}
START_S=${START_S:-$((TIMEOUT_S - CELL_S - 60))}
mkdir -p "$OUT" "$WORK"
# felix_jax importable: installed, or else a copy of the package with its models/ and traces/ inside it (the
# layout pyproject.toml maps), for a machine where nothing can be installed
if ! (cd /tmp && "$PYTHON" -c "import felix_jax.traces, felix_jax.models" 2>/dev/null); then
  PKG="$WORK/pkg"
  rm -rf "$PKG" && mkdir -p "$PKG" && cp -r felix_jax "$PKG/" && cp -r models "$PKG/felix_jax/models" \
    && cp -r traces "$PKG/felix_jax/traces"
  export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
fi
# processes share the device: none may take most of its memory up front
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
"$PYTHON" -c "import jax, json, sys; json.dump({'jax': jax.__version__, 'backend': jax.default_backend(),
'devices': [d.device_kind for d in jax.devices()]}, open(sys.argv[1], 'w'))" "$OUT/env.json"
cat "$OUT/env.json"; echo

echo "== warm-up: one cell of each strategy, seed 99, ${WARMUP_S}s each, side by side"
t0=$(date +%s)
"$PYTHON" benchmarks/attribution.py --seeds 99 --regimes "${REGIMES%%,*}" --folders "${FOLDERS%%,*}" \
  --strategies "$STRATEGIES" --workers 3 --cell-budget-s "$WARMUP_S" --out "$WORK/warmup" \
  --cells "$WORK/warmup-cells" --json "$WORK/warmup.json" >"$OUT/warmup.log" 2>&1
rc=$?
echo "warm-up: $(( $(date +%s) - t0 )) s (exit $rc)"

DMON=
if command -v nvidia-smi >/dev/null; then
  nvidia-smi dmon -s um -d 5 >"$OUT/dmon.txt" 2>&1 &
  DMON=$!
fi
echo "== the cells: seeds $SEEDS, $REGIMES, $FOLDERS, $WORKERS at a time, ${CELL_S}s each"
t0=$(date +%s)
timeout "$TIMEOUT_S" "$PYTHON" benchmarks/attribution.py --seeds "$SEEDS" --regimes "$REGIMES" --folders "$FOLDERS" \
  --strategies "$STRATEGIES" --workers "$WORKERS" --cell-budget-s "$CELL_S" --budget-s "$START_S" --out "$WORK/attribution" \
  --cells "$WORK/cells" --json "$OUT/attribution.json" 2>&1 | grep -v "^\[" >"$OUT/attribution.log"
echo "cells: $(( $(date +%s) - t0 )) s"
[ -n "$DMON" ] && kill "$DMON" 2>/dev/null
tail -40 "$OUT/attribution.log"

# the compact cells and each run's record, in one file
(cd "$WORK" && find attribution -maxdepth 4 \( -name config.json -o -name summary.json -o -name metrics.csv \) \
  -print0 | tar --null -czf "$OUT/cells.tar.gz" cells -T - 2>/dev/null || tar -czf "$OUT/cells.tar.gz" cells)
ls -la "$OUT"
exit 0
