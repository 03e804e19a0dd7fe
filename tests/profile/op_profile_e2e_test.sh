#!/usr/bin/env bash
# The operator profile end to end: `xlaunch run --profile_ops 5 --record_shapes --trace DIR` on a
# 2-rank CPU job (tests/report/report_job.cpp: 3 linear layers, SGD). Each rank's table is printed
# after the utilization report, with its columns; report.json has both ranks' rows, each linear
# layer's addmm 5 times (once per profiled step) with its input shapes; trace.json has each rank's
# operator spans, with input shapes, inside that rank's profiled steps (steps 11-15) on the
# timeline's clock, forward's aten::addmm inside the rank's forward spans. Then report: false with a
# run that ends before its profiled steps do: partial tables, printed. Then with profile_ops off: no
# table, no "operators" key.
#   op_profile_e2e_test.sh XLAUNCH_BIN REPORT_JOB_BIN
set -uo pipefail
XLAUNCH=$1
JOB=$2
. "$(dirname "$0")/../common/test_lib.sh"
test_workdir
export XDG_CONFIG_HOME=$work/config TMPDIR=$work
unset XLAUNCH_CONFIG_FILE

mkdir -p "$work/logs" && mkdir -m 700 "$work/trace"
printf 'num_processes: 2\ndistributed_type: MULTI_CPU\nuse_cpu: true\nlog_dir: %s\n' "$work/logs" > "$work/job.yaml"
"$XLAUNCH" run --config_file "$work/job.yaml" --profile_ops 5 --record_shapes --trace "$work/trace" \
  "$JOB" --steps 30 --hidden 64 --layers 2 --features 32 --batch 32 > "$work/run.log" 2>&1 || fail "the profiled job ran"
cat "$work/run.log"

for r in 0 1; do
  grep -q "^xlaunch: operators of rank $r, steps 11-15 (LibTorch's profiler; share of all self CPU time " "$work/run.log" \
    && pass "rank $r's table is printed" || fail "rank $r's table is printed"
done
grep -Eq '^xlaunch:   name +calls +self CPU +CPU total +self CUDA +share  input shapes$' "$work/run.log" \
  && pass "the table's columns" || fail "the table's columns"
# After the utilization report: its first table line comes after the report's heading.
awk '/^xlaunch: utilization, steps/ {u = NR} /^xlaunch: operators of rank 0/ {o = NR} END {exit !(u && o > u)}' "$work/run.log" \
  && pass "printed after the utilization report" || fail "printed after the utilization report"

python3 - "$work/logs/report.json" "$work/trace/trace.json" <<'PY' && pass "report.json's operators and trace.json's operator spans" || fail "report.json / trace.json"
import json, sys
report = json.load(open(sys.argv[1]))
ops = report["operators"]
assert [t["rank"] for t in ops] == [0, 1], ops
for t in ops:
    assert t["first_step"] == 11 and t["steps"] == 5 and t["device"] == "cpu", t
    addmm = [r for r in t["rows"] if r["name"] == "aten::addmm"]
    # One row per layer (its own shapes), 5 calls each: once per profiled step.
    assert sorted(r["calls"] for r in addmm) == [5, 5, 5], addmm
    assert all(r["input_shapes"].startswith("[[") for r in addmm), addmm
    assert abs(sum(r["share"] for r in t["rows"]) - 1) < 0.5, "the rows kept hold most of the time"
    assert all(r["self_cpu_us"] <= r["cpu_total_us"] + 1e-6 for r in t["rows"]), t["rows"]

events = json.load(open(sys.argv[2]))["traceEvents"]
for rank in (0, 1):
    steps = [e for e in events if e.get("pid") == rank and e.get("ph") == "X" and e["name"] == "step"
             and 11 <= e.get("args", {}).get("step", 0) <= 15]
    assert len(steps) == 5, f"rank {rank}: steps 11-15 on the timeline: {len(steps)}"
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    spans = [e for e in events if e.get("pid") == rank and e.get("ph") == "X" and e.get("tid", 0) >= 200]
    assert len(spans) > 50, f"rank {rank}: {len(spans)} operator spans"
    assert any(e["name"] == "aten::addmm" and e["args"]["input_shapes"].startswith("[[") for e in spans)
    # On the timeline's clock: inside the profiled steps (to within 10 us, as below).
    outside = [e for e in spans if e["ts"] < lo - 10 or e["ts"] + e["dur"] > hi + 10]
    assert not outside, f"rank {rank}: {len(outside)} operator spans outside steps 11-15 [{lo}, {hi}]: {outside[:3]}"
    # Forward's matrix products inside the rank's own forward spans (backward's are aten::mm), to
    # within 10 us: LibTorch converts its own clock to wall time, which here lands 0.3-1.4 us
    # after the step clock's (the last layer's addmm "ends" that much after forward).
    forwards = [e for e in events if e.get("pid") == rank and e.get("ph") == "X" and e["name"] == "forward"]
    for a in (e for e in spans if e["name"] == "aten::addmm"):
        assert any(f["ts"] - 10 <= a["ts"] and a["ts"] + a["dur"] <= f["ts"] + f["dur"] + 10 for f in forwards), \
            f"rank {rank}: aten::addmm at {a['ts']} is in no forward span"
    names = [e for e in events if e.get("pid") == rank and e.get("ph") == "M" and e.get("tid") == 200]
    assert names and names[0]["args"]["name"].startswith("operators"), names
PY

# report: false, and a run that ends at step 13 of 11-15: the tables are printed all the same
# (xlaunch run reads them without a report), each saying it holds 3 of the 5 steps asked for
# (the rank stops its profiler when its Accelerator is destroyed).
printf 'num_processes: 2\ndistributed_type: MULTI_CPU\nuse_cpu: true\nreport: false\n' > "$work/noreport.yaml"
"$XLAUNCH" run --config_file "$work/noreport.yaml" --profile_ops 5 "$JOB" --steps 13 --hidden 64 --layers 2 \
  --features 32 --batch 32 > "$work/partial.log" 2>&1 || fail "the job with report: false ran"
cat "$work/partial.log"
! grep -q "^xlaunch: utilization, steps" "$work/partial.log" && pass "report: false: no utilization report" \
  || fail "report: false: no utilization report"
for r in 0 1; do
  grep -q "^xlaunch: operators of rank $r, steps 11-" "$work/partial.log" \
    && pass "report: false: rank $r's table is printed" || fail "report: false: rank $r's table is printed"
  grep -q "^xlaunch: operators of rank $r, steps 11-13, 3 of the 5 asked for (the rank ended first" "$work/partial.log" \
    && pass "rank $r's partial profile says so" || fail "rank $r's partial profile says so"
done

# Off (the default): no table, no key.
"$XLAUNCH" run --config_file "$work/job.yaml" "$JOB" --steps 30 --hidden 64 --layers 2 --features 32 --batch 32 \
  > "$work/off.log" 2>&1 || fail "the job without profile ran"
! grep -q "operators of rank" "$work/off.log" && python3 -c "import json,sys; sys.exit('operators' in json.load(open(sys.argv[1])))" "$work/logs/report.json" \
  && pass "profile_ops off: no table, no report.json key" || fail "profile_ops off"

test_finish
