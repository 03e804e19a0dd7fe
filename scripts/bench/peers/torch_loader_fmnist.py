#!/usr/bin/env python3
"""Peer of scripts/bench/loader.sh: torch.utils.data.DataLoader over Fashion-MNIST, the same work
as bench_loader's host path.

The first --samples training images of Debian's dataset-fashion-mnist (the IDX files, gunzipped
and decoded once), each sample made in __getitem__ as xlaunch::FashionMnist::get makes it: its 784
bytes scaled to float in [0, 1] as [1, 28, 28], its label an int64 scalar. DataLoader with
--workers workers (persistent, so they start once), shuffled batches of --batch, drop_last; the
consumer sums each batch. One epoch warms the loader up (its workers start) and is not timed; then
--epochs epochs are. dataset_us_per_batch: the dataset's own work for a batch, __getitem__ on
--batch samples in a plain loop, no DataLoader. torch.set_num_threads(1), as bench_loader does.
Prints:
  peer=torch-dataloader dataset=fashion_mnist workers=K batch=B samples_per_s=X us_per_batch=T dataset_us_per_batch=W
"""
import argparse
import gzip
import time

import torch
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--workers", type=int, default=2)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--samples", type=int, default=20000)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
a = p.parse_args()


def read_idx(path):
    """An IDX file's uint8 payload as a tensor of its dims (big-endian int32 each)."""
    raw = gzip.open(path, "rb").read()
    if raw[2] != 0x08:
        raise SystemExit(f"{path}: not a uint8 IDX file")
    dims = [int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(raw[3])]
    return torch.frombuffer(bytearray(raw[4 + 4 * len(dims):]), dtype=torch.uint8).view(*dims)


class FashionMnist(Dataset):
    def __init__(self, root, n):
        self.images = read_idx(f"{root}/train-images-idx3-ubyte.gz")[:n]
        self.targets = read_idx(f"{root}/train-labels-idx1-ubyte.gz")[:n].long()

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        return self.images[i].float().mul_(1.0 / 255.0).unsqueeze_(0), self.targets[i]


torch.set_num_threads(1)
data = FashionMnist(a.data_dir, a.samples)
dl = DataLoader(data, batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
                persistent_workers=a.workers > 0)


def epoch():
    n = 0
    for x, y in dl:
        x.sum()
        n += x.shape[0]
    return n


epoch()  # warm-up, not timed
t0 = time.perf_counter()
n = sum(epoch() for _ in range(a.epochs))
dt = time.perf_counter() - t0
t1 = time.perf_counter()
for i in range(n):
    data[i % len(data)]
work = time.perf_counter() - t1
batches = n / a.batch
print(f"peer=torch-dataloader dataset=fashion_mnist workers={a.workers} batch={a.batch} "
      f"samples_per_s={n / dt:.1f} us_per_batch={dt / batches * 1e6:.2f} "
      f"dataset_us_per_batch={work / batches * 1e6:.2f}")
