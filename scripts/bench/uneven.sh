#!/usr/bin/env bash
# Uneven inputs: 3 ranks whose shards differ by SKEW (default 0.3) of the mean (ranks whose data
# ends first join the others, docs/data-loading.md#uneven-inputs) against the same job with even
# shards of the mean size, alternating rounds in one run. A step is one optimizer step of the job,
# so the ratio is what the joined ranks' zero contributions cost per step (target >= 0.9).
# Usage: scripts/bench/uneven.sh [ROUNDS]   (BUILD_DIR, SKEW, MEAN_BATCHES, BATCH, HIDDEN, EPOCHS override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
SKEW="${SKEW:-0.3}"
ARGS=(--mean_batches "${MEAN_BATCHES:-100}" --batch "${BATCH:-32}" --hidden "${HIDDEN:-512}" --epochs "${EPOCHS:-4}")
need_bin scripts/bench/bench_uneven
BIN="$BUILD_DIR/scripts/bench/bench_uneven"

run() { field steps_per_s "$("${MPIRUN[@]}" -np 3 "$BIN" --skew "$1" "${ARGS[@]}")"; }

uneven="" even=""
for ((r = 0; r < ROUNDS; r++)); do
  uneven+="$(run "$SKEW") "
  even+="$(run 0) "
done
# shellcheck disable=SC2086
U=$(median $uneven)
# shellcheck disable=SC2086
E=$(median $even)
echo "bench=uneven ranks=3 skew=0 steps_per_s=$E"
awk -v s="$SKEW" -v u="$U" -v e="$E" \
  'BEGIN {printf "bench=uneven ranks=3 skew=%s steps_per_s=%s ratio_vs_even=%.2f\n", s, u, u / e}'
