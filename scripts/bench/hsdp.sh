#!/usr/bin/env bash
# Hybrid sharding (ddp.shard_group machine, FSDP's HYBRID_SHARD; docs/memory.md) against the whole
# job's sharding (FULL_SHARD) at ZeRO stage 3: tokens/s of the GPT of examples/gpt_model.h
# (bench_fsdp, as in fsdp.sh) on 2 simulated machines x 2 ranks whose links are limited to $RATE
# (scripts/cluster/sim.sh, tbf), through `xlaunch run` with an ordinary hostfile; and the bytes that
# crossed between the machines per step, from the counters of machine 0's link (its eth0, in its own
# network namespace: everything it sends or receives goes to or comes from the other machine).
# Both on the hierarchical communicator (cpu_allreduce auto: only each machine's leader crosses the
# network); FULL_SHARD also over flat MPI (cpu_allreduce mpi: every rank crosses it), for reference.
# Rounds alternate between the three; the median of each counts. Prints
#   bench=hsdp machines=2 ranks_per_machine=2 strategy=FULL_SHARD|HYBRID_SHARD inter_machine_mb_per_step=M
#     tokens_per_s=X ratio_vs_full_shard=R transport=hier|mpi
# (R: against FULL_SHARD on the hierarchical communicator) and the bytes of HYBRID_SHARD against each.
# Usage: sudo scripts/bench/hsdp.sh [ROUNDS]   (BUILD_DIR, DIM, LAYERS, HEADS, SEQ, BATCH, STEPS, RATE override)
set -euo pipefail
shopt -s inherit_errexit
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
# A 12.6M-parameter model on 16 tokens per rank: the step is bound by the link, as a GPU's would be;
# with the 2 shared cores of a test host computing 4 ranks' larger batches it is bound by compute,
# and the two strategies tie (docs/benchmarks.md has both).
DIM="${DIM:-512}" LAYERS="${LAYERS:-4}" HEADS="${HEADS:-8}" SEQ="${SEQ:-16}" BATCH="${BATCH:-1}"
STEPS="${STEPS:-10}" RATE="${RATE:-1gbit}"
need_bin scripts/bench/bench_fsdp
need_bin launcher/xlaunch
BIN="$BUILD_DIR/scripts/bench/bench_fsdp"
sim_machines hsdp 2 2
cat >"$work/config.yaml" <<YAML
distributed_type: MULTI_CPU
num_processes: 4
num_machines: 2
mpi:
  hostfile: $work/hosts
YAML

run_group() {  # shard_group cpu_allreduce -> "tokens_per_s link_mb_per_step"
  local out
  out=$("$BUILD_DIR/launcher/xlaunch" run --config_file "$work/config.yaml" "$BIN" --stage 3 --dim "$DIM" \
        --layers "$LAYERS" --heads "$HEADS" --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --warmup 2 \
        --cpu_allreduce "$2" --shard_group "$1" --count_link eth0 2>/dev/null)
  echo "$(field tokens_per_s "$out") $(field link_mb_per_step "$out")"
}

full_tps="" full_mb="" hyb_tps="" hyb_mb="" flat_tps="" flat_mb=""
for ((r = 0; r < ROUNDS; r++)); do
  read -r t m < <(run_group world auto)
  full_tps+="$t " full_mb+="$m "
  read -r t m < <(run_group machine auto)
  hyb_tps+="$t " hyb_mb+="$m "
  read -r t m < <(run_group world mpi)
  flat_tps+="$t " flat_mb+="$m "
done
# shellcheck disable=SC2086
ft=$(median $full_tps) fm=$(median $full_mb) ht=$(median $hyb_tps) hm=$(median $hyb_mb)
# shellcheck disable=SC2086
pt=$(median $flat_tps) pm=$(median $flat_mb)
for v in "$ft" "$fm" "$ht" "$hm" "$pt" "$pm"; do
  [ -n "$v" ] || { echo "hsdp: a run gave no figure" >&2; exit 1; }
done
line="bench=hsdp machines=2 ranks_per_machine=2"
echo "$line strategy=FULL_SHARD inter_machine_mb_per_step=$fm tokens_per_s=$ft ratio_vs_full_shard=1.00 transport=hier"
echo "$line strategy=HYBRID_SHARD inter_machine_mb_per_step=$hm tokens_per_s=$ht ratio_vs_full_shard=$(ratio "$ht" "$ft") transport=hier"
echo "$line strategy=FULL_SHARD inter_machine_mb_per_step=$pm tokens_per_s=$pt ratio_vs_full_shard=$(ratio "$pt" "$ft") transport=mpi"
echo "bench=hsdp link=$RATE hybrid_bytes_vs_full_shard_hier=$(ratio "$hm" "$fm") hybrid_bytes_vs_full_shard_mpi=$(ratio "$hm" "$pm")"
