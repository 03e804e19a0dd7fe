#!/usr/bin/env bash
# Configures and builds xlaunch (Release with debug info) into BUILD_DIR (default ./build), with
# ccache and 2 jobs by default. Extra arguments go to cmake's configure step, e.g.
#   scripts/build.sh -DXLAUNCH_WITH_CUDA=OFF
# BUILD_TARGETS (space-separated) builds only those targets and what they need, e.g.
#   BUILD_TARGETS="xlaunch train_fashion_mnist" scripts/build.sh
# (unset: everything, the tests included).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
JOBS="${JOBS:-2}"
# ccache keyed on paths relative to the checkout, so another clone of the repo reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$REPO}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
start=$(date +%s)
cmake -S "$REPO" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@"
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
echo "[build] done in $(( $(date +%s) - start )) s: $BUILD_DIR"
