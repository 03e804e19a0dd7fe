#!/usr/bin/env bash
# The MPI communicator's reduce-scatter algorithms (MPI_Reduce_scatter_block and the ring) side by
# side on 2, 3 and 4 ranks of this machine, input sizes 4 KiB to 64 MiB: one line per world and
# size, then the ring's speed relative to the block's. What kRingReduceScatterChunkBytes in
# runtime/src/comm/mpi_reduce_scatter.h was chosen from.
# Usage: scripts/bench/reduce_scatter.sh [MAX_BYTES] [WORLDS...]   (BUILD_DIR overrides the build)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_bin scripts/bench/bench_reduce_scatter
max="${1:-67108864}"
shift || true
worlds=("${@:-2 3 4}")
for w in ${worlds[@]}; do
  out=$("${MPIRUN[@]}" -np "$w" "$BUILD_DIR/scripts/bench/bench_reduce_scatter" --max_bytes "$max")
  echo "$out"
  while read -r line; do
    echo "bench=reduce_scatter world=$w bytes=$(field bytes "$line") ring_vs_block=$(ratio "$(field ring_gbps "$line")" \
         "$(field block_gbps "$line")")"
  done <<<"$out"
done
