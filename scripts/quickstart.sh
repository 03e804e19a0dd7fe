#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, writes a default config when there is
# none (non-interactively, like `accelerate config default`), and runs the example on 2 ranks.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
bash "$REPO/scripts/install-deps.sh"
bash "$REPO/scripts/build.sh"
XLAUNCH="$BUILD_DIR/launcher/xlaunch"
CONFIG="${XLAUNCH_CONFIG_FILE:-${XDG_CONFIG_HOME:-$HOME/.config}/xlaunch/default_config.yaml}"
if [ ! -f "$CONFIG" ]; then
  "$XLAUNCH" config default --num_processes 2 --config_file "$CONFIG"
fi
"$XLAUNCH" run --config_file "$CONFIG" -n 2 "$BUILD_DIR/examples/hello_allreduce"
