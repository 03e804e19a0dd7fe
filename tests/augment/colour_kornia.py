#!/usr/bin/env python3
"""Kornia 0.9's colour augmentations on chosen batches with explicit parameters, for
colour_kornia_test (colour_kornia_test.sh runs both).

usage: colour_kornia.py OUT.json

Each ColorJitter case is a batch, its parameters in xlaunch's columns (brightness_factor,
contrast_factor, saturation_factor, hue_factor, order_0..order_3; colour.h) with `applied` per
row, and kornia.augmentation.ColorJitter's output for them: Kornia's forward with params= (its
own replay path), once per group of rows that share an order, since Kornia applies one order to
a whole call where xlaunch draws one per sample. Rows not applied get batch_prob 0 and pass
through Kornia's own gate (which it consults only when p < 1: the instance has p = 0.5). Each Normalize case is a batch, mean, std and
kornia.augmentation.Normalize's output. Floats are written by the json module (repr), so every
float32 and float64 value reads back exactly.

The cases: random batches (values a little outside [0, 1], so the input clamp shows) under
ColorJitter(0.4, 0.4, 0.4, 0.1)'s ranges and under wide ones, in float32 and float64; hues next
to the 0/1 wrap shifted across it; saturation 0 and contrast 0; near-gray images (channels within
1e-4: the hue's degenerate sextant, contrast on almost no colour); a 1-channel batch with
brightness and contrast only; rows not applied.

Fails (does not skip) when kornia 0.9 is missing: scripts/install-deps.sh --test.
"""
import itertools
import json
import sys

try:
    import torch
    import kornia
    import kornia.augmentation as K
except ImportError as e:
    sys.exit(f"FAIL: {e}: colour_kornia_test compares against Kornia 0.9. "
             "Install the test peers: scripts/install-deps.sh --test")
if not kornia.__version__.startswith("0.9."):
    sys.exit(f"FAIL: kornia {kornia.__version__} is installed; colour_kornia_test compares against Kornia 0.9. "
             "Install the pinned test peers: scripts/install-deps.sh --test")

FACTORS = ("brightness_factor", "contrast_factor", "saturation_factor", "hue_factor")


def draw_values(gen, rows, brightness, contrast, saturation, hue):
    """[rows, 8] float64: factors uniform in the given ranges, a random order per row."""
    values = torch.empty(rows, 8, dtype=torch.float64)
    for k, (lo, hi) in enumerate((brightness, contrast, saturation, hue)):
        values[:, k] = lo + (hi - lo) * torch.rand(rows, generator=gen, dtype=torch.float64)
    for i in range(rows):
        values[i, 4:] = torch.randperm(4, generator=gen).to(torch.float64)
    return values


def kornia_jitter(images, values, applied):
    # p below 1: with a static p of 1 Kornia applies every row and ignores batch_prob.
    aug = K.ColorJitter(p=0.5)
    out = images.clone()
    orders = {tuple(int(o) for o in row[4:]) for row in values}
    for order in sorted(orders):
        rows = [i for i in range(len(values)) if tuple(int(o) for o in values[i, 4:]) == order]
        idx = torch.tensor(rows)
        x = images[idx]
        params = {name: values[idx, k].to(images.dtype) for k, name in enumerate(FACTORS)}
        params["order"] = torch.tensor(order)
        params["batch_prob"] = applied[idx].to(torch.float32)
        params["forward_input_shape"] = torch.tensor(x.shape)
        out[idx] = aug(x, params=params)
    return out


def jitter_case(name, images, values, applied=None):
    if applied is None:
        applied = torch.ones(images.shape[0], dtype=torch.bool)
    out = kornia_jitter(images, values, applied)
    return {"name": name, "dtype": str(images.dtype).replace("torch.", ""), "shape": list(images.shape),
            "input": images.flatten().tolist(), "values": values.tolist(), "applied": applied.tolist(),
            "output": out.flatten().tolist()}


def near_wrap_images(gen, rows, size):
    """Hues just either side of 0/1: red with a little green (h just above 0) or blue (just below 1)."""
    x = torch.empty(rows, 3, size, size)
    x[:, 0] = 0.5 + 0.5 * torch.rand(rows, size, size, generator=gen)
    small = 1e-3 * torch.rand(rows, 2, size, size, generator=gen)
    green_side = torch.rand(rows, 1, size, size, generator=gen) < 0.5
    x[:, 1:2] = torch.where(green_side, small[:, :1] + 0.1, torch.full_like(small[:, :1], 0.1))
    x[:, 2:3] = torch.where(green_side, torch.full_like(small[:, 1:], 0.1), small[:, 1:] + 0.1)
    return x


