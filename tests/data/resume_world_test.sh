#!/usr/bin/env bash
# Exact resume on another world size mid-epoch, under mpirun (see resume_world.cpp):
#   usage: resume_world_test.sh RESUME_WORLD_BIN MPIEXEC [MPIEXEC_FLAGS...]
# A job of 4 ranks x batch 4 stops in epoch 1 after 3 of its batches (48 samples read) and saves;
# jobs of 2 and 3 ranks (batch 5) resume it. The epoch's samples over both jobs must be every
# sample once, plus only the padding that evens out the rest of the epoch over the new ranks, and
# gather_for_metrics must return each sample once, in the epoch's order. Epoch 2 is whole again.
set -u
bin=$1
shift
mpirun=("$@")
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir

run() {  # run NP NAME ARGS...: one job; its output goes to $work/NAME.log, its files to $work/NAME.*
  local np=$1 name=$2
  shift 2
  "${mpirun[@]}" -np "$np" "$bin" --out "$work/$name" --epochs 3 "$@" >"$work/$name.log" 2>&1 ||
    { echo "FAIL: job $name"; sed 's/^/    /' "$work/$name.log"; failures=$((failures + 1)); }
}
check() {  # check WHAT N EPOCH PADDING NAME...
  local what=$1
  shift
  if "$bin" --check "$@" >"$work/check.log" 2>&1; then echo "PASS $what"; else
    echo "FAIL $what"; sed 's/^/    /' "$work/check.log"; failures=$((failures + 1))
  fi
}
says() {  # says NAME TEXT: the job's log has TEXT
  if grep -qF "$2" "$work/$1.log"; then echo "PASS $1 says: $2"; else
    echo "FAIL $1 should say: $2"; sed 's/^/    /' "$work/$1.log"; failures=$((failures + 1))
  fi
}

# 102 samples: the 54 left divide by 2 and 3, so the resumed epoch has no padding.
run 4 a4 --n 102 --batch 4 --save "$work/a" --stop-after-steps 10
run 2 a2 --n 102 --batch 5 --resume "$work/a"
run 3 a3 --n 102 --batch 5 --resume "$work/a"
check "4 -> 2 ranks, no padding: every sample of epoch 1 once" 102 1 0 "$work/a4" "$work/a2"
check "4 -> 3 ranks, no padding: every sample of epoch 1 once" 102 1 0 "$work/a4" "$work/a3"
check "epoch 2 on 2 ranks is whole" 102 2 0 "$work/a2"
check "epoch 2 on 3 ranks is whole" 102 2 0 "$work/a3"
says a3 "load_state: loader 0 was saved at sample 48 of 102 in epoch 1 by 4 processes of batch 4; this job has 3 of batch 5: it continues with the 54 samples not yet read"

# 101 samples: 53 left, padded by one on 2 ranks (27 + 27) and on 3 (18 x 3).
run 4 b4 --n 101 --batch 4 --save "$work/b" --stop-after-steps 10
run 2 b2 --n 101 --batch 5 --resume "$work/b"
run 3 b3 --n 101 --batch 5 --resume "$work/b"
check "4 -> 2 ranks: every sample of epoch 1 once, one padded repeat, gathers drop it" 101 1 1 "$work/b4" "$work/b2"
check "4 -> 3 ranks: every sample of epoch 1 once, one padded repeat, gathers drop it" 101 1 1 "$work/b4" "$work/b3"
check "epoch 2 on 3 ranks is whole (one padded)" 101 2 1 "$work/b3"

# Saved again during the resumed epoch (after 2 of its batches: 48 + 30 read), resumed on 2 ranks
# x 4: the 23 left, padded by one.
run 3 c3 --n 101 --batch 5 --resume "$work/b" --save "$work/c" --stop-after-steps 2
run 2 c2 --n 101 --batch 4 --resume "$work/c"
check "4 -> 3 -> 2 ranks: every sample of epoch 1 once" 101 1 1 "$work/b4" "$work/c3" "$work/c2"
says c2 "was saved at sample 78 of 101 in epoch 1 by 3 processes of batch 5; this job has 2 of batch 4: it continues with the 23 samples not yet read"

# The same world size: the epoch continues as if never stopped (its own padding: 3 at the end).
run 4 d4 --n 101 --batch 4 --resume "$work/b"
check "4 -> 4 ranks: epoch 1 as one job reads it" 101 1 3 "$work/b4" "$work/d4"
if grep -q "loader 0 was saved" "$work/d4.log"; then echo "FAIL d4: nothing to say on the same layout"; failures=$((failures + 1)); fi

test_finish
