#!/usr/bin/env bash
# acc.log on 2 ranks through `xlaunch run` (track_job.cpp), read back by TensorBoard's own reader,
# json and csv (check_tracking.py):
#   usage: tracking_job_test.sh XLAUNCH_BIN TRACK_JOB_BIN
#  - "straight": log_with all, 3 epochs: one event file (only rank 0 writes), train/loss at every
#    step equal (float32) to the mean of the two ranks' own losses, lr, the hyperparameters (text
#    and the HPARAMS plugin), utilization scalars every report_interval steps, weight and gradient
#    histograms every log_histograms_every_n_steps; metrics.jsonl and metrics.csv the same values
#    as doubles;
#  - "resumed": a job whose rank 1 crashes at step 10, after the checkpoint of step 8, restarted
#    by max_restarts: every step once in TensorBoard's view and in metrics.jsonl, max over ranks
#    for train/max_loss, and the losses equal to the straight run's (a resumed job continues
#    bitwise);
#  - a CSV run that logs a name its first call did not have stops with a message naming it.
set -u
xlaunch=$1
bin=$2
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
here=$(cd "$(dirname "$0")" && pwd)
config() {  # config NAME LOG_WITH: a 2-rank CPU job's config in $work/NAME.yaml
  cat >"$work/$1.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 2
use_cpu: true
project_dir: $work/$1
log_with: $2
report_interval: 4
log_histograms_every_n_steps: $3
checkpoint:
  every_n_steps: 4
max_restarts: 1
timeout_s: 60
YAML
}

config straight all 8
"$xlaunch" run --config_file "$work/straight.yaml" "$bin" --epochs 3 --values "$work/straight.values" \
  >"$work/straight.log" 2>&1 && pass "straight run" || fail "straight run" straight

config resumed "[tensorboard, jsonl]" 0
"$xlaunch" run --config_file "$work/resumed.yaml" "$bin" --epochs 3 --values "$work/resumed.values" --calls mixed \
  --crash_at_step 10 >"$work/resumed.log" 2>&1 && pass "crashed at step 10, restarted, finished" ||
  fail "crashed and restarted run" resumed
grep -q "restart" "$work/resumed.log" || fail "the resumed run did not restart" resumed

if python3 "$here/check_tracking.py" "$work" >"$work/check.log" 2>&1; then
  sed 's/^/  /' "$work/check.log"
  pass "the files read back"
else
  fail "the files read back" check
fi

config csvmix csv 0
sed -i "s/max_restarts: 1/max_restarts: 0/" "$work/csvmix.yaml"
if "$xlaunch" run --config_file "$work/csvmix.yaml" "$bin" --epochs 1 --values "$work/csvmix.values" --calls mixed \
  >"$work/csvmix.log" 2>&1; then
  fail "a CSV run with a new name went through" csvmix
elif grep -q "train/max_loss" "$work/csvmix.log" && grep -q "metrics.csv" "$work/csvmix.log"; then
  pass "a new name in a CSV run is refused, naming it and the file"
else
  fail "the CSV refusal does not name the name and the file" csvmix
fi

test_finish
