"""Ray Train's "Saving and loading checkpoints": every epoch rank 0 saves the model's and
the optimizer's state_dict (and the epoch) into a temporary directory and reports it with
train.Checkpoint.from_directory; a restarted attempt (failure_config.max_failures) gets
the latest committed checkpoint from train.get_checkpoint() and continues after its epoch.

`sleep_s` slows each epoch down so that a test can kill a worker in the middle of the run.
"""
import os
import tempfile
import time

import torch
import torch.nn as nn

from traintl import train
from traintl.train import Checkpoint


def make_data(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    w = torch.arange(1.0, 7.0).unsqueeze(1)
    y = x @ w / 6.0 + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def train_func(config):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
    model = train.torch.prepare_model(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.get("lr", 0.01))
    loss_fn = nn.MSELoss()
    # The plain module inside DDP (prepare_model wraps it when there are several ranks).
    module = model.module if hasattr(model, "module") else model

    # Load the checkpoint a restarted attempt gets.
    start_epoch = 0
    resumed_from_epoch = -1
    checkpoint = train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            module.load_state_dict(torch.load(os.path.join(checkpoint_dir, "model.pt")))
            optimizer.load_state_dict(torch.load(os.path.join(checkpoint_dir, "optimizer.pt")))
            resumed_from_epoch = torch.load(os.path.join(checkpoint_dir, "extra_state.pt"))["epoch"]
            start_epoch = resumed_from_epoch + 1

    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    x, y = make_data(config.get("num_samples", 512))
    x, y = x[rank::world], y[rank::world]
    batch_size = config.get("batch_size", 32)

    for epoch in range(start_epoch, config.get("epochs", 8)):
        total, batches = 0.0, 0
        for i in range(0, len(x), batch_size):
            loss = loss_fn(model(x[i:i + batch_size]), y[i:i + batch_size])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        time.sleep(config.get("sleep_s", 0))

        # Adam's step count: continues from the checkpoint when the optimizer state was loaded.
        optimizer_steps = int(optimizer.state[next(iter(module.parameters()))]["step"])
        metrics = {"loss": total / batches, "epoch": epoch, "start_epoch": start_epoch,
                   "resumed_from_epoch": resumed_from_epoch, "optimizer_steps": optimizer_steps,
                   "steps_per_epoch": batches, "attempt": ctx.get_attempt()}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            checkpoint = None
            # In standard DDP training the model is the same on every rank: only the
            # global rank 0 worker saves and reports the checkpoint.
            if rank == 0:
                torch.save(module.state_dict(), os.path.join(temp_checkpoint_dir, "model.pt"))
                torch.save(optimizer.state_dict(),
                           os.path.join(temp_checkpoint_dir, "optimizer.pt"))
                torch.save({"epoch": epoch}, os.path.join(temp_checkpoint_dir, "extra_state.pt"))
                checkpoint = Checkpoint.from_directory(temp_checkpoint_dir)
            train.report(metrics, checkpoint=checkpoint)
        if rank == 0:
            print(metrics, flush=True)
        if train.should_stop():
            return
