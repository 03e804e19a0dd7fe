#!/usr/bin/env bash
# Exact resume across processes, under mpirun -np 2 (see train_resume.cpp):
#   usage: checkpoint_resume_test.sh TRAIN_BIN MPIEXEC [MPIEXEC_FLAGS...]
# Each case stops a job (cleanly, or by SIGKILL in the middle of save_state), resumes it in a fresh
# job, and compares the final parameters byte for byte with a job that trained straight through.
set -u
bin=$1
shift
mpirun=("$@")
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir

run() {  # run NP LOGNAME ARGS...: one job; its output goes to $work/LOGNAME.log
  local np=$1 log=$2
  shift 2
  "${mpirun[@]}" -np "$np" "$bin" "$@" >"$work/$log.log" 2>&1
}
same() {  # same NAME FILE: FILE has the straight run's bytes
  if cmp -s "$work/straight_$3.bin" "$2"; then pass "$1"; else fail "$1 (parameters differ from the straight run)"; fi
}

for opt in sgd adam; do
  run 2 straight_$opt --optimizer $opt --epochs 2 --out "$work/straight_$opt.bin" || fail "straight run ($opt)" straight_$opt
done
if cmp -s "$work/straight_sgd.bin" "$work/straight_adam.bin"; then fail "sgd and adam runs differ"; fi

# 1. Stop after epoch 1, resume in a new job for epoch 2.
printf 'distributed_type: MULTI_CPU\nnum_processes: 2\n' >"$work/config.yaml"
XLAUNCH_CONFIG_FILE=$work/config.yaml run 2 e1 --epochs 2 --save "$work/e1" --stop-after-epochs 1 &&
  run 2 e1_resume --epochs 2 --resume "$work/e1" --out "$work/e1.bin" || fail "epoch resume runs" e1_resume
same "resume after epoch 1 is bitwise exact (SGD momentum)" "$work/e1.bin" sgd
cmp -s "$work/config.yaml" "$work/e1/config/config_file.yaml" && grep -q "^XLAUNCH_CONFIG_FILE=$work/config.yaml$" "$work/e1/config/env.txt" &&
  pass "the config file and XLAUNCH_* values are saved" || fail "the config file and XLAUNCH_* values are saved"

# 2. Stop mid-epoch (after batch 3 of epoch 1; 8 batches per epoch), with Adam.
run 2 mid --optimizer adam --epochs 2 --save "$work/mid" --stop-after-batches 11 &&
  run 2 mid_resume --optimizer adam --epochs 2 --resume "$work/mid" --out "$work/mid.bin" || fail "mid-epoch runs" mid_resume
grep -q "next batch 3 of 8" "$work/mid/metadata.txt" || fail "metadata.txt records the loader position"
same "resume mid-epoch is bitwise exact (Adam)" "$work/mid.bin" adam

# 2b. The same under bf16 autocast (fp16, with its GradScaler, needs a GPU).
export XLAUNCH_MIXED_PRECISION=bf16
run 2 straight_bf16 --epochs 2 --out "$work/straight_bf16.bin" &&
  run 2 bf16 --epochs 2 --save "$work/bf16" --stop-after-batches 13 &&
  run 2 bf16_resume --epochs 2 --resume "$work/bf16" --out "$work/bf16.bin" || fail "bf16 runs" bf16_resume
same "resume mid-epoch under bf16 autocast is bitwise exact" "$work/bf16.bin" bf16
unset XLAUNCH_MIXED_PRECISION

# 3. SIGKILL while the new checkpoint's files are written: the previous one is untouched.
run 2 k1 --epochs 2 --save "$work/k1" --stop-after-epochs 1 || fail "kill test: first save" k1
run 2 k1_killed --epochs 2 --resume "$work/k1" --save "$work/k1" --stop-after-batches 5 \
  --kill-at "wrote rank0/model_0.pt" && fail "kill test: the job should have died" k1_killed
ls -d "$work"/k1.tmp-?????? >/dev/null 2>&1 || fail "kill test: the partial checkpoint should be in k1.tmp-XXXXXX"
run 2 k1_resume --epochs 2 --resume "$work/k1" --out "$work/k1.bin" || fail "kill test: resume" k1_resume
same "killed while writing: the previous checkpoint loads and resumes exactly" "$work/k1.bin" sgd

# 3b. checkpoint.async: the files are written by a thread on each rank while training goes on.
# Rank 1 is killed in its thread, writing its own file: the job dies, and the previous checkpoint
# (itself written in the background) loads and resumes exactly.
export XLAUNCH_CHECKPOINT_ASYNC=1
run 2 k3 --epochs 2 --save "$work/k3" --stop-after-epochs 1 || fail "async kill test: first save" k3
grep -q "save_state($work/k3): written in the background in .* s; training was held .* s" "$work/k3.log" &&
  pass "an async save says how long it took and how long training was held" ||
  fail "an async save says how long it took and how long training was held" k3
run 2 k3_killed --epochs 2 --resume "$work/k3" --save "$work/k3" --stop-after-batches 5 \
  --kill-at "wrote rng/rank_1.pt" && fail "async kill test: the job should have died" k3_killed
