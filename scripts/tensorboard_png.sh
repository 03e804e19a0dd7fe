#!/usr/bin/env bash
# Renders TensorBoard's scalars dashboard of a run to a PNG with headless Chromium (through
# scripts/report_png.sh), for docs/images/tensorboard.png:
#   scripts/tensorboard_png.sh LOGDIR OUT.png [TAG_REGEX] [WIDTHxHEIGHT]
# e.g. scripts/tensorboard_png.sh runs/fashion_mnist docs/images/tensorboard.png 'train/loss|steps_per_s'
# Starts `tensorboard --logdir LOGDIR` on a free local port (python3's tensorboard: pip install
# tensorboard), waits at most 60 s for it to answer, and stops it afterwards. Not part of the
# build or the tests.
set -euo pipefail
logdir=$(realpath "$1")
out=$2
regex=${3:-}
size=${4:-1400x900}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
python3 -m tensorboard.main --logdir "$logdir" --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
tb=$!
trap 'kill "$tb" 2>/dev/null; wait "$tb" 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/data/runs" >/dev/null 2>&1 && break
  kill -0 "$tb" 2>/dev/null || { echo "tensorboard_png: tensorboard exited:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/data/runs" >/dev/null || { echo "tensorboard_png: tensorboard did not answer in 60 s" >&2; exit 1; }
filter=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$regex")
"$here/report_png.sh" "http://127.0.0.1:$port/?darkMode=false#scalars&tagFilter=$filter" "$out" "$size"
