#!/usr/bin/env bash
# The fault matrix as numbers, and what the collective watchdog costs.
#  1. For each fault of tests/faults/fault_program.cpp, with 2 and 3 ranks under `xlaunch run`
#     (timeout_s 10; debug on for `mismatch`), rank 1 misbehaving at step 20:
#       bench=faults fault=F ranks=N rc=C seconds_to_exit=T named_rank=R orphans=K flight=yes|no finding=X
#     seconds_to_exit: from the fault (the program prints when it injects it) to xlaunch's exit;
#     named_rank: the rank in xlaunch's last line ("exit code C, from rank R"); orphans: processes
#     of the job still alive a second later; flight: whether the failure showed the flight
#     recorder's "last collectives:" table; finding: what it found (desync, straggler, none). The
#     fault `desync` (4 ranks only, rank 2 in acc.reduce where the others are in acc.gather) must be
#     named rank 2 with finding=desync.
#  2. The watchdog's cost on 2-rank training of the benchmark MLP (H=1024), alternating rounds with
#     the watchdog on (the default) and off (XLAUNCH_TIMEOUT_S=0), debug off:
#       bench=watchdog hidden=1024 ratio_vs_off=X      (and the same with debug on: ratio_debug_vs_off)
# Usage: scripts/bench/faults.sh [ROUNDS]   (BUILD_DIR, STEPS override)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROUNDS="${1:-3}"
STEPS="${STEPS:-200}"
need_bin launcher/xlaunch
need_bin tests/faults/fault_program
need_bin scripts/bench/bench_ddp
XLAUNCH="$BUILD_DIR/launcher/xlaunch"
FAULT_BIN="$BUILD_DIR/tests/faults/fault_program"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

now_ns() { date +%s%N; }

for ranks in 2 3 4; do
  faults="exit3 return1 exit0_early throw segv kill9 hang mismatch"
  [ "$ranks" = 4 ] && faults=desync
  for fault in $faults; do
    rank=1
    [ "$fault" = desync ] && rank=2
    debug=false
    [ "$fault" = mismatch ] && debug=true
    printf 'distributed_type: MULTI_CPU\nuse_cpu: true\nnum_processes: %s\ntimeout_s: 10\ndebug: %s\n' \
      "$ranks" "$debug" >"$WORK/config.yaml"
    set +e
    out=$(TMPDIR="$WORK" "$XLAUNCH" run --config_file "$WORK/config.yaml" "$FAULT_BIN" --fault "$fault" \
          --fault_rank "$rank" --fault_step 20 2>&1)
    rc=$?
    set -e
    ended=$(now_ns)
    injected=$(sed -n "s/.*rank $rank injects [a-z0-9_]* at step 20 at \([0-9]*\).*/\1/p" <<<"$out" | head -n1)
    seconds=$(awk -v a="${injected:-$ended}" -v b="$ended" 'BEGIN {printf "%.2f", (b - a) / 1e9}')
    named=$(sed -n 's/^xlaunch: exit code [0-9]*, from rank \([0-9]*\)$/\1/p' <<<"$out" | tail -n1)
    sleep 1
    orphans=$(pgrep -f -c "$FAULT_BIN" || true)
    flight=no finding=none
    grep -q "^last collectives:$" <<<"$out" && flight=yes
    grep -q "^xlaunch: .* while .* \(is\|are\) in .*: the .* took" <<<"$out" && finding=desync
    grep -q "^xlaunch: every rank but [0-9]* entered\|^xlaunch: ranks\? [0-9, ]* entered" <<<"$out" && finding=straggler
    echo "bench=faults fault=$fault ranks=$ranks rc=$rc seconds_to_exit=$seconds named_rank=${named:--} orphans=$orphans flight=$flight finding=$finding"
    if [ "$fault" = desync ] && { [ "${named:-}" != 2 ] || [ "$finding" != desync ]; }; then
      echo "faults.sh: the desync was not named (rank 2, finding desync); xlaunch said:" >&2
      printf '%s\n' "$out" >&2
      exit 1
    fi
  done
done

on=() off=() dbg=()
for ((r = 0; r < ROUNDS; r++)); do
  on+=("$(ddp_h1024_steps_per_s)")
  off+=("$(ddp_h1024_steps_per_s -x XLAUNCH_TIMEOUT_S=0)")
  dbg+=("$(ddp_h1024_steps_per_s -x XLAUNCH_DEBUG=1)")
done
awk -v on="$(median "${on[@]}")" -v off="$(median "${off[@]}")" -v dbg="$(median "${dbg[@]}")" \
  'BEGIN {printf "bench=watchdog hidden=1024 steps_per_s_on=%s steps_per_s_off=%s ratio_vs_off=%.3f ratio_debug_vs_off=%.3f\n", on, off, on / off, dbg / off}'
