#!/usr/bin/env python3
"""Peer of scripts/bench/e2e.sh: examples/train_fashion_mnist.cpp (the README's main job) written
for HuggingFace Accelerate, run with `accelerate launch` (its MPI multi-CPU config: mpirun starts
the ranks, gloo between them).

The same job: Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist, each sample's
784 bytes scaled to [0, 1]; the same CNN (conv-BN-ReLU, pool, conv-BN-ReLU, pool, linear, the input
normalised in forward); Adam at 2e-3 with linear warmup over 5% of the optimizer steps then cosine
decay to 0; per-process batch 64, shuffled, seed 42; an EMA of the weights (decay 0.999) after every
step; a checkpoint (accelerator.save_state) after every epoch; the training loss every 10 steps and
the test accuracy every epoch to TensorBoard; exact test accuracy over all 10000 test images
(gather_for_metrics) after every epoch; at the end the EMA's accuracy and the weights as
safetensors. DataLoader with --num_workers workers (xlaunch's default config has 2).
Prints on the main process, as the C++ example does:
  epoch=E train_loss=L test_acc=A samples_per_s=X seconds=S   (one per epoch)
  ema_test_acc=A
"""
import argparse
import gzip
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from torch.utils.data import DataLoader, Dataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch_size", type=int, default=64)
p.add_argument("--lr", type=float, default=2e-3)
p.add_argument("--seed", type=int, default=42)
p.add_argument("--ema_decay", type=float, default=0.999)
p.add_argument("--limit_train", type=int, default=0)
p.add_argument("--num_workers", type=int, default=2)
p.add_argument("--log_every", type=int, default=10)
p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
p.add_argument("--project_dir", default="runs/accelerate_fashion_mnist")
a = p.parse_args()


def read_idx(path):
    """An IDX file's uint8 payload as a tensor of its dims (big-endian int32 each)."""
    raw = gzip.open(path, "rb").read()
    dims = [int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(raw[3])]
    return torch.frombuffer(bytearray(raw[4 + 4 * len(dims):]), dtype=torch.uint8).view(*dims)


class FashionMnist(Dataset):
    def __init__(self, split, limit=0):
        self.images = read_idx(f"{a.data_dir}/{split}-images-idx3-ubyte.gz")
        self.targets = read_idx(f"{a.data_dir}/{split}-labels-idx1-ubyte.gz").long()
        if limit > 0:
            self.images, self.targets = self.images[:limit], self.targets[:limit]

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, i):
        return self.images[i].float().mul_(1.0 / 255.0).unsqueeze_(0), self.targets[i]


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class FashionCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(block(1, 16), nn.MaxPool2d(2), block(16, 32), nn.MaxPool2d(2))
        self.classifier = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = (x - 0.2860) / 0.3530  # the training set's mean and standard deviation
        return self.classifier(self.features(x).flatten(1))


def evaluate(acc, model, loader):
    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for x, y in loader:
            hits = acc.gather_for_metrics(model(x).argmax(1).eq(y))
            correct += int(hits.sum())
            seen += hits.numel()
    model.train()
    return correct / max(seen, 1)


def main():
    acc = Accelerator(log_with="tensorboard",
                      project_config=ProjectConfiguration(project_dir=a.project_dir, automatic_checkpoint_naming=True))
    set_seed(a.seed)
    model = FashionCnn()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    train = DataLoader(FashionMnist("train", a.limit_train), batch_size=a.batch_size, shuffle=True,
                       num_workers=a.num_workers, persistent_workers=a.num_workers > 0)
    test = DataLoader(FashionMnist("t10k"), batch_size=256, num_workers=a.num_workers,
                      persistent_workers=a.num_workers > 0)
    total = a.epochs * math.ceil(len(train.dataset) / (a.batch_size * acc.num_processes))
    warmup = total // 20

    def cosine(step):  # transformers' get_cosine_schedule_with_warmup, as xlaunch's "cosine"
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine)
    model, opt, train, test, sched = acc.prepare(model, opt, train, test, sched)
    net = acc.unwrap_model(model)
    ema = {k: v.detach().clone() for k, v in net.named_parameters()}
    acc.init_trackers("fashion_mnist", {"lr": a.lr, "batch_size": a.batch_size, "epochs": a.epochs})
    step = 0
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        loss_sum = torch.zeros(())
        window = torch.zeros(())
        steps = 0
        for x, y in train:
            loss = F.cross_entropy(model(x), y)
            acc.backward(loss)
            opt.step()
            sched.step()
            opt.zero_grad()
            with torch.no_grad():
                for k, v in net.named_parameters():
                    ema[k].lerp_(v.detach(), 1 - a.ema_decay)
            loss_sum += loss.detach()
            window += loss.detach()
            steps += 1
            step += 1
            if step % a.log_every == 0:
                acc.log({"train/loss": acc.reduce(window, "mean").item() / a.log_every,
                         "lr": sched.get_last_lr()[0]}, step=step)
                window.zero_()
        train_seconds = time.perf_counter() - t0
        train_loss = acc.reduce(loss_sum, "mean").item() / steps
        accuracy = evaluate(acc, model, test)
        acc.print(f"epoch={epoch + 1} train_loss={train_loss:.4f} test_acc={accuracy:.4f} "
                  f"samples_per_s={len(train.dataset) / train_seconds:.1f} seconds={time.perf_counter() - t0:.1f}")
        acc.log({"test/accuracy": accuracy, "train/epoch_loss": train_loss}, step=step)
        acc.save_state()
    with torch.no_grad():
        kept = {k: v.detach().clone() for k, v in net.named_parameters()}
        for k, v in net.named_parameters():
            v.copy_(ema[k])
        acc.print(f"ema_test_acc={evaluate(acc, model, test):.4f}")
        for k, v in net.named_parameters():
            v.copy_(kept[k])
    acc.save_model(model, f"{a.project_dir}/model")
    acc.end_training()


if __name__ == "__main__":
    main()
