#!/usr/bin/env bash
# DDP training steps/s of the benchmark MLP (bench_ddp, as in ddp.sh) on 2 simulated machines x 1
# rank whose links are limited to 1 Gbit/s (scripts/cluster/sim.sh, tbf), through `xlaunch run`
# with an ordinary hostfile, for each communication hook (ddp.comm_hook). One line per hidden size
# and hook, the hooks alternating within each round, medians over the rounds:
#   bench=multimachine link=1gbit hidden=H hook=X steps_per_s=S ratio_vs_none=R
# PowerSGD runs with ddp.powersgd_rank POWERSGD_RANK (4) from the first step (powersgd_start_step
# 0): the steady state, which a real run reaches after its start step.
# Usage: sudo scripts/bench/multimachine.sh [ROUNDS]
#        (BUILD_DIR, STEPS, BATCH, RATE, HOOKS, HIDDENS, POWERSGD_RANK override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
STEPS="${STEPS:-30}"
BATCH="${BATCH:-64}"
RATE="${RATE:-1gbit}"
HOOKS="${HOOKS:-none bf16 powersgd}"
HIDDENS="${HIDDENS:-1024 2048}"
POWERSGD_RANK="${POWERSGD_RANK:-4}"
need_bin scripts/bench/bench_ddp
need_bin launcher/xlaunch
BIN="$BUILD_DIR/scripts/bench/bench_ddp"
sim_machines mm 2 1
for hook in $HOOKS; do hook_config "$hook" 0; done

run_hook() {  # hook hidden -> steps_per_s
  local out
  out=$("$BUILD_DIR/launcher/xlaunch" run --config_file "$work/$1.yaml" "$BIN" --mode ddp --hidden "$2" \
        --batch "$BATCH" --steps "$STEPS" 2>"$work/err") || { cat "$work/err" >&2; return 1; }
  field steps_per_s "$out"
}

for H in $HIDDENS; do
  declare -A results=()
  for ((r = 0; r < ROUNDS; r++)); do
    for hook in $HOOKS; do results[$hook]+="$(run_hook "$hook" "$H") "; done
  done
  # shellcheck disable=SC2086
  none=$(median ${results[none]})
  for hook in $HOOKS; do
    # shellcheck disable=SC2086
    s=$(median ${results[$hook]})
    echo "bench=multimachine link=$RATE hidden=$H hook=$hook steps_per_s=$s ratio_vs_none=$(ratio "$s" "$none")"
  done
  unset results
done
"$SIM" down >/dev/null; flock -u 9; bash "$REPO/scripts/bench/hier.sh" "$ROUNDS"  # 2 x 2 machines of its own, under the same lock
