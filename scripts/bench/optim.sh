#!/usr/bin/env bash
# The optimizer step on the CPU (docs/performance.md#compiling-the-step): AdamW over a GPT-like
# model's parameters (many small tensors, a few large ones; about 10 M and 100 M parameters), one
# thread and every core: xlaunch's fused step, LibTorch's AdamW, PyTorch's
# torch.optim.AdamW(fused=True) and (foreach=True) (peers/torch_optim.py), and the same bytes moved
# with next to no arithmetic (bench_optim --system stream: the machine's memory bandwidth for this
# traffic, 28 bytes per parameter read and written, as stream_copy_gbps). Systems
# alternate round by round in one run; medians of the rounds. Prints per size, threads and system
#   bench=optim system=S params_m=P threads=N dtype=D ms_per_step=X gbps=Y stream_copy_gbps=C frac_of_copy=F
#         ratio_vs_libtorch=R ratio_vs_torch_fused=T
# (ratios: how many times faster than that system; frac_of_copy: gbps / stream_copy_gbps).
# Then end to end: the GPT of examples/gpt_model.h (bench_fsdp: DIM 256, 4 layers, AdamW) on 2 ranks
# at ddp.zero_stage 0 and 2, with the fused step and with LibTorch's (XLAUNCH_OPTIMIZER_FUSED),
# alternating; a batch of 8 x 128 bytes per rank (compute-heavy) and of 2 x 64 (optimizer-heavy):
#   bench=optim_e2e model=gpt params_m=P world=2 stage=S batch=B seq=Q dtype=D fused_tokens_per_s=X
#         libtorch_tokens_per_s=Y ratio_vs_libtorch=R
# (a bfloat16 model at the two optimizer-heavy settings: its fused step keeps float32 masters).
# With bfloat16 parameters (DTYPES, default "float32 bfloat16"; bfloat16 at the first size only):
# xlaunch's fused step keeps float32 master weights and state (30 bytes per parameter moved),
# LibTorch's AdamW and PyTorch's keep bfloat16 state and no masters (14 bytes); the lines say
# dtype=bfloat16 and gbps counts each system's own bytes.
# Usage: scripts/bench/optim.sh [ROUNDS]   (BUILD_DIR, PEERS, PEER_PYTHON, SIZES, THREADS, DTYPES override;
#   STEP=0 runs the end-to-end part only, E2E=0 the step part only)
set -euo pipefail
shopt -s inherit_errexit
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
PY="${PEER_PYTHON:-python3}"
SIZES="${SIZES:-10 100}"
THREADS="${THREADS:-1 $(nproc)}"
DTYPES="${DTYPES:-float32 bfloat16}"
need_bin scripts/bench/bench_optim
need_bin scripts/bench/bench_fsdp
BIN="$BUILD_DIR/scripts/bench/bench_optim"
SYSTEMS=(fused libtorch torch-fused torch-foreach stream)

run_system() {  # system params_m threads steps dtype -> the program's line
  case "$1" in
    torch-*) "$PY" "$PEERS/torch_optim.py" --system "$1" --params_m "$2" --threads "$3" --steps "$4" --dtype "$5" ;;
    *)       "$BIN" --system "$1" --params_m "$2" --threads "$3" --steps "$4" --dtype "$5" ;;
  esac
}

first_size=${SIZES%% *}
step_dtypes=$DTYPES
[ "${STEP:-1}" = 1 ] || step_dtypes=""
for dtype in $step_dtypes; do
for size in $SIZES; do
  [ "$dtype" = float32 ] || [ "$size" = "$first_size" ] || continue
  steps=$(( size >= 50 ? 5 : 20 ))
  for threads in $THREADS; do
    declare -A ms=() gb=()
    real_m=""
    for ((r = 0; r < ROUNDS; r++)); do
      for sys in "${SYSTEMS[@]}"; do
        out=$(run_system "$sys" "$size" "$threads" "$steps" "$dtype")
        ms[$sys]+="$(figure ms_per_step "$sys" "$out") "
        gb[$sys]+="$(figure gbps "$sys" "$out") "
        real_m=$(figure params_m "$sys" "$out")
      done
    done
    declare -A med=() medgb=()
    for sys in "${SYSTEMS[@]}"; do
      # shellcheck disable=SC2086
      med[$sys]=$(median ${ms[$sys]}); medgb[$sys]=$(median ${gb[$sys]})
    done
    copy=${medgb[stream]}
    for sys in fused libtorch torch-fused torch-foreach; do
      echo "bench=optim system=$sys params_m=$real_m threads=$threads dtype=$dtype ms_per_step=${med[$sys]}" \
           "gbps=${medgb[$sys]}" \
           "stream_copy_gbps=$copy frac_of_copy=$(ratio "${medgb[$sys]}" "$copy")" \
           "ratio_vs_libtorch=$(ratio "${med[libtorch]}" "${med[$sys]}")" \
           "ratio_vs_torch_fused=$(ratio "${med[torch-fused]}" "${med[$sys]}")"
    done
    unset ms gb med medgb
  done
done
done

[ "${E2E:-1}" = 1 ] || exit 0
FSDP_BIN="$BUILD_DIR/scripts/bench/bench_fsdp"
for cfg in "0 8 128 float32" "0 2 64 float32" "2 2 64 float32" "0 2 64 bfloat16" "2 2 64 bfloat16"; do
  read -r stage batch seq dtype <<<"$cfg"
  case " $DTYPES " in *" $dtype "*) ;; *) continue ;; esac
  fused=() libtorch=()
  for ((r = 0; r < ROUNDS; r++)); do
    for mode in true false; do
      out=$("${MPIRUN[@]}" -np 2 -x XLAUNCH_OPTIMIZER_FUSED=$mode "$FSDP_BIN" --cpu_allreduce mpi --stage "$stage" \
            --dim 256 --layers 4 --heads 8 --seq "$seq" --batch "$batch" --steps 20 --model_dtype "$dtype" 2>/dev/null)
      tps=$(figure tokens_per_s "bench_fsdp (optimizer.fused $mode)" "$out")
      params_m=$(figure params_m "bench_fsdp" "$out")
      if [ "$mode" = true ]; then fused+=("$tps"); else libtorch+=("$tps"); fi
    done
  done
  f=$(median "${fused[@]}") l=$(median "${libtorch[@]}")
  echo "bench=optim_e2e model=gpt params_m=$params_m world=2 stage=$stage batch=$batch seq=$seq dtype=$dtype" \
       "fused_tokens_per_s=$f libtorch_tokens_per_s=$l ratio_vs_libtorch=$(ratio "$f" "$l")"
done
