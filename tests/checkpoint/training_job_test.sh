#!/usr/bin/env bash
# A whole training job (train_job.cpp) under mpirun, on 1 and 3 ranks:
#   usage: training_job_test.sh TRAIN_JOB_BIN MPIEXEC [MPIEXEC_FLAGS...]
#  - the prepared cosine schedule's learning rates, with gradient_accumulation_steps 4 and forced
#    fp16 skips, equal the schedule's formula (computed here, in Python, from transformers'
#    definition) at the count of optimizer steps that really happened;
#  - a job stopped at a step and resumed from "latest" ends with the same parameters and EMA, byte
#    for byte, and logs the same learning-rate sequence, as one that ran straight through;
#  - checkpoint.total_limit 2 keeps the two newest, also when a save is killed (SIGKILL) half-way,
#    and the job resumed from there still ends bitwise equal;
#  - a torn newest checkpoint is skipped with a warning naming it; registered objects of another
#    count are refused, naming both lists.
set -u
bin=$1
shift
mpirun=("$@")
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
export XLAUNCH_MIXED_PRECISION=fp16 XLAUNCH_GRADIENT_ACCUMULATION_STEPS=4

run() {  # run NP LOGNAME ARGS...: one job; its output goes to $work/LOGNAME.log
  local np=$1 log=$2
  shift 2
  "${mpirun[@]}" -np "$np" "$bin" "$@" >"$work/$log.log" 2>&1
}
complete() {  # the complete named checkpoints of project $1, by step
  for d in "$1"/checkpoints/checkpoint_*; do [ -f "$d/MANIFEST" ] && basename "$d"; done | sort -t_ -k2 -n | tr '\n' ' '
}

