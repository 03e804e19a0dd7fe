#!/usr/bin/env bash
# A whole job (train_job.cpp) through `xlaunch run` at ddp.zero_stage 2 on 3 ranks (shared memory):
#   usage: zero_job_test.sh XLAUNCH_BIN TRAIN_JOB_BIN
#  - stopped at step 7 and resumed with the same config: the same bytes (parameters and EMA) as a
#    job that ran straight through;
#  - the stage-2 checkpoint holds every rank's optimizer file and the layout, metadata.txt the stage;
#  - resumed on 2 ranks at stage 1 and on 1 process at stage 0: the job finishes, and says what it
#    re-sliced. (Bit-for-bit equality across layouts is zero_checkpoint_test's.)
set -u
xlaunch=$1
bin=$2
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
config() {  # config NAME NP STAGE: a config file of NP ranks at ZeRO stage STAGE
  printf 'distributed_type: MULTI_CPU\nnum_processes: %s\ntimeout_s: 60\nddp:\n  zero_stage: %s\n' "$2" "$3" \
    >"$work/$1.yaml"
}
job() {  # job CONFIG LOGNAME ARGS...
  local cfg=$1 log=$2
  shift 2
  "$xlaunch" run --config_file "$work/$cfg.yaml" "$@" >"$work/$log.log" 2>&1
}
config s2 3 2
config s1 2 1
config s0 1 0

job s2 straight "$bin" --project "$work/straight" --epochs 4 --out "$work/straight.bin" || fail "straight run" straight
job s2 stop "$bin" --project "$work/p" --epochs 4 --stop_at_step 7 || fail "stopped run" stop
ckpt=$work/p/checkpoints/checkpoint_7
[ -f "$ckpt/optimizer_0/rank_2.pt" ] && [ -f "$ckpt/optimizer_0/layout.txt" ] && [ ! -e "$ckpt/rank0/optimizer_0.pt" ] &&
  grep -q "^zero_stage 2$" "$ckpt/metadata.txt" && grep -q "^world_size 3$" "$ckpt/optimizer_0/layout.txt" &&
  pass "the stage-2 checkpoint holds every rank's optimizer file and the layout" ||
  fail "stage-2 checkpoint files: $(cd "$ckpt" && find . -type f | sort | tr '\n' ' ')"
cp -r "$work/p" "$work/p1"
cp -r "$work/p" "$work/p0"
job s2 resume --resume "$ckpt" "$bin" --project "$work/p" --epochs 4 --out "$work/resumed.bin" || fail "resumed run" resume
grep -q "first optimizer step after load_state done (step 8)" "$work/resume.log" || fail "resume line" resume
cmp -s "$work/straight.bin" "$work/resumed.bin" &&
  pass "stage 2, 3 ranks: stopped at step 7 + resumed = straight run (parameters and EMA, byte for byte)" ||
  fail "the resumed stage-2 job differs from the straight one"
grep -q "re-sliced" "$work/resume.log" && fail "the same layout should not be re-sliced" resume

job s1 resume1 --resume "$work/p1/checkpoints/checkpoint_7" "$bin" --project "$work/p1" --epochs 4 --out "$work/resumed1.bin" &&
  grep -q "optimizer state of 3 ranks at stage 2 re-sliced for 2 ranks at stage 1" "$work/resume1.log" &&
  [ -s "$work/resumed1.bin" ] && pass "the stage-2 checkpoint of 3 ranks resumes on 2 ranks at stage 1, saying so" ||
  fail "resume on 2 ranks at stage 1" resume1
job s0 resume0 --resume "$work/p0/checkpoints/checkpoint_7" "$bin" --project "$work/p0" --epochs 4 --out "$work/resumed0.bin" &&
  grep -q "optimizer state of 3 ranks at stage 2 re-sliced for 1 ranks at stage 0" "$work/resume0.log" &&
  [ -s "$work/resumed0.bin" ] && pass "the stage-2 checkpoint of 3 ranks resumes on 1 process at stage 0, saying so" ||
  fail "resume on 1 process at stage 0" resume0

test_finish
