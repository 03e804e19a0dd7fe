#!/usr/bin/env bash
# The capacity of fully sharded data parallelism (docs/memory.md, stage 3): every rank held to the
# same memory budget, BUDGET_MB of peak resident memory above the bare process (as bench_fsdp and
# the FSDP2 peer measure it, over cpu_allreduce: mpi, where every page a rank holds is its own),
# the largest GPT of examples/gpt_model.h (DIM wide, HEADS heads, SEQ tokens x BATCH sequences per
# rank, AdamW) that trains at WORLD ranks: xlaunch at ddp.zero_stage 2, at stage 3, and PyTorch
# 2.11's FSDP2 (peers/torch_fsdp2_gpt.py); and then (AC=1, the default) xlaunch at stage 3 with
# fsdp.activation_checkpointing, which the peer script does not do.
#
# Every system runs with glibc's mmap threshold fixed at 1 MiB (MALLOC_MMAP_THRESHOLD_, passed to
# every rank): blocks of 1 MiB and more get pages of their own, given back when freed, instead of
# heap the process keeps (docs/memory.md, Capacity); it favours memory over speed, for each alike.
#
# Depth (the number of blocks) is what grows. For each system the peak is measured at two depths;
# the depth where the line through them meets the budget is run, and then the depth one below
# (while over the budget) or one above (while under) until the largest depth whose measured run
# stays under it is found: every figure is a run that trained, never the line.
# Prints the measured runs on stderr, then:
#   bench=fsdp_capacity world=W budget_mb=B stage2_params_m=… stage3_params_m=… torch_fsdp2_params_m=…
#     ratio_vs_stage2=… ratio_vs_torch_fsdp2=…
#   bench=fsdp_capacity_ac world=W budget_mb=B stage3ac_params_m=… ratio_vs_stage2=… ratio_vs_stage3=…
# (ratio_vs_*: stage 3's parameters over the other's.) If FSDP2 refuses the CPU its figures are n/a.
# Usage: scripts/bench/fsdp_capacity.sh [BUDGET_MB]   (BUILD_DIR, PEERS, PEER_PYTHON, WORLD, DIM,
# HEADS, SEQ, BATCH, LOW, HIGH (the two first depths), AC (0: no activation checkpointing run) override)
set -euo pipefail
shopt -s inherit_errexit
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BUDGET_MB="${1:-400}"
WORLD="${WORLD:-4}" DIM="${DIM:-384}" HEADS="${HEADS:-6}" SEQ="${SEQ:-64}" BATCH="${BATCH:-2}"
LOW="${LOW:-2}" HIGH="${HIGH:-8}" AC="${AC:-1}"
need_bin scripts/bench/bench_fsdp
BIN="$BUILD_DIR/scripts/bench/bench_fsdp"
[[ $BUDGET_MB =~ ^[0-9]+$ ]] || { echo "fsdp_capacity.sh: BUDGET_MB must be a number of MB, not '$BUDGET_MB'" >&2; exit 2; }

export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-1048576}"
MPIRUN+=(-x MALLOC_MMAP_THRESHOLD_)

run() {  # system depth -> the program's line (one warm-up step and one timed step)
  local model=(--dim "$DIM" --layers "$2" --heads "$HEADS" --seq "$SEQ" --batch "$BATCH" --steps 1 --warmup 1)
  case "$1" in
    stage2) "${MPIRUN[@]}" -np "$WORLD" "$BIN" --cpu_allreduce mpi --stage 2 "${model[@]}" ;;
    stage3) "${MPIRUN[@]}" -np "$WORLD" "$BIN" --cpu_allreduce mpi --stage 3 "${model[@]}" ;;
    stage3ac) "${MPIRUN[@]}" -np "$WORLD" "$BIN" --cpu_allreduce mpi --stage 3 --activation_checkpointing 1 \
                "${model[@]}" ;;
    torch-fsdp2) "${MPIRUN[@]}" -np "$WORLD" "$PEERS/mpi_torch_env.sh" python3 "$PEERS/torch_fsdp2_gpt.py" \
                   "${model[@]}" 2>/dev/null ;;
  esac
}

declare -A peak=() params=()
measure() {  # system depth: fills peak[system/depth] and params[system/depth]
  local key="$1/$2" out
  [ -n "${peak[$key]:-}" ] && return 0
  out=$(run "$1" "$2")
  peak[$key]=$(figure peak_rss_above_bare_mb "$1" "$out")
  params[$key]=$(figure params_m "$1" "$out")
  echo "fsdp_capacity: $1 layers=$2 params_m=${params[$key]} peak_rss_above_bare_mb=${peak[$key]}" >&2
}
under() { [ -n "${peak[$1/$2]:-}" ] && awk -v m="${peak[$1/$2]}" -v b="$BUDGET_MB" 'BEGIN {exit !(m <= b)}'; }

largest() {  # system -> the parameters (millions) of the deepest model under the budget, or 0
  local sys=$1 depth
  measure "$sys" "$LOW"
  measure "$sys" "$HIGH"
  depth=$(awk -v l="$LOW" -v h="$HIGH" -v a="${peak[$sys/$LOW]}" -v b="${peak[$sys/$HIGH]}" -v m="$BUDGET_MB" \
          'BEGIN {s = (b - a) / (h - l); d = (s > 0) ? int(h + (m - b) / s) : h; print (d < 1) ? 1 : d}')
  measure "$sys" "$depth"
  while ! under "$sys" "$depth" && ((depth > 1)); do
    depth=$((depth - 1))
    measure "$sys" "$depth"
  done
  if ! under "$sys" "$depth"; then echo 0; return; fi
  while :; do  # (a run that fails stops the script: measure is no condition here)
    measure "$sys" $((depth + 1))
    under "$sys" $((depth + 1)) || break
    depth=$((depth + 1))
  done
  echo "${params[$sys/$depth]}"
}

s2=$(largest stage2)
s3=$(largest stage3)
probe=$("${MPIRUN[@]}" -np 2 "$PEERS/mpi_torch_env.sh" python3 "$PEERS/torch_fsdp2_gpt.py" --probe 2>/dev/null || true)
if grep -q "probe=ok" <<<"$probe"; then
  t=$(largest torch-fsdp2)
  vs_torch=$(ratio "$s3" "$t")
else
  echo "bench=fsdp_capacity peer=torch-fsdp2 refused the CPU: ${probe:-no output}" >&2
  t=n/a vs_torch=n/a
fi
echo "bench=fsdp_capacity world=$WORLD budget_mb=$BUDGET_MB stage2_params_m=$s2 stage3_params_m=$s3" \
     "torch_fsdp2_params_m=$t ratio_vs_stage2=$(ratio "$s3" "$s2") ratio_vs_torch_fsdp2=$vs_torch"
if [ "$AC" = 1 ]; then
  s3ac=$(largest stage3ac)
  echo "bench=fsdp_capacity_ac world=$WORLD budget_mb=$BUDGET_MB stage3ac_params_m=$s3ac" \
       "ratio_vs_stage2=$(ratio "$s3ac" "$s2") ratio_vs_stage3=$(ratio "$s3ac" "$s3")"
fi
