#!/usr/bin/env bash
# Installs everything xlaunch needs on Debian 12, idempotently: Debian packages (apt-get update
# first) and LibTorch from PyPI's torch wheel (pinned). Skips what is already there and says so.
# Usage: scripts/install-deps.sh        (as root, or with sudo available)
set -euo pipefail

TORCH_VERSION="${XLAUNCH_TORCH_VERSION:-2.11.0}"
PY="${XLAUNCH_PYTHON:-python3}"
APT_PACKAGES=(cmake g++ make ccache pkg-config libopenmpi-dev openmpi-bin libyaml-cpp-dev libcli11-dev
              nlohmann-json3-dev libgtest-dev zlib1g-dev dataset-fashion-mnist python3 python3-pip iproute2)

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

have=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have" = "$TORCH_VERSION" ]; then
  say "torch $have already installed for $("$PY" -c 'import sys; print(sys.executable)')"
else
  say "torch: found '${have:-none}', installing torch==$TORCH_VERSION (large: CUDA wheels included)"
  extra=()
  # Debian's own python3 refuses pip installs into the system (PEP 668) unless told otherwise.
  if "$PY" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    extra+=(--break-system-packages)
  fi
  "$PY" -m pip install -q --no-cache-dir "${extra[@]}" "torch==$TORCH_VERSION"
fi
say "torch cmake prefix: $("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