run 2 k3_resume --epochs 2 --resume "$work/k3" --out "$work/k3.bin" || fail "async kill test: resume" k3_resume
unset XLAUNCH_CHECKPOINT_ASYNC
same "killed while writing in the background: the previous checkpoint loads and resumes exactly" "$work/k3.bin" sgd

# 4. SIGKILL between the two renames: <dir> is gone, <dir>.old is loaded instead, saying so.
run 2 k2 --epochs 2 --save "$work/k2" --stop-after-epochs 1 || fail "kill test 2: first save" k2
run 2 k2_killed --epochs 2 --resume "$work/k2" --save "$work/k2" --stop-after-batches 5 \
  --kill-at "moved previous aside" && fail "kill test 2: the job should have died" k2_killed
[ ! -e "$work/k2" ] && [ -d "$work/k2.old" ] || fail "kill test 2: expected only k2.old"
run 2 k2_resume --epochs 2 --resume "$work/k2" --out "$work/k2.bin" || fail "kill test 2: resume" k2_resume
grep -q "loading $work/k2.old" "$work/k2_resume.log" || fail "kill test 2: load_state should say it fell back" k2_resume
same "killed between renames: <dir>.old loads and resumes exactly" "$work/k2.bin" sgd
# ... and the next save replaces it cleanly.
run 2 k2_again --epochs 2 --resume "$work/k2" --save "$work/k2" --stop-after-batches 2 || fail "save after fallback" k2_again
[ -f "$work/k2/MANIFEST" ] && [ ! -e "$work/k2.old" ] && ! ls -d "$work"/k2.tmp* >/dev/null 2>&1 &&
  pass "a save after a fallback leaves one clean checkpoint" || fail "a save after a fallback leaves one clean checkpoint"

# 5. Another world size: allowed; the interrupted epoch continues with the samples not yet read
# (2 x 3 batches of 8 of epoch 1 read: 48 of 120; 72 left, 9 batches on 1 x 8: done at step 20),
# and load_state says so.
if XLAUNCH_BUCKET_CAP_MB=10 run 1 world1 --optimizer adam --epochs 2 --resume "$work/mid" --out "$work/world1.bin" &&
   grep -q "XLAUNCH_BUCKET_CAP_MB was '25', now '10'" "$work/world1.log" &&
   grep -q "saved by 2 processes, this job has 1" "$work/world1.log" &&
   grep -q "saved at sample 48 of 120 in epoch 1 by 2 processes; this job has 1: it continues with the 72 samples not yet read" "$work/world1.log" &&
   grep -q "^done: step 20$" "$work/world1.log"; then
  pass "a 2-process checkpoint resumes on 1 process, continuing the interrupted epoch, naming changed settings"
else
  fail "a 2-process checkpoint resumes on 1 process, continuing the interrupted epoch, naming changed settings" world1
fi

# 5b. Another world size with the same global batch (2 x 8 saved, 1 x 16 now): epoch 1 continues at
# its batch 3 of 8 and the run ends at step 16, as the straight run (restarting the epoch would end
# at 11 + 8 = 19).
if run 1 world1_global --optimizer adam --epochs 2 --batch 16 --resume "$work/mid" &&
   grep -q "by 2 processes of batch 8; this job has 1 of batch 16: it continues with the 72 samples not yet read" "$work/world1_global.log" &&
   grep -q "^done: step 16$" "$work/world1_global.log"; then
  pass "a 2 x 8 checkpoint taken mid-epoch continues at its place on 1 x 16 (the same global batch): done at step 16"
else
  fail "a 2 x 8 checkpoint taken mid-epoch continues at its place on 1 x 16: want the message and done: step 16" world1_global
fi

# 6. Refusals: another model, a corrupt file, a missing checkpoint.
run 2 other_model --hidden 16 --epochs 2 --resume "$work/e1" &&
  fail "another model should be refused" other_model
grep -q "'0.weight' is \[16, 8\] Float here, and \[32, 8\] Float in the checkpoint" "$work/other_model.log" &&
  pass "another model is refused, naming the first differing parameter" ||
  fail "another model is refused, naming the first differing parameter" other_model
cp -r "$work/e1" "$work/corrupt"
printf 'X' | dd of="$work/corrupt/rank0/optimizer_0.pt" bs=1 seek=100 conv=notrunc status=none
run 2 corrupt --epochs 2 --resume "$work/corrupt" && fail "a corrupt checkpoint should be refused" corrupt
grep -q "is corrupt: $work/corrupt/rank0/optimizer_0.pt" "$work/corrupt.log" &&
  pass "a corrupt file is refused, naming it" || fail "a corrupt file is refused, naming it" corrupt
run 2 missing --epochs 2 --resume "$work/nothing_here" && fail "a missing checkpoint should be refused" missing
grep -q "no checkpoint at $work/nothing_here" "$work/missing.log" &&
  pass "a missing checkpoint is refused, naming the path" || fail "a missing checkpoint is refused, naming the path" missing

test_finish
