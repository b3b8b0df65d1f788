"""Measure 1b: bench/ddp/train_ddp.py's training loop as a train_fn(config), run by
traintl's Python entry point (`"entrypoint": {"python": "ddp_fn:train_fn"}`).

The model (MLP 784-512-512-10), data (8 fixed batches per rank), optimizer (SGD 0.05,
momentum 0.9), loss, warmup (10 steps) and loop body are train_ddp.py's, line for line;
what differs is only what Ray Train users write instead of the torchrun boilerplate: the
process group is already there (traintl set it up from the job's rendezvous), the rank
comes from train.get_context(), and train.torch.prepare_model(model) wraps the model in
DistributedDataParallel with DDP's defaults (as train_ddp.py's DDP(model)). Every rank
reports its steps/s once with train.report (rank 0's becomes the job's metrics); rank 0
also prints "steps_per_s <x>" as train_ddp.py does.
"""
import time

import torch
import torch.nn as nn

from traintl import train


def train_fn(config):
    steps = int(config.get("steps", 300))
    batch = int(config.get("batch", 64))
    warmup = 10
    torch.set_num_threads(1)
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(1000 + rank)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    ddp = train.torch.prepare_model(model)
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
    train.report({"steps_per_s": steps / dt, "final_loss": loss.item()})
