#!/usr/bin/env bash
# The GPU bundle's check of host-device syncs counted per step (issue 29, docs/performance.md
# #host-device-syncs) and of deterministic: true on a GPU; run.sh runs it as the part
# sync_count_cuda:
#   sync_check.sh SYNC_COUNT_JOB        (xlaunch on PATH; one GPU, one rank)
# 1. `xlaunch run --debug` of a loop with one loss.item() per step: the report must say
#    "host-device syncs: 1 per step on rank 0"; where the first came from is shown (NOTE when it
#    does not name item, which is information, not a failure);
# 2. the same loop reading the loss once after the last step: the report must say "none";
# 2b. that loop under --mixed_precision fp16: the training loop's syncs must be none and xlaunch's
#    own 1 per step (loss scaling's inf/NaN check), said apart without advice to remove it;
# 3. the loop (cuBLAS matrix products) under --deterministic, twice: both must run (the runtime
#    sets CUBLAS_WORKSPACE_CONFIG, without which PyTorch refuses them), say deterministic mode is
#    on, and end with the same loss to the last digit.
# Exit status: 0 when every requirement held. Prints one PASS/FAIL line per requirement.
set -uo pipefail
JOB=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/xlaunch-sync-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf 'distributed_type: NO\nnum_processes: 1\ntimeout_s: %s\n' "${XLAUNCH_TIMEOUT_S:-40}" >"$work/one.yaml"
failures=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# run NAME [xlaunch run options] -- [job options]: the job's output in $work/NAME.log, shown too.
run() {
  local name=$1; shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  xlaunch run --config_file "$work/one.yaml" "${opts[@]}" "$JOB" --steps 60 "$@" >"$work/$name.log" 2>&1
  local rc=$?
  sed "s/^/[$name] /" "$work/$name.log"
  return $rc
}

if run item --debug -- --item; then
  line=$(grep -o 'host-device syncs: .*' "$work/item.log" | head -1)
  if [[ "$line" == "host-device syncs: 1 per step on rank 0 "* ]]; then
    pass "one loss.item() per step: the report counts 1 per step (${line%%; remove it*})"
    [[ "$line" == *item* || "$line" == *_local_scalar_dense* ]] ||
      echo "NOTE the first sync's place does not name item: ${line%%; remove it*}"
  else
    fail "one loss.item() per step: the report says '${line:-no host-device syncs line}', not 1 per step on rank 0"
  fi
else
  fail "the --item job failed (its log above)"
fi

if run none --debug; then
  line=$(grep -o 'host-device syncs: .*' "$work/none.log" | head -1)
  if [[ "$line" == "host-device syncs: none in the steps after the warm-up on rank 0"* ]]; then
    pass "no sync in the loop: the report counts none"
  else
    fail "no sync in the loop: the report says '${line:-no host-device syncs line}', not none"
  fi
else
  fail "the job without syncs failed (its log above)"
fi

if run fp16 --debug --mixed_precision fp16; then
  line=$(grep -o 'host-device syncs: .*' "$work/fp16.log" | head -1)
  if [[ "$line" == "host-device syncs: 1 per step on rank 0, all made by xlaunch itself ("*"inf/NaN check"*"); none by the training loop" ]]; then
    pass "fp16 without a sync in the loop: none of the loop's, and xlaunch's inf/NaN check 1 per step ($line)"
  else
    fail "fp16 without a sync in the loop: the report says '${line:-no host-device syncs line}', not 1 per step all made by xlaunch itself (the inf/NaN check) and none by the training loop"
  fi
else
  fail "the fp16 job without syncs failed (its log above)"
fi

if run det1 --deterministic && run det2 --deterministic; then
  grep -q 'deterministic: true: deterministic algorithms only' "$work/det1.log" &&
    pass "deterministic: true on the GPU: cuBLAS products run, and rank 0 says deterministic mode is on" ||
    fail "deterministic: true: no start-up line saying deterministic mode is on"
  a=$(grep -o 'mean_loss=[^ ]*' "$work/det1.log" | tail -1)
  b=$(grep -o 'mean_loss=[^ ]*' "$work/det2.log" | tail -1)
  [ -n "$a" ] && [ "$a" = "$b" ] && pass "deterministic: two runs end with the same loss ($a)" ||
    fail "deterministic: two runs end with different losses ('$a', '$b')"
else
  fail "a job under --deterministic failed on the GPU (its log above)"
fi
exit $((failures > 0))
