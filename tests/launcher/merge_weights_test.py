#!/usr/bin/env python3
"""`xlaunch merge-weights` against torch and the safetensors package as oracles.

  merge_weights_test.py XLAUNCH MERGE_WEIGHTS_JOB MPIEXEC [MPIEXEC_FLAGS...]

1. merge_weights_job saves a checkpoint on 2 ranks (two prepared models, buffers among them);
   merge-weights writes it; safetensors.torch.load_file reads model.safetensors and
   model_1.safetensors, and every tensor equals, bit for bit and in dtype, the one torch.load reads
   from the checkpoint's rank0/model_<i>.pt; the same for a checkpoint saved at ZeRO stage 2; at
   stage 3, the shards every rank saved (safetensors files), assembled by this test from
   model_0/layout.txt; and a stage-3 checkpoint turned into format 2 (its shards torch pickles, as
   the first stage-3 checkpoints were) merges into the same weights.
4. Streaming export (issue 44): a stage-3 checkpoint of a 1 GiB model (four 256 MiB parameters)
   merges with the process's peak memory at most 2 x its largest tensor above what the same
   program takes to merge a tiny model, and into the very bytes the job's own save_model wrote.
2. Sharded (--max_shard_size): the index's weight_map names files that exist and that together hold
   exactly the checkpoint's tensors; model_<i>'s files carry its stem.
3. Refused, with exit code 2, a message naming the problem and the fix, and nothing written: a
   missing directory, one that is not a checkpoint, a project directory, a torn checkpoint, an OUT
   that cannot be made, an OUT already holding model files (without --overwrite; with it, the
   earlier merge's files are replaced, shards and index included).

Fails (does not skip) when the safetensors package is missing: scripts/install-deps.sh --test
installs it.
"""
import filecmp
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

try:
    import torch
    from safetensors.torch import load_file
except ImportError as e:
    print(f"FAIL: {e}. Install the test peers: scripts/install-deps.sh --test", file=sys.stderr)
    sys.exit(1)

XLAUNCH, JOB = sys.argv[1], sys.argv[2]
MPIRUN = sys.argv[3:]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from py_checks import check, clean_up, failures, finish  # noqa: E402


