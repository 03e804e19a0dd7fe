#!/usr/bin/env bash
# Every GPU check in one go, for a machine with a CUDA GPU (a lent GPU machine, or yours):
#   scripts/gpu/run_all.sh [OUT_DIR]
# Builds xlaunch against that machine's LibTorch (XLAUNCH_PYTHON, else /opt/torch/.venv/bin/python3,
# else python3), then runs the tests that skip without a GPU (NCCL communicator and DDP on CUDA,
# the loader's pinned/device path, the fused unscale kernel and fp16/bf16 training) and the GPU
# benchmarks, and writes a log per part into OUT_DIR (default: $OUT, else ./gpu-results).
# Needs mpirun (Open MPI) on PATH. Exit status: nonzero when any part failed.
# The lent GPU machines have no Open MPI, yaml-cpp or CLI11 and no registry: there, use the bundle
# instead (scripts/gpu/bundle.sh here, then its run.sh there; docs/gpu.md).
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT_DIR="${1:-${OUT:-$REPO/gpu-results}}"
mkdir -p "$OUT_DIR"
PY="${XLAUNCH_PYTHON:-}"
[ -z "$PY" ] && [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
PY="${PY:-python3}"
export BUILD_DIR="${BUILD_DIR:-$REPO/build-gpu}" JOBS="${JOBS:-$(nproc)}"
status=0
command -v mpirun >/dev/null || { echo "run_all: mpirun not found: install openmpi-bin (or unpack its .debs)" | tee "$OUT_DIR/summary.txt"; exit 2; }
nvidia-smi > "$OUT_DIR/nvidia-smi.txt" 2>&1

prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)') || { echo "run_all: $PY has no torch"; exit 2; }
cmake -S "$REPO" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DXLAUNCH_WITH_CUDA=ON -DXLAUNCH_WITH_NCCL=ON > "$OUT_DIR/configure.log" 2>&1 &&
  cmake --build "$BUILD_DIR" -j "$JOBS" > "$OUT_DIR/build.log" 2>&1 || { echo "run_all: build failed"; tail -30 "$OUT_DIR/build.log"; exit 1; }

part() {  # name command...: runs, logs, reports
  local name=$1; shift
  if "$@" > "$OUT_DIR/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name"; status=1; fi
  grep -E '^bench=|SKIPPED|FAILED' "$OUT_DIR/$name.log" | head -40
}
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
part nccl mpirun "${root[@]}" -np 1 "$BUILD_DIR/tests/runtime/nccl_test"
part loader_cuda "$BUILD_DIR/tests/data/loader_test" --gtest_filter='*Cuda*:*cuda*:*Pinned*:*Device*'
part amp bash "$REPO/scripts/gpu/amp_checks.sh"
part bench_loader bash "$REPO/scripts/bench/loader.sh"
part ctest_all bash -c "cd '$BUILD_DIR' && ctest --output-on-failure -j4 --timeout 600"
echo "status=$status" | tee -a "$OUT_DIR/summary.txt"
exit $status
