#!/usr/bin/env bash
# Preemption of the Fashion-MNIST job: a 2-rank run (project_dir set) gets SIGTERM, as a cluster
# gives it, once it is training (epoch 1 at AT percent); it must exit 75 (EX_TEMPFAIL, "preempted,
# checkpoint written"). Then the next submission, `xlaunch run --resume`, continues it and must
# exit 0. Prints per round
#   bench=preempt exit=75 save_s=S restart_to_first_step_s=R last_step_shown=A first_step_after_resume=B steps_lost=L
# save_s: from the SIGTERM to `xlaunch run` returning 75 with the checkpoint written (what the
#   cluster's grace period must cover; the ranks' own figure, the save alone, is in the log).
# restart_to_first_step_s: from starting `xlaunch run --resume` to the resumed job's first
#   optimizer step (its "first optimizer step after load_state done (step B)" line): mpirun, the
#   ranks' start, load_state and one step.
# steps_lost, measured from outside, not from the checkpoint's record: A is the last step the
#   progress output showed before the signal (its samples done over the global batch the job
#   printed), B the first step the resumed job ran; L = A - (B - 1), 0 when the resumed job starts
#   past A (steps done after the last progress line were kept). Target 0.
# A round whose job does not exit 75, whose resumed job fails, or whose output lacks any of those
# lines fails the run.
# Usage: scripts/bench/preempt.sh [ROUNDS]   (BUILD_DIR, IMAGES, AT override)
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
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
  rm -rf "$project" "$work/rc"
  cat >"$work/config.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 2
project_dir: $project
YAML
  { local code=0
    "$XLAUNCH" run --config_file "$work/config.yaml" "$TRAIN" --epochs 2 --limit_train "$IMAGES" --batch_size 64 || code=$?
    echo "$code" >"$work/rc"; } 2>&1 | stamp >"$log" &
  pid=$!
  until awk -v k="$AT" '$2 == "epoch" && $3 == "1/2" { for (i = 4; i <= NF; i++) if ($i ~ /^[0-9]+%$/ && $i + 0 >= k) { f = 1 } }
                        END { exit !f }' "$log"; do
    sleep 0.05
    ((++n < 6000)) || { echo "preempt.sh: epoch 1 never reached ${AT}%" >&2; cat "$log" >&2; return 1; }
  done
  local signalled ended rc=0 code
  signalled=$(date +%s.%N)
  pkill -TERM -f "$XLAUNCH run --config_file $work/config.yaml" ||
    { echo "preempt.sh: found no \`xlaunch run\` of this round to signal" >&2; return 1; }
  wait "$pid" || true
  ended=$(date +%s.%N)
  code=$(cat "$work/rc" 2>/dev/null || echo none)
  if [ "$code" != 75 ]; then
    echo "preempt.sh: the preempted job exited $code, not 75 (preempted, checkpoint written):" >&2
    cat "$log" >&2
    return 1
  fi
  # The last progress line before the signal: "<time> epoch 1/2 [...] P% DONE/TOTAL ...".
  local global_batch done_shown shown started first_step first
  global_batch=$(sed -n 's/.*global batch \([0-9]*\),.*/\1/p' "$log" | head -1)
  done_shown=$(awk -v t="$signalled" '$1 < t && $2 == "epoch" && $3 == "1/2" {
                 for (i = 4; i <= NF; i++) if ($i ~ /^[0-9]+\/[0-9]+$/) { split($i, d, "/"); v = d[1] } }
               END { print v }' "$log")
  if [ -z "$global_batch" ] || [ -z "$done_shown" ]; then
    echo "preempt.sh: no global batch or no progress line before the signal in the job's output:" >&2
    cat "$log" >&2
    return 1
  fi
  shown=$((done_shown / global_batch))
  started=$(date +%s.%N)
  "$XLAUNCH" run --config_file "$work/config.yaml" --resume "$TRAIN" --epochs 2 --limit_train "$IMAGES" \
    --batch_size 64 2>&1 | stamp >"$log2" || rc=$?
  first=$(time_of "first optimizer step after load_state" "$log2" || true)
  first_step=$(sed -n 's/.*first optimizer step after load_state done (step \([0-9]*\)).*/\1/p' "$log2" | head -1)
  if [ "$rc" != 0 ] || [ -z "$first" ] || [ -z "$first_step" ]; then
    echo "preempt.sh: the resumed job did not run as expected (exit $rc):" >&2
    cat "$log2" >&2
    return 1
  fi
  echo "bench=preempt exit=$code save_s=$(since "$ended" "$signalled") restart_to_first_step_s=$(since "$first" "$started")" \
       "last_step_shown=$shown first_step_after_resume=$first_step" \
       "steps_lost=$((shown - first_step + 1 > 0 ? shown - first_step + 1 : 0))"
}

for ((r = 1; r <= ROUNDS; r++)); do one_round; done
