#!/usr/bin/env bash
# Does following the report's advice pay? A 2-rank job whose samples take 400 us each to make
# (tests/report/report_job.cpp) with loader.num_workers 1: the report finds the data wait and
# names loader.num_workers; the same job with the workers it suggests raising (4), same run:
#   bench=advice knob=loader.num_workers from=1 to=4 data_wait_before=P samples_per_s_before=X samples_per_s_after=Y ratio=R
# (target: R >= 1.5). Usage: scripts/bench/advice.sh   (BUILD_DIR overrides)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_bin launcher/xlaunch
need_bin tests/report/report_job
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export XDG_CONFIG_HOME="$WORK/config" TMPDIR="$WORK"
unset XLAUNCH_CONFIG_FILE

run() {  # workers -> "samples_per_s advice data_wait" of rank 0
  mkdir -p "$WORK/logs-$1"
  printf 'num_processes: 2\ndistributed_type: MULTI_CPU\nuse_cpu: true\nlog_dir: %s\nloader:\n  num_workers: %s\n' \
    "$WORK/logs-$1" "$1" > "$WORK/c$1.yaml"
  "$BUILD_DIR/launcher/xlaunch" run --config_file "$WORK/c$1.yaml" "$BUILD_DIR/tests/report/report_job" --steps 80 \
    --get_us 400 --batch 32 > "$WORK/run$1.log" 2>&1
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); x=min(r["ranks"], key=lambda x: x["samples_per_s"]); \
print(x["samples_per_s"], int("loader.num_workers" in " ".join(r["advice"])), max(y["phase_pct"]["data_wait"] for y in r["ranks"]))' \
    "$WORK/logs-$1/report.json"
}
read -r before advised wait < <(run 1)
read -r after _ _ < <(run 4)
[ "$advised" = 1 ] || echo "advice.sh: warning: the report did not name loader.num_workers" >&2
awk -v b="$before" -v a="$after" -v w="$wait" \
  'BEGIN {printf "bench=advice knob=loader.num_workers from=1 to=4 data_wait_before=%.1f%% samples_per_s_before=%.1f samples_per_s_after=%.1f ratio=%.2f\n", w, b, a, a / b}'
