#!/usr/bin/env bash
# The shared-memory gradient allreduce when /dev/shm is too small, at each of its three stages:
# no room for the control block (the whole CPU allreduce uses MPI), for a bucket (that bucket uses
# MPI), or for the gradient pool (fresh gradients are copied into the buckets). Each time rank 0
# says so, and 2-rank training still equals one process. /dev/shm is shrunk in a private mount
# namespace, which needs root; elsewhere the test is skipped (exit 77).
# Usage: shm_fallback_test.sh MPIRUN PROGRAM [mpirun flags...], PROGRAM holding ddp_mpi_test.cpp
# (the MPI test group, tests/CMakeLists.txt).
set -uo pipefail
mpirun="$1" bin="$2"
shift 2
flags=("$@")
if [[ $(id -u) != 0 ]] || ! unshare --mount --propagation private true 2>/dev/null; then
  echo "SKIPPED: shrinking /dev/shm needs root and mount namespaces"
  exit 77
fi
status=0
check() {  # size expected-message
  local out
  out=$(unshare --mount --propagation private bash -c '
    mount -t tmpfs -o size="$1" tmpfs /dev/shm || exit 97
    shift
    exec "$@"' _ "$1" "$mpirun" "${flags[@]}" --mca btl_vader_backing_directory /tmp -np 2 "$bin" \
      --gtest_filter='Ddp/SgdSteps.*:Ddp.MlpGradients*:Ddp.GradientAccumulation*' 2>&1)
  local rc=$?
  if [[ $rc != 0 ]] || ! grep -q "PASSED.*4 tests" <<<"$out"; then
    echo "FAIL /dev/shm=$1: training did not match one process (exit $rc)"; echo "$out" | tail -30; status=1
  elif ! grep -q "$2" <<<"$out"; then
    echo "FAIL /dev/shm=$1: rank 0 did not say '$2'"; echo "$out" | grep xlaunch: | head; status=1
  else
    echo "ok /dev/shm=$1: $2"
  fi
}
check 8k "shared-memory gradient allreduce unavailable, using MPI"
check 40k "a gradient bucket falls back to MPI"
check 1m "no gradient pool; fresh gradients are copied into the buckets"
exit $status
