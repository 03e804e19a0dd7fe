"""The JSONL and CSV trackers' files read back by Python's own readers (json.loads per line,
csv.DictReader): every value equals what was logged (NaN, inf and -inf included), names that need
quoting or escaping come back as they were, empty CSV cells where a record left a name out, and a
resumed run shows each step once, the orphans of the first process gone.

    python3 tracked_files_test.py PATH/TO/tracked_files
"""
import csv
import json
import math
import subprocess
import sys
import tempfile

NAMES = ["train/loss", "lr", "a,b", 'say "hi"', "two\nlines", "\u00fcn\u00ef"]
UTILIZATION = ["xlaunch/steps_per_s", "xlaunch/data_wait"]
# xlaunch.csv's columns: every utilization scalar (docs/tracking.md), whichever a record holds.
UTILIZATION_COLUMNS = ["xlaunch/" + n for n in (
    "steps_per_s", "samples_per_s", "data_wait", "forward", "backward", "comm_wait", "optimizer", "other",
    "data_wait_max", "comm_wait_max", "cpu_cores", "gpu_busy", "gpu_sm")]


def value(phase, step, k):  # as tracked_files.cpp computes it
    if step % 5 == 3 and k == 0:
        return math.nan
    if step % 5 == 4 and k == 1:
        return math.inf
    if step % 5 == 0 and k == 2:
        return -math.inf
    return (step + 1) * (k + 1) / 7.0 + 100.0 * phase + k * 1e-3


def utilization(phase, step, k):
    return (step + 1) / 3.0 + phase + k


def expected_records():
    """(step, {name: value}) in the order the surviving records were logged."""
    out = []
    for phase, steps in ((1, range(0, 6)), (2, range(6, 13))):
        for step in steps:
            names = NAMES[:2] if step == 7 else NAMES
            out.append((step, {n: value(phase, step, k) for k, n in enumerate(names)}))
            if step % 5 == 0:
                out.append((step, {n: utilization(phase, step, k) for k, n in enumerate(UTILIZATION)}))
    return out


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def check_wall_time(t, where):
    check(isinstance(t, float) and math.isfinite(t) and t > 1e9, f"{where}: wall_time {t!r}")


def check_jsonl(path, expected):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    check(text.endswith("\n"), f"{path}: the last line has no newline")
    lines = text.splitlines()
    check(len(lines) == len(expected), f"{path}: {len(lines)} lines, expected {len(expected)}")
    for i, (line, (step, values)) in enumerate(zip(lines, expected)):
        rec = json.loads(line)
        where = f"{path} line {i + 1}"
        check(list(rec) == ["step", "wall_time"] + list(values), f"{where}: keys {list(rec)}")
        check(rec.get("step") == step and isinstance(rec.get("step"), int), f"{where}: step {rec.get('step')!r} != {step}")
        check_wall_time(rec.get("wall_time"), where)
        for name, v in values.items():
            check(name in rec and same(rec[name], v), f"{where}: {name!r} = {rec.get(name)!r}, logged {v!r}")


def check_csv(path, expected, columns):
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        check(reader.fieldnames == ["step", "wall_time"] + columns, f"{path}: header {reader.fieldnames}")
    check(len(rows) == len(expected), f"{path}: {len(rows)} rows, expected {len(expected)}")
    for i, (row, (step, values)) in enumerate(zip(rows, expected)):
        where = f"{path} row {i + 1}"
        check(int(row["step"]) == step, f"{where}: step {row['step']!r} != {step}")
        check_wall_time(float(row["wall_time"]), where)
        for name in columns:
            if name in values:
                check(same(float(row[name]), values[name]), f"{where}: {name!r} = {row[name]!r}, logged {values[name]!r}")
            else:
                check(row[name] == "", f"{where}: {name!r} = {row[name]!r}, not logged: expected an empty cell")


def main():
    program = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="xlaunch_tracked_files.") as run_dir:
        subprocess.run([program, run_dir], check=True, timeout=60)
        expected = expected_records()
        check_jsonl(f"{run_dir}/metrics.jsonl", expected)
        user = [(s, v) for s, v in expected if not next(iter(v)).startswith("xlaunch/")]
        util = [(s, v) for s, v in expected if next(iter(v)).startswith("xlaunch/")]
        check_csv(f"{run_dir}/metrics.csv", user, NAMES)
        check_csv(f"{run_dir}/xlaunch.csv", util, UTILIZATION_COLUMNS)
    if failures:
        print("\n".join(failures[:40]))
        print(f"FAILED: {len(failures)} checks")
        return 1
    print(f"ok: {len(expected)} records read back from metrics.jsonl, metrics.csv and xlaunch.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
