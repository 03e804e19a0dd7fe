#!/usr/bin/env bash
# Preemption of the Fashion-MNIST job: a 2-rank run (project_dir set) gets SIGTERM, as a cluster
# gives it, once it is training (epoch 1 at AT percent); then the next submission, `xlaunch run
# --resume`, continues it. Prints per round
#   bench=preempt save_s=S restart_to_first_step_s=R steps_lost=L
# save_s: from the SIGTERM to `xlaunch run` returning 75 with the checkpoint written (what the
#   cluster's grace period must cover; the ranks' own figure, the save alone, is in the log).
# restart_to_first_step_s: from starting `xlaunch run --resume` to the resumed job's first
#   optimizer step (its "first optimizer step after load_state" line): mpirun, the ranks' start,
#   load_state and one step.
# steps_lost: the step the preempted run had reached, less the step the resumed run started from
#   (target 0: the checkpoint is taken after the last step).
# Usage: scripts/bench/preempt.sh [ROUNDS]   (BUILD_DIR, IMAGES, AT override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
IMAGES="${IMAGES:-12000}"
AT="${AT:-30}"
need_bin examples/train_fashion_mnist
need_bin launcher/xlaunch
XLAUNCH="$BUILD_DIR/launcher/xlaunch"
TRAIN="$BUILD_DIR/examples/train_fashion_mnist"
work=$(mktemp -d /tmp/xlaunch_bench_preempt.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Each line of stdin with the time (seconds since the epoch) in front; progress redraws (\r) too.
stamp() {
  stdbuf -oL tr '\r' '\n' | while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done
}
time_of() { grep -m1 -E "^[0-9.]+ .*$1" "$2" | cut -d' ' -f1; }
since() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a - b}'; }

one_round() {
  local project=$work/project log=$work/first.log log2=$work/second.log pid n=0
  rm -rf "$project"
  cat >"$work/config.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 2
project_dir: $project
YAML
  "$XLAUNCH" run --config_file "$work/config.yaml" "$TRAIN" --epochs 2 --limit_train "$IMAGES" 2>&1 | stamp >"$log" &
  pid=$!
  until awk -v k="$AT" '$2 == "epoch" && $3 == "1/2" { for (i = 4; i <= NF; i++) if ($i ~ /^[0-9]+%$/ && $i + 0 >= k) { f = 1 } }
                        END { exit !f }' "$log"; do
    sleep 0.05
    ((++n < 6000)) || { echo "preempt.sh: epoch 1 never reached ${AT}%" >&2; cat "$log" >&2; return 1; }
  done
  local signalled ended rc=0
  signalled=$(date +%s.%N)
  pkill -TERM -f "^$XLAUNCH run --config_file $work/config.yaml"
  wait "$pid" || true
  ended=$(date +%s.%N)
  grep -q "preempted at step" "$log" || { echo "preempt.sh: the job was not preempted:" >&2; cat "$log" >&2; return 1; }
  local stopped_step started resumed_step first
  stopped_step=$(sed -n 's/.*preempted at step \([0-9]*\):.*/\1/p' "$log" | head -1)
  started=$(date +%s.%N)
  "$XLAUNCH" run --config_file "$work/config.yaml" --resume "$TRAIN" --epochs 2 --limit_train "$IMAGES" 2>&1 |
    stamp >"$log2" || rc=$?
  first=$(time_of "first optimizer step after load_state" "$log2")
  resumed_step=$(sed -n 's/.*resumed at epoch [0-9]* (step \([0-9]*\)).*/\1/p' "$log2" | head -1)
  if [ "$rc" != 0 ] || [ -z "$first" ] || [ -z "$resumed_step" ]; then
    echo "preempt.sh: the resumed job did not run as expected:" >&2
    cat "$log2" >&2
    return 1
  fi
  echo "bench=preempt save_s=$(since "$ended" "$signalled") restart_to_first_step_s=$(since "$first" "$started")" \
       "steps_lost=$((stopped_step - resumed_step))"
}

for ((r = 1; r <= ROUNDS; r++)); do one_round; done
