#!/usr/bin/env bash
# DDP training steps/s of the benchmark MLP (bench_ddp, as in ddp.sh) on 2 simulated machines x 1
# rank whose links are limited to 1 Gbit/s (scripts/cluster/sim.sh, tbf), through `xlaunch run`
# with an ordinary hostfile. One line per hidden size:
#   bench=multimachine link=1gbit hidden=H hook=none steps_per_s=S ratio_vs_none=1.00
# Skeleton: only hook=none so far (gradient compression hooks will be compared against it).
# Usage: sudo scripts/bench/multimachine.sh [ROUNDS]   (BUILD_DIR, STEPS, BATCH, RATE override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
STEPS="${STEPS:-30}"
BATCH="${BATCH:-64}"
RATE="${RATE:-1gbit}"
need_bin scripts/bench/bench_ddp
need_bin launcher/xlaunch
BIN="$BUILD_DIR/scripts/bench/bench_ddp"
SIM="$REPO/scripts/cluster/sim.sh"
"$SIM" check || { echo "multimachine.sh: cannot simulate machines here (see above)" >&2; exit 2; }

work=$(mktemp -d /tmp/xlaunch_bench_mm.XXXXXX)
exec 9>/run/xlsim.lock
flock -w 600 9
trap '"$SIM" down >/dev/null; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM HUP
"$SIM" up 2 --rate "$RATE" >&2
eval "$("$SIM" env)"
printf 'sim0 slots=1\nsim1 slots=1\n' >"$work/hosts"
cat >"$work/config.yaml" <<EOF
distributed_type: MULTI_CPU
num_processes: 2
num_machines: 2
mpi:
  hostfile: $work/hosts
EOF

run_hook() {  # hook hidden -> steps_per_s
  local out
  out=$("$BUILD_DIR/launcher/xlaunch" run --config_file "$work/config.yaml" "$BIN" --mode ddp --hidden "$2" \
        --batch "$BATCH" --steps "$STEPS" 2>/dev/null)
  field steps_per_s "$out"
}

for H in 1024 2048; do
  results=""
  for ((r = 0; r < ROUNDS; r++)); do results+="$(run_hook none "$H") "; done
  # shellcheck disable=SC2086
  none=$(median $results)
  echo "bench=multimachine link=$RATE hidden=$H hook=none steps_per_s=$none ratio_vs_none=1.00"
done
"$SIM" down >/dev/null; flock -u 9; bash "$REPO/scripts/bench/hier.sh" "$ROUNDS"  # 2 x 2 machines of its own, under the same lock
