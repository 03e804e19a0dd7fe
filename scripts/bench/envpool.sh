#!/usr/bin/env bash
# The RL environment pool (docs/rl.md): environment steps per second of xlaunch's EnvPool
# (bench_envpool, C++) against EnvPool itself (PyPI envpool) and Gymnasium's vector environments
# (peers/vector_envs.py): SyncVectorEnv, AsyncVectorEnv and, where the environment has one, its
# numpy-vectorised version (gymnasium.make_vec(..., vectorization_mode="vector_entry_point"):
# CartPole-v1). Same environment, same number of environments; xlaunch's pool on THREADS threads
# (default: the cores here), EnvPool's num_threads swept from 1 to THREADS with the best kept (as
# augment.sh keeps Kornia's better thread count); every system warmed up alike (min(1, S/5) s of
# uncounted steps). Alternating rounds in one run, medians of the rounds. CartPole-v1 and
# Pendulum-v1 at N = 8, 64, 256, sync (step all N) and async (batch_size N/2, recv/send).
# Gymnasium's vector envs have no asynchronous batches: their figures are the same in both modes'
# lines, and the Gymnasium ratio is against the fastest of them for that size (gym_best). Prints
#   bench=envpool env=E num_envs=N mode=M xlaunch_sps=X envpool_sps=P envpool_threads=T gym_sync_sps=A
#     gym_async_sps=B gym_vector_sps=C|n/a gym_best=SYSTEM ratio_vs_envpool=X/P ratio_vs_gym_best=X/max(A,B,C)
# (one line). A system that prints no figure fails the run.
# Usage: scripts/bench/envpool.sh [ROUNDS]   (BUILD_DIR, PEERS, THREADS, BENCH_SECONDS, ENVS, SIZES override)
# The peers come from scripts/install-deps.sh --bench (envpool, gymnasium).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
THREADS="${THREADS:-$(nproc)}"
SECONDS_PER="${BENCH_SECONDS:-1}"
ENVS="${ENVS:-CartPole-v1 Pendulum-v1}"
SIZES="${SIZES:-8 64 256}"
need_bin scripts/bench/bench_envpool
BIN="$BUILD_DIR/scripts/bench/bench_envpool"
PY="${PEER_PYTHON:-python3}"
"$PY" -c 'import envpool, gymnasium' 2>/dev/null ||
  { echo "envpool.sh: the peers are missing: run scripts/install-deps.sh --bench" >&2; exit 2; }

peer() {  # system env n mode threads -> sps
  local out
  out=$("$PY" -W ignore "$PEERS/vector_envs.py" --system "$1" --env "$2" --num_envs "$3" --mode "$4" \
        --num_threads "$5" --seconds "$SECONDS_PER" 2>&1) || true
  figure sps "vector_envs.py --system $1 --env $2 --num_envs $3 --mode $4 --num_threads $5" "$out"
}
ours() {  # env n mode -> xlaunch_sps
  local out
  out=$("$BIN" --env "$1" --num_envs "$2" --mode "$3" --num_threads "$THREADS" --seconds "$SECONDS_PER" 2>&1) || true
  figure xlaunch_sps "bench_envpool --env $1 --num_envs $2 --mode $3" "$out"
}
# best_of NAME... : "NAME median" of the name whose median in sps[NAME] is the largest
best_of() {
  local name m best="" best_m=-1
  for name in "$@"; do
    # shellcheck disable=SC2086
    m=$(median ${sps[$name]})
    if awk -v a="$m" -v b="$best_m" 'BEGIN {exit !(a > b)}'; then best=$name best_m=$m; fi
  done
  echo "$best $best_m"
}

for env in $ENVS; do
  gyms=(gym_sync gym_async)
  "$PY" -W ignore -c "import gymnasium as g, sys; sys.exit(g.spec('$env').vector_entry_point is None)" && gyms+=(gym_vector)
  for n in $SIZES; do
    declare -A sps=()
    for ((r = 0; r < ROUNDS; r++)); do
      for mode in sync async; do
        sps[x_$mode]+="$(ours "$env" "$n" "$mode") "
        for ((t = 1; t <= THREADS; t++)); do sps[e_${mode}_$t]+="$(peer envpool "$env" "$n" "$mode" "$t") "; done
      done
      for g in "${gyms[@]}"; do sps[$g]+="$(peer "$g" "$env" "$n" sync "$THREADS") "; done
    done
    declare -A med=()
    for g in "${gyms[@]}"; do
      # shellcheck disable=SC2086
      med[$g]=$(median ${sps[$g]})
    done
    read -r gbest gbest_sps <<<"$(best_of "${gyms[@]}")"
    for mode in sync async; do
      # shellcheck disable=SC2086
      x=$(median ${sps[x_$mode]})
      names=()
      for ((t = 1; t <= THREADS; t++)); do names+=("e_${mode}_$t"); done
      read -r ebest e <<<"$(best_of "${names[@]}")"
      echo "bench=envpool env=$env num_envs=$n mode=$mode xlaunch_sps=$x envpool_sps=$e envpool_threads=${ebest##*_}" \
           "gym_sync_sps=${med[gym_sync]} gym_async_sps=${med[gym_async]} gym_vector_sps=${med[gym_vector]:-n/a}" \
           "gym_best=$gbest ratio_vs_envpool=$(ratio "$x" "$e") ratio_vs_gym_best=$(ratio "$x" "$gbest_sps")"
    done
    unset sps med
  done
done
