#!/usr/bin/env bash
# The tensor environments on the CPU (docs/rl.md): environment steps per second of xlaunch's
# TensorEnv (bench_envpool --backend tensor: every environment as rows of tensors, one fused loop on
# the intra-op threads) against xlaunch's thread pool (bench_envpool --backend threads), EnvPool 1.2.5
# (its num_threads swept from 1 to THREADS, the best kept) and Gymnasium's numpy-vectorised CartPole
# (gymnasium.make_vec("CartPole-v1", num_envs=N, vectorization_mode="vector_entry_point"), which runs
# on one thread, as its users run it), all synchronous (every environment steps each call), random
# actions drawn before the clock, warmed up alike. Alternating rounds in one run, medians of rounds.
# Prints, per N, one line per xlaunch backend:
#   bench=tensor_env env=CartPole-v1 num_envs=N device=cpu backend=tensor|pool steps_per_s=X
#     ratio_vs_pool=X/POOL ratio_vs_gym_vector=X/GYM ratio_vs_envpool=X/ENVPOOL envpool_threads=T
# A system that prints no figure fails the run.
# Usage: scripts/bench/tensor_env.sh [ROUNDS]   (BUILD_DIR, PEERS, THREADS, BENCH_SECONDS, SIZES override)
# The peers come from scripts/install-deps.sh --bench (envpool, gymnasium).
set -euo pipefail
shopt -s inherit_errexit
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
THREADS="${THREADS:-$(nproc)}"
SECONDS_PER="${BENCH_SECONDS:-1}"
SIZES="${SIZES:-64 1024 16384 262144}"
ENV=CartPole-v1
need_bin scripts/bench/bench_envpool
BIN="$BUILD_DIR/scripts/bench/bench_envpool"
PY="${PEER_PYTHON:-python3}"
"$PY" -c 'import envpool, gymnasium' 2>/dev/null ||
  { echo "tensor_env.sh: the peers are missing: run scripts/install-deps.sh --bench" >&2; exit 2; }

peer() {  # system n threads -> sps
  local out
  out=$("$PY" -W ignore "$PEERS/vector_envs.py" --system "$1" --env "$ENV" --num_envs "$2" --mode sync \
        --num_threads "$3" --seconds "$SECONDS_PER" 2>&1) || true
  figure sps "vector_envs.py --system $1 --env $ENV --num_envs $2 --num_threads $3" "$out"
}
ours() {  # backend n -> xlaunch_sps
  local out
  out=$("$BIN" --env "$ENV" --num_envs "$2" --mode sync --backend "$1" --num_threads "$THREADS" \
        --seconds "$SECONDS_PER" 2>&1) || true
  figure xlaunch_sps "bench_envpool --backend $1 --env $ENV --num_envs $2" "$out"
}

for n in $SIZES; do
  declare -A sps=()
  for ((r = 0; r < ROUNDS; r++)); do
    sps[tensor]+="$(ours tensor "$n") "
    sps[pool]+="$(ours threads "$n") "
    sps[gym]+="$(peer gym_vector "$n" 1) "
    for ((t = 1; t <= THREADS; t++)); do sps[e_$t]+="$(peer envpool "$n" "$t") "; done
  done
  declare -A med=()
  for k in tensor pool gym; do
    # shellcheck disable=SC2086
    med[$k]=$(median ${sps[$k]})
  done
  ebest=1 e=-1
  for ((t = 1; t <= THREADS; t++)); do
    # shellcheck disable=SC2086
    m=$(median ${sps[e_$t]})
    if awk -v a="$m" -v b="$e" 'BEGIN {exit !(a > b)}'; then ebest=$t e=$m; fi
  done
  for backend in tensor pool; do
    x=${med[$backend]}
    echo "bench=tensor_env env=$ENV num_envs=$n device=cpu backend=$backend steps_per_s=$x" \
         "ratio_vs_pool=$(ratio "$x" "${med[pool]}") ratio_vs_gym_vector=$(ratio "$x" "${med[gym]}")" \
         "ratio_vs_envpool=$(ratio "$x" "$e") envpool_threads=$ebest"
  done
  unset sps med
done
