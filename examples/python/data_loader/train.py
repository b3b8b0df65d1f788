"""Ray Train's "Set up a dataset" step: a plain PyTorch DataLoader (shuffle=True) over a
TensorDataset, handed to prepare_data_loader, which gives it a DistributedSampler (each
rank a disjoint half) and moves batches to the rank's device. Written as in Ray's
tutorial, with `import ray.train.torch` -> `import traintl.train.torch`.
"""
import torch
from torch.nn import CrossEntropyLoss
from torch.optim import Adam
from torch.utils.data import DataLoader, TensorDataset

import traintl.train
import traintl.train.torch


def make_dataset(n, seed):
    # Three Gaussian blobs in 8 dimensions, fixed by the seed (the same on every rank).
    g = torch.Generator().manual_seed(seed)
    centers = 2.0 * torch.randn(3, 8, generator=g)
    labels = torch.randint(0, 3, (n,), generator=g)
    features = centers[labels] + torch.randn(n, 8, generator=g)
    return TensorDataset(features, labels)


def train_func(config):
    torch.set_num_threads(1)
    torch.manual_seed(0)

    # Model, loss, optimizer
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    # [1] Prepare the model.
    model = traintl.train.torch.prepare_model(model)
    criterion = CrossEntropyLoss()
    optimizer = Adam(model.parameters(), lr=config.get("lr", 0.01))

    # Data
    train_data = make_dataset(config.get("num_samples", 512), seed=1)
    train_loader = DataLoader(train_data, batch_size=config.get("batch_size", 32), shuffle=True)
    # [2] Prepare the data loader.
    train_loader = traintl.train.torch.prepare_data_loader(train_loader)

    # Training
    for epoch in range(config.get("epochs", 4)):
        if traintl.train.get_context().get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)

        seen, correct, total_loss, batches = 0, 0, 0.0, 0
        for features, labels in train_loader:
            # prepare_data_loader already moved them to the device.
            outputs = model(features)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen += len(labels)
            correct += (outputs.argmax(1) == labels).sum().item()
            total_loss += loss.item()
            batches += 1

        # [3] Report metrics.
        metrics = {"loss": total_loss / batches, "accuracy": correct / seen, "epoch": epoch,
                   "samples": seen}
        traintl.train.report(metrics)
        if traintl.train.get_context().get_world_rank() == 0:
            print(metrics, flush=True)