# The expected rate at each micro-step: 0.2 x cosine-with-warmup factor of the real steps so far.
check_lr() {  # check_lr LOG NP SKIPS
  python3 - "$@" <<'EOF'
import math, sys
log, np_, skips = sys.argv[1], int(sys.argv[2]), {int(s) for s in sys.argv[3].split(",") if s}
accum, epochs, base = 4, 6, 0.2
batches = 96 // np_ // 4
total = epochs * batches // accum
warmup = total // 5
def factor(k):  # transformers.get_cosine_schedule_with_warmup, num_cycles 0.5
    if k < warmup:
        return k / max(1, warmup)
    progress = (k - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
rows = [line.split() for line in open(log)]
real, bad = 0, []
if len(rows) != epochs * batches:
    bad.append(f"{len(rows)} rows, expected {epochs * batches}")
for i, (micro, lr, step) in enumerate(rows):
    if int(micro) != i:
        bad.append(f"row {i} is micro-step {micro}")
        break
    if (i + 1) % accum == 0 and (i + 1) // accum - 1 not in skips:
        real += 1
    want = base * factor(real)
    if abs(float(lr) - want) > 1e-9 * max(1.0, want) or int(step) != real:
        bad.append(f"micro-step {i}: lr {lr} step {step}, expected lr {want!r} after {real} real steps")
if bad:
    print("\n".join(bad[:5]))
    sys.exit(1)
EOF
}

for np in 1 3; do
  # 1. Straight through, with skips at sync steps 2 and 5: the rates follow the real steps.
  run $np straight$np --project "$work/p$np" --epochs 6 --skip 2,5 --out "$work/straight$np.bin" \
      --lr_log "$work/straight$np.lr" || fail "np=$np: straight run" straight$np
  if out=$(check_lr "$work/straight$np.lr" $np 2,5); then pass "np=$np: lr follows optimizer steps that happened"
  else fail "np=$np: learning rates: $out"; fi
  grep -q "ema.updates" "$work/straight$np.bin" || fail "np=$np: no EMA in the output"

  # 2. Stopped at step 7 (mid-epoch), resumed from "latest": the same bytes and rates.
  run $np stop$np --project "$work/s$np" --epochs 6 --skip 2,5 --stop_at_step 7 --lr_log "$work/resumed$np.lr" ||
    fail "np=$np: stopped run" stop$np
  [ "$(complete "$work/s$np")" = "checkpoint_7 " ] || fail "np=$np: expected checkpoint_7, found: $(complete "$work/s$np")"
  XLAUNCH_RESUME=latest run $np resume$np --project "$work/s$np" --epochs 6 --skip 2,5 --out "$work/resumed$np.bin" \
      --lr_log "$work/resumed$np.lr" || fail "np=$np: resumed run" resume$np
  grep -q "loading .*checkpoint_7, the newest complete checkpoint" "$work/resume$np.log" || fail "np=$np: resume line" resume$np
  if cmp -s "$work/straight$np.bin" "$work/resumed$np.bin" && cmp -s "$work/straight$np.lr" "$work/resumed$np.lr"; then
    pass "np=$np: stop at step 7 + resume = straight run (parameters, EMA, learning rates)"
  else fail "np=$np: the resumed run differs from the straight one"; fi
done

# 3. total_limit 2, a checkpoint every step, the 4th save killed half-way (rank 0 SIGKILLed).
export XLAUNCH_CHECKPOINT_EVERY_N_STEPS=1 XLAUNCH_CHECKPOINT_TOTAL_LIMIT=2
run 3 killed --project "$work/k" --epochs 6 --kill_at_save 4 && fail "the killed run should fail" killed
[ "$(complete "$work/k")" = "checkpoint_2 checkpoint_3 " ] &&
  ls -d "$work"/k/checkpoints/checkpoint_4.tmp-* >/dev/null 2>&1 &&
  pass "killed in the 4th save: the two newest complete checkpoints remain, and the torn temporary" ||
  fail "after the kill: $(ls "$work/k/checkpoints" | tr '\n' ' ')"
cp -r "$work/k" "$work/torn"
XLAUNCH_RESUME=latest run 3 kresume --project "$work/k" --epochs 6 --out "$work/k.bin" || fail "resume after kill" kresume
run 3 kstraight --project "$work/k2" --epochs 6 --out "$work/kstraight.bin" || fail "straight with every_n_steps" kstraight
cmp -s "$work/k.bin" "$work/kstraight.bin" && pass "resumed after the kill = straight run" ||
  fail "resumed after the kill differs from the straight run"
[ "$(complete "$work/k")" = "checkpoint_11 checkpoint_12 " ] && ! ls -d "$work"/k/checkpoints/*.tmp-* >/dev/null 2>&1 &&
  pass "rotation keeps the two newest and removes the temporary" || fail "after the run: $(ls "$work/k/checkpoints" | tr '\n' ' ')"
unset XLAUNCH_CHECKPOINT_EVERY_N_STEPS XLAUNCH_CHECKPOINT_TOTAL_LIMIT

# 4. A torn newest checkpoint is skipped, named; another count of registered objects is refused.
truncate -s 10 "$work/torn/checkpoints/checkpoint_3/rank0/model_0.pt"
XLAUNCH_RESUME=latest run 3 torn --project "$work/torn" --epochs 6 --stop_at_step 4 || fail "resume past a torn one" torn
grep -q "skipping .*checkpoint_3, which is torn" "$work/torn.log" && grep -q "loading .*checkpoint_2," "$work/torn.log" &&
  pass "a torn newest checkpoint is skipped with a warning naming it" || fail "torn checkpoint" torn
XLAUNCH_RESUME=latest run 3 extra --project "$work/s3" --epochs 6 --register_extra 1 && fail "extra object accepted" extra
grep -q "holds 1 objects registered for checkpointing (.*Ema), this program has 2 (.*Ema, .*Counter)" "$work/extra.log" &&
  pass "another count of registered objects is refused, naming both" || fail "registered-object mismatch message" extra

test_finish
