#!/usr/bin/env python3
"""The safetensors package as the oracle for xlaunch's safetensors files, both directions.

  safetensors_oracle_test.py SAFETENSORS_TOOL

1. What C++ writes, python reads: save_safetensors of every dtype (one file, and shards at a small
   limit) read with safetensors.torch.load_file and safe_open, compared bit for bit with the raw
   bytes the tool also wrote; the shard assignment compared with huggingface_hub's algorithm,
   written out again here; the header's padding and alignment.
2. What python writes, C++ reads: safetensors.torch.save_file of every dtype (one file, and two
   shards with an index the way huggingface_hub lays them out), read by load_safetensors and
   compared with raw bytes python wrote.
3. Killed saves: a save into a directory holding an earlier one, killed (SIGKILL) at each of its
   steps, leaves only whole files under final names, never an index mixing the two saves, and the
   other files of the directory; a later save cleans up.

Fails (does not skip) when the safetensors package is missing: scripts/install-deps.sh --test
installs it.
"""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"FAIL: {e}. Install the test peers: scripts/install-deps.sh --test", file=sys.stderr)
    sys.exit(1)

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64,
          "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U64": torch.uint64,
          "U32": torch.uint32, "U16": torch.uint16, "U8": torch.uint8, "BOOL": torch.bool}
NAME_OF = {v: k for k, v in DTYPES.items()}

TOOL = sys.argv[1]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def tool(*args, expect_rc=0):
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=300)
    if r.returncode != expect_rc:
        sys.exit(f"FAIL: {TOOL} {' '.join(map(str, args))} exited {r.returncode}, not {expect_rc}:\n"
                 f"{r.stdout}{r.stderr}")
    return r.stdout


def raw(t):
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist())


def expected(d):
    """name -> (dtype name, shape, bytes), in save order, from the tool's or our raw files."""
    out = {}
    for e in json.load(open(os.path.join(d, "expected.json"))):
        out[e["name"]] = (e["dtype"], e["shape"], open(os.path.join(d, e["file"]), "rb").read())
    return out


def matches(tensors, want):
    if set(tensors) != set(want):
        return False
    return all(NAME_OF[t.dtype] == want[n][0] and list(t.shape) == want[n][1] and raw(t) == want[n][2]
               for n, t in tensors.items())


def hub_shards(names_and_bytes, limit):
    """huggingface_hub's split_state_dict_into_shards_factory, without the storage sharing."""
    shards, current, current_size = [], [], 0
    for name, size in names_and_bytes:
        if size > limit:
            shards.append([name])
            continue
        if current_size + size > limit:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        shards.append(current)
    return shards


def header_of(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))


def cpp_to_python(work):
    exp = os.path.join(work, "expected1")
    os.makedirs(exp)
    tool("expect", exp, 1)
    want = expected(exp)

    single = os.path.join(work, "single")
    tool("save", single, 1, 1 << 30)
    path = os.path.join(single, "model.safetensors")
    check(sorted(os.listdir(single)) == ["model.safetensors"], "one file when everything fits")
    check(matches(load_file(path), want), "load_file reads every dtype and shape bit for bit")
    with safe_open(path, framework="pt") as f:
        check(f.metadata() == {"format": "pt", "producer": "xlaunch safetensors_tool", "seed": "1"},
              f"metadata {f.metadata()}")
    n, header = header_of(path)
    check(n % 8 == 0, f"header length {n} is a multiple of 8")
    check(all(v["data_offsets"][0] % torch.empty(0, dtype=DTYPES[v["dtype"]]).element_size() == 0
              for k, v in header.items() if k != "__metadata__"),
          "every tensor starts at a multiple of its element size")

    limit = 100  # F64 and I64 and U64 matrices (120 bytes) are larger: shards of their own
    sharded = os.path.join(work, "sharded")
    tool("save", sharded, 1, limit)
    index = json.load(open(os.path.join(sharded, "model.safetensors.index.json")))
    sizes = [(n, len(b)) for n, (_, _, b) in want.items()]
    shards = hub_shards(sizes, limit)
    count = len(shards)
    want_map = {n: f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i, s in enumerate(shards) for n in s}
    check(count > 2 and index["weight_map"] == want_map,
          f"{count} shards assigned as huggingface_hub assigns them")
    check(index["metadata"] == {"total_size": sum(s for _, s in sizes)}, f"total_size {index['metadata']}")
    check(sorted(os.listdir(sharded)) == sorted(set(want_map.values())) + ["model.safetensors.index.json"],
          "the shards and the index, nothing else")
    loaded = {}
    for file in sorted(set(want_map.values())):
        part = load_file(os.path.join(sharded, file))
        check(all(want_map[n] == file for n in part), f"{file} holds what the index maps to it")
        loaded.update(part)
    check(matches(loaded, want), "the shards together hold every tensor bit for bit")


def python_samples():
    g = torch.Generator().manual_seed(7)
    out = {}
    for name, dtype in DTYPES.items():
        for label, shape in [("scalar", []), ("empty", [0]), ("cube", [2, 3, 4]), ("row", [7])]:
            numel = 1
            for s in shape:
                numel *= s
            if dtype == torch.bool:
                t = torch.randint(0, 2, shape, generator=g, dtype=torch.uint8).bool()
            else:
                size = torch.empty(0, dtype=dtype).element_size()
                t = torch.randint(0, 256, [numel * size], generator=g, dtype=torch.uint8).view(dtype).reshape(shape)
            out[f"py.{name}.{label}"] = t
    return out


