#!/usr/bin/env bash
# The RL environment pool (docs/rl.md): environment steps per second of xlaunch's EnvPool
# (bench_envpool, C++) against EnvPool itself (PyPI envpool) and Gymnasium's SyncVectorEnv and
# AsyncVectorEnv (peers/vector_envs.py), same environment, same number of environments, the pools
# on the same number of threads (THREADS, default: the cores here); alternating rounds in one run,
# medians of the rounds. CartPole-v1 and Pendulum-v1 at N = 8, 64, 256, sync (step all N) and async
# (batch_size N/2, recv/send). Gymnasium's vector envs have no asynchronous batches: their figure
# is the same in both modes' lines.
# Usage: scripts/bench/envpool.sh [ROUNDS]   (BUILD_DIR, PEERS, THREADS, BENCH_SECONDS, ENVS, SIZES override)
# The peers come from scripts/install-deps.sh --bench (envpool, gymnasium).
set -euo pipefail
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

peer() {  # system env n mode -> sps
  field sps "$("$PY" -W ignore "$PEERS/vector_envs.py" --system "$1" --env "$2" --num_envs "$3" --mode "$4" \
               --num_threads "$THREADS" --seconds "$SECONDS_PER")"
}

for env in $ENVS; do
  for n in $SIZES; do
    declare -A sps=()
    for ((r = 0; r < ROUNDS; r++)); do
      for mode in sync async; do
        sps[x_$mode]+="$(field xlaunch_sps "$("$BIN" --env "$env" --num_envs "$n" --mode "$mode" \
                          --num_threads "$THREADS" --seconds "$SECONDS_PER")") "
        sps[e_$mode]+="$(peer envpool "$env" "$n" "$mode") "
      done
      sps[gs]+="$(peer gym_sync "$env" "$n" sync) "
      sps[ga]+="$(peer gym_async "$env" "$n" sync) "
    done
    # shellcheck disable=SC2086
    gs=$(median ${sps[gs]}) ga=$(median ${sps[ga]})
    for mode in sync async; do
      # shellcheck disable=SC2086
      x=$(median ${sps[x_$mode]}) e=$(median ${sps[e_$mode]})
      echo "bench=envpool env=$env num_envs=$n mode=$mode xlaunch_sps=$x envpool_sps=$e gym_sync_sps=$gs" \
           "gym_async_sps=$ga ratio_vs_envpool=$(ratio "$x" "$e") ratio_vs_gym_async=$(ratio "$x" "$ga")"
    done
    unset sps
  done
done
