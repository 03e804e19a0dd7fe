#!/usr/bin/env bash
# The README's test command: installs what is missing (test peers included), builds, and runs the
# whole test suite.
# GPU tests skip, saying so, on machines without a GPU.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
bash "$REPO/scripts/install-deps.sh" --test
bash "$REPO/scripts/build.sh"
cd "$BUILD_DIR"
ctest --output-on-failure -j "${JOBS:-2}" --timeout 600
