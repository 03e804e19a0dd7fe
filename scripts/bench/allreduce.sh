#!/usr/bin/env bash
# The runtime's allreduce against a raw MPI_Allreduce of the same bytes on 2 ranks, 1 KiB to
# 256 MiB, with algorithm and bus bandwidth (nccl-tests' definitions), then the ratio per size.
# Usage: scripts/bench/allreduce.sh [MAX_BYTES]   (BUILD_DIR overrides the build)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_bin scripts/bench/bench_allreduce
out=$("${MPIRUN[@]}" -np 2 "$BUILD_DIR/scripts/bench/bench_allreduce" --max_bytes "${1:-268435456}")
echo "$out"
while read -r bytes; do
  ours=$(grep "system=xlaunch .*bytes=$bytes " <<<"$out" | sed -n 's/.*busbw_gbps=\([^ ]*\).*/\1/p')
  raw=$(grep "system=mpi .*bytes=$bytes " <<<"$out" | sed -n 's/.*busbw_gbps=\([^ ]*\).*/\1/p')
  awk -v n="$bytes" -v a="$ours" -v b="$raw" 'BEGIN {printf "bench=allreduce bytes=%s ratio_vs_mpi=%.2f\n", n, a / b}'
done < <(sed -n 's/.*system=mpi .*bytes=\([0-9]*\) .*/\1/p' <<<"$out")
