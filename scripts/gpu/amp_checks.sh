#!/usr/bin/env bash
# GPU checks for mixed precision (issue 4), meant to be called from the master GPU-check script
# on a machine with a CUDA GPU, after configuring the build:
#   BUILD_DIR=./build scripts/gpu/amp_checks.sh
# 1. builds the amp targets (a no-op when they are current);
# 2. runs the CUDA tests: the unscale kernel against its CPU reference (fp32/fp16/bf16, inf and
#    NaN in various tensors and positions, misaligned tensors, more tensors than one launch
#    holds), unscale_and_check_ against at::_amp_foreach_non_finite_check_and_unscale_, and fp16
#    (GradScaler) / bf16 MLP training on the GPU against fp32. A skip counts as a failure here:
#    on a GPU machine these tests must run;
# 3. runs the benchmarks: the fused unscale vs a D2D copy vs torch's op on ResNet-50's
#    gradients (target: >= 0.9 x copy, >= 1.0 x torch), and the MLP on the GPU.
# Exit status: nonzero when a test fails or is skipped, or the benchmark's own check fails.
# Missing the bandwidth target is reported, not fatal.
set -uo pipefail
BUILD_DIR=${BUILD_DIR:-./build}
JOBS=${JOBS:-$(nproc)}
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'
cmake --build "$BUILD_DIR" -j "$JOBS" --target amp_unscale_test grad_scaler_test autocast_test \
  bench_amp bench_amp_unscale || exit 1

run_cuda_tests() {  # name filter
  local out
  out=$("$BUILD_DIR/tests/amp/$1" --gtest_filter="$2" 2>&1)
  local rc=$?
  echo "$out" | grep -E '^\[  (PASSED|FAILED|SKIPPED) |^cuda mean loss|Failure|Expected|Which is' | sed "s/^/[$1] /"
  if [[ $rc -ne 0 ]]; then echo "amp_checks: $1 FAILED"; status=1; fi
  if echo "$out" | grep -q '^\[  SKIPPED \]'; then echo "amp_checks: $1 skipped CUDA tests on a GPU machine"; status=1; fi
}
run_cuda_tests amp_unscale_test 'AmpUnscaleCuda.*'
run_cuda_tests grad_scaler_test 'UnscaleAndCheck.Cuda*'
run_cuda_tests autocast_test 'AutocastTraining.Cuda*'

bench="$BUILD_DIR/scripts/bench"
line=$("$bench/bench_amp_unscale" --devices cuda --iters 200 --rounds 7) || status=1
echo "$line"
ratio=$(echo "$line" | sed -n 's/.*ratio xlaunch\/copy=\([0-9.]*\) xlaunch\/torch=\([0-9.]*\).*/\1 \2/p')
if [[ -n "$ratio" ]]; then
  read -r vs_copy vs_torch <<<"$ratio"
  awk -v c="$vs_copy" -v t="$vs_torch" 'BEGIN {
    printf "amp_checks: fused unscale at %.3f of copy bandwidth (target >= 0.9): %s; %.3f of torch (target >= 1.0): %s\n",
           c, (c >= 0.9 ? "met" : "MISSED"), t, (t >= 1.0 ? "met" : "MISSED") }'
fi
for h in 1024 4096; do
  "$bench/bench_amp" --device cuda --hidden "$h" --batch 256 --steps 100 --rounds 5 --precisions fp32,bf16,fp16 || status=1
done
exit $status
