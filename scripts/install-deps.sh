#!/usr/bin/env bash
# Installs everything xlaunch needs on Debian 12, idempotently: Debian packages (apt-get update
# first) and LibTorch from PyPI's torch wheel (pinned). Skips what is already there and says so.
# Usage: scripts/install-deps.sh          (as root, or with sudo available)
#        scripts/install-deps.sh --test   the same, and the python packages the tests compare
#                                         against (TEST_PEERS below, pinned; scripts/test.sh)
#        scripts/install-deps.sh --bench  the same, and the python packages benchmarks compare
#                                         with that the tests do not need (BENCH_PEERS below)
set -euo pipefail

WITH_TEST_PEERS=0
WITH_BENCH_PEERS=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST_PEERS=1 ;;
    --bench) WITH_BENCH_PEERS=1 ;;
    *) echo "[install-deps] unknown argument '$arg'; usage: $0 [--test] [--bench]" >&2; exit 2 ;;
  esac
done

TORCH_VERSION="${XLAUNCH_TORCH_VERSION:-2.11.0}"
PY="${XLAUNCH_PYTHON:-python3}"
APT_PACKAGES=(cmake g++ make ccache pkg-config libopenmpi-dev openmpi-bin libyaml-cpp-dev libcli11-dev
              nlohmann-json3-dev libgtest-dev zlib1g-dev dataset-fashion-mnist fortunes python3 python3-pip iproute2
              protobuf-compiler libprotobuf-dev libboost-dev)

say() { echo "[install-deps] $*"; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  say "Debian packages: all ${#APT_PACKAGES[@]} already installed"
else
  say "Debian packages: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

pip_install() {
  local extra=()
  # Debian's own python3 refuses pip installs into the system (PEP 668) unless told otherwise.
  if "$PY" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    extra+=(--break-system-packages)
  fi
  "$PY" -m pip install -q --no-cache-dir "${extra[@]}" "$@"
}

have=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" = "$TORCH_VERSION" ]; then
  say "torch $have already installed for $("$PY" -c 'import sys; print(sys.executable)')"
else
  say "torch: found '${have:-none}', installing torch==$TORCH_VERSION (large: CUDA wheels included)"
  pip_install "torch==$TORCH_VERSION"
fi
say "torch cmake prefix: $("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"

# Test peers: the reference implementations tests compare against, and what they import, as
# "name==version module" (one row each; a row whose pinned version imports is skipped).
#   safetensors: tests/checkpoint/safetensors_oracle_test.py; safetensors.torch imports packaging,
#   and its save_file numpy (its "torch" extra, pinned here)
#   tensorboard: tests/track, reading xlaunch's event files back with TensorBoard's EventAccumulator
#   gymnasium: tests/rl/gym_trace.py, Gymnasium's classic-control trajectories that xlaunch's
#   environments replay (its numpy requirement is met by the pinned numpy above)
#   kornia: tests/augment/colour_kornia.py, Kornia's ColorJitter and Normalize that xlaunch's match
#   (it needs torch, already pinned above, and installs its kornia_rs)
#   accelerate: tests/config/accelerate_files_test.py, whose config files Accelerate's own
#   `accelerate config` code writes (it needs torch >= 2.0, so pip keeps ours)
TEST_PEERS=("packaging==25.0 packaging"
            "numpy==2.2.6 numpy"
            "safetensors==0.7.0 safetensors.torch"
            "tensorboard==2.21.0 tensorboard.backend.event_processing.event_accumulator"
            "gymnasium==1.4.0 gymnasium"
            "kornia==0.9.0 kornia"
            "accelerate==1.15.0 accelerate.commands.config.cluster")
# Benchmark peers (scripts/bench/): "name==version module" rows as above.
#   envpool: scripts/bench/envpool.sh's peer (the newest that installs here), with Gymnasium's vector
#   environments (scripts/bench/peers/vector_envs.py)
#   kornia, torchvision: scripts/bench/augment.sh's peers (peers/augment_peers.py); torchvision
#   0.26.0 is the one built for torch 2.11.0 (it requires exactly that torch, so pip keeps ours)
#   tensorboard: scripts/bench/tracking.sh reads the event files back with TensorBoard's own reader
#   accelerate: scripts/bench/e2e.sh's peer (peers/accelerate_fashion_mnist.py under `accelerate
#   launch`); it needs torch >= 2.0, so pip keeps ours
BENCH_PEERS=("numpy==2.2.6 numpy"
             "gymnasium==1.4.0 gymnasium"
             "envpool==1.2.5 envpool"
             "kornia==0.9.0 kornia"
             "torchvision==0.26.0 torchvision"
             "tensorboard==2.21.0 tensorboard.backend.event_processing.event_accumulator"
             "accelerate==1.15.0 accelerate")

install_peers() {  # kind row... : pip-installs each row whose pinned version does not import yet
  local kind="$1" row spec module want have
  shift
  for row in "$@"; do
    read -r spec module <<<"$row"
    want="${spec#*==}"
    have=$("$PY" -c "import importlib.metadata as m; print(m.version('${spec%%==*}'))" 2>/dev/null || true)
    have="${have%%+*}"  # a local label (torchvision's +cu130) is the same release
    if [ "$have" = "$want" ] && "$PY" -c "import $module" 2>/dev/null; then
      say "$kind peer $spec already installed"
    else
      say "$kind peer: found '${have:-none}', installing $spec"
      pip_install "$spec"
    fi
  done
}
if [ "$WITH_TEST_PEERS" = 1 ]; then install_peers test "${TEST_PEERS[@]}"; fi
if [ "$WITH_BENCH_PEERS" = 1 ]; then install_peers bench "${BENCH_PEERS[@]}"; fi
