#!/usr/bin/env bash
# Sharded data parallelism (docs/memory.md): training steps/s, optimizer state per rank and peak
# resident memory of the benchmark MLP with AdamW, for xlaunch at ddp.zero_stage 0, 1 and 2 and
# PyTorch's ZeroRedundancyOptimizer over gloo (peers/torch_zero_mlp.py, the model in DDP),
# alternating rounds in one run; medians of the rounds. 2 ranks at H=1024 and H=2048 (speed), and
# 4 ranks at H=4096 (memory, MEM_STEPS steps).
# Usage: scripts/bench/zero.sh [ROUNDS]   (BUILD_DIR, PEERS, PEER_PYTHON, STEPS, MEM_STEPS override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
STEPS="${STEPS:-40}"
MEM_STEPS="${MEM_STEPS:-5}"
need_bin scripts/bench/bench_zero
BIN="$BUILD_DIR/scripts/bench/bench_zero"
SYSTEMS=(stage0 stage1 stage2 torch-zero)

run_system() {  # system world hidden batch steps -> the program's line
  case "$1" in
    stage*)     "${MPIRUN[@]}" -np "$2" "$BIN" --stage "${1#stage}" --hidden "$3" --batch "$4" --steps "$5" ;;
    torch-zero) "${MPIRUN[@]}" -np "$2" "$PEERS/mpi_torch_env.sh" python3 "$PEERS/torch_zero_mlp.py" \
                  --hidden "$3" --batch "$4" --steps "$5" 2>/dev/null ;;
  esac
}

for cfg in "2 1024 64 $STEPS" "2 2048 32 $STEPS" "4 4096 32 $MEM_STEPS"; do
  read -r W H B N <<<"$cfg"
  declare -A sps=() state=() rss=()
  for ((r = 0; r < ROUNDS; r++)); do
    for sys in "${SYSTEMS[@]}"; do
      out=$(run_system "$sys" "$W" "$H" "$B" "$N")
      sps[$sys]+="$(field steps_per_s "$out") "
      state[$sys]+="$(field opt_state_mb_per_rank "$out") "
      rss[$sys]+="$(field peak_rss_mb "$out") "
    done
  done
  declare -A med=()
  for sys in "${SYSTEMS[@]}"; do
    # shellcheck disable=SC2086
    med[$sys]="$(median ${sps[$sys]}) $(median ${state[$sys]}) $(median ${rss[$sys]})"
  done
  read -r s0 _ _ <<<"${med[stage0]}"
  read -r tz tz_state tz_rss <<<"${med[torch-zero]}"
  for sys in stage0 stage1 stage2; do
    read -r s st rs <<<"${med[$sys]}"
    echo "bench=zero stage=${sys#stage} hidden=$H world=$W opt_state_mb_per_rank=$st peak_rss_mb=$rs steps_per_s=$s" \
         "ratio_vs_stage0=$(ratio "$s" "$s0") ratio_vs_torch_zero=$(ratio "$s" "$tz")"
  done
  echo "bench=zero system=torch-zero hidden=$H world=$W opt_state_mb_per_rank=$tz_state peak_rss_mb=$tz_rss" \
       "steps_per_s=$tz ratio_vs_stage0=$(ratio "$tz" "$s0")"
  unset sps state rss med
done
