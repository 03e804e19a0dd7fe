#!/usr/bin/env bash
# What experiment tracking costs a training step: 2-rank DDP of the benchmark MLP (H=1024, batch
# 64) logging SCALARS (default 10) scalars per step through LOG_WITH (default tensorboard; the
# utilization every 50 steps comes with it), against the same job logging nothing, alternating
# rounds in one run. Target: ratio_vs_off >= 0.99.
# Usage: scripts/bench/tracking.sh [ROUNDS]   (BUILD_DIR, SCALARS, LOG_WITH, STEPS override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-5}"
STEPS="${STEPS:-300}"
SCALARS="${SCALARS:-10}"
LOG_WITH="${LOG_WITH:-tensorboard}"
need_bin scripts/bench/bench_ddp
BIN="$BUILD_DIR/scripts/bench/bench_ddp"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # run SCALARS -> steps_per_s
  local extra=()
  [ "$1" -gt 0 ] && extra=(-x XLAUNCH_LOG_WITH="$LOG_WITH" -x XLAUNCH_PROJECT_DIR="$work/project")
  field steps_per_s "$("${MPIRUN[@]}" -np 2 "${extra[@]}" "$BIN" --mode ddp --hidden 1024 --batch 64 \
                        --steps "$STEPS" --log_scalars "$1" 2>/dev/null)"
}

on="" off=""
for ((r = 0; r < ROUNDS; r++)); do
  on+="$(run "$SCALARS") "
  off+="$(run 0) "
done
# shellcheck disable=SC2086
ON=$(median $on)
# shellcheck disable=SC2086
OFF=$(median $off)
awk -v n="$SCALARS" -v on="$ON" -v off="$OFF" -v w="$LOG_WITH" \
  'BEGIN {printf "bench=tracking scalars_per_step=%s ratio_vs_off=%.3f log_with=%s steps_per_s=%s off_steps_per_s=%s\n", n, on / off, w, on, off}'
