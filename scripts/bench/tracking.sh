#!/usr/bin/env bash
# What experiment tracking costs a training step: 2-rank DDP of the benchmark MLP (H=1024, batch
# 64) logging SCALARS (default 10) scalars per step through LOG_WITH (default tensorboard, which it
# must include; the utilization every 50 steps comes with it), against the same job logging
# nothing, alternating rounds in one run. The logging job's time runs until its trackers have
# drained (acc.end_training() inside the timed steps), and after each such round TensorBoard's own
# reader (EventAccumulator) must find every logged scalar in the event files: SCALARS tags with
# WARMUP + STEPS values each, steps 1 to WARMUP + STEPS; else the run fails. Prints the medians:
#   bench=tracking scalars_per_step=N ratio_vs_off=R log_with=W steps_per_s=X off_steps_per_s=Y scalars_checked_per_round=C
# Target: ratio_vs_off >= 0.99.
# Usage: scripts/bench/tracking.sh [ROUNDS]   (BUILD_DIR, SCALARS, LOG_WITH, STEPS, PEER_PYTHON override)
# The reader comes from scripts/install-deps.sh --bench (tensorboard).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-5}"
STEPS="${STEPS:-300}"
WARMUP=10
SCALARS="${SCALARS:-10}"
LOG_WITH="${LOG_WITH:-tensorboard}"
PY="${PEER_PYTHON:-python3}"
need_bin scripts/bench/bench_ddp
BIN="$BUILD_DIR/scripts/bench/bench_ddp"
case ",$LOG_WITH," in
  *,tensorboard,* | *,all,*) ;;
  *) echo "tracking.sh: LOG_WITH=$LOG_WITH writes no event files to check; include tensorboard" >&2; exit 2 ;;
esac
"$PY" -c 'import tensorboard' 2>/dev/null ||
  { echo "tracking.sh: TensorBoard's reader is missing: run scripts/install-deps.sh --bench" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# count_logged DIR: checks that each of the SCALARS tags in DIR's event files holds steps
# 1..WARMUP+STEPS exactly once and prints how many values they hold (else exits 1, saying what is
# missing)
count_logged() {
  "$PY" -W ignore - "$1" "$SCALARS" "$((WARMUP + STEPS))" <<'PY'
import sys
from tensorboard.backend.event_processing import event_accumulator as ea
run, tags, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
acc = ea.EventAccumulator(run, size_guidance={"scalars": 0})
acc.Reload()
have = set(acc.Tags()["scalars"])
names = ["train/loss"] + [f"bench/value{i}" for i in range(1, tags)]
errors, total = [], 0
for name in names:
    got = sorted(e.step for e in acc.Scalars(name)) if name in have else []
    total += len(got)
    if got != list(range(1, steps + 1)):
        errors.append(f"{name}: {len(got)} values (steps {got[:1]}..{got[-1:]}), expected steps 1..{steps}")
if errors:
    sys.exit("tracking.sh: the event files in " + run + " miss logged scalars:\n  " + "\n  ".join(errors))
print(total)
PY
}

run() {  # run SCALARS -> steps_per_s (and, logging, the check of its event files)
  local extra=() out sps
  rm -rf "$work/project"
  [ "$1" -gt 0 ] && extra=(-x XLAUNCH_LOG_WITH="$LOG_WITH" -x XLAUNCH_PROJECT_DIR="$work/project")
  out=$("${MPIRUN[@]}" -np 2 "${extra[@]}" "$BIN" --mode ddp --hidden 1024 --batch 64 --steps "$STEPS" \
        --warmup "$WARMUP" --log_scalars "$1" 2>&1) || true
  sps=$(figure steps_per_s "bench_ddp --log_scalars $1" "$out")
  if [ "$1" -gt 0 ]; then
    count_logged "$work/project/bench_ddp" >/dev/null
  fi
  echo "$sps"
}

on=() off=()
for ((r = 0; r < ROUNDS; r++)); do
  on+=("$(run "$SCALARS")")
  off+=("$(run 0)")
done
ON=$(median "${on[@]}") OFF=$(median "${off[@]}")
awk -v n="$SCALARS" -v on="$ON" -v off="$OFF" -v w="$LOG_WITH" -v c="$((SCALARS * (WARMUP + STEPS)))" \
  'BEGIN {printf "bench=tracking scalars_per_step=%s ratio_vs_off=%.3f log_with=%s steps_per_s=%s off_steps_per_s=%s scalars_checked_per_round=%s\n", n, on / off, w, on, off, c}'
