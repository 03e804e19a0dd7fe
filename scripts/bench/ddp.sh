#!/usr/bin/env bash
# 2-rank training steps/s of the benchmark MLP for xlaunch DDP, xlaunch without gradient sync
# (the compute-only bound), and PyTorch DDP over gloo (the peer), alternating rounds in one run.
# Usage: scripts/bench/ddp.sh [ROUNDS]   (BUILD_DIR, PEERS, PEER_PYTHON, STEPS override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
STEPS="${STEPS:-60}"
need_bin scripts/bench/bench_ddp
BIN="$BUILD_DIR/scripts/bench/bench_ddp"

run_system() {  # system hidden batch -> steps_per_s
  local out
  case "$1" in
    xlaunch-ddp)   out=$("${MPIRUN[@]}" -np 2 "$BIN" --mode ddp --hidden "$2" --batch "$3" --steps "$STEPS") ;;
    xlaunch-local) out=$("${MPIRUN[@]}" -np 2 "$BIN" --mode local --hidden "$2" --batch "$3" --steps "$STEPS") ;;
    torch-ddp)     out=$("${MPIRUN[@]}" -np 2 "$PEERS/mpi_torch_env.sh" python3 "$PEERS/torch_ddp_mlp.py" \
                         --mode ddp --hidden "$2" --batch "$3" --steps "$STEPS" 2>/dev/null) ;;
  esac
  field steps_per_s "$out"
}

for cfg in "128 32" "1024 64" "2048 32"; do
  read -r H B <<<"$cfg"
  declare -A results=()
  for ((r = 0; r < ROUNDS; r++)); do
    for sys in xlaunch-ddp xlaunch-local torch-ddp; do
      results[$sys]+="$(run_system "$sys" "$H" "$B") "
    done
  done
  declare -A med=()
  for sys in xlaunch-ddp xlaunch-local torch-ddp; do
    # shellcheck disable=SC2086
    med[$sys]=$(median ${results[$sys]})
    echo "bench=ddp system=$sys hidden=$H batch=$B world=2 steps_per_s=${med[$sys]}"
  done
  awk -v h="$H" -v b="$B" -v d="${med[xlaunch-ddp]}" -v t="${med[torch-ddp]}" -v l="${med[xlaunch-local]}" \
    'BEGIN {printf "bench=ddp hidden=%s batch=%s ratio_vs_torch=%.2f ratio_vs_local=%.2f\n", h, b, d / t, d / l}'
  unset results med
done
