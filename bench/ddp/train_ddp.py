# The Python peer of ddp_bench's `train` mode: the same MLP (784-512-512-10), data, optimizer
# and batch size, under torch.nn.parallel.DistributedDataParallel (Gloo, 25 MB buckets).
# Run by run.sh through torchrun_py311.py; prints "steps_per_s <x>" on rank 0.
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
warmup = 10
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(1000 + rank)
model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 10))
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
G = batch * world
xs, ys = [], []
for k in range(8):
    g = torch.Generator().manual_seed(42 + k)
    x = torch.randn(G, 784, generator=g)
    y = torch.randint(0, 10, (G,), generator=g)
    xs.append(x[rank * batch:(rank + 1) * batch].contiguous())
    ys.append(y[rank * batch:(rank + 1) * batch].contiguous())
loss_fn = nn.CrossEntropyLoss()
for s in range(steps + warmup):
    if s == warmup:
        t0 = time.perf_counter()
    opt.zero_grad()
    loss = loss_fn(ddp(xs[s % 8]), ys[s % 8])
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
if rank == 0:
    print(f"steps_per_s {steps / dt:.2f} final_loss {loss.item():.5f}", flush=True)
dist.destroy_process_group()
