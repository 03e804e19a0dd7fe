#!/usr/bin/env bash
# Gymnasium 1.4 records its classic-control trajectories (gym_trace.py), then xlaunch's
# environments replay them (gym_equivalence_test.cpp). Fails, naming the fix, when python3 has no
# gymnasium 1.4.
#   usage: gym_equivalence_test.sh GYM_TRACE_PY REPLAY_BIN
set -u
trace_py=$1
replay=$2
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
python3 "$trace_py" "$work/trace.json" || { echo "FAIL: gym_trace.py could not record Gymnasium's trajectories"; exit 1; }
"$replay" --trace "$work/trace.json"
