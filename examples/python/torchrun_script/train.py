"""An ordinary torchrun DDP script, nothing traintl-specific in it:

    torchrun --nproc_per_node 2 train.py --steps 20

traintl's command entry point runs it per rank with the same environment torchrun gives
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, ...), so
init_process_group("gloo") reads its rendezvous from there.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # env:// rendezvous
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    print(f"rank {rank}/{world} local_rank {local_rank} master "
          f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    g = torch.Generator().manual_seed(100 + rank)
    true_w = torch.linspace(-1.0, 1.0, 10).unsqueeze(1)

    first = None
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 10, generator=g)
        y = x @ true_w
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = loss.item() if first is None else first

    # The average loss of the last step over the ranks.
    final = torch.tensor([loss.item()])
    dist.all_reduce(final)
    final /= world
    if rank == 0:
        print(f"steps {args.steps} first_loss {first:.6f} final_loss {final.item():.6f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
