#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, writes a default config when there is
# none (non-interactively, like `accelerate config default`), and trains the Fashion-MNIST example
# on 2 ranks. Extra arguments go to the example (e.g. --epochs 1).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
bash "$REPO/scripts/install-deps.sh"
# Only what this job runs: the launcher, the runtime and the example (scripts/test.sh builds the
# rest, the tests included).
BUILD_TARGETS="xlaunch train_fashion_mnist" bash "$REPO/scripts/build.sh"
XLAUNCH="$BUILD_DIR/launcher/xlaunch"
CONFIG="${XLAUNCH_CONFIG_FILE:-${XDG_CONFIG_HOME:-$HOME/.config}/xlaunch/default_config.yaml}"
if [ ! -f "$CONFIG" ]; then
  "$XLAUNCH" config default --num_processes 2 --config_file "$CONFIG"
fi
# Fashion-MNIST (Debian's dataset-fashion-mnist), a small CNN, 3 epochs on 2 ranks: about 90% test
# accuracy in a minute or two on 2 cores. Checkpoints go to ./runs/fashion_mnist/checkpoints, the
# weights (safetensors) to ./runs/fashion_mnist/model, the curves (TensorBoard event files) to
# ./runs/fashion_mnist/fashion_mnist: `tensorboard --logdir runs/fashion_mnist`.
"$XLAUNCH" run --config_file "$CONFIG" -n 2 "$BUILD_DIR/examples/train_fashion_mnist" --epochs 3 "$@"
