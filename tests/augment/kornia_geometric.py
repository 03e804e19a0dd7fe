#!/usr/bin/env python3
"""Records Kornia 0.9's geometric augmentations, for kornia_geometric_test.

usage: kornia_geometric.py OUT_DIR

Each case makes one Kornia augmentation with the keyword arguments listed (the same ones
augment::make takes), lets Kornia draw its own parameters (seeded) for a seeded random batch in
[0, 1], and runs it. OUT_DIR/cases.json lists the cases (name, Kornia class, keyword arguments,
file); OUT_DIR/<case>.safetensors holds the input, Kornia's parameters translated to xlaunch's
columns (geometric.h) as `values` [B, k] float64 and `applied` [B] bool, and Kornia's output.
The C++ test applies the same parameters with Transform::apply and compares.

A "sequence" case runs kornia.augmentation.AugmentationSequential and stores each step's
parameters (values_<i>, applied_<i>), for Transform::apply in order.

Fails (does not skip) when kornia 0.9 is missing: scripts/install-deps.sh --test.
"""
import json
import os
import sys

try:
    import torch
    import kornia
    import kornia.augmentation as K
    from safetensors.torch import save_file
except ImportError as e:
    sys.exit(f"FAIL: {e}: kornia_geometric_test compares against Kornia 0.9. "
             "Install the test peers: scripts/install-deps.sh --test")
if not kornia.__version__.startswith("0.9."):
    sys.exit(f"FAIL: kornia {kornia.__version__} is installed; kornia_geometric_test compares against "
             "Kornia 0.9. Install the pinned test peers: scripts/install-deps.sh --test")

# (case, Kornia class, keyword arguments, input shape [B, C, H, W])
CASES = [
    ("affine_all", "RandomAffine",
     {"degrees": [30], "translate": [0.1, 0.2], "scale": [0.7, 1.3], "shear": [-10, 10, -5, 5], "p": [1]},
     (4, 3, 32, 48)),
    ("affine_one_channel", "RandomAffine",
     {"degrees": [-45, 45], "scale": [0.8, 1.2, 0.9, 1.1], "shear": [15], "p": [1]}, (3, 1, 20, 20)),
    ("affine_same_on_batch", "RandomAffine",
     {"degrees": [20], "translate": [0.2, 0.1], "same_on_batch": [1], "p": [1]}, (4, 3, 24, 16)),
    ("affine_p_half", "RandomAffine", {"degrees": [90], "translate": [0.3, 0.3], "p": [0.5]}, (8, 3, 16, 16)),
    ("affine_224", "RandomAffine",
     {"degrees": [15], "translate": [0.1, 0.1], "scale": [0.9, 1.1], "shear": [5], "p": [1]}, (2, 3, 224, 224)),
    ("perspective", "RandomPerspective", {"distortion_scale": [0.5], "p": [1]}, (4, 3, 32, 40)),
    ("perspective_one_channel_p", "RandomPerspective", {"distortion_scale": [0.8], "p": [0.5]}, (8, 1, 24, 24)),
    ("perspective_same_on_batch", "RandomPerspective",
     {"distortion_scale": [0.3], "same_on_batch": [1], "p": [1]}, (3, 3, 16, 20)),
    ("resized_crop", "RandomResizedCrop", {"size": [24, 20]}, (4, 3, 32, 48)),
    ("resized_crop_one_channel", "RandomResizedCrop",
     {"size": [16, 16], "scale": [0.5, 1.0], "ratio": [0.5, 2.0]}, (5, 1, 64, 40)),
    ("resized_crop_upscale", "RandomResizedCrop", {"size": [40, 36], "scale": [0.1, 0.3]}, (3, 3, 20, 24)),
    ("resized_crop_same_on_batch", "RandomResizedCrop", {"size": [8, 12], "same_on_batch": [1]}, (3, 3, 30, 30)),
    ("hflip", "RandomHorizontalFlip", {"p": [0.5]}, (6, 3, 8, 10)),
    ("hflip_one_channel", "RandomHorizontalFlip", {"p": [1]}, (2, 1, 5, 7)),
]


def kornia_kwargs(name, args):
    """xlaunch's Args (lists of numbers) as Kornia's keyword arguments."""
    out = {}
    for key, v in args.items():
        if key == "same_on_batch":
            out[key] = bool(v[0])
        elif key == "size":
            out[key] = (int(v[0]), int(v[1]))
        elif len(v) == 1:
            out[key] = float(v[0])
        else:
            out[key] = tuple(float(x) for x in v)
    return out


def columns(name, params, batch):
    """Kornia's parameters as xlaunch's columns (geometric.h)."""
    if name == "RandomAffine":
        t, s = params["translations"], params["scale"]
        return torch.stack([params["angle"], t[:, 0], t[:, 1], s[:, 0], s[:, 1],
                            params["shear_x"], params["shear_y"]], dim=1)
    if name == "RandomPerspective":
        return params["end_points"].reshape(batch, 8)
    if name == "RandomResizedCrop":
        src = params["src"]
        return torch.stack([src[:, 0, 0], src[:, 0, 1], src[:, 1, 0] - src[:, 0, 0] + 1,
                            src[:, 3, 1] - src[:, 0, 1] + 1], dim=1)
    if name == "RandomHorizontalFlip":
        return torch.zeros(batch, 0)
    raise ValueError(name)


def record(out_dir, case, name, args, shape, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=gen)
    aug = getattr(K, name)(**kornia_kwargs(name, args))
    torch.manual_seed(seed + 1)
    y = aug(x)
    params = aug._params
    values = columns(name, params, shape[0]).to(torch.float64).contiguous()
    applied = (params["batch_prob"] > 0.5).reshape(shape[0]).contiguous()
    save_file({"input": x, "values": values, "applied": applied, "output": y.contiguous()},
              os.path.join(out_dir, case + ".safetensors"))
    return {"case": case, "name": name, "args": args, "file": case + ".safetensors"}


def record_sequence(out_dir, seed):
    steps = [("RandomAffine", {"degrees": [25], "translate": [0.1, 0.1], "scale": [0.8, 1.2], "p": [0.7]}),
             ("RandomPerspective", {"distortion_scale": [0.4], "p": [0.7]}),
             ("RandomHorizontalFlip", {"p": [0.5]}),
             ("RandomResizedCrop", {"size": [20, 20], "scale": [0.3, 1.0]})]
    gen = torch.Generator().manual_seed(seed)
    shape = (6, 3, 28, 32)
    x = torch.rand(shape, generator=gen)
    seq = K.AugmentationSequential(*[getattr(K, n)(**kornia_kwargs(n, a)) for n, a in steps])
    torch.manual_seed(seed + 1)
    y = seq(x)
    tensors = {"input": x, "output": y.contiguous()}
    for i, ((name, _), item) in enumerate(zip(steps, seq._params)):
        p = item.data
        tensors[f"values_{i}"] = columns(name, p, shape[0]).to(torch.float64).contiguous()
        tensors[f"applied_{i}"] = (p["batch_prob"] > 0.5).reshape(shape[0]).contiguous()
    save_file(tensors, os.path.join(out_dir, "sequence.safetensors"))
    return {"case": "sequence", "name": "AugmentationSequential",
            "steps": [{"name": n, "args": a} for n, a in steps], "file": "sequence.safetensors"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    cases = [record(out_dir, c, n, a, s, 29 + i) for i, (c, n, a, s) in enumerate(CASES)]
    cases.append(record_sequence(out_dir, 1000))
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump({"kornia": kornia.__version__, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
