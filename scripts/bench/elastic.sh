#!/usr/bin/env bash
# An elastic job losing a machine: train_fashion_mnist on 3 simulated machines x 1 rank
# (scripts/cluster/sim.sh) with num_machines 2:3 and a checkpoint every half epoch; when epoch 1's
# progress passes KILL_AT percent (after its mid-epoch checkpoint), sim2's link is cut for good
# (sim.sh cut: it no longer answers, as over ssh). The job goes on with sim0 and sim1. Prints
#   bench=elastic machines=3:2 lost_steps=L seconds_to_detect=D seconds_to_resume=R test_acc=A
# lost_steps: optimizer steps the first attempt had made by its last progress line before the loss
#   (so at least this many), less the step of the checkpoint the second attempt resumed from. The
#   global batch is kept (--global_batch_size), so the second attempt continues the epoch where the
#   checkpoint was taken (docs/checkpointing.md#another-world-size).
# seconds_to_detect: from the cut to `xlaunch: job failed` (the watchdog's verdict, timeout_s 10, and
#   mpirun ended after its grace).
# seconds_to_resume: from `xlaunch: job failed` to the second attempt's "resumed at" line: the
#   probe of the machines, mpirun's start on two and load_state (target: 30 s).
# Usage: sudo scripts/bench/elastic.sh [ROUNDS]   (BUILD_DIR, IMAGES, BATCH, KILL_AT, RATE override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-1}"
IMAGES="${IMAGES:-12000}"
BATCH="${BATCH:-96}"  # global: 32 per rank on 3 machines, 48 on 2
KILL_AT="${KILL_AT:-80}"
RATE="${RATE:-10gbit}"
need_bin examples/train_fashion_mnist
need_bin launcher/xlaunch
TRAIN="$BUILD_DIR/examples/train_fashion_mnist"

# Each line of stdin with the time (seconds since the epoch) in front. The ranks' output reaches
# mpirun through a pseudo-terminal, so the progress bar redraws with \r: each redraw is a line here.
stamp() {
  stdbuf -oL tr '\r' '\n' | while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done
}
# The time of the first line of the log matching a regex.
time_of() { grep -m1 -E "^[0-9.]+ $1" "$2" | cut -d' ' -f1; }

one_round() {  # -> one bench= line
  local log=$work/run.log ckpt=$work/ckpt job
  rm -rf "$ckpt" "$ckpt".*
  "$SIM" down >/dev/null
  "$SIM" up 3 --rate "$RATE" >/dev/null 9>&-  # the holders must not inherit the lock (fd 9)
  "$BUILD_DIR/launcher/xlaunch" run --config_file "$work/elastic.yaml" "$TRAIN" --epochs 2 --checkpoints_per_epoch 2 \
    --limit_train "$IMAGES" --global_batch_size "$BATCH" --resume --project_dir "$ckpt" 2>&1 | stamp >"$log" &
  job=$!
  local line="" n=0
  # The first progress line of epoch 1 at KILL_AT percent or more.
  until line=$(awk -v k="$KILL_AT" '$2 == "epoch" && $3 == "1/2" {
                 for (i = 4; i <= NF; i++) if ($i ~ /^[0-9]+%$/ && $i + 0 >= k) { print; exit } }' "$log") &&
        [ -n "$line" ]; do
    sleep 0.05
    ((++n < 12000)) || { echo "elastic.sh: epoch 1 never reached ${KILL_AT}%" >&2; cat "$log" >&2; return 1; }
  done
  "$SIM" cut sim2
  local killed done
  killed=$(date +%s.%N)
  done=$(sed -E 's#.* ([0-9]+)/[0-9]+ .*#\1#' <<<"$line")
  wait "$job" || true
  local failed resumed resumed_step acc
  failed=$(time_of "xlaunch: job failed" "$log")
  resumed=$(time_of "resumed at" "$log")
  resumed_step=$(grep -m1 -o "resumed at .* (step [0-9]*)" "$log" | sed -E 's/.*step ([0-9]+)\)/\1/')
  acc=$(sed -n 's/^[0-9.]* epoch=2 .*test_acc=\([0-9.]*\).*/\1/p' "$log" | tail -1)
  if [ -z "$failed" ] || [ -z "$resumed" ] || [ -z "$acc" ]; then
    echo "elastic.sh: the job did not fail, resume and finish as expected:" >&2
    cat "$log" >&2
    return 1
  fi
  echo "bench=elastic machines=3:2 lost_steps=$((done / BATCH - resumed_step))" \
       "seconds_to_detect=$(awk -v a="$failed" -v b="$killed" 'BEGIN {printf "%.1f", a - b}')" \
       "seconds_to_resume=$(awk -v a="$resumed" -v b="$failed" 'BEGIN {printf "%.1f", a - b}')" \
       "test_acc=$acc"
}

sim_machines elastic 3 1
cat >"$work/elastic.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 3
num_machines: 2:3
max_restarts: 2
timeout_s: 10
log_dir: $work/logs
loader:
  num_workers: 0
mpi:
  hostfile: $work/hosts
YAML
for ((r = 0; r < ROUNDS; r++)); do one_round; done
