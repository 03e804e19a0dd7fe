#!/usr/bin/env bash
# Batched augmentation (docs/data-loading.md#augmentation-on-the-device): samples per second of the
# guide's pipeline (ColorJitter(0.4, 0.4, 0.4, 0.1), RandomAffine(degrees=15, translate=(0.1, 0.1),
# scale=(0.9, 1.1), shear=5), RandomPerspective(0.5), all p = 1; float32 images on the CPU) in
# xlaunch's augment::Sequential (bench_augment, C++), in Kornia's AugmentationSequential on the same
# batch, and in torchvision's per-sample transforms (v2) in a DataLoader (peers/augment_peers.py).
# xlaunch and Kornia run on THREADS torch threads (default: the cores here), torchvision's
# DataLoader on THREADS workers of one thread each. Kornia is also run on one thread, and its
# figure is the better of the two: its many small ops each split over THREADS OpenMP threads, and
# on a machine whose cores are shared with other work that can be several times slower than one
# thread (measured: 30.7 against 147 samples/s at 224 x 224 with two threads on two busy cores). Alternating rounds in one run, medians of the
# rounds, for 128 x 3 x 32 x 32 and 32 x 3 x 224 x 224 batches (SIZES: batch:size pairs).
# With PER_TRANSFORM=1 (the default) each transform is also timed alone in each system, one more
# line per transform: where the time goes.
# Usage: scripts/bench/augment.sh [ROUNDS]   (BUILD_DIR, PEERS, THREADS, BENCH_SECONDS, SIZES,
#        PER_TRANSFORM override). The peers come from scripts/install-deps.sh --bench (kornia, torchvision).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
THREADS="${THREADS:-$(nproc)}"
SECONDS_PER="${BENCH_SECONDS:-2}"
SIZES="${SIZES:-128:32 32:224}"
PER_TRANSFORM="${PER_TRANSFORM:-1}"
need_bin scripts/bench/bench_augment
BIN="$BUILD_DIR/scripts/bench/bench_augment"
PY="${PEER_PYTHON:-python3}"
"$PY" -c 'import kornia, torchvision' 2>/dev/null ||
  { echo "augment.sh: the peers are missing: run scripts/install-deps.sh --bench" >&2; exit 2; }
TRANSFORMS="ColorJitter RandomAffine RandomPerspective"
extra=()
[ "$PER_TRANSFORM" = 1 ] && extra=(--per_transform)

# collect SYSTEM OUTPUT: appends each line's samples/s to sps[SYSTEM] (the pipeline) and
# sps[SYSTEM_TRANSFORM] (a transform alone).
collect() {
  local line t
  while read -r line; do
    t=$(field transform "$line")
    sps[$1${t:+_$t}]+="$(sed -n 's/.*samples_per_s=\([^[:space:]]*\).*/\1/p' <<<"$line") "
  done <<<"$2"
}

# best "A1 A2 .." "B1 B2 ..": the larger of the two lists' medians.
best() {
  # shellcheck disable=SC2086
  local a b
  a=$(median $1) b=$(median $2)
  awk -v a="$a" -v b="$b" 'BEGIN {print (a > b) ? a : b}'
}

for pair in $SIZES; do
  batch=${pair%%:*} size=${pair##*:}
  declare -A sps=()
  for ((r = 0; r < ROUNDS; r++)); do
    collect x "$("$BIN" --batch "$batch" --size "$size" --threads "$THREADS" --seconds "$SECONDS_PER" "${extra[@]}")"
    for run in kornia:"$THREADS" kornia1:1 torchvision:"$THREADS"; do
      collect "${run%%:*}" "$("$PY" -W ignore "$PEERS/augment_peers.py" --system "$(sed 's/1$//' <<<"${run%%:*}")" \
                              --batch "$batch" --size "$size" --threads "${run##*:}" --seconds "$SECONDS_PER" "${extra[@]}")"
    done
  done
  # shellcheck disable=SC2086
  x=$(median ${sps[x]}) k=$(best "${sps[kornia]}" "${sps[kornia1]}") t=$(median ${sps[torchvision]})
  echo "bench=augment batch=$batch size=$size xlaunch_samples_per_s=$x kornia_samples_per_s=$k" \
       "torchvision_samples_per_s=$t ratio_vs_kornia=$(ratio "$x" "$k") ratio_vs_torchvision=$(ratio "$x" "$t")"
  if [ "$PER_TRANSFORM" = 1 ]; then
    for name in $TRANSFORMS; do
      # shellcheck disable=SC2086
      x=$(median ${sps[x_$name]}) k=$(best "${sps[kornia_$name]}" "${sps[kornia1_$name]}")
      # shellcheck disable=SC2086
      t=$(median ${sps[torchvision_$name]})
      echo "bench=augment_transform batch=$batch size=$size transform=$name xlaunch_samples_per_s=$x" \
           "kornia_samples_per_s=$k torchvision_samples_per_s=$t ratio_vs_kornia=$(ratio "$x" "$k")" \
           "ratio_vs_torchvision=$(ratio "$x" "$t")"
    done
  fi
  unset sps
done
