#!/usr/bin/env bash
# Mixed-precision benchmarks (issue 4). Run from the repository root after building:
#   BUILD_DIR=./build scripts/bench/amp.sh
# 1. The benchmark MLP (784-H-H-10) on the CPU in fp32 and bf16, rounds alternating:
#      bench=amp device=cpu precision=<fp32|bf16> hidden=H batch=B steps_per_s=X
#    (bf16 on a CPU is only faster with AVX512-BF16 / AMX matmul kernels; otherwise it can be slower.)
# 2. Where a GPU is present, the fused unscale on ResNet-50's gradients against a D2D copy and
#    against PyTorch's own op, plus the MLP on the GPU in fp32, bf16 and fp16 (GradScaler):
#      bench=amp_unscale device=cuda bytes=N gbps=X copy_gbps=Y torch_gbps=Z
#    Without a GPU it says that it skipped.
# Knobs: HIDDEN (default "1024"; a list runs each), BATCH (64), STEPS per round (30), ROUNDS (7).
set -euo pipefail
BUILD_DIR=${BUILD_DIR:-./build}
HIDDEN=${HIDDEN:-1024}
BATCH=${BATCH:-64}
STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-7}
bench="$BUILD_DIR/scripts/bench"
for exe in bench_amp bench_amp_unscale; do
  if [[ ! -x "$bench/$exe" ]]; then
    echo "amp.sh: $bench/$exe not found; build it first: cmake --build $BUILD_DIR --target $exe" >&2
    exit 1
  fi
done

echo "# host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
     "bf16 matmul units: $(grep -o -m1 -w -e amx_bf16 -e avx512_bf16 /proc/cpuinfo | sort -u | xargs || true)"
for h in $HIDDEN; do
  "$bench/bench_amp" --device cpu --hidden "$h" --batch "$BATCH" --steps "$STEPS" --rounds "$ROUNDS" \
    --precisions fp32,bf16
done
"$bench/bench_amp_unscale" --devices cpu,cuda --iters 200 --cpu_iters 10 --rounds "$ROUNDS"
if "$bench/bench_amp" --device cuda --hidden 16 --batch 2 --steps 1 --rounds 1 --precisions fp32 | grep -q skipped; then
  echo "bench=amp device=cuda skipped: no CUDA device"
else
  for h in $HIDDEN 4096; do
    "$bench/bench_amp" --device cuda --hidden "$h" --batch 256 --steps 100 --rounds "$ROUNDS" \
      --precisions fp32,bf16,fp16
  done
fi
