#!/usr/bin/env bash
# Gymnasium 1.4 records its classic-control trajectories (gym_trace.py), then xlaunch's
# environments replay them (gym_equivalence_test.cpp). Fails, naming the fix, when python3 has no
# gymnasium 1.4.
# gym_vector_trace.py records its SyncVectorEnv, for TensorEnv's automatic reset.
#   usage: gym_equivalence_test.sh GYM_TRACE_PY GYM_VECTOR_TRACE_PY REPLAY_BIN
set -u
trace_py=$1
vector_py=$2
replay=$3
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
python3 "$trace_py" "$work/trace.json" || { echo "FAIL: gym_trace.py could not record Gymnasium's trajectories"; exit 1; }
python3 "$vector_py" "$work/vector.json" || { echo "FAIL: gym_vector_trace.py could not record Gymnasium's SyncVectorEnv"; exit 1; }
"$replay" --trace "$work/trace.json" --vector_trace "$work/vector.json"
