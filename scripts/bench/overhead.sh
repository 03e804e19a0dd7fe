#!/usr/bin/env bash
# What the utilization report and the timeline cost (docs/performance.md): 2-rank training of the
# benchmark MLP (H=1024, batch 64, shared memory), alternating rounds with
#   off:    XLAUNCH_REPORT=0, no timeline
#   report: the step clock on (the default), publishing into a status directory as under xlaunch run,
#           with profile_ops 0 (the default: the operator profile off, one branch per step)
#   trace:  the step clock and the timeline over every step (XLAUNCH_TRACE_STEPS = STEPS)
#   ops:    the report with profile_ops 5 (LibTorch's profiler over 5 of the STEPS steps)
# and prints the medians as ratios to off:
#   bench=overhead hidden=1024 report_ratio=R trace_ratio=T
#   bench=overhead hidden=1024 profile_ops_off_ratio=R profile_ops5_ratio=P
# and the flight recorder (docs/failures.md): the progress boards in a status directory as under
# xlaunch run, with the watchdog that keeps them (the default), against neither (XLAUNCH_TIMEOUT_S=0),
# the report off in both:
#   bench=overhead hidden=1024 steps_per_s_no_boards=A steps_per_s_boards=B recorder_ratio=B/A
# Usage: scripts/bench/overhead.sh [ROUNDS]   (BUILD_DIR, STEPS override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-5}"
STEPS="${STEPS:-300}"
need_bin scripts/bench/bench_ddp
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

off=() rep=() tr=() ops=() nob=() boards=()
for ((r = 0; r < ROUNDS; r++)); do
  off+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=0)")
  d=$(mktemp -d "$WORK/status.XXXXXX")
  rep+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=1 -x XLAUNCH_STATUS_DIR="$d" -x XLAUNCH_PROFILE_OPS=0)")
  d=$(mktemp -d "$WORK/status.XXXXXX") t=$(mktemp -d "$WORK/trace.XXXXXX")
  tr+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=1 -x XLAUNCH_STATUS_DIR="$d" -x XLAUNCH_TRACE_DIR="$t" -x XLAUNCH_TRACE_STEPS="$STEPS")")
  d=$(mktemp -d "$WORK/status.XXXXXX")
  ops+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=1 -x XLAUNCH_STATUS_DIR="$d" -x XLAUNCH_PROFILE_OPS=5)")
  nob+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=0 -x XLAUNCH_TIMEOUT_S=0)")
  d=$(mktemp -d "$WORK/status.XXXXXX")
  boards+=("$(ddp_h1024_steps_per_s -x XLAUNCH_REPORT=0 -x XLAUNCH_STATUS_DIR="$d")")
done
awk -v off="$(median "${off[@]}")" -v rep="$(median "${rep[@]}")" -v tr="$(median "${tr[@]}")" \
  'BEGIN {printf "bench=overhead hidden=1024 steps_per_s_off=%s steps_per_s_report=%s steps_per_s_trace=%s report_ratio=%.3f trace_ratio=%.3f\n", off, rep, tr, rep / off, tr / off}'
awk -v off="$(median "${off[@]}")" -v rep="$(median "${rep[@]}")" -v ops="$(median "${ops[@]}")" \
  'BEGIN {printf "bench=overhead hidden=1024 steps_per_s_profile_ops5=%s profile_ops_off_ratio=%.3f profile_ops5_ratio=%.3f\n", ops, rep / off, ops / off}'
awk -v a="$(median "${nob[@]}")" -v b="$(median "${boards[@]}")" \
  'BEGIN {printf "bench=overhead hidden=1024 steps_per_s_no_boards=%s steps_per_s_boards=%s recorder_ratio=%.3f\n", a, b, b / a}'
