#!/usr/bin/env bash
# Preemption, as a cluster does it: SIGTERM to `xlaunch run` of a 3-rank job in the middle of an
# epoch, then the next submission with --resume.
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "PASS $1"; }
fail() {
  echo "FAIL $1"
  [ -n "${2:-}" ] && sed 's/^/    /' "$work/$2.log"
  failures=$((failures + 1))
}
cat >"$work/config.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 3
project_dir: $work/project
timeout_s: 60
YAML
job() { "$xlaunch" run --config_file "$work/config.yaml" "$@"; }

job "$bin" --project "$work/straight" --epochs 6 --out "$work/straight.bin" >"$work/straight.log" 2>&1 ||
  fail "straight run" straight

# Not through job(): $! must be xlaunch itself, as a cluster signals it.
"$xlaunch" run --config_file "$work/config.yaml" "$bin" --epochs 6 --wait_at_step 5 --marker "$work/marker" \
  --out "$work/preempted.bin" >"$work/first.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do [ -f "$work/marker" ] && break; sleep 0.1; done
[ -f "$work/marker" ] || fail "the job never reached step 5" first
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" = 75 ] && pass "xlaunch run returns 75 when preempted" || fail "xlaunch run returned $rc, not 75" first
left=$( (pgrep -f "^$bin "; pgrep -f "__rank.* $bin "; pgrep -f "mpirun .* $bin ") | tr '\n' ' ')
[ -z "$left" ] && pass "no process of the job outlives xlaunch run" || fail "processes left: $left"
grep -q "preempted at step [0-9]*: checkpoint .*checkpoint_[0-9]* saved in [0-9.]* s" "$work/first.log" &&
  pass "the ranks agreed on a step, saved, and said how long it took" || fail "preemption log" first
[ -f "$work/preempted.bin" ] && fail "the preempted run should not have finished"
step=$(sed -n 's/.*preempted at step \([0-9]*\):.*/\1/p' "$work/first.log" | head -1)
[ -f "$work/project/checkpoints/checkpoint_$step/MANIFEST" ] || fail "no checkpoint_$step in the project"

job --resume "$bin" --epochs 6 --out "$work/resumed.bin" >"$work/resumed.log" 2>&1 || fail "resumed run" resumed
grep -q "loading .*checkpoint_$step, the newest complete checkpoint" "$work/resumed.log" || fail "resume line" resumed
cmp -s "$work/straight.bin" "$work/resumed.bin" &&
  pass "preempted at step $step and resumed = never interrupted (parameters and EMA, byte for byte)" ||
  fail "the resumed job's result differs from the uninterrupted one"

[ "$failures" -eq 0 ] || { echo "$failures failure(s); logs in $work"; trap - EXIT; exit 1; }
echo "all passed"
