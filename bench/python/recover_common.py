"""Measure 3's training job, shared by recover_script.py (torchrun / command entry) and
recover_fn.py (Python entry): bench/ddp/train_ddp.py's model, data, optimizer and step,
with the step counter, checkpoint state and timestamps around it."""
import time

import torch
import torch.nn as nn


def build(rank, world, batch):
    torch.set_num_threads(1)
    torch.manual_seed(1000 + rank)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    G = batch * world
    xs, ys = [], []
    for k in range(8):
        g = torch.Generator().manual_seed(42 + k)
        x = torch.randn(G, 784, generator=g)
        y = torch.randint(0, 10, (G,), generator=g)
        xs.append(x[rank * batch:(rank + 1) * batch].contiguous())
        ys.append(y[rank * batch:(rank + 1) * batch].contiguous())
    return model, xs, ys


def make_step(ddp, opt, xs, ys):
    loss_fn = nn.CrossEntropyLoss()

    def step(s):
        opt.zero_grad()
        loss = loss_fn(ddp(xs[s % 8]), ys[s % 8])
        loss.backward()
        opt.step()
        return loss
    return step


def state(model, opt, step):
    return {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}


now = time.time
