#!/usr/bin/env bash
# Data loading benchmark: the README example's dataset (Fashion-MNIST's training images from the
# IDX files of Debian's dataset-fashion-mnist, each sample scaled to float in [0, 1]) through
# xlaunch's loader (0, 1, 2 workers; bench_loader) and through torch.utils.data.DataLoader (0, 2
# workers; peers/torch_loader_fmnist.py, the same per-sample work in __getitem__), shuffled batches,
# alternating rounds in one invocation. Both sides run one untimed epoch first (the DataLoader's
# workers are persistent, so their start-up is not timed), then EPOCHS timed ones. Prints one line
# per configuration (median of the rounds):
#   bench=loader system=<xlaunch|torch-dataloader> workers=K samples_per_s=X us_per_batch=T dataset_us_per_batch=W
# (dataset_us_per_batch: the dataset's own work for a batch, get() / __getitem__ in a plain loop),
# then the best of each side, their ratio and each loader's overhead per batch with 0 workers
# (us_per_batch less dataset_us_per_batch, both on one thread):
#   bench=loader xlaunch_samples_per_s=X torch_samples_per_s=P ratio_best=R xlaunch_overhead_us_per_batch=O torch_overhead_us_per_batch=Q
# then the device path (or that it skipped). A side that prints no figure fails the run.
# Builds nothing: build bench_loader first.
#
#   BUILD_DIR=./build   the build directory holding scripts/bench/bench_loader
#   PEER_PYTHON=python3 a python3 that can import torch
#   PEERS=scripts/bench/peers  the folder holding torch_loader_fmnist.py
#   ROUNDS=3 SAMPLES=20000 BATCH=64 EPOCHS=1 DATA_DIR=/usr/share/datasets/fashion-mnist
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
cd "$(dirname "$0")/../.."
source scripts/bench/common.sh

PEER_PYTHON=${PEER_PYTHON:-python3}
ROUNDS=${ROUNDS:-3}
SAMPLES=${SAMPLES:-20000}
BATCH=${BATCH:-64}
EPOCHS=${EPOCHS:-1}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
BIN=$BUILD_DIR/scripts/bench/bench_loader
PEER=$PEERS/torch_loader_fmnist.py

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
ARGS=(--samples "$SAMPLES" --batch "$BATCH" --epochs "$EPOCHS" --data_dir "$DATA_DIR")

run_config() {  # system workers: appends "system workers samples_per_s us_per_batch dataset_us_per_batch"
  local out f vals=()
  if [[ $1 == xlaunch ]]; then out=$("$BIN" --workers "$2" "${ARGS[@]}" 2>&1) || true
  else out=$("$PEER_PYTHON" -W ignore "$PEER" --workers "$2" "${ARGS[@]}" 2>&1) || true; fi
  for f in samples_per_s us_per_batch dataset_us_per_batch; do vals+=("$(figure "$f" "$1 workers=$2" "$out")"); done
  echo "$1 $2 ${vals[*]}" >>"$results"
}

configs=("xlaunch 0" "torch-dataloader 0" "xlaunch 1" "xlaunch 2" "torch-dataloader 2")
for ((round = 1; round <= ROUNDS; ++round)); do
  # Alternate the order between rounds so neither system always runs on a warmer machine.
  if ((round % 2)); then order=("${configs[@]}"); else order=(); for ((i = ${#configs[@]} - 1; i >= 0; --i)); do order+=("${configs[$i]}"); done; fi
  for c in "${order[@]}"; do run_config $c; done
done

config_median() {  # system workers column
  # shellcheck disable=SC2046
  median $(awk -v s="$1" -v w="$2" -v c="$3" '$1 == s && $2 == w { print $c }' "$results")
}

best_x=0 best_p=0
declare -A overhead=()
for c in "${configs[@]}"; do
  set -- $c
  m=$(config_median "$1" "$2" 3) t=$(config_median "$1" "$2" 4) d=$(config_median "$1" "$2" 5)
  echo "bench=loader system=$1 workers=$2 samples_per_s=$m us_per_batch=$t dataset_us_per_batch=$d"
  [[ $2 == 0 ]] && overhead[$1]=$(awk -v t="$t" -v d="$d" 'BEGIN { printf "%.1f", t - d }')
  if [[ $1 == xlaunch ]]; then best_x=$(awk -v a="$best_x" -v b="$m" 'BEGIN { print (b > a) ? b : a }')
  else best_p=$(awk -v a="$best_p" -v b="$m" 'BEGIN { print (b > a) ? b : a }'); fi
done
echo "bench=loader xlaunch_samples_per_s=$best_x torch_samples_per_s=$best_p ratio_best=$(ratio "$best_x" "$best_p")" \
     "xlaunch_overhead_us_per_batch=${overhead[xlaunch]} torch_overhead_us_per_batch=${overhead[torch-dataloader]}"

"$BIN" --device-path --workers "${DEVICE_WORKERS:-4}" --samples "$SAMPLES" --batch "$BATCH"
