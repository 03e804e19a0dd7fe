#!/usr/bin/env bash
# Kornia 0.9 applies its ColorJitter and Normalize to chosen batches with explicit parameters
# (colour_kornia.py), then xlaunch's are compared with its outputs (colour_kornia_test.cpp). Fails,
# naming the fix, when python3 has no kornia 0.9.
#   usage: colour_kornia_test.sh COLOUR_KORNIA_PY TEST_BIN
set -u
cases_py=$1
test_bin=$2
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
python3 "$cases_py" "$work/cases.json" || { echo "FAIL: colour_kornia.py could not record Kornia's outputs"; exit 1; }
"$test_bin" --cases "$work/cases.json"