def write_expected(d, tensors):
    os.makedirs(d)
    listing = []
    for i, (n, t) in enumerate(tensors.items()):
        open(os.path.join(d, f"{i}.bin"), "wb").write(raw(t))
        listing.append({"name": n, "dtype": NAME_OF[t.dtype], "shape": list(t.shape), "file": f"{i}.bin"})
    json.dump(listing, open(os.path.join(d, "expected.json"), "w"))


def python_to_cpp(work):
    tensors = python_samples()
    exp = os.path.join(work, "py_expected")
    write_expected(exp, tensors)
    single = os.path.join(work, "py_single")
    os.makedirs(single)
    save_file(tensors, os.path.join(single, "model.safetensors"), metadata={"format": "pt"})
    out = tool("check", os.path.join(single, "model.safetensors"), exp)
    check("0 failures" in out, "load_safetensors reads save_file's file (every dtype) bit for bit")
    out = tool("check", single, exp)
    check("0 failures" in out, "load_safetensors reads a directory with model.safetensors")

    sharded = os.path.join(work, "py_sharded")
    os.makedirs(sharded)
    names = list(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(halves):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(sharded, file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(sharded, "model.safetensors.index.json"), "w"), indent=2)
    out = tool("check", sharded, exp)
    check("0 failures" in out, "load_safetensors reads python's shards through their index")


def final_names(d):
    return sorted(n for n in os.listdir(d) if not n.startswith("."))


def state_is_whole(d, old, new):
    """Every file under a final name whole; model.safetensors and the index each all-old or all-new."""
    names = final_names(d)
    if "config.json" not in names:
        return "config.json was removed"
    views = []
    if "model.safetensors" in names:
        views.append(("model.safetensors", load_file(os.path.join(d, "model.safetensors"))))
    for n in names:
        if n.endswith(".safetensors"):
            load_file(os.path.join(d, n))  # raises on a half-written file
    if "model.safetensors.index.json" in names:
        index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        merged = {}
        for file in set(index["weight_map"].values()):
            if file not in names:
                return f"the index names {file}, which is missing"
            part = load_file(os.path.join(d, file))
            if any(index["weight_map"].get(k) != file for k in part) or \
                    sum(1 for v in index["weight_map"].values() if v == file) != len(part):
                return f"{file} does not hold what the index maps to it"
            merged.update(part)
        views.append(("the index", merged))
    for label, tensors in views:
        if not (matches(tensors, old) or matches(tensors, new)):
            return f"{label} mixes the two saves"
    return None


def killed_saves(work, old_limit, new_limit, label):
    exp_old, exp_new = os.path.join(work, "exp_old"), os.path.join(work, "exp_new")
    for d, seed in [(exp_old, 1), (exp_new, 2)]:
        if not os.path.isdir(d):
            os.makedirs(d)
            tool("expect", d, seed)
    old, new = expected(exp_old), expected(exp_new)

    def fresh(name):
        d = os.path.join(work, name)
        os.makedirs(d)
        open(os.path.join(d, "config.json"), "w").write("{}\n")
        tool("save", d, 1, old_limit)
        return d

    d = fresh(f"{label}_events")
    events = [e for e in tool("save", d, 2, new_limit, "print").split("\n") if e]
    if new_limit > 1 << 20:
        layout = ["config.json", "model.safetensors"]
    else:
        index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        layout = sorted(["config.json", "model.safetensors.index.json", *set(index["weight_map"].values())])
    check(len(events) >= 3 and final_names(d) == layout,
          f"{label}: the new save's files, config.json, nothing of the old save ({len(events)} steps)")
    check(not any(n.startswith(".") for n in os.listdir(d)), f"{label}: no temporaries left")
    check(matches(load_any(d), new), f"{label}: the directory holds the new save")

    for i, event in enumerate(events):
        d = fresh(f"{label}_kill{i}")
        tool("save", d, 2, new_limit, event, expect_rc=-signal.SIGKILL)
        problem = state_is_whole(d, old, new)
        check(problem is None, f"{label}: killed after '{event}': {problem or 'whole files, no mixed save'}")
        tool("save", d, 2, new_limit)
        check(not any(n.startswith(".") for n in os.listdir(d)) and matches(load_any(d), new),
              f"{label}: killed after '{event}', then saved again: the new save, no leftovers")


def load_any(d):
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return load_file(os.path.join(d, "model.safetensors"))
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    out = {}
    for file in set(index["weight_map"].values()):
        out.update(load_file(os.path.join(d, file)))
    return out


def main():
    with tempfile.TemporaryDirectory(prefix="xlaunch_safetensors_oracle.") as work:
        cpp_to_python(work)
        python_to_cpp(work)
        # 1519 bytes of tensors: 4 shards at 400, 3 at 600.
        killed_saves(work, 400, 600, "sharded over sharded")
        killed_saves(work, 600, 1 << 30, "one file over sharded")
        killed_saves(work, 1 << 30, 600, "sharded over one file")
    print(f"{'FAIL' if failures else 'PASS'}: {len(failures)} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
