#!/usr/bin/env bash
# Accuracy under each communication hook: examples/train_fashion_mnist (3 epochs, the README's job)
# on 2 simulated machines x 1 rank with a 1 Gbit/s link (scripts/cluster/sim.sh), once per hook.
# One line per hook, test accuracy in points and its difference from hook none:
#   bench=hook_accuracy machines=2 link=1gbit hook=X epochs=3 test_acc=A points_vs_none=D
# PowerSGD: rank POWERSGD_RANK (4), compressing after POWERSGD_START (100) synced steps of the
# run's ~1400 (PyTorch's default start, 1000, would leave only the last third compressed).
# Usage: sudo scripts/bench/hook_accuracy.sh   (BUILD_DIR, RATE, HOOKS, EPOCHS, POWERSGD_* override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
RATE="${RATE:-1gbit}"
HOOKS="${HOOKS:-none bf16 powersgd}"
EPOCHS="${EPOCHS:-3}"
POWERSGD_RANK="${POWERSGD_RANK:-4}"
POWERSGD_START="${POWERSGD_START:-100}"
need_bin examples/train_fashion_mnist
need_bin launcher/xlaunch
sim_machines acc 2 1

none=""
for hook in $HOOKS; do
  hook_config "$hook" "$POWERSGD_START"
  out=$("$BUILD_DIR/launcher/xlaunch" run --config_file "$work/$hook.yaml" "$BUILD_DIR/examples/train_fashion_mnist" \
        --epochs "$EPOCHS" --project_dir "$work/ckpt-$hook" 2>"$work/err") || { cat "$work/err" >&2; exit 1; }
  last=$(grep "epoch=$EPOCHS " <<<"$out" | tail -n1)
  acc=$(awk -v a="$(field test_acc "$last")" 'BEGIN {printf "%.2f", 100 * a}')
  [ -n "$none" ] || none=$acc
  echo "bench=hook_accuracy machines=2 link=$RATE hook=$hook epochs=$EPOCHS test_acc=$acc" \
       "points_vs_none=$(awk -v a="$acc" -v b="$none" 'BEGIN {printf "%+.2f", a - b}')"
done
