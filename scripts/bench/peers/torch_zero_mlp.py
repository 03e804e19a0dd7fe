#!/usr/bin/env python3
"""Peer benchmark: PyTorch's ZeroRedundancyOptimizer (gloo, CPU) on a 3-layer MLP with AdamW.

Run under Open MPI, one process per rank, e.g.
    mpirun -np 2 scripts/bench/peers/mpi_torch_env.sh python3 scripts/bench/peers/torch_zero_mlp.py --hidden 1024
The model is wrapped in DistributedDataParallel and its optimizer is
torch.distributed.optim.ZeroRedundancyOptimizer over AdamW, as PyTorch's documentation of it does:
DDP averages the gradients, each rank steps the parameters it owns, then broadcasts them.
Prints one line on rank 0:
    peer=torch-zero world=W steps_per_s=X opt_state_mb_per_rank=M peak_rss_mb=R
opt_state_mb_per_rank: the largest, over the ranks, of the bytes of every tensor in the rank's local
optimizer state (after the timed steps); peak_rss_mb: the largest VmHWM (/proc/self/status) over the
ranks, at the end (MB = 1e6 bytes, both).
Needs a python3 with torch (the wrapper picks one, or set PEER_PYTHON).
"""
import argparse, os, sys, time
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=64, help="per-rank batch size")
p.add_argument("--hidden", type=int, default=1024)
p.add_argument("--steps", type=int, default=40)
p.add_argument("--warmup", type=int, default=5)
a = p.parse_args()

def peak_rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(784, a.hidden), torch.nn.ReLU(),
    torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
    torch.nn.Linear(a.hidden, 10))
net = torch.nn.parallel.DistributedDataParallel(model)
opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
g = torch.Generator().manual_seed(rank)
x = torch.randn(a.batch, 784, generator=g)
y = torch.randint(0, 10, (a.batch,), generator=g)

def step():
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()

for _ in range(a.warmup):
    step()
dist.barrier()
t0 = time.perf_counter()
for _ in range(a.steps):
    step()
dist.barrier()
dt = time.perf_counter() - t0

state = sum(t.numel() * t.element_size() for s in opt.optim.state.values() for t in s.values() if torch.is_tensor(t))
mine = torch.tensor([state, peak_rss_bytes()], dtype=torch.float64)
dist.all_reduce(mine, op=dist.ReduceOp.MAX)
if rank == 0:
    print(f"peer=torch-zero world={world} steps_per_s={a.steps / dt:.2f} "
          f"opt_state_mb_per_rank={mine[0].item() / 1e6:.1f} peak_rss_mb={mine[1].item() / 1e6:.1f}")
dist.barrier()
dist.destroy_process_group()
# torch 2.11 with this optimizer aborts now and then in the interpreter's teardown ("terminate
# called without an active exception", after the script): the measurement is done, so leave at once.
sys.stdout.flush()
os._exit(0)
