#!/usr/bin/env python3
"""Accelerate 1.15's own `accelerate config` files, run by xlaunch or refused naming the key.

  accelerate_files_test.py XLAUNCH MERGE_WEIGHTS_JOB

Each file is written by Accelerate's own code: the questions of `accelerate config`
(accelerate.commands.config.cluster.get_cluster_input), its converters and its writer
(ClusterConfig.to_yaml_file), with only the terminal replaced: its menus and prompts are answered from
a table here, and a question not in the table takes Accelerate's default. Then:
- `xlaunch launch --cpu --dry_run --config_file F` runs it (exit 0) with the settings the FSDP or
  DeepSpeed answers mean (XLAUNCH_ZERO_STAGE, XLAUNCH_FSDP_*), and says what each became in a note at
  the start; or refuses it (exit 2) naming the key and the reason (CPU offload: not
  built; hybrid sharding on one machine);
- one of them (FSDP 2, NO_WRAP) runs for real: a 2-rank job at stage 3 whose checkpoint holds the
  ranks' shards.

Fails (does not skip) when accelerate is missing: scripts/install-deps.sh --test installs it.
"""
import os
import subprocess
import sys
import tempfile

try:
    import accelerate
    import accelerate.commands.config.cluster as cluster
except ImportError as e:
    print(f"FAIL: {e}. Install the test peers: scripts/install-deps.sh --test", file=sys.stderr)
    sys.exit(1)

XLAUNCH, JOB = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from py_checks import check, clean_up, finish  # noqa: E402


def accelerate_config(path, answers):
    """Writes `path` as `accelerate config` does when its questions get `answers` (question text ->
    answer: an option's text for a menu, what is typed for a prompt); the rest take the defaults."""
    asked = []

    def answer_to(text):
        for question, answer in answers.items():
            if question in text:
                return answer
        return None

    def ask_field(input_text, convert_value=None, default=None, error_message=None):
        typed = answer_to(input_text)
        asked.append(input_text)
        if typed is None:
            if default is not None:
                return default
            typed = ""
        return convert_value(typed) if convert_value is not None else typed

    def ask_options(input_text, options=[], convert_value=None, default=0):
        chosen = answer_to(input_text)
        asked.append(input_text)
        index = default if chosen is None else [str(o) for o in options].index(str(chosen))
        return convert_value(index) if convert_value is not None else index

    cluster._ask_field, cluster._ask_options = ask_field, ask_options
    cluster.is_deepspeed_available = lambda: True  # its writer does not need DeepSpeed itself
    cluster.get_cluster_input().to_yaml_file(path)
    unused = [q for q in answers if not any(q in text for text in asked)]
    check(not unused, f"{os.path.basename(path)}: Accelerate asked every question answered", str(unused))


def dry_run(path):
    r = subprocess.run([XLAUNCH, "launch", "--cpu", "--dry_run", "--config_file", path, "true"], capture_output=True,
                       text=True, timeout=60)
    exports = {}
    for line in r.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            exports[key] = value
    return r.returncode, r.stdout + r.stderr, exports


GPU_JOB = {"Which type of machine": "multi-GPU", "How many GPU(s)": "2", "How many different machines": "1"}
FSDP = dict(GPU_JOB, **{"FullyShardedDataParallel": "yes"})
FSDP1 = dict(FSDP, **{"FSDP version": "1"})
DEEPSPEED = dict(GPU_JOB, **{"use DeepSpeed": "yes"})

