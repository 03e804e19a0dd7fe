#!/usr/bin/env bash
# Uneven inputs: 3 ranks whose shards differ by SKEW (default 0.3) of the mean (ranks whose data
# ends first join the others, docs/data-loading.md#uneven-inputs) against the even baseline: the
# same samples in the same number of steps (the longest shard's), spread evenly over the ranks
# (bench_uneven --even_like SKEW), alternating rounds in one run. Both jobs do the same compute and
# the same allreduces, so a join that costs nothing reads 1.0 (target >= 0.9). Prints the medians
#   bench=uneven ranks=3 even_like=S steps_per_epoch=N samples_per_epoch=M batch=B steps_per_s=E
#   bench=uneven ranks=3 skew=S steps_per_epoch=N samples_per_epoch=M batch=B steps_per_s=U ratio_vs_even=R
# and fails when either job prints no figure or the two did not run the same steps and samples.
# Usage: scripts/bench/uneven.sh [ROUNDS]   (BUILD_DIR, SKEW, MEAN_BATCHES, BATCH, HIDDEN, EPOCHS override)
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
SKEW="${SKEW:-0.3}"
ARGS=(--mean_batches "${MEAN_BATCHES:-100}" --batch "${BATCH:-32}" --hidden "${HIDDEN:-512}" --epochs "${EPOCHS:-4}")
need_bin scripts/bench/bench_uneven
BIN="$BUILD_DIR/scripts/bench/bench_uneven"

# run FLAG -> "steps_per_s steps_per_epoch samples_per_epoch batch" of one job
run() {
  local out f vals=()
  out=$("${MPIRUN[@]}" -np 3 "$BIN" "$1" "$SKEW" "${ARGS[@]}" 2>&1) || true
  for f in steps_per_s steps_per_epoch samples_per_epoch batch; do vals+=("$(figure "$f" "bench_uneven $1 $SKEW" "$out")"); done
  echo "${vals[*]}"
}

uneven=() even=()
for ((r = 0; r < ROUNDS; r++)); do
  line=$(run --skew)
  read -r u us un ub <<<"$line"
  line=$(run --even_like)
  read -r e es en eb <<<"$line"
  if [ "$us" != "$es" ] || [ "$un" != "$en" ]; then
    echo "uneven.sh: the jobs differ: skew $SKEW ran $us steps and $un samples an epoch, the even one $es and $en" >&2
    exit 1
  fi
  uneven+=("$u") even+=("$e")
done
U=$(median "${uneven[@]}") E=$(median "${even[@]}")
echo "bench=uneven ranks=3 even_like=$SKEW steps_per_epoch=$es samples_per_epoch=$en batch=$eb steps_per_s=$E"
echo "bench=uneven ranks=3 skew=$SKEW steps_per_epoch=$us samples_per_epoch=$un batch=$ub steps_per_s=$U" \
     "ratio_vs_even=$(ratio "$U" "$E")"
