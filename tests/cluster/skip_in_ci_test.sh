#!/usr/bin/env bash
# A test that could not run is not a pass in CI: the multi-machine tests, run where machines cannot
# be simulated (as an unprivileged user: sim.sh needs root), skip (exit 77, saying why) and, under
# CI=true, fail (exit 1) naming themselves and the reason.
#   usage: skip_in_ci_test.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
# $2 (the build directory) is not needed: each test stops before it looks there.
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
# The scripts as an unprivileged user reads them (the checkout may be in a directory only root enters).
chmod 755 "$work"
mkdir -p "$work/src/tests/cluster" "$work/src/tests/common" "$work/src/scripts/cluster"
cp "$src"/tests/cluster/*.sh "$work/src/tests/cluster/"
cp "$src/tests/common/test_lib.sh" "$work/src/tests/common/"
cp "$src/scripts/cluster/sim.sh" "$work/src/scripts/cluster/"
chmod -R a+rX "$work/src"
src=$work/src
as_user=()
if [ "$(id -u)" = 0 ]; then
  command -v setpriv >/dev/null || skip "setpriv not found (util-linux)"
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
for t in multimachine_test elastic_test zero_cluster_test startup_test; do
  (cd "$work" && "${as_user[@]}" env -u CI bash "$src/tests/cluster/$t.sh" "$src" "$work") >"$work/$t.log" 2>&1
  plain=$?
  (cd "$work" && "${as_user[@]}" env CI=true bash "$src/tests/cluster/$t.sh" "$src" "$work") >"$work/$t.ci.log" 2>&1
  ci=$?
  if [ "$plain" = 77 ] && grep -q "^SKIP this machine cannot simulate machines" "$work/$t.log"; then
    pass "$t without CI: skipped (77), saying why"
  else
    fail "$t without CI: want exit 77 and a SKIP line; got $plain" "$t"
  fi
  if [ "$ci" = 1 ] && grep -q "^FAIL $t could not run, and CI=true makes a skipped test a failure: this machine cannot simulate machines" "$work/$t.ci.log"; then
    pass "$t under CI=true: failed (1), naming itself and why"
  else
    fail "$t under CI=true: want exit 1 and a FAIL line naming it; got $ci" "$t.ci"
  fi
done
test_finish