# name, answers, what xlaunch runs it as (XLAUNCH_* values), or the words its refusal must hold.
RUNS = [
    ("fsdp2_defaults", dict(FSDP, **{"transformer layer class names": "Block"}),
     {"XLAUNCH_ZERO_STAGE": "3", "XLAUNCH_FSDP_RESHARD_AFTER_FORWARD": "1", "XLAUNCH_FSDP_WRAP": "type:Block"}),
    ("fsdp2_no_reshard", dict(FSDP, **{"resharding after forward": "no", "auto wrap policy": "NO_WRAP"}),
     {"XLAUNCH_ZERO_STAGE": "3", "XLAUNCH_FSDP_RESHARD_AFTER_FORWARD": "0", "XLAUNCH_FSDP_WRAP": "none"}),
    ("fsdp2_size_wrap", dict(FSDP, **{"auto wrap policy": "SIZE_BASED_WRAP", "minimum number of parameters": "5000",
                                      "activation checkpointing": "yes", "mixed precision": "bf16"}),
     {"XLAUNCH_ZERO_STAGE": "3", "XLAUNCH_FSDP_WRAP": "size:5000", "XLAUNCH_FSDP_ACTIVATION_CHECKPOINTING": "1",
      "XLAUNCH_MIXED_PRECISION": "bf16"}),
    ("fsdp1_full_shard", dict(FSDP1, **{"sharding strategy": "FULL_SHARD"}),
     {"XLAUNCH_ZERO_STAGE": "3", "XLAUNCH_FSDP_RESHARD_AFTER_FORWARD": "1"}),
    ("fsdp1_shard_grad_op", dict(FSDP1, **{"sharding strategy": "SHARD_GRAD_OP"}),
     {"XLAUNCH_ZERO_STAGE": "3", "XLAUNCH_FSDP_RESHARD_AFTER_FORWARD": "0"}),
    ("fsdp1_no_shard", dict(FSDP1, **{"sharding strategy": "NO_SHARD"}), {"XLAUNCH_ZERO_STAGE": "0"}),
    ("deepspeed_zero3", dict(DEEPSPEED, **{"ZeRO optimization stage": "3"}), {"XLAUNCH_ZERO_STAGE": "3"}),
    ("deepspeed_zero2", dict(DEEPSPEED, **{"ZeRO optimization stage": "2"}), {"XLAUNCH_ZERO_STAGE": "2"}),
]
REFUSED = [
    # Hybrid sharding maps to ddp.shard_group machine (config_accelerate_test checks the mapping on two
    # machines); these files are for one machine, where it is refused saying why.
    ("fsdp1_hybrid_shard", dict(FSDP1, **{"sharding strategy": "HYBRID_SHARD"}),
     ["ddp.shard_group", "HYBRID_SHARD", "the machine is the whole job"]),
    ("fsdp1_hybrid_shard_zero2", dict(FSDP1, **{"sharding strategy": "HYBRID_SHARD_ZERO2"}),
     ["ddp.shard_group", "HYBRID_SHARD", "the machine is the whole job"]),
    ("fsdp2_offload", dict(FSDP, **{"offload parameters and gradients to CPU": "yes"}),
     ["fsdp_config.fsdp_offload_params", "offloading"]),
    ("deepspeed_offload_optimizer", dict(DEEPSPEED, **{"ZeRO optimization stage": "3",
                                                       "offload optimizer states": "cpu"}),
     ["offload_optimizer_device"]),
    ("deepspeed_offload_params", dict(DEEPSPEED, **{"ZeRO optimization stage": "3", "offload parameters": "cpu"}),
     ["offload_param_device"]),
]

print(f"accelerate {accelerate.__version__}")
work = tempfile.mkdtemp(prefix="xlaunch_accelerate_files.")
try:
    for name, answers, want in RUNS:
        path = os.path.join(work, name + ".yaml")
        accelerate_config(path, answers)
        rc, text, exports = dry_run(path)
        check(rc == 0, f"{name}: xlaunch runs Accelerate's file", text)
        got = {k: exports.get(k) for k in want}
        check(got == want, f"{name}: it runs as {want}", f"got {got}\n{open(path).read()}")
        check("xlaunch: note: accelerate config:" in text, f"{name}: the start says what the file's settings became",
              text)
    for name, answers, words in REFUSED:
        path = os.path.join(work, name + ".yaml")
        accelerate_config(path, answers)
        rc, text, exports = dry_run(path)
        check(rc == 2 and all(w in text for w in words), f"{name}: refused naming {words}", f"exit {rc}: {text}")
        check(not exports, f"{name}: nothing is launched")

    # One of them for real: 2 ranks at stage 3 (NO_WRAP: each of the job's two models one unit, its
    # root), each rank saving its shard of the parameters.
    save = os.path.join(work, "ckpt")
    r = subprocess.run([XLAUNCH, "launch", "--cpu", "--config_file", os.path.join(work, "fsdp2_no_reshard.yaml"),
                        "--mixed_precision", "no", JOB, "--save", save, "--steps", "2"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    check(r.returncode == 0, "fsdp2_no_reshard runs a 2-rank job", r.stdout + r.stderr)
    shards = sorted(os.listdir(os.path.join(save, "model_0"))) if os.path.isdir(os.path.join(save, "model_0")) else []
    check(shards == ["layout.txt", "rank_0.safetensors", "rank_0.safetensors.crc32", "rank_1.safetensors",
                     "rank_1.safetensors.crc32", "tensors.txt"],
          "its checkpoint holds both ranks' shards of the parameters, each with its block CRC32s (ddp.zero_stage 3)",
          str(shards))
finally:
    clean_up(work)

finish()
