"""Reads what tracking_job_test.sh's runs logged, with TensorBoard's own reader (EventAccumulator),
json and csv, and compares it with what the ranks computed (their .rank<r> files).

usage: check_tracking.py WORK   (WORK/straight and WORK/resumed are project_dirs; the run is
track_job, so the files are in WORK/<name>/track_job)"""
import csv
import glob
import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator, event_file_loader
from tensorboard.plugins.hparams import plugin_data_pb2

work = sys.argv[1]
STEPS = list(range(1, 25))  # 128 samples / 2 ranks / batch 8 = 8 steps an epoch, 3 epochs
errors = []


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def expect(cond, what):
    if not cond:
        errors.append(what)


def rank_values(name):
    """{step: (loss, max_loss)} per rank; a step logged twice (a resumed job) keeps the last."""
    out = []
    for r in range(2):
        d = {}
        for line in open(f"{work}/{name}.values.rank{r}"):
            s, l, m = line.split()
            d[int(s)] = (float(l), float(m))
        out.append(d)
    return out


def accumulator(run_dir):
    ea = event_accumulator.EventAccumulator(
        run_dir, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    ea.Reload()
    return ea


def scalars(ea, tag):
    return [(e.step, e.value) for e in ea.Scalars(tag)]


def check_run(name, mixed, files):
    run_dir = f"{work}/{name}/track_job"
    ranks = rank_values(name)
    mean = {s: (0.0 + ranks[0][s][0] + ranks[1][s][0]) / 2 for s in STEPS}
    events = glob.glob(f"{run_dir}/events.out.tfevents.*")
    expect(len(events) == files, f"{name}: {len(events)} event files, expected {files} (one per attempt, rank 0 only)")
    ea = accumulator(run_dir)
    tags = ea.Tags()
    loss = scalars(ea, "train/loss")
    expect([s for s, _ in loss] == STEPS, f"{name}: train/loss steps {[s for s, _ in loss]}")
    for s, v in loss:
        expect(v == f32(mean[s]), f"{name}: train/loss at {s} is {v}, the ranks' mean is {mean[s]}")
    lr = scalars(ea, "lr")
    expect([s for s, _ in lr] == STEPS and all(v == f32(0.1) for _, v in lr), f"{name}: lr {lr[:3]}...")
    if mixed:
        mx = scalars(ea, "train/max_loss")
        expect([s for s, _ in mx] == STEPS, f"{name}: train/max_loss steps {[s for s, _ in mx]}")
        for s, v in mx:
            expect(v == f32(max(ranks[0][s][1], ranks[1][s][1])), f"{name}: train/max_loss at {s} is {v}")
    util = scalars(ea, "xlaunch/steps_per_s")
    expect([s for s, _ in util] == [4, 8, 12, 16, 20, 24], f"{name}: xlaunch/steps_per_s at steps {[s for s, _ in util]}")
    expect(all(v > 0 for _, v in util), f"{name}: steps_per_s {util}")
    for t in ("xlaunch/samples_per_s", "xlaunch/data_wait", "xlaunch/comm_wait", "xlaunch/forward",
              "xlaunch/backward", "xlaunch/optimizer", "xlaunch/other", "xlaunch/cpu_cores"):
        expect(t in tags["scalars"], f"{name}: no {t} among {tags['scalars']}")
    if "xlaunch/samples_per_s" in tags["scalars"]:
        # 16 samples a step (8 per rank) at steps_per_s: the two agree.
        for (s, sps), (_, smp) in zip(util, scalars(ea, "xlaunch/samples_per_s")):
            expect(abs(smp - 16 * sps) <= 1e-3 * smp, f"{name}: samples_per_s {smp} against 16 x {sps} at {s}")
    # The hyperparameters: the HPARAMS plugin's session start and the text.
    try:
        content = ea.PluginTagToContent("hparams")
    except KeyError:
        content = {}
    start = None
    for tag, blob in content.items():
        data = plugin_data_pb2.HParamsPluginData.FromString(blob)
        if data.HasField("session_start_info"):
            start = data.session_start_info
    expect(start is not None, f"{name}: no hparams session_start_info (tags {list(content)})")
    if start is not None:
        hp = start.hparams
        expect(hp["lr"].number_value == 0.1 and hp["batch_size"].number_value == 8 and
               hp["optimizer"].string_value == "sgd" and hp["momentum"].bool_value is True, f"{name}: hparams {hp}")
    expect(any("text" in t or "hparams" in t for t in tags["tensors"]), f"{name}: no text summary among {tags['tensors']}")
    # metrics.jsonl: one line per call, the same numbers as doubles.
    rows = [json.loads(l) for l in open(f"{run_dir}/metrics.jsonl")]
    jl = [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r]
    expect([s for s, _ in jl] == STEPS, f"{name}: metrics.jsonl train/loss steps {[s for s, _ in jl]}")
    for s, v in jl:
        expect(v == mean[s], f"{name}: metrics.jsonl train/loss at {s} is {v!r}, the ranks' mean is {mean[s]!r}")
    return {s: v for s, v in loss}


straight = check_run("straight", mixed=False, files=1)
ea = accumulator(f"{work}/straight/track_job")
hist = [h.step for h in ea.Histograms("weights/0.weight")] if "weights/0.weight" in ea.Tags()["histograms"] else []
expect(hist == [8, 16, 24], f"straight: weights/0.weight histograms at {hist} ({ea.Tags()['histograms'][:4]})")
if "grads/0.weight" in ea.Tags()["histograms"]:
    h = ea.Histograms("grads/0.weight")[0].histogram_value
    expect(h.num == 16 * 8 and h.min <= h.max and sum(h.bucket) == h.num, f"straight: grads histogram {h}")
else:
    errors.append("straight: no grads/0.weight histogram")
rows = list(csv.DictReader(open(f"{work}/straight/track_job/metrics.csv")))
expect([int(r["step"]) for r in rows] == STEPS, f"straight: metrics.csv steps {[r['step'] for r in rows]}")
ranks = rank_values("straight")
for r in rows:
    s = int(r["step"])
    expect(float(r["train/loss"]) == (0.0 + ranks[0][s][0] + ranks[1][s][0]) / 2 and float(r["lr"]) == 0.1,
           f"straight: metrics.csv row {r}")
xl = list(csv.DictReader(open(f"{work}/straight/track_job/xlaunch.csv")))
expect([int(r["step"]) for r in xl] == [4, 8, 12, 16, 20, 24], f"straight: xlaunch.csv steps {[r['step'] for r in xl]}")

resumed = check_run("resumed", mixed=True, files=2)
# The first attempt's file holds the orphans (steps 9 and 10, after the checkpoint of step 8) that
# the view above no longer shows twice.
first = sorted(glob.glob(f"{work}/resumed/track_job/events.out.tfevents.*"))[0]
orphan_steps = sorted({e.step for e in event_file_loader.EventFileLoader(first).Load()
                       if e.HasField("summary") and any(v.tag == "train/loss" for v in e.summary.value)})
expect(orphan_steps[-2:] == [9, 10], f"resumed: the first attempt logged train/loss at {orphan_steps}, expected up to 10")
expect(resumed == straight, "resumed: the losses differ from the straight run's: " +
       str([(s, straight.get(s), resumed.get(s)) for s in STEPS if straight.get(s) != resumed.get(s)][:4]))

if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"checked {len(STEPS)} steps of 2 runs: TensorBoard, metrics.jsonl, metrics.csv, xlaunch.csv")
