#!/usr/bin/env bash
# Preemption, as a cluster does it: SIGTERM to `xlaunch run` of a 3-rank job in the middle of an
# epoch, then the next submission with --resume; once as usual, once started with SIGTERM and
# SIGUSR1 blocked, once with an mpirun that passes no signal on, once with checkpoint.async.
#   usage: preempt_test.sh XLAUNCH_BIN TRAIN_JOB_BIN
#  - xlaunch run returns 75 ("preempted"), and only once every process of the job is gone;
#  - the ranks saved a named checkpoint at the step they agreed on, and said how long it took;
#  - `xlaunch run --resume` continues from it, and the final parameters and EMA equal, byte for
#    byte, those of a job that was never interrupted (no step lost, none repeated).
# The job waits at step 5 until its ranks have been asked to stop (train_job --wait_at_step), so
# the signal always lands mid-run, whatever the machine's speed.
set -u
xlaunch=$1
bin=$2
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
cat >"$work/config.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 3
project_dir: $work/project
timeout_s: 60
YAML
job() { "$xlaunch" run --config_file "$work/config.yaml" "$@"; }

job "$bin" --project "$work/straight" --epochs 6 --out "$work/straight.bin" >"$work/straight.log" 2>&1 ||
  fail "straight run" straight

# preempted NAME [WRAPPER...]: a job stopped by SIGTERM at step 5, then resumed with --resume; its
# result must equal the straight run's. WRAPPER starts `xlaunch run` (exec'ing it, so that $! is
# xlaunch itself, as a cluster signals it).
preempted() {
  local name=$1 project=$work/project_$1
  shift
  { sed "s|^project_dir: .*|project_dir: $project|" "$work/config.yaml"; printf '%s' "${extra_config:-}"; } \
    >"$work/config_$name.yaml"
  rm -f "$work/marker"
  "$@" "$xlaunch" run --config_file "$work/config_$name.yaml" "$bin" --epochs 6 --wait_at_step 5 \
    --marker "$work/marker" --out "$work/preempted_$name.bin" >"$work/first_$name.log" 2>&1 &
  local pid=$! rc left step
  for _ in $(seq 1200); do [ -f "$work/marker" ] && break; sleep 0.1; done
  [ -f "$work/marker" ] || fail "$name: the job never reached step 5" "first_$name"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [ "$rc" = 75 ] && pass "$name: xlaunch run returns 75 when preempted" ||
    fail "$name: xlaunch run returned $rc, not 75" "first_$name"
  left=$( (pgrep -f "^$bin "; pgrep -f "__rank.* $bin "; pgrep -f "mpirun .* $bin ") | tr '\n' ' ')
  [ -z "$left" ] && pass "$name: no process of the job outlives xlaunch run" || fail "$name: processes left: $left"
  grep -q "preempted at step [0-9]*: checkpoint .*checkpoint_[0-9]* saved in [0-9.]* s" "$work/first_$name.log" &&
    pass "$name: the ranks agreed on a step, saved, and said how long it took" || fail "$name: preemption log" "first_$name"
  [ -f "$work/preempted_$name.bin" ] && fail "$name: the preempted run should not have finished"
  step=$(sed -n 's/.*preempted at step \([0-9]*\):.*/\1/p' "$work/first_$name.log" | head -1)
  [ -n "$step" ] && [ -f "$project/checkpoints/checkpoint_$step/MANIFEST" ] || fail "$name: no checkpoint_$step in the project"

  "$xlaunch" run --config_file "$work/config_$name.yaml" --resume "$bin" --epochs 6 --out "$work/resumed_$name.bin" \
    >"$work/resumed_$name.log" 2>&1 || fail "$name: resumed run" "resumed_$name"
  grep -q "loading .*checkpoint_$step, the newest complete checkpoint" "$work/resumed_$name.log" ||
    fail "$name: resume line" "resumed_$name"
  # The same config resumed: nothing to warn about (a per-run variable once was).
  grep -q "settings differ" "$work/resumed_$name.log" && fail "$name: a warning about settings that did not change" "resumed_$name"
  [ -n "$step" ] && cmp -s "$work/straight.bin" "$work/resumed_$name.bin" &&
    pass "$name: preempted at step $step and resumed = never interrupted (parameters and EMA, byte for byte)" ||
    fail "$name: the resumed job's result differs from the uninterrupted one"
}

preempted plain
# With checkpoint.async the preemption's checkpoint is written in the background, and completed
# before the processes exit with 75: it must be there, whole, and resume exactly.
extra_config=$'checkpoint:\n  async: true\n' preempted async
grep -q "checkpoint .*checkpoint_[0-9]* written in the background in [0-9.]* s; training was held" "$work/first_async.log" &&
  pass "async: the preemption's checkpoint was written in the background and completed before the exit" ||
  fail "async: the preemption's checkpoint was written in the background and completed before the exit" first_async
# The same where whatever starts xlaunch run left SIGTERM and SIGUSR1 blocked (the signal mask
# survives exec; the GPU machines' runner does this): xlaunch unblocks what it relies on, so the
# preemption still reaches mpirun and the ranks. Before, the ranks never heard of it.
preempted inherited_mask python3 -c 'import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})
os.execvp(sys.argv[1], sys.argv[1:])'
# And where mpirun passes no signal on at all (what the GPU machine's mpirun did with SIGUSR1):
# xlaunch passes the preemption straight to the training processes of this machine, and one rank
# that hears of it is enough (they agree through the control element). Before, mpirun died of it.
preempted mpirun_forwards_nothing env OMPI_MCA_ess_base_forward_signals=none

test_finish