def merge(*args):
    r = subprocess.run([XLAUNCH, "merge-weights", *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def same_tensors(got, want):
    """'' when the two dicts hold the same names, dtypes, shapes and bits; else what differs."""
    if set(got) != set(want):
        return f"names differ: {sorted(set(got) ^ set(want))}"
    for k, w in want.items():
        g = got[k]
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"{k}: {g.dtype} {tuple(g.shape)} vs {w.dtype} {tuple(w.shape)}"
        if not torch.equal(g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8)):
            return f"{k}: the bytes differ"
    return ""


def sharded(out, stem):
    """The tensors of a sharded model `stem` in out, read through its index, and the shard names."""
    with open(os.path.join(out, stem + ".safetensors.index.json")) as f:
        index = json.load(f)
    files = sorted(set(index["weight_map"].values()))
    tensors = {}
    for name in files:
        for k, v in load_file(os.path.join(out, name)).items():
            tensors[k] = v
            check(index["weight_map"][k] == name, f"{stem}: {k} is in the shard its index names")
    return tensors, files


def staging_left(out):
    return [n for n in os.listdir(out) if n.startswith(".xlaunch-merge-")] if os.path.isdir(out) else []


work = tempfile.mkdtemp(prefix="xlaunch_merge_weights.")
try:
    ckpt = os.path.join(work, "ckpt")
    env = dict(os.environ, OMP_NUM_THREADS="1", XLAUNCH_USE_CPU="1")
    r = subprocess.run([*MPIRUN, "-np", "2", JOB, "--save", ckpt, "--steps", "3"], capture_output=True, text=True,
                       env=env, timeout=300)
    check(r.returncode == 0 and os.path.isfile(os.path.join(ckpt, "MANIFEST")), "the job saved a checkpoint",
          r.stdout + r.stderr)
    if failures:
        sys.exit(1)
    # The files are the test's own, and LibTorch's pickler tags dicts with torch.jit's restore_type_tag,
    # which weights_only refuses.
    want = [torch.load(os.path.join(ckpt, "rank0", f"model_{i}.pt"), weights_only=False) for i in (0, 1)]
    check(any(v.dtype == torch.int64 for v in want[0].values()), "model 0's checkpoint holds an int64 buffer")

    # 1. One file per model.
    out = os.path.join(work, "out")
    rc, text = merge(ckpt, out)
    check(rc == 0, "merge-weights CHECKPOINT OUT", text)
    check(sorted(os.listdir(out)) == ["model.safetensors", "model_1.safetensors"], "OUT holds exactly the two files",
          str(os.listdir(out)))
    for i, name in enumerate(["model.safetensors", "model_1.safetensors"]):
        diff = same_tensors(load_file(os.path.join(out, name)), want[i])
        check(diff == "", f"{name} equals rank0/model_{i}.pt bit for bit", diff)
    check("model 1 of" in text and "model_1.safetensors" in text, "it says what it wrote", text)

    # 2. Sharded.
    shards = os.path.join(work, "sharded")
    rc, text = merge(ckpt, shards, "--max_shard_size", "40B")
    check(rc == 0, "merge-weights --max_shard_size 40B", text)
    for i, stem in enumerate(["model", "model_1"]):
        got, files = sharded(shards, stem)
        check(len(files) > 1 and all(f.startswith(stem + "-") for f in files), f"{stem} is in shards named {stem}-*",
              str(files))
        diff = same_tensors(got, want[i])
        check(diff == "", f"{stem}'s shards equal rank0/model_{i}.pt bit for bit", diff)
    check(not os.path.exists(os.path.join(shards, "model.safetensors")), "no single file beside the shards")

    # 3. Refusals.
    def refused(args, what, *parts):
        rc, text = merge(*args)
        check(rc == 2 and all(p in text for p in parts), what, f"exit {rc}: {text}")

    refused([os.path.join(work, "nowhere"), os.path.join(work, "o1")], "a missing directory is refused",
            "no checkpoint directory at", "give a directory save_state wrote")
    check(not os.path.exists(os.path.join(work, "o1")), "nothing was made for it")
    empty = os.path.join(work, "empty")
    os.mkdir(empty)
    refused([empty, os.path.join(work, "o2")], "a directory that is not a checkpoint is refused",
            "is not a complete xlaunch checkpoint", "MANIFEST is missing")
    project = os.path.join(work, "project")
    os.makedirs(os.path.join(project, "checkpoints"))
    refused([project, os.path.join(work, "o3")], "a project directory is refused, naming its checkpoints",
            "is a project directory", "checkpoints/checkpoint_<step>")
    torn = os.path.join(work, "torn")
    shutil.copytree(ckpt, torn)
    with open(os.path.join(torn, "rank0", "model_0.pt"), "r+b") as f:
        f.truncate(10)
    refused([torn, os.path.join(work, "o4")], "a torn checkpoint is refused, naming the file",
            "is corrupt", "rank0/model_0.pt", "merge a complete checkpoint")
    check(not os.path.exists(os.path.join(work, "o4")), "nothing was written for it")
    a_file = os.path.join(work, "a_file")
    open(a_file, "w").close()
    refused([ckpt, os.path.join(a_file, "out")], "an OUT that cannot be made is refused",
            "cannot make the output directory", "choose a directory you can write")
    refused([ckpt, a_file], "an OUT that is a file is refused", "cannot make the output directory")

    before = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
    refused([ckpt, out], "an OUT holding model files is refused without --overwrite",
            "already holds model files (model.safetensors, model_1.safetensors)", "--overwrite")
    after = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
    check(before == after, "and its files are left as they were")

    rc, text = merge(ckpt, shards, "--overwrite")
    check(rc == 0, "--overwrite replaces an earlier (sharded) merge", text)
    check(sorted(os.listdir(shards)) == ["model.safetensors", "model_1.safetensors"],
          "the earlier merge's shards and indexes are gone", str(os.listdir(shards)))
    check(same_tensors(load_file(os.path.join(shards, "model.safetensors")), want[0]) == "",
          "the new model.safetensors equals the checkpoint")
    for d in (out, shards):
        check(staging_left(d) == [], f"no staging directory left in {os.path.basename(d)}", str(staging_left(d)))

    # A checkpoint saved at ZeRO stage 2 (optimizer state and gradients sharded; the parameters,
    # and so rank0/model_<i>.pt, whole) merges the same way.
    ckpt2 = os.path.join(work, "ckpt_stage2")
    r = subprocess.run([*MPIRUN, "-np", "2", JOB, "--save", ckpt2, "--steps", "3"], capture_output=True, text=True,
                       env=dict(env, XLAUNCH_ZERO_STAGE="2"), timeout=300)
    check(r.returncode == 0, "the job saved a checkpoint at ZeRO stage 2", r.stdout + r.stderr)
    out2 = os.path.join(work, "out_stage2")
    rc, text = merge(ckpt2, out2)
    check(rc == 0, "merge-weights of the stage-2 checkpoint", text)
    for i, name in enumerate(["model.safetensors", "model_1.safetensors"]):
        want2 = torch.load(os.path.join(ckpt2, "rank0", f"model_{i}.pt"), weights_only=False)
        diff = same_tensors(load_file(os.path.join(out2, name)), want2) if rc == 0 else "not written"
        check(diff == "", f"stage 2: {name} equals rank0/model_{i}.pt bit for bit", diff)

    # At ZeRO stage 3 each rank keeps only its shard of the parameters (the Sequential's entries are
    # units), and saves it as it is: model_0/rank_<r>.safetensors, with model_0/layout.txt saying which
    # elements of which parameter each piece holds; rank0/model_0.pt keeps what is whole (buffers).
    # merge-weights assembles the model as trained: what the job's own save_model wrote, bit for
    # bit, and what this test assembles itself from the layout and torch.load of the shards.
    ckpt3 = os.path.join(work, "ckpt_stage3")
    model3 = os.path.join(work, "model_stage3")
    r = subprocess.run([*MPIRUN, "-np", "2", JOB, "--save", ckpt3, "--steps", "3", "--model_out", model3],
                       capture_output=True, text=True, env=dict(env, XLAUNCH_ZERO_STAGE="3"), timeout=300)
    check(r.returncode == 0, "the job saved a checkpoint at ZeRO stage 3", r.stdout + r.stderr)
    out3 = os.path.join(work, "out_stage3")
    rc, text = merge(ckpt3, out3)
    check(rc == 0, "merge-weights of the stage-3 checkpoint", text)
    r3_ok = rc == 0 and r.returncode == 0
    if r3_ok:
        merged = load_file(os.path.join(out3, "model.safetensors"))
        trained = load_file(os.path.join(model3, "model.safetensors"))
        check(same_tensors(merged, trained) == "", "stage 3: model.safetensors equals the job's save_model bit for bit",
              same_tensors(merged, trained))
        check(all(t.abs().sum().item() > 0 for k, t in merged.items() if k.endswith("weight")),
              "stage 3: every weight is whole, not a freed shard's zeros")
        whole = torch.load(os.path.join(ckpt3, "rank0", "model_0.pt"), weights_only=False)
        check(not any(k.endswith("weight") and "running" not in k for k in whole),
              "stage 3: rank0/model_0.pt holds no sharded parameter", str(sorted(whole)))
        assembled = dict(whole)
        shapes = {}
        for line in open(os.path.join(ckpt3, "model_0", "tensors.txt")).read().splitlines():
            words = line.split(" ")
            dims = int(words[2])
            shapes[" ".join(words[3 + dims:])] = (words[1], [int(d) for d in words[3:3 + dims]])
        flat = {n: torch.zeros(int(torch.tensor(s).prod().item()) if s else 1,
                               dtype={"Float": torch.float32, "Double": torch.float64}[d]) for n, (d, s) in shapes.items()}
        rank, piece, at, pieces = None, None, 0, {}
        for line in open(os.path.join(ckpt3, "model_0", "layout.txt")).read().splitlines():
            w = line.split(" ")
            if w[0] == "rank":
                rank, piece = int(w[1]), -1
                pieces = load_file(os.path.join(ckpt3, "model_0", f"rank_{rank}.safetensors"))
            elif w[0] == "piece":
                piece, at = piece + 1, 0
            elif w[0] == "segment":
                offset, length, name = int(w[1]), int(w[2]), " ".join(w[3:])
                flat[name][offset:offset + length] = pieces[f"piece.{piece}"][at:at + length]
                at += length
        for n, (d, s) in shapes.items():
            assembled[n] = flat[n].view(s)
        listing = sorted(os.listdir(os.path.join(ckpt3, "model_0")))
        shards = [f for f in listing if f.endswith(".safetensors")]
        check(len(shards) == 2 and listing == sorted(shards + [f + ".crc32" for f in shards] + ["layout.txt", "tensors.txt"]),
              "stage 3: one shard file per rank with its block CRC32s, a layout and the shapes", str(listing))
        for f in shards:  # the block CRC32s, against zlib's own over the file's blocks
            with open(os.path.join(ckpt3, "model_0", f), "rb") as fh:
                data = fh.read()
            with open(os.path.join(ckpt3, "model_0", f + ".crc32")) as fh:
                words = fh.read().split()
            magic, block, size, crcs = words[0], int(words[1]), int(words[2]), words[3:]
            want = [f"{zlib.crc32(data[i:i + block]) & 0xffffffff:08x}" for i in range(0, len(data), block)]
            check(magic == "xlaunch-block-crc32" and size == len(data) and crcs == want,
                  f"stage 3: {f}.crc32 holds zlib's CRC32 of each {block}-byte block of {f}", " ".join(words[:3]))
        check(same_tensors(merged, assembled) == "",
              "stage 3: model.safetensors equals the shards assembled from layout.txt bit for bit",
              same_tensors(merged, assembled))

    # 4. Streaming export: merge-weights never holds the model, only the parameter it assembles.
    #    The bare process: the same program merging the tiny checkpoint above.
    def peak_rss_kb(*args):
        """Exit code, output and peak resident memory (KiB) of `xlaunch merge-weights ARGS`."""
        code = ("import resource, subprocess, sys\n"
                "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
                "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
                "sys.stdout.write(r.stdout + r.stderr)\n")
        r = subprocess.run([sys.executable, "-c", code, XLAUNCH, "merge-weights", *args], capture_output=True,
                           text=True, timeout=600)
        first, _, rest = r.stdout.partition("\n")
        rc, kb = (int(w) for w in first.split())
        return rc, rest + r.stderr, kb

    rc, text, bare_kb = peak_rss_kb(ckpt, os.path.join(work, "bare"))
    check(rc == 0, "merge-weights of the tiny checkpoint (the bare process)", text)
    big_ckpt = os.path.join(work, "ckpt_big")
    big_model = os.path.join(work, "model_big")
    width = 8192  # four 8192 x 8192 fp32 weights: 1 GiB, the largest tensor 256 MiB
    r = subprocess.run([*MPIRUN, "-np", "2", JOB, "--save", big_ckpt, "--steps", "1", "--big_width", str(width),
                        "--model_out", big_model], capture_output=True, text=True,
                       env=dict(env, XLAUNCH_ZERO_STAGE="3"), timeout=600)
    check(r.returncode == 0, "the job saved a 1 GiB model's checkpoint at ZeRO stage 3", r.stdout + r.stderr)
    if r.returncode == 0:
        big_out = os.path.join(work, "out_big")
        rc, text, big_kb = peak_rss_kb(big_ckpt, big_out)
        check(rc == 0, "merge-weights of the 1 GiB stage-3 checkpoint", text)
        largest_kb = width * width * 4 // 1024
        print(f"    peak {big_kb} KiB, bare {bare_kb} KiB, largest tensor {largest_kb} KiB")
        check(big_kb - bare_kb <= 2 * largest_kb,
              f"merge-weights' peak memory above the bare process ({(big_kb - bare_kb) // 1024} MiB) is at most "
              f"2 x the largest tensor ({2 * largest_kb // 1024} MiB)")
        check(rc == 0 and filecmp.cmp(os.path.join(big_out, "model.safetensors"),
                                      os.path.join(big_model, "model.safetensors"), shallow=False),
              "the merged model.safetensors is byte for byte what the job's save_model wrote")
        shutil.rmtree(big_ckpt, ignore_errors=True)
        shutil.rmtree(big_out, ignore_errors=True)
        shutil.rmtree(big_model, ignore_errors=True)

    # A stage-3 checkpoint of format_version 2 (the first ones, whose shards were torch pickles,
    # model_<i>/rank_<r>.pt) still merges, into the same weights.
    if r3_ok:
        ckpt3_v2 = os.path.join(work, "ckpt_stage3_v2")
        shutil.copytree(ckpt3, ckpt3_v2)
        entries = {}
        with open(os.path.join(ckpt3_v2, "MANIFEST")) as f:
            header, *lines = f.read().splitlines()  # "xlaunch-checkpoint 1", then "crc32 bytes path"
            for line in lines:
                crc, size, path = line.split(" ", 2)
                entries[path] = line

        def rewrite(path, data):
            with open(os.path.join(ckpt3_v2, path), "wb") as f:
                f.write(data)
            entries[path] = f"{zlib.crc32(data) & 0xffffffff:08x} {len(data)} {path}"

        for path in [p for p in entries if p.startswith("model_") and "/rank_" in p and p.endswith(".safetensors")]:
            buffer = io.BytesIO()
            torch.save(load_file(os.path.join(ckpt3_v2, path)), buffer)
            os.remove(os.path.join(ckpt3_v2, path))
            del entries[path]
            rewrite(path[:-len(".safetensors")] + ".pt", buffer.getvalue())
        with open(os.path.join(ckpt3_v2, "rank0", "trainer_state.txt")) as f:
            state = f.read()
        check("format_version 3" in state, "a stage-3 checkpoint says format_version 3")
        rewrite("rank0/trainer_state.txt", state.replace("format_version 3", "format_version 2").encode())
        with open(os.path.join(ckpt3_v2, "MANIFEST"), "w") as f:
            f.write(header + "\n" + "".join(entries[p] + "\n" for p in sorted(entries)))
        out3_v2 = os.path.join(work, "out_stage3_v2")
        rc, text = merge(ckpt3_v2, out3_v2)
        check(rc == 0, "merge-weights of a format-2 stage-3 checkpoint (pickled shards)", text)
        if rc == 0:
            for name in ("model.safetensors", "model_1.safetensors"):
                check(same_tensors(load_file(os.path.join(out3_v2, name)), load_file(os.path.join(out3, name))) == "",
                      f"format 2: {name} holds the same weights as the format-3 checkpoint's merge")

    rc, text = merge("--help")
    check(rc == 0 and "CHECKPOINT" in text and "--overwrite" in text and "--max_shard_size" in text,
          "xlaunch merge-weights --help", text)
    r = subprocess.run([XLAUNCH, "--help"], capture_output=True, text=True)
    check("merge-weights" in r.stdout + r.stderr, "xlaunch --help lists merge-weights", r.stdout + r.stderr)
finally:
    clean_up(work)

finish()
