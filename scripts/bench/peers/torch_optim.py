"""PyTorch's own AdamW on the CPU, as its users run it: torch.optim.AdamW(fused=True) or
(foreach=True), over the same GPT-like parameters as scripts/bench/src/bench_optim.cpp (the same
shapes; fixed random gradients). Prints the line bench_optim prints:
  bench=optim_one system=torch-fused|torch-foreach params_m=P tensors=T threads=N dtype=D bytes_per_param=B
      ms_per_step=X gbps=Y
--dtype bfloat16: bfloat16 parameters and gradients; PyTorch then keeps bfloat16 state (no master
weights): 14 bytes per parameter read and written.
"""
import argparse
import statistics
import time

import torch


def gpt_shapes(params_m):
    target = params_m * 1e6
    d = 768 if target >= 5e7 else 256
    vocab, ctx = 8192, 1024
    per_layer = 12.0 * d * d + 13.0 * d
    layers = max(1, round((target - (vocab + ctx) * d) / per_layer))
    s = [(vocab, d), (ctx, d)]
    for _ in range(layers):
        s += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (4 * d, d), (4 * d,), (d, 4 * d), (d,)]
    return s + [(d,), (d,)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", choices=["torch-fused", "torch-foreach"], default="torch-fused")
    ap.add_argument("--params_m", type=float, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    params = []
    for shape in gpt_shapes(a.params_m):
        dtype = getattr(torch, a.dtype)
        p = torch.nn.Parameter((torch.randn(shape) * 0.02).to(dtype))
        p.grad = (torch.randn(shape) * 1e-3).to(dtype)
        params.append(p)
    kind = a.system.split("-")[1]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, **{kind: True})
    for _ in range(2):
        opt.step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    n = sum(p.numel() for p in params)
    b = 28.0 if a.dtype == "float32" else 14.0
    print(f"bench=optim_one system={a.system} params_m={n / 1e6:.1f} tensors={len(params)} threads={a.threads} "
          f"dtype={a.dtype} bytes_per_param={b:.0f} ms_per_step={s * 1e3:.3f} gbps={b * n / s / 1e9:.2f}")


if __name__ == "__main__":
    main()
