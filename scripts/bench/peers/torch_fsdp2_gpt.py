#!/usr/bin/env python3
"""Peer benchmark: PyTorch's FSDP2 (fully_shard, gloo, CPU) on the GPT of examples/gpt_model.h.

Run under Open MPI, one process per rank, e.g.
    mpirun -np 2 scripts/bench/peers/mpi_torch_env.sh python3 scripts/bench/peers/torch_fsdp2_gpt.py --dim 256
The model is the same byte-level decoder as xlaunch's (token and position embeddings, pre-norm
blocks of causal self-attention and a 4x MLP, a final norm, the output projection tied to the token
embedding); as FSDP2's documentation does, fully_shard is applied to each block, then to the whole
model (the root: embeddings and final norm), on a 1-D CPU mesh over gloo; AdamW. Random tokens
(the same per rank and step as bench_fsdp's are not needed: the work is what is timed).
Prints one line on rank 0:
    peer=torch-fsdp2 world=W params_m=P tokens_per_s=X peak_rss_above_bare_mb=R peak_rss_mb=T
peak_rss_above_bare_mb: the largest, over the ranks, of VmHWM at the end minus VmHWM once torch is
imported and the process group made (before the model); MB = 1e6 bytes.
--probe: build, shard and run one step only, then print "peer=torch-fsdp2 probe=ok" (or the error).
Needs a python3 with torch (the wrapper picks one, or set PEER_PYTHON).
"""
import argparse, os, sys, time
import torch
import torch.distributed as dist
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
p.add_argument("--seq", type=int, default=128)
p.add_argument("--dim", type=int, default=256)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--heads", type=int, default=8)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--reshard_after_forward", type=int, default=1)
p.add_argument("--probe", action="store_true")
a = p.parse_args()


def hwm_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.down = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return y + self.down(F.gelu(self.up(self.ln2(y))))


class Gpt(torch.nn.Module):
    def __init__(self, dim, layers, heads, seq):
        super().__init__()
        self.tok = torch.nn.Embedding(256, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) * 0.01)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.lnf = torch.nn.LayerNorm(dim)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        return F.linear(self.lnf(x), self.tok.weight)


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
bare = hwm_bytes()
try:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = Gpt(a.dim, a.layers, a.heads, a.seq)
    params = sum(p.numel() for p in model.parameters())
    for b in model.blocks:
        fully_shard(b, mesh=mesh, reshard_after_forward=bool(a.reshard_after_forward))
    fully_shard(model, mesh=mesh, reshard_after_forward=bool(a.reshard_after_forward))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, 256, (a.batch, a.seq + 1), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.reshape(-1, 256), tokens[:, 1:].reshape(-1)).backward()
        opt.step()

    step()
except Exception as e:  # FSDP2 refusing the CPU: say so with its error
    if rank == 0:
        print(f"peer=torch-fsdp2 probe=failed error={type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    sys.stdout.flush()
    os._exit(3)
if a.probe:
    if rank == 0:
        print("peer=torch-fsdp2 probe=ok")
    sys.stdout.flush()
    os._exit(0)
for _ in range(a.warmup - 1):
    step()
dist.barrier()
t0 = time.perf_counter()
for _ in range(a.steps):
    step()
dist.barrier()
dt = time.perf_counter() - t0
mine = torch.tensor([hwm_bytes() - bare, hwm_bytes()], dtype=torch.float64)
dist.all_reduce(mine, op=dist.ReduceOp.MAX)
if rank == 0:
    print(f"peer=torch-fsdp2 world={world} params_m={params / 1e6:.2f} "
          f"tokens_per_s={a.steps * a.batch * a.seq * world / dt:.0f} "
          f"peak_rss_above_bare_mb={mine[0].item() / 1e6:.1f} peak_rss_mb={mine[1].item() / 1e6:.1f}")
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)
