#!/usr/bin/env python3
"""TensorBoard's own reader as the oracle for xlaunch's event files.

  tensorboard_oracle_test.py TB_WRITE_EVENTS

TB_WRITE_EVENTS writes one run in two processes (tb_write_events.cpp): part 1 logs steps 0..99;
part 2, the next process, resumes at step 60 and logs 60..129, then resumes again in the same
process at 100 (part 3: 100..119). Read back with tensorboard's EventAccumulator (keeping every
event), the run must show:
- every record framed with valid masked CRC-32Cs (TensorBoard's masked_crc32c);
- every scalar's steps and values as logged, as float32 (NaN as NaN): steps 0..59 from part 1,
  60..99 from part 2, 100..119 from part 3, no step twice (the orphans were dropped), and
  "only_first" (part 1 only) up to step 59;
- the histograms' min/max/num/sum/sum_squares/buckets;
- the hyperparameters, as the hparams plugin's session_start_info (values of every kind) and as
  the text plugin's markdown table.

Fails (does not skip) when the tensorboard package is missing: scripts/install-deps.sh --test
installs it.
"""
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    from tensorboard.plugins.hparams import plugin_data_pb2
except ImportError as e:
    print(f"FAIL: {e}. Install the test peers: scripts/install-deps.sh --test", file=sys.stderr)
    sys.exit(1)

TOOL = sys.argv[1]
WALL_TIME0 = 1733300000.0
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


# The values tb_write_events logs, written out again.
def special(part, step):
    return [math.nan, math.inf, -math.inf, 1e39, -1e39, 1e-46, 3e-40,
            part * 1e10 + step / 7.0][step % 8]


def scalar(part, tag, step):
    return {"train/loss": lambda: part / (step + 3.0),
            "lr": lambda: 0.1 * step + 0.01 * part,
            "special": lambda: special(part, step),
            "only_first": lambda: float(step)}[tag]()


def histogram(part, step):
    return dict(min=-float(step), max=float(step + part), num=float(step + 1),
                sum=step * 0.5 + part, sum_squares=float(step * step),
                bucket_limit=[-1.0, 0.0, 1.0, sys.float_info.max], bucket=[1.0, 2.0, 3.0, float(step)])


def part_of(step):
    """Which part's record of `step` the run keeps after both resumptions."""
    return 1 if step < 60 else 2 if step < 100 else 3


def as_float32(x):
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(x))


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def read_records(path):
    """Every record's data, both CRCs checked the way TensorBoard's reader checks them."""
    data = open(path, "rb").read()
    records, at, ok = [], 0, True
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        ok = ok and len_crc == masked_crc32c(header) and body_crc == masked_crc32c(body)
        records.append(body)
        at += 16 + length
    return records, ok and at == len(data)


def main():
    with tempfile.TemporaryDirectory(prefix="xlaunch_tb_oracle.") as tmp:
        run = os.path.join(tmp, "oracle")
        files = []
        for part in ("first", "resume"):
            r = subprocess.run([TOOL, run, part], capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                sys.exit(f"FAIL: {TOOL} {run} {part} exited {r.returncode}:\n{r.stdout}{r.stderr}")
            files.append(r.stdout.strip())

        names = sorted(os.listdir(run))
        check(names == [os.path.basename(f) for f in files],
              f"two event files, the resumed process's sorting after the first's: {names}")
        for f in files:
            records, ok = read_records(f)
            check(ok and len(records) > 0, f"{os.path.basename(f)}: {len(records)} records, CRCs valid")
            first = event_pb2.Event.FromString(records[0])
            check(first.file_version == "brain.Event:2", f"{os.path.basename(f)} begins with brain.Event:2")

        acc = ea.EventAccumulator(run, size_guidance={k: 0 for k in ea.DEFAULT_SIZE_GUIDANCE})
        acc.Reload()
        tags = acc.Tags()

        check(sorted(tags["scalars"]) == ["lr", "only_first", "special", "train/loss"],
              f"scalar tags: {tags['scalars']}")
        for tag in ("train/loss", "lr", "special"):
            events = acc.Scalars(tag)
            steps = [e.step for e in events]
            check(steps == list(range(120)), f"{tag}: steps 0..119 once each, in order")
            bad = [(e.step, e.value, as_float32(scalar(part_of(e.step), tag, e.step))) for e in events
                   if not same(e.value, as_float32(scalar(part_of(e.step), tag, e.step)))]
            check(not bad, f"{tag}: every value as logged, as float32 (first mismatches: {bad[:3]})")
            bad_time = [e.step for e in events if e.wall_time != WALL_TIME0 + e.step]
            check(not bad_time, f"{tag}: wall times as logged")
        special_values = [e.value for e in acc.Scalars("special")]
        check(sum(math.isnan(v) for v in special_values) == 15
              and special_values.count(math.inf) == 30 and special_values.count(-math.inf) == 30,
              "special: NaN, +inf and -inf (and float32 overflow) kept as such")
        only = acc.Scalars("only_first")
        check([e.step for e in only] == list(range(60)) and all(e.value == e.step for e in only),
              "only_first: part 1's steps before the resumption only")

        histos = acc.Histograms("weights/w")
        check([h.step for h in histos] == list(range(0, 120, 10)), "weights/w: a histogram every 10 steps, once each")
        bad = []
        for h in histos:
            want = histogram(part_of(h.step), h.step)
            got = h.histogram_value
            got = dict(min=got.min, max=got.max, num=got.num, sum=got.sum, sum_squares=got.sum_squares,
                       bucket_limit=list(got.bucket_limit), bucket=list(got.bucket))
            if got != want:
                bad.append((h.step, got, want))
        check(not bad, f"weights/w: min/max/num/sum/sum_squares/buckets as logged {bad[:1]}")

        content = acc.PluginTagToContent("hparams")
        check(list(content) == ["_hparams_/session_start_info"], f"hparams plugin tags: {list(content)}")
        data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        info = data.session_start_info
        hp = {k: v.WhichOneof("kind") + "=" + repr(getattr(v, v.WhichOneof("kind"))) for k, v in info.hparams.items()}
        want = {"lr": "number_value=0.001", "batch_size": "number_value=64.0", "amp": "bool_value=True",
                "compile": "bool_value=False", "optimizer": "string_value='adamw'",
                "note": "string_value='a|b'", "tiny": "number_value=1e-300", "neg": "number_value=-2.5",
                "seed": "number_value=123456789012.0"}
        check(data.version == 0 and hp == want, f"hparams: every kind as given: {hp}")
        check(info.start_time_secs == WALL_TIME0, "hparams: start_time_secs")

        check("hparams/text_summary" in acc.PluginTagToContent("text"), "text plugin: hparams/text_summary")
        texts = acc.Tensors("hparams/text_summary")
        markdown = ("| name | value |\n|---|---|\n| amp | true |\n| batch_size | 64 |\n| compile | false |\n"
                    "| lr | 0.001 |\n| neg | -2.5 |\n| note | a\\|b |\n| optimizer | adamw |\n"
                    "| seed | 123456789012 |\n| tiny | 1e-300 |\n")
        check([t.step for t in texts] == [0, 60] and all(t.tensor_proto.string_val == [markdown.encode()]
                                                         for t in texts),
              "text plugin: the markdown table, once per process, at the steps where they began")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("all checks passed")


main()
