#!/usr/bin/env bash
# Does following the report's advice give what it promises? Two 2-rank CPU jobs whose samples take
# 400 us each to make (tests/report/report_job.cpp), with loader.num_workers 1:
#   slow_storage: the samples wait (a sleep, as on slow storage): the report names
#     loader.num_workers, the count to raise it to and the gain ("from 1 to N", "up to Gx");
#   cpu_bound: the samples compute (--burn: 400 us of CPU each), so the ranks' loaders fill the
#     cores: the report must not promise a gain from more workers ("at most Gx", G about 1).
# Each case runs the job as it was and as the advice says (cpu_bound: with the 4 workers the old
# advice proposed), alternating, ROUNDS times, and prints the promised and the measured gain
# (the median of the rounds' samples/s ratios; samples/s of the slowest rank):
#   bench=advice case=C knob=loader.num_workers from=1 to=N data_wait_before=P cpu_before=U promised=Gx measured=Mx
# A job that fails, or a report with no loader advice line ("data wait ...") or no gain in it,
# fails the run: nothing is taken by default.
# Usage: scripts/bench/advice.sh   (BUILD_DIR, ROUNDS=3, STEPS=80 override)
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_bin launcher/xlaunch
need_bin tests/report/report_job
ROUNDS="${ROUNDS:-3}" STEPS="${STEPS:-80}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export XDG_CONFIG_HOME="$WORK/config" TMPDIR="$WORK"
unset XLAUNCH_CONFIG_FILE

# run NAME WORKERS JOB_ARGS... -> "samples_per_s data_wait_pct cpu_pct_sum" of the run; its
# advice lines in $WORK/NAME.advice
run() {
  local name=$1 workers=$2
  shift 2
  rm -rf "$WORK/logs-$name" && mkdir -p "$WORK/logs-$name"
  printf 'num_processes: 2\ndistributed_type: MULTI_CPU\nuse_cpu: true\nlog_dir: %s\nloader:\n  num_workers: %s\n' \
    "$WORK/logs-$name" "$workers" > "$WORK/$name.yaml"
  "$BUILD_DIR/launcher/xlaunch" run --config_file "$WORK/$name.yaml" "$BUILD_DIR/tests/report/report_job" \
    --steps "$STEPS" --batch 32 "$@" > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log" >&2; exit 1; }
  python3 - "$WORK/logs-$name/report.json" "$WORK/$name.advice" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
open(sys.argv[2], "w").write("\n".join(r["advice"]) + "\n")
ranks = [x for x in r["ranks"] if x["present"]]
if len(ranks) < 2:
    sys.exit(f"advice.sh: {sys.argv[1]} has {len(ranks)} ranks present, expected 2")
print(min(x["samples_per_s"] for x in ranks), max(x["phase_pct"]["data_wait"] for x in ranks),
      sum(x["cpu_pct"] for x in ranks))
EOF
}

# The loader line of an advice file: "to promised", the count it names ("from 1 to N") and the gain
# it promises ("up to Gx" or "at most Gx"). A case whose advice names no count (cpu_bound) passes
# the count to try as DEFAULT_TO; no line, no gain, or no count and no DEFAULT_TO: exits 1.
follow() {  # ADVICE_FILE [DEFAULT_TO]
  python3 - "$@" <<'EOF'
import re, sys
line = next((l for l in open(sys.argv[1]) if l.startswith("data wait")), None)
if line is None:
    sys.exit(f"advice.sh: the report gave no loader advice (no 'data wait' line) in {sys.argv[1]}")
to = re.search(r"loader\.num_workers from \d+ to (\d+)", line)
gain = re.search(r"(?:up to|at most) ([0-9.]+)x", line)
if gain is None or (to is None and len(sys.argv) < 3):
    sys.exit(f"advice.sh: the loader advice names no {'gain' if gain is None else 'worker count'}: {line.strip()}")
print(to.group(1) if to else sys.argv[2], gain.group(1))
EOF
}

bench_case() {  # NAME DEFAULT_TO JOB_ARGS...   (DEFAULT_TO "": the advice must name the count)
  local name=$1 default_to=$2 ratios=() to promised before wait cpu after line
  shift 2
  line=$(run "$name-1" 1 "$@")
  read -r before wait cpu <<<"$line"
  echo "# $name advice (workers 1): $(grep '^data wait' "$WORK/$name-1.advice" || true)"
  line=$(follow "$WORK/$name-1.advice" ${default_to:+"$default_to"})
  read -r to promised <<<"$line"
  for ((i = 0; i < ROUNDS; i++)); do
    if [ "$i" -gt 0 ]; then
      line=$(run "$name-1" 1 "$@")
      read -r before _ _ <<<"$line"
    fi
    line=$(run "$name-$to" "$to" "$@")
    read -r after _ _ <<<"$line"
    ratios+=("$(awk -v a="$after" -v b="$before" 'BEGIN {printf "%.3f", a / b}')")
  done
  echo "# $name ratios: ${ratios[*]}"
  awk -v n="$name" -v to="$to" -v w="$wait" -v c="$cpu" -v p="$promised" -v m="$(median "${ratios[@]}")" \
    'BEGIN {printf "bench=advice case=%s knob=loader.num_workers from=1 to=%s data_wait_before=%.1f%% cpu_before=%.0f%% promised=%.1fx measured=%.2fx\n", n, to, w, c, p, m}'
}

echo "# host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
bench_case slow_storage "" --get_us 400
bench_case cpu_bound 4 --get_us 400 --burn
