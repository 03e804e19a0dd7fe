"""Samples per second of the Python peers of xlaunch's augmentation (scripts/bench/augment.sh).

  python3 augment_peers.py --system kornia|torchvision --batch 128 --size 32 --threads 2 \
      --seconds 2 [--per_transform]

The guide's pipeline, every transform with p = 1, on float32 images in [0, 1] on the CPU:
  ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
  RandomAffine(degrees=15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5)   (bilinear, zeros)
  RandomPerspective(distortion_scale=0.5)                                     (bilinear, zeros)

- kornia: kornia.augmentation.AugmentationSequential of the three on one [batch, 3, size, size]
  tensor, torch.set_num_threads(threads) (PyTorch's way to give an op its threads), under
  torch.no_grad().
- torchvision: torchvision.transforms.v2's ColorJitter, RandomAffine and RandomPerspective,
  composed, applied per sample in a Dataset's __getitem__ (the usual CPU pipeline), in a
  torch.utils.data.DataLoader with num_workers = threads (each worker runs one thread, as the
  DataLoader sets it) and batch_size = batch. RandomAffine and RandomPerspective are given
  bilinear interpolation (torchvision's RandomAffine defaults to nearest) so that the three
  systems compute the same kind of pixels. The dataset holds 4 * batch distinct images, cycled;
  the workers are started and warmed before the clock starts.

After a warm-up (one batch; for torchvision until each worker delivered one), batches are timed
until `seconds` have passed (at least two). Prints `peer=SYSTEM batch=B size=S samples_per_s=X`,
and with --per_transform one more line per transform alone:
`peer=SYSTEM batch=B size=S transform=NAME samples_per_s=X`.
"""
import argparse
import time

import torch

ARGS = {
    "ColorJitter": dict(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1),
    "RandomAffine": dict(degrees=15, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=5),
    "RandomPerspective": dict(distortion_scale=0.5),
}


def timed(step, seconds, batch):
    """samples/s of step() (one batch each), at least 2 batches and `seconds`."""
    n, start = 0, time.perf_counter()
    while True:
        step()
        n += 1
        elapsed = time.perf_counter() - start
        if n >= 2 and elapsed >= seconds:
            return n * batch / elapsed


def kornia_transforms(names):
    import kornia.augmentation as K
    return [getattr(K, name)(**ARGS[name], p=1.0) for name in names]


def kornia_sps(a, names):
    import kornia.augmentation as K
    pipeline = K.AugmentationSequential(*kornia_transforms(names))
    x = torch.rand(a.batch, 3, a.size, a.size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        pipeline(x)
        return timed(lambda: pipeline(x), a.seconds, a.batch)


class Augmented(torch.utils.data.Dataset):
    def __init__(self, images, transform, length):
        self.images, self.transform, self.length = images, transform, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        return self.transform(self.images[i % len(self.images)])


def torchvision_transforms(names):
    from torchvision.transforms import v2
    bilinear = v2.InterpolationMode.BILINEAR
    extra = {"ColorJitter": {}, "RandomAffine": {"interpolation": bilinear},
             "RandomPerspective": {"interpolation": bilinear, "p": 1.0}}
    return v2.Compose([getattr(v2, name)(**ARGS[name], **extra[name]) for name in names])


def torchvision_sps(a, names):
    images = torch.rand(4 * a.batch, 3, a.size, a.size, generator=torch.Generator().manual_seed(0))
    # Long enough never to run out within the measurement (the loop stops on time).
    dataset = Augmented(images, torchvision_transforms(names), length=a.batch * 1_000_000)
    loader = torch.utils.data.DataLoader(dataset, batch_size=a.batch, num_workers=a.threads,
                                         persistent_workers=True, prefetch_factor=2)
    it = iter(loader)
    for _ in range(max(1, a.threads)):
        next(it)
    sps = timed(lambda: next(it), a.seconds, a.batch)
    del it, loader
    return sps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--system", choices=["kornia", "torchvision"], required=True)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--per_transform", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    run = kornia_sps if a.system == "kornia" else torchvision_sps
    names = list(ARGS)
    print(f"peer={a.system} batch={a.batch} size={a.size} samples_per_s={run(a, names):.1f}", flush=True)
    if a.per_transform:
        for name in names:
            print(f"peer={a.system} batch={a.batch} size={a.size} transform={name} "
                  f"samples_per_s={run(a, [name]):.1f}", flush=True)


if __name__ == "__main__":
    main()
