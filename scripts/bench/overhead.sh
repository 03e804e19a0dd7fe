#!/usr/bin/env bash
# What the utilization report and the timeline cost (docs/performance.md): 2-rank training of the
# benchmark MLP (H=1024, batch 64, shared memory), alternating rounds with
#   off:    XLAUNCH_REPORT=0, no timeline
#   report: the step clock on (the default), publishing into a status directory as under xlaunch run
#   trace:  the step clock and the timeline over every step (XLAUNCH_TRACE_STEPS = STEPS)
# and prints the medians as ratios to off:
#   bench=overhead hidden=1024 report_ratio=R trace_ratio=T
# Usage: scripts/bench/overhead.sh [ROUNDS]   (BUILD_DIR, STEPS override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-5}"
STEPS="${STEPS:-300}"
need_bin scripts/bench/bench_ddp
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

off=() rep=() tr=()
for ((r = 0; r < ROUNDS; r++)); do
  off+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=0)")
  d=$(mktemp -d "$WORK/status.XXXXXX")
  rep+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=1 -x XLAUNCH_STATUS_DIR="$d")")
  d=$(mktemp -d "$WORK/status.XXXXXX") t=$(mktemp -d "$WORK/trace.XXXXXX")
  tr+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=1 -x XLAUNCH_STATUS_DIR="$d" -x XLAUNCH_TRACE_DIR="$t" -x XLAUNCH_TRACE_STEPS="$STEPS")")
done
awk -v off="$(median "${off[@]}")" -v rep="$(median "${rep[@]}")" -v tr="$(median "${tr[@]}")" \
  'BEGIN {printf "bench=overhead hidden=1024 steps_per_s_off=%s steps_per_s_report=%s steps_per_s_trace=%s report_ratio=%.3f trace_ratio=%.3f\n", off, rep, tr, rep / off, tr / off}'