def cases():
    gen = torch.Generator().manual_seed(29)
    out = []
    rand = lambda *shape, dtype=torch.float32: (  # noqa: E731
        torch.rand(*shape, generator=gen, dtype=torch.float64) * 1.2 - 0.1).to(dtype)
    guide = ((0.6, 1.4), (0.6, 1.4), (0.6, 1.4), (-0.1, 0.1))
    wide = ((0.0, 2.5), (0.0, 2.5), (0.0, 2.5), (-0.5, 0.5))
    out.append(jitter_case("guide_ranges", rand(32, 3, 17, 13), draw_values(gen, 32, *guide)))
    out.append(jitter_case("wide_ranges", rand(32, 3, 9, 11), draw_values(gen, 32, *wide)))
    out.append(jitter_case("float64", rand(16, 3, 8, 8, dtype=torch.float64), draw_values(gen, 16, *wide)))
    out.append(jitter_case("one_pixel_rows", rand(24, 3, 1, 1), draw_values(gen, 24, *wide)))

    # Every one of the 24 orders, each once.
    values = draw_values(gen, 24, *wide)
    for i, order in enumerate(itertools.permutations(range(4))):
        values[i, 4:] = torch.tensor(order, dtype=torch.float64)
    out.append(jitter_case("every_order", rand(24, 3, 6, 7), values))

    # Hue across the wrap: shifts of -0.5 .. 0.5 turns, and small ones both ways.
    values = draw_values(gen, 16, (1, 1), (1, 1), (1, 1), (-0.5, 0.5))
    values[:8, 3] = torch.tensor([1e-4, -1e-4, 1e-3, -1e-3, 0.5, -0.5, 0.25, -0.25], dtype=torch.float64)
    out.append(jitter_case("hue_wrap", near_wrap_images(gen, 16, 8), values))
    values = draw_values(gen, 16, *guide)
    out.append(jitter_case("hue_wrap_all_steps", near_wrap_images(gen, 16, 8), values))

    # Saturation 0 (gray), contrast 0 (the flat mean), and both.
    values = draw_values(gen, 12, *guide)
    values[:4, 2] = 0
    values[4:8, 1] = 0
    values[8:, 1:3] = 0
    out.append(jitter_case("saturation_contrast_zero", rand(12, 3, 10, 10), values))

    # Near-gray images: channels within 1e-4 of each other, some exactly equal.
    base = torch.rand(12, 1, 10, 10, generator=gen)
    x = base + 1e-4 * torch.rand(12, 3, 10, 10, generator=gen)
    x[:4] = base[:4].expand(4, 3, 10, 10)
    out.append(jitter_case("near_gray", x, draw_values(gen, 12, *wide)))

    # One channel: brightness and contrast only (saturation and hue neutral).
    out.append(jitter_case("one_channel", rand(12, 1, 9, 9), draw_values(gen, 12, (0, 2.5), (0, 2.5), (1, 1), (0, 0))))

    # Rows not applied pass unchanged (not even clamped).
    applied = torch.rand(16, generator=gen) < 0.5
    applied[0], applied[1] = True, False
    out.append(jitter_case("some_applied", rand(16, 3, 8, 8), draw_values(gen, 16, *guide), applied))
    return out


def normalize_cases():
    gen = torch.Generator().manual_seed(30)
    out = []
    for name, channels, mean, std in (("per_channel", 3, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                                      ("one_value", 3, [0.5], [0.25]),
                                      ("one_channel", 1, [0.2860], [0.3530]),
                                      ("four_channels", 4, [0.1, 0.2, 0.3, 0.4], [0.5, 1.5, 2.0, 0.75])):
        x = torch.rand(8, channels, 7, 5, generator=gen)
        y = K.Normalize(mean=mean, std=std, p=1.0)(x)
        out.append({"name": name, "shape": list(x.shape), "mean": mean, "std": std, "input": x.flatten().tolist(),
                    "output": y.flatten().tolist()})
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.set_num_threads(1)
    with open(sys.argv[1], "w") as f:
        json.dump({"kornia": kornia.__version__, "color_jitter": cases(), "normalize": normalize_cases()}, f)


if __name__ == "__main__":
    main()
