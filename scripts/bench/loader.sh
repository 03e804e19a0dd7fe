#!/usr/bin/env bash
# Data loading benchmark: the augmentation pipeline of peers/torch_loader.py through
# xlaunch's loader (0, 1, 2 workers) and through torch.utils.data.DataLoader (0, 2 workers), in
# alternating rounds, in one invocation. Prints one line per configuration (median of the rounds):
#   bench=loader system=<xlaunch|torch-dataloader> workers=K samples_per_s=X
# then   bench=loader ratio_best=R   (best xlaunch over best peer), then the device path (or that
# it skipped). Builds nothing: build bench_loader first.
#
#   BUILD_DIR=./build   the build directory holding scripts/bench/bench_loader
#   PEER_PYTHON=python3 a python3 that can import torch
#   PEERS=scripts/bench/peers  the folder holding torch_loader.py
#   ROUNDS=3 SAMPLES=20000 BATCH=64
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/bench/common.sh

PEER_PYTHON=${PEER_PYTHON:-python3}
ROUNDS=${ROUNDS:-3}
SAMPLES=${SAMPLES:-20000}
BATCH=${BATCH:-64}
BIN=$BUILD_DIR/scripts/bench/bench_loader
PEER=$PEERS/torch_loader.py

if [[ ! -x $BIN ]]; then
  echo "loader.sh: $BIN not found; build it first: cmake --build $BUILD_DIR --target bench_loader" >&2
  exit 2
fi
if [[ ! -f $PEER ]]; then
  echo "loader.sh: the peer $PEER is missing (it ships in scripts/bench/peers; check PEERS)" >&2
  exit 2
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT

rate() { sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p'; }

run_config() {  # system workers
  local x
  if [[ $1 == xlaunch ]]; then
    x=$("$BIN" --workers "$2" --samples "$SAMPLES" --batch "$BATCH" 2>/dev/null | rate)
  else
    x=$("$PEER_PYTHON" "$PEER" --workers "$2" --samples "$SAMPLES" --batch "$BATCH" 2>/dev/null | rate)
  fi
  [[ -n $x ]] || { echo "loader.sh: $1 workers=$2 printed no samples_per_s" >&2; exit 1; }
  echo "$1 $2 $x" >>"$results"
}

configs=("xlaunch 0" "torch-dataloader 0" "xlaunch 1" "xlaunch 2" "torch-dataloader 2")
for ((round = 1; round <= ROUNDS; ++round)); do
  # Alternate the order between rounds so neither system always runs on a warmer machine.
  if ((round % 2)); then order=("${configs[@]}"); else order=(); for ((i = ${#configs[@]} - 1; i >= 0; --i)); do order+=("${configs[$i]}"); done; fi
  for c in "${order[@]}"; do run_config $c; done
done

config_median() {  # system workers
  awk -v s="$1" -v w="$2" '$1 == s && $2 == w { print $3 }' "$results" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

best_x=0
best_p=0
for c in "${configs[@]}"; do
  set -- $c
  m=$(config_median "$1" "$2")
  echo "bench=loader system=$1 workers=$2 samples_per_s=$m"
  if [[ $1 == xlaunch ]]; then best_x=$(awk -v a="$best_x" -v b="$m" 'BEGIN { print (b > a) ? b : a }')
  else best_p=$(awk -v a="$best_p" -v b="$m" 'BEGIN { print (b > a) ? b : a }'); fi
done
awk -v x="$best_x" -v p="$best_p" 'BEGIN { printf "bench=loader ratio_best=%.2f\n", x / p }'

"$BIN" --device-path --workers "${DEVICE_WORKERS:-4}" --samples "$SAMPLES" --batch "$BATCH"
