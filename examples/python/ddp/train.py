"""Data-parallel training with prepare_model on a small CNN, with an explicit check of
what DDP promises: after every step the parameters are identical on every rank, and the
gradient DDP produced equals the average of the ranks' local gradients (computed here on
an unsynchronized copy and averaged with an explicit all_reduce). Each rank trains on
different data, so neither holds by accident.
"""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn

from traintl import train


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.conv(x).flatten(1))


def make_batch(batch_size, seed):
    # 8x8 "images" of 4 classes: a bright quadrant tells the class.
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (batch_size,), generator=g)
    images = 0.3 * torch.randn(batch_size, 1, 8, 8, generator=g)
    for i, c in enumerate(labels.tolist()):
        r, q = divmod(c, 2)
        images[i, 0, 4 * r:4 * r + 4, 4 * q:4 * q + 4] += 1.0
    return images, labels


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def max_diff_across_ranks(vector):
    """All-gathers `vector` from every rank; the largest difference from rank 0's."""
    gathered = [torch.empty_like(vector) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, vector)
    return max((g - gathered[0]).abs().max().item() for g in gathered)


def train_func(config):
    torch.set_num_threads(1)
    torch.manual_seed(config.get("seed", 0))  # the same initial weights on every rank
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()

    model = train.torch.prepare_model(SmallCNN())
    module = model.module if hasattr(model, "module") else model
    optimizer = torch.optim.SGD(model.parameters(), lr=config.get("lr", 0.1), momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    batch_size = config.get("batch_size", 32)

    worst_param_diff = 0.0
    worst_grad_error = 0.0
    local_grad_spread = 0.0
    for epoch in range(config.get("epochs", 3)):
        total, correct, seen = 0.0, 0, 0
        for step in range(config.get("steps_per_epoch", 8)):
            # Different data on every rank.
            images, labels = make_batch(batch_size, seed=1000 * epoch + 10 * step + rank)

            # The rank's own gradient, from an unsynchronized copy of the model ...
            local = copy.deepcopy(module)
            local.zero_grad(set_to_none=True)
            loss_fn(local(images), labels).backward()
            local_grad = flat(p.grad for p in local.parameters())
            # (The ranks' local gradients differ, or the check below proves nothing.)
            local_grad_spread = max(local_grad_spread, max_diff_across_ranks(local_grad))
            # ... averaged over the ranks with an explicit all_reduce.
            expected = local_grad.clone()
            dist.all_reduce(expected)
            expected /= world

            optimizer.zero_grad()
            outputs = model(images)
            loss = loss_fn(outputs, labels)
            loss.backward()  # DDP averages the gradients here
            ddp_grad = flat(p.grad for p in model.parameters())
            worst_grad_error = max(worst_grad_error, (ddp_grad - expected).abs().max().item())
            optimizer.step()

            worst_param_diff = max(worst_param_diff,
                                   max_diff_across_ranks(flat(model.parameters())))
            total += loss.item()
            correct += (outputs.argmax(1) == labels).sum().item()
            seen += len(labels)

        metrics = {"epoch": epoch, "loss": total / config.get("steps_per_epoch", 8),
                   "accuracy": correct / seen, "world_size": world,
                   "param_max_diff": worst_param_diff, "grad_allreduce_max_error": worst_grad_error,
                   "local_grad_spread": local_grad_spread,
                   "params_equal": worst_param_diff == 0.0,
                   "grads_averaged": worst_grad_error < 1e-5,
                   "wrapped_in_ddp": isinstance(model, nn.parallel.DistributedDataParallel),
                   # "traintl" with transport "shm": the ranks of a node reduce through
                   # shared memory (TRAINTL_SHM_COLLECTIVES=0 in the job's env: "gloo").
                   "backend": dist.get_backend(),
                   "transport": getattr(dist.group.WORLD, "transport", dist.get_backend())}
        train.report(metrics)
        if rank == 0:
            print(metrics, flush=True)
