#!/usr/bin/env bash
# Two builds of xlaunch side by side (a change against the commit before it): 2-rank steps/s of the
# benchmark MLP (H=1024, batch 64) under DDP, ZeRO stages 0-2, and DDP with the report on,
# alternating rounds; the medians and the ratio new/old per case:
#   ab=CASE steps_per_s_old=... steps_per_s_new=... ratio_new_vs_old=...
# Usage: scripts/bench/ab.sh OLD_BUILD_DIR NEW_BUILD_DIR [ROUNDS]   (STEPS overrides 150)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 2 ] || { echo "usage: $0 OLD_BUILD_DIR NEW_BUILD_DIR [ROUNDS]" >&2; exit 2; }
OLD=$1 NEW=$2 ROUNDS=${3:-5} STEPS=${STEPS:-150}
for b in "$OLD" "$NEW"; do BUILD_DIR=$b need_bin scripts/bench/bench_ddp; BUILD_DIR=$b need_bin scripts/bench/bench_zero; done
STATUS=$(mktemp -d)
trap 'rm -rf "$STATUS"' EXIT
mlp="--hidden 1024 --batch 64 --steps $STEPS"
cases=("ddp|bench_ddp --mode ddp $mlp|-x XLAUNCH_REPORT=0"
       "zero0|bench_zero --stage 0 $mlp|-x XLAUNCH_REPORT=0"
       "zero1|bench_zero --stage 1 $mlp|-x XLAUNCH_REPORT=0"
       "zero2|bench_zero --stage 2 $mlp|-x XLAUNCH_REPORT=0"
       "report|bench_ddp --mode ddp $mlp|-x XLAUNCH_REPORT=1 -x XLAUNCH_STATUS_DIR=$STATUS")
declare -A v
for ((r = 0; r < ROUNDS; r++)); do
  for c in "${cases[@]}"; do
    IFS='|' read -r name cmd extra <<<"$c"
    for side in old new; do
      b=$OLD; [ "$side" = new ] && b=$NEW
      # shellcheck disable=SC2086  # cmd and extra are word lists
      out=$("${MPIRUN[@]}" --bind-to none -np 2 $extra "$b/scripts/bench/"$cmd)
      v[$name.$side]+="$(field steps_per_s "$out") "
    done
  done
done
for c in "${cases[@]}"; do
  name=${c%%|*}
  # shellcheck disable=SC2086
  o=$(median ${v[$name.old]}) n=$(median ${v[$name.new]})
  awk -v c="$name" -v o="$o" -v n="$n" \
    'BEGIN {printf "ab=%s steps_per_s_old=%s steps_per_s_new=%s ratio_new_vs_old=%.3f\n", c, o, n, n / o}'
done
