#!/usr/bin/env bash
# Fully sharded data parallelism (docs/memory.md, stage 3): tokens/s and memory of the GPT of
# examples/gpt_model.h (byte level, DIM wide, LAYERS blocks, AdamW, SEQ-byte sequences, BATCH per
# rank) for xlaunch at ddp.zero_stage 2, at stage 3 (fsdp.prefetch 1), at stage 3 with
# reshard_after_forward false and at stage 3 with activation_checkpointing, and PyTorch 2.11's FSDP2 (fully_shard per block and on the root, a
# gloo CPU mesh, OMP_NUM_THREADS=1 per rank as torchrun sets it: peers/torch_fsdp2_gpt.py), in
# alternating rounds in one run, medians of the rounds, on 2 and 4 ranks.
# The xlaunch jobs run over cpu_allreduce: mpi (TRANSPORT), where every page a rank holds is its
# own, so peak_rss_above_bare_mb is each rank's own memory (docs/memory.md, Peak resident memory).
# Prints per world size and system:
#   bench=fsdp system=xlaunch|torch-fsdp2 stage=S params_m=P world=W tokens_per_s=X
#     peak_rss_above_bare_mb=M ratio_vs_torch_fsdp2=R ratio_vs_stage2=Q
# (stage=3k: stage 3 with reshard_after_forward false; stage=3ac: stage 3 with
# activation_checkpointing; torch-fsdp2 is stage=3.)
# Usage: scripts/bench/fsdp.sh [ROUNDS]   (BUILD_DIR, PEERS, PEER_PYTHON, DIM, LAYERS, HEADS, SEQ,
# BATCH, STEPS, WORLDS, TRANSPORT override)
set -euo pipefail
shopt -s inherit_errexit
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
DIM="${DIM:-256}" LAYERS="${LAYERS:-4}" HEADS="${HEADS:-8}" SEQ="${SEQ:-128}" BATCH="${BATCH:-8}"
STEPS="${STEPS:-10}" WORLDS="${WORLDS:-2 4}" TRANSPORT="${TRANSPORT:-mpi}"
need_bin scripts/bench/bench_fsdp
BIN="$BUILD_DIR/scripts/bench/bench_fsdp"
SYSTEMS=(stage2 stage3 stage3k stage3ac torch-fsdp2)
MODEL=(--dim "$DIM" --layers "$LAYERS" --heads "$HEADS" --seq "$SEQ" --batch "$BATCH" --steps "$STEPS")

run_system() {  # system world -> the program's line
  case "$1" in
    stage2)  "${MPIRUN[@]}" -np "$2" "$BIN" --cpu_allreduce "$TRANSPORT" --stage 2 "${MODEL[@]}" ;;
    stage3)  "${MPIRUN[@]}" -np "$2" "$BIN" --cpu_allreduce "$TRANSPORT" --stage 3 "${MODEL[@]}" ;;
    stage3k) "${MPIRUN[@]}" -np "$2" "$BIN" --cpu_allreduce "$TRANSPORT" --stage 3 --reshard_after_forward 0 "${MODEL[@]}" ;;
    stage3ac) "${MPIRUN[@]}" -np "$2" "$BIN" --cpu_allreduce "$TRANSPORT" --stage 3 --activation_checkpointing 1 "${MODEL[@]}" ;;
    torch-fsdp2)
      "${MPIRUN[@]}" -np "$2" "$PEERS/mpi_torch_env.sh" python3 "$PEERS/torch_fsdp2_gpt.py" "${MODEL[@]}" 2>/dev/null ;;
  esac
}

# FSDP2 on a CPU mesh: if it refuses, say so with its error (and compare with nothing).
probe=$("${MPIRUN[@]}" -np 2 "$PEERS/mpi_torch_env.sh" python3 "$PEERS/torch_fsdp2_gpt.py" --probe 2>/dev/null || true)
if ! grep -q "probe=ok" <<<"$probe"; then
  echo "bench=fsdp peer=torch-fsdp2 refused the CPU: ${probe:-no output}" >&2
  SYSTEMS=(stage2 stage3 stage3k stage3ac)
fi

for W in $WORLDS; do
  declare -A tps=() mem=() pm=()
  for ((r = 0; r < ROUNDS; r++)); do
    for sys in "${SYSTEMS[@]}"; do
      out=$(run_system "$sys" "$W")
      tps[$sys]+="$(figure tokens_per_s "$sys" "$out") "
      mem[$sys]+="$(figure peak_rss_above_bare_mb "$sys" "$out") "
      pm[$sys]=$(figure params_m "$sys" "$out")
    done
  done
  declare -A med=() mmem=()
  for sys in "${SYSTEMS[@]}"; do
    # shellcheck disable=SC2086
    med[$sys]=$(median ${tps[$sys]})
    # shellcheck disable=SC2086
    mmem[$sys]=$(median ${mem[$sys]})
  done
  torch_tps="${med[torch-fsdp2]:-}"
  for sys in "${SYSTEMS[@]}"; do
    case "$sys" in
      torch-fsdp2) name=torch-fsdp2 stage=3 ;;
      *) name=xlaunch stage=${sys#stage} ;;
    esac
    vs_torch="n/a"
    [ -n "$torch_tps" ] && vs_torch=$(ratio "${med[$sys]}" "$torch_tps")
    echo "bench=fsdp system=$name stage=$stage params_m=${pm[$sys]} world=$W tokens_per_s=${med[$sys]}" \
         "peak_rss_above_bare_mb=${mmem[$sys]} ratio_vs_torch_fsdp2=$vs_torch" \
         "ratio_vs_stage2=$(ratio "${med[$sys]}" "${med[stage2]}")"
  done
  unset tps mem pm med mmem
done
