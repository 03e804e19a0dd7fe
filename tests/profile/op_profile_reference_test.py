#!/usr/bin/env python3
"""The operator profile against torch.profiler: the benchmark MLP and the Fashion-MNIST CNN train on
one fixed batch with plain SGD, 10 warm-up steps and then 5 profiled ones, in C++ (op_profile_job:
LibTorch's profiler through xlaunch's op_profile, its table read from ops-0.json) and here in
Python (torch.profiler.profile around the same 5 steps, key_averages()). Same layers, loss,
optimizer, batch size and torch.set_num_threads(1).

What must agree, and why by call counts:
  1. The top 5 operators by call count (ties broken by name), with their call counts: the issue's
     "same top 5 operators, with the same call counts", in an order that does not depend on timing.
     Ranked by self time instead, the two runs disagree from one try to the next on this shared
     machine: the MLP's 3rd to 7th operators lie within 0.3% of the step of each other, and a
     process preempted for some milliseconds inside one call moves that operator up by ranks (one
     run here put aten::copy_ 2nd in Python at 16 ms and 8th in C++ at 0.1 ms). Call counts are
     exact. The tables by self CPU time are printed side by side for a look, not compared; the
     meaning of self and total time is checked on literal events (op_aggregate_test).
  2. Every operator either side lists, with the same call count: the profile counts what
     torch.profiler counts (the nesting rules, the merged duplicates, the names left out).

The Python loop issues the ATen operators LibTorch's C++ frontend issues, where the two frontends
differ (both are then the same program, op for op):
  - torch::nn::Linear on a 2-D input calls torch::addmm(bias, x, weight.t()) itself
    (torch/nn/functional/linear.h), without aten::linear around it: CppLinear does the same;
  - LibTorch's Optimizer::zero_grad detaches each gradient (grad.detach_()) before dropping it;
  - LibTorch's backward() makes the implicit gradient with ones_like in the contiguous format
    (aten::empty), Python's in the preserved format (aten::empty_strided): the gradient is given.
Python's torch.optim adds two record_function ranges per step that LibTorch's C++ optimizers do not
have ("Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad"): left out of the comparison.
Any other difference fails the test.

  usage: op_profile_reference_test.py OP_PROFILE_JOB
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

WARMUP, STEPS, BATCH, HIDDEN = 10, 5, 64, 512
PYTHON_ONLY = ("Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad")


class CppLinear(nn.Linear):
    """torch::nn::Linear's forward on a 2-D input (torch/nn/functional/linear.h)."""

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight.t())


class Block(nn.Module):  # conv 3x3 (no bias) -> BatchNorm -> ReLU, as examples/fashion_cnn.h
    def __init__(self, i, o):
        super().__init__()
        self.conv = nn.Conv2d(i, o, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(o)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class FashionCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(Block(1, 16), nn.MaxPool2d(2), Block(16, 32), nn.MaxPool2d(2))
        self.classifier = CppLinear(32 * 7 * 7, 10)

    def forward(self, x):
        x = (x - 0.2860) / 0.3530
        return self.classifier(self.features(x).flatten(1))


class Mlp(nn.Module):  # bench_model.h: 784-H-H-10, ReLU
    def __init__(self, h):
        super().__init__()
        self.l1, self.l2, self.l3 = CppLinear(784, h), CppLinear(h, h), CppLinear(h, 10)

    def forward(self, x):
        return self.l3(self.l2(self.l1(x).relu()).relu())


def python_rows(model_name):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Mlp(HIDDEN) if model_name == "mlp" else FashionCnn()
    x = torch.randn(BATCH, 784) if model_name == "mlp" else torch.rand(BATCH, 1, 28, 28)
    y = torch.randint(0, 10, (BATCH,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        for p in model.parameters():  # LibTorch's zero_grad: detach_, then drop
            if p.grad is not None:
                p.grad.detach_()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward(torch.ones_like(loss, memory_format=torch.contiguous_format))  # LibTorch's implicit gradient
        opt.step()

    for _ in range(WARMUP):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            step()
    return {e.key: (e.count, e.self_cpu_time_total) for e in prof.key_averages() if e.key not in PYTHON_ONLY}


def cpp_rows(job, model_name):
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        subprocess.run([job, "--model", model_name, "--dir", d, "--steps", str(STEPS), "--hidden", str(HIDDEN),
                        "--batch", str(BATCH), "--threads", "1"], check=True)
        table = json.load(open(os.path.join(d, "ops-0.json")))
    assert table["first_step"] == WARMUP + 1 and table["steps"] == STEPS, table
    return {r["name"]: (r["calls"], r["self_cpu_ns"] / 1e3) for r in table["rows"]}


def by_calls(rows):
    return [(n, rows[n][0]) for n in sorted(rows, key=lambda n: (-rows[n][0], n))[:5]]


def by_self_cpu(rows):
    return sorted(rows, key=lambda n: (-rows[n][1], n))


def compare(job, model_name):
    py, cpp = python_rows(model_name), cpp_rows(job, model_name)
    failures = []
    print(f"--- {model_name}: top 10 by self CPU time, C++ (xlaunch) | Python (torch.profiler)")
    for a, b in zip(by_self_cpu(cpp)[:10], by_self_cpu(py)[:10]):
        print(f"  {a[:45]:45} {cpp[a][0]:5} {cpp[a][1]:10.1f}us | {b[:45]:45} {py[b][0]:5} {py[b][1]:10.1f}us")

    top_cpp, top_py = by_calls(cpp), by_calls(py)
    print(f"  top 5 by calls: C++ {top_cpp}\n                  Python {top_py}")
    if top_cpp != top_py:
        failures.append(f"top 5 by calls differ: C++ {top_cpp}, Python {top_py}")

    for name in sorted(set(cpp) | set(py)):
        c, p = cpp.get(name, (0, 0))[0], py.get(name, (0, 0))[0]
        if c != p:
            failures.append(f"{name}: {c} calls in C++, {p} in Python")

    for f in failures:
        print(f"FAIL {model_name}: {f}")
    if not failures:
        print(f"PASS {model_name}: the same top 5 operators by calls, and every operator's call count ({len(cpp)} operators)")
    return not failures


def main():
    job = sys.argv[1]
    ok = all([compare(job, m) for m in ("mlp", "cnn")])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
