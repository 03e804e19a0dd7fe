#!/usr/bin/env bash
# End to end: the README's main job (scripts/quickstart.sh: a default config written by `xlaunch
# config default --num_processes 2`, then `xlaunch run -n 2 examples/train_fashion_mnist --epochs
# 3`) side by side with the same job under HuggingFace Accelerate 1.15 (peers/accelerate_fashion_
# mnist.py: same data, model, optimizer, schedule, batch, EMA, checkpoints and TensorBoard logging,
# a DataLoader with the 2 workers of xlaunch's default config), started with `accelerate launch`
# on Accelerate's MPI multi-CPU config (distributed_type MULTI_CPU, 2 processes, mpirun_config's
# hostfile: Accelerate runs mpirun), alternating which goes first from round to round. Prints per
# round and system
#   bench=e2e round=R system=<xlaunch|accelerate> wall_s=W samples_per_s=X test_acc=A ema_test_acc=E
# (wall_s: the launch command, start to exit; samples_per_s: the last epoch's training samples
# per second, as the job printed it; test_acc: after the last epoch), then the medians
#   bench=e2e epochs=N xlaunch_wall_s=W accelerate_wall_s=V speedup=V/W xlaunch_test_acc=A accelerate_test_acc=B
# A job that fails or does not print its last epoch's line and ema_test_acc fails the run.
# Usage: scripts/bench/e2e.sh [ROUNDS]   (BUILD_DIR, PEERS, PEER_PYTHON, EPOCHS=3, LIMIT_TRAIN=0 (all) override)
# The peer comes from scripts/install-deps.sh --bench (accelerate 1.15.0).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-2}"
EPOCHS="${EPOCHS:-3}"
LIMIT_TRAIN="${LIMIT_TRAIN:-0}"
PY="${PEER_PYTHON:-python3}"
need_bin launcher/xlaunch
need_bin examples/train_fashion_mnist
XLAUNCH="$BUILD_DIR/launcher/xlaunch"
have=$("$PY" -c 'import importlib.metadata as m; print(m.version("accelerate"))' 2>/dev/null || true)
[ "$have" = 1.15.0 ] ||
  { echo "e2e.sh: Accelerate 1.15.0 is missing (found '${have:-none}'): run scripts/install-deps.sh --bench" >&2; exit 2; }
work=$(mktemp -d /tmp/xlaunch_bench_e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Neither system finds a config of the user's: xlaunch's is written here as quickstart.sh writes it.
export XDG_CONFIG_HOME="$work/config" HF_HOME="$work/hf"
unset XLAUNCH_CONFIG_FILE
"$XLAUNCH" config default --num_processes 2 --config_file "$work/xlaunch.yaml" >/dev/null
# Accelerate's MPI multi-CPU config ("Do you want accelerate to launch mpirun? yes" in `accelerate
# config`); as root, Open MPI's mpirun wants the environment's equivalent of --allow-run-as-root.
echo "localhost slots=2" >"$work/hostfile"
cat >"$work/accelerate.yaml" <<YAML
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_CPU
mixed_precision: 'no'
machine_rank: 0
num_machines: 1
num_processes: 2
use_cpu: true
rdzv_backend: static
same_network: true
main_training_function: main
mpirun_config:
  mpirun_hostfile: $work/hostfile
YAML
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
JOB_ARGS=(--epochs "$EPOCHS" --limit_train "$LIMIT_TRAIN")

run() {  # system round: prints its bench=e2e line, writes "wall_s samples_per_s test_acc ema_test_acc" to $work/figures
  local start out rc=0 last wall f vals=()
  rm -rf "$work/project"
  start=$(date +%s.%N)
  if [ "$1" = xlaunch ]; then
    out=$("$XLAUNCH" run --config_file "$work/xlaunch.yaml" -n 2 "$BUILD_DIR/examples/train_fashion_mnist" \
          "${JOB_ARGS[@]}" --project_dir "$work/project" 2>&1) || rc=$?
  else
    out=$("$PY" -m accelerate.commands.launch --config_file "$work/accelerate.yaml" \
          "$PEERS/accelerate_fashion_mnist.py" "${JOB_ARGS[@]}" --project_dir "$work/project" 2>&1) || rc=$?
  fi
  wall=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN {printf "%.1f", a - b}')
  if [ "$rc" != 0 ]; then echo "e2e.sh: the $1 job exited $rc; its output:" >&2; echo "$out" >&2; exit 1; fi
  last=$(grep "epoch=$EPOCHS " <<<"$out" || true)
  for f in samples_per_s test_acc; do vals+=("$(figure "$f" "the $1 job (its epoch=$EPOCHS line)" "$last")"); done
  vals+=("$(figure ema_test_acc "the $1 job" "$out")")
  echo "bench=e2e round=$2 system=$1 wall_s=$wall samples_per_s=${vals[0]} test_acc=${vals[1]} ema_test_acc=${vals[2]}"
  echo "$wall ${vals[*]}" >"$work/figures"
}

declare -A wall=() acc=()
for ((r = 1; r <= ROUNDS; r++)); do
  order=(xlaunch accelerate)
  ((r % 2)) || order=(accelerate xlaunch)
  for sys in "${order[@]}"; do
    run "$sys" "$r"
    read -r w _ a _ <"$work/figures"
    wall[$sys]+="$w " acc[$sys]+="$a "
  done
done
# shellcheck disable=SC2086
XW=$(median ${wall[xlaunch]}) AW=$(median ${wall[accelerate]}) XA=$(median ${acc[xlaunch]}) AA=$(median ${acc[accelerate]})
echo "bench=e2e epochs=$EPOCHS xlaunch_wall_s=$XW accelerate_wall_s=$AW speedup=$(ratio "$AW" "$XW")" \
     "xlaunch_test_acc=$XA accelerate_test_acc=$AA"
