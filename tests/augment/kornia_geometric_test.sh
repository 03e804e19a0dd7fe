#!/usr/bin/env bash
# Kornia 0.9 records its geometric augmentations with its own parameters (kornia_geometric.py),
# then xlaunch applies the same parameters (kornia_geometric_test.cpp). Fails, naming the fix, when
# python3 has no kornia 0.9.
#   usage: kornia_geometric_test.sh KORNIA_GEOMETRIC_PY TEST_BIN
set -u
record_py=$1
test_bin=$2
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
python3 "$record_py" "$work" || { echo "FAIL: kornia_geometric.py could not record Kornia's augmentations"; exit 1; }
"$test_bin" --cases "$work"
