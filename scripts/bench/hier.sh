#!/usr/bin/env bash
# The hierarchical CPU allreduce (cpu_allreduce auto: shared memory inside each machine, MPI between
# their leaders) against a flat MPI allreduce over every rank (cpu_allreduce mpi): DDP training
# steps/s of the benchmark MLP (bench_ddp, as in ddp.sh) on 2 simulated machines x 2 ranks whose
# links are limited to 1 Gbit/s (scripts/cluster/sim.sh, tbf), through `xlaunch run` with an ordinary
# hostfile; rounds alternate between the two, and the median of each counts. Hidden size 3072 by
# default (48 MB of gradients a step: the link, not the 2 shared cores, sets the step time; at 2048
# the ratio is smaller, see docs/benchmarks.md). Prints
#   bench=hier hidden=H link=1gbit flat_steps_per_s=F hier_steps_per_s=S
#   bench=hier machines=2 ranks_per_machine=2 ratio_vs_flat=R
# Usage: sudo scripts/bench/hier.sh [ROUNDS]   (BUILD_DIR, STEPS, BATCH, HIDDEN, RATE override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
STEPS="${STEPS:-10}"
BATCH="${BATCH:-64}"
HIDDEN="${HIDDEN:-3072}"
RATE="${RATE:-1gbit}"
need_bin scripts/bench/bench_ddp
need_bin launcher/xlaunch
BIN="$BUILD_DIR/scripts/bench/bench_ddp"
sim_machines hier 2 2
cat >"$work/config.yaml" <<EOF
distributed_type: MULTI_CPU
num_processes: 4
num_machines: 2
mpi:
  hostfile: $work/hosts
EOF

run_mode() {  # cpu_allreduce -> steps_per_s
  local out
  out=$("$BUILD_DIR/launcher/xlaunch" run --config_file "$work/config.yaml" "$BIN" --mode ddp --hidden "$HIDDEN" \
        --batch "$BATCH" --steps "$STEPS" --warmup 3 --cpu_allreduce "$1" 2>/dev/null)
  field steps_per_s "$out"
}

flat="" hier=""
for ((r = 0; r < ROUNDS; r++)); do
  flat+="$(run_mode mpi) "
  hier+="$(run_mode auto) "
done
# shellcheck disable=SC2086
f=$(median $flat)
# shellcheck disable=SC2086
h=$(median $hier)
echo "bench=hier hidden=$HIDDEN link=$RATE flat_steps_per_s=$f hier_steps_per_s=$h"
echo "bench=hier machines=2 ranks_per_machine=2 ratio_vs_flat=$(ratio "$h" "$f")"
