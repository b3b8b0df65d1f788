"""The basic Ray Train loop (Getting started with PyTorch: "Set up a model", "Report
metrics"): a small MLP on synthetic regression data, wrapped with prepare_model (DDP), a
few epochs, one report per epoch.

Ray Train users write the same function; traintl runs it per rank from job.json instead
of `TorchTrainer(train_func, ...).fit()`.
"""
import torch
import torch.nn as nn

from traintl import train


def make_data(n, seed):
    # y = sin(x0) + 0.5 * x1 * x2 - x3 + noise, fixed by the seed (same on every rank).
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] - x[:, 3]
    y = y + 0.05 * torch.randn(n, generator=g)
    return x, y.unsqueeze(1)


def train_func(config):
    torch.set_num_threads(1)
    torch.manual_seed(config.get("seed", 0))

    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 1))
    # [1] Prepare the model: DDP across the ranks (and the device).
    model = train.torch.prepare_model(model)
    device = train.torch.get_device()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.get("lr", 0.01))
    loss_fn = nn.MSELoss()

    # Each rank trains on its own slice of the data set.
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    x, y = make_data(config.get("num_samples", 1024), config.get("seed", 0))
    x, y = x[rank::world].to(device), y[rank::world].to(device)
    batch_size = config.get("batch_size", 64)

    for epoch in range(config.get("epochs", 5)):
        total, batches = 0.0, 0
        for i in range(0, len(x), batch_size):
            loss = loss_fn(model(x[i:i + batch_size]), y[i:i + batch_size])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        metrics = {"loss": total / batches, "epoch": epoch}
        # [2] Report metrics (every rank reports; rank 0's become the job's).
        train.report(metrics)
        if rank == 0:
            print(metrics, flush=True)
