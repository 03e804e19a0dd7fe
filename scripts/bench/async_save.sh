#!/usr/bin/env bash
# Asynchronous checkpoints (docs/checkpointing.md, "Asynchronous saves"): how long save_state holds
# training, synchronous against checkpoint.async, for the benchmark MLP with AdamW on 2 ranks at
# ddp.zero_stage STAGE (default 3: each rank writes its own shard; 0: rank 0 writes the whole model
# and optimizer), alternating rounds in one run; medians.
# Prints
#   bench=async_save params_m=P world=2 stage=S copy_ms=C blocked_ms=B write_ms=W sync_ms=S ratio_blocked_vs_sync=B/S ratio_blocked_vs_copy=B/C
# copy_ms: a host copy of what a rank saves (every tensor cloned), the floor of any save's hold on
#   training; blocked_ms: save_state's hold with checkpoint.async; write_ms: from save_state until
#   that checkpoint was complete (wait_for_checkpoint); sync_ms: a synchronous save_state.
# A round that fails, or prints no line, fails the run.
# Usage: scripts/bench/async_save.sh [ROUNDS]   (BUILD_DIR, HIDDEN, STAGE override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-5}"
HIDDEN="${HIDDEN:-4096}"
STAGE="${STAGE:-3}"
need_bin scripts/bench/bench_async_save
BIN="$BUILD_DIR/scripts/bench/bench_async_save"
work=$(mktemp -d /tmp/xlaunch_bench_async_save.XXXXXX)
trap 'rm -rf "$work"' EXIT

copy="" blocked="" write="" sync="" params=""
for ((r = 0; r < ROUNDS; r++)); do
  for async in 0 1; do
    out=$(XLAUNCH_ZERO_STAGE=$STAGE XLAUNCH_CHECKPOINT_ASYNC=$async "${MPIRUN[@]}" -np 2 "$BIN" --hidden "$HIDDEN" \
            --dir "$work/ckpt_$async")
    line=$(grep '^xlaunch-async-save ' <<<"$out") || { echo "async_save.sh: no result line:" >&2; echo "$out" >&2; exit 1; }
    params=$(field params_m "$line")
    if [ "$async" = 1 ]; then
      copy+="$(field copy_ms "$line") "
      blocked+="$(field blocked_ms "$line") "
      write+="$(field total_ms "$line") "
    else
      sync+="$(field total_ms "$line") "
    fi
  done
done
# shellcheck disable=SC2086
read -r c b w s <<<"$(median $copy) $(median $blocked) $(median $write) $(median $sync)"
echo "bench=async_save params_m=$params world=2 stage=$STAGE copy_ms=$c blocked_ms=$b write_ms=$w sync_ms=$s" \
     "ratio_blocked_vs_sync=$(ratio "$b" "$s") ratio_blocked_vs_copy=$(ratio "$b" "$c")"
