#!/usr/bin/env bash
# The start-up deadline on simulated machines: scripts/bench/startup.sh's four cases (a daemon that
# exits before it calls back, a PATH without orted, a link cut before the job, a healthy job that
# outlives the deadline), each held to its bound: `xlaunch run` returns within startup_timeout_s +
# 10 s, non-zero, naming sim1; the healthy one exits 0; nothing of the job is left on any machine
# 10 s later. The script exits 1 when a case misses.
#   usage: startup_test.sh SOURCE_DIR BUILD_DIR
# Needs root and network/UTS/mount namespaces: exits 77 (skipped, saying why) without them; under
# CI=true that is a failure (tests/common/test_lib.sh, skip).
set -u
. "$(dirname "$0")/../common/test_lib.sh"
"$1/scripts/cluster/sim.sh" check || skip "this machine cannot simulate machines (sim.sh check says why above)"
BUILD_DIR=$2 LEFT_AFTER_S=10 exec "$1/scripts/bench/startup.sh"
