# Sourced by the test scripts (tests/*/*_test.sh) for what they all do: a scratch directory, PASS
# and FAIL lines with a count, and the ending that says how many failed and keeps their files.
#   test_workdir        $work: a fresh directory, /tmp/xlaunch_<script>.XXXXXX; removed at exit when
#                       no check failed, kept for a look when one did. A script that has more to
#                       undo at exit (simulated machines) defines test_on_exit, which runs first.
#   pass WHAT           prints "PASS WHAT"
#   fail WHAT [LOG]     prints "FAIL WHAT", then $work/LOG.log indented; counts the failure
#   test_finish         "<script>: all passed", or "<script>: N failed; files kept in $work" and exit 1
#   skip WHY            the test cannot run here: "SKIP WHY" and exit 77 (ctest: skipped); under
#                       CI=true a failure instead ("FAIL <script> could not run ...", exit 1), so that
#                       a green CI run means every such test ran
# Usage: . "$(dirname "$0")/../common/test_lib.sh"
test_name=$(basename "$0" .sh)
failures=0

pass() { echo "PASS $1"; }
fail() {
  echo "FAIL $1"
  [ -n "${2:-}" ] && sed 's/^/    /' "$work/$2.log"
  failures=$((failures + 1))
}

skip() {
  if [ "${CI:-}" = true ]; then
    echo "FAIL $test_name could not run, and CI=true makes a skipped test a failure: $1"
    exit 1
  fi
  echo "SKIP $1"
  exit 77
}

_test_exit() {
  declare -F test_on_exit >/dev/null && test_on_exit
  [ "$failures" -eq 0 ] && rm -rf "$work"
  return 0
}
test_workdir() {
  work=$(mktemp -d "/tmp/xlaunch_$test_name.XXXXXX")
  trap _test_exit EXIT
  trap 'exit 130' INT TERM HUP  # so that the exit trap runs when the test is stopped
}

test_finish() {
  if [ "$failures" -eq 0 ]; then
    echo "$test_name: all passed"
    exit 0
  fi
  echo "$test_name: $failures failed; files kept in $work"
  exit 1
}
