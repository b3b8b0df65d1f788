"""Ray Train's dataset shards: `train.get_dataset_shard("train")` is this rank's part of
the "train" dataset declared in job.json (a CSV with a header row; split between the
ranks). Each epoch counts the rows this rank reads with iter_batches (a dict of numpy
arrays per batch) and trains a logistic regression on them with iter_torch_batches; the
per-rank row counts are gathered to rank 0 and reported.
"""
import torch
import torch.distributed as dist

from traintl import train

FEATURES = ["f0", "f1", "f2", "f3", "f4"]


def train_func(config):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    shard = train.get_dataset_shard("train")
    batch_size = config.get("batch_size", 32)

    model = train.torch.prepare_model(torch.nn.Linear(len(FEATURES), 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.get("lr", 0.5))
    loss_fn = torch.nn.BCEWithLogitsLoss()

    for epoch in range(config.get("epochs", 2)):
        # Count this rank's rows: numpy batches.
        rows, batches, positives, f0_sum = 0, 0, 0.0, 0.0
        for batch in shard.iter_batches(batch_size=batch_size, batch_format="numpy"):
            assert set(FEATURES + ["label"]) <= set(batch), sorted(batch)
            rows += len(batch["label"])
            positives += float(batch["label"].sum())
            f0_sum += float(batch["f0"].sum())
            batches += 1

        # Train on them: torch batches.
        total, steps = 0.0, 0
        for batch in shard.iter_torch_batches(batch_size=batch_size):
            x = torch.stack([batch[name].float() for name in FEATURES], dim=1)
            y = batch["label"].float().unsqueeze(1)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            steps += 1

        # Every rank's counts, gathered (the job's metrics are rank 0's report): the rows,
        # and two sums that tell whether the shards are disjoint and cover the file.
        mine = torch.tensor([rows, positives, f0_sum], dtype=torch.float64)
        gathered = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        rows_per_rank = [int(g[0].item()) for g in gathered]

        metrics = {"epoch": epoch, "rank": rank, "rows": rows, "batches": batches,
                   "rows_per_rank": rows_per_rank, "total_rows": sum(rows_per_rank),
                   "positives_per_rank": [g[1].item() for g in gathered],
                   "f0_sum_per_rank": [g[2].item() for g in gathered],
                   "loss": total / max(steps, 1)}
        print(f"rank {rank} epoch {epoch}: {rows} rows in {batches} batches", flush=True)
        train.report(metrics)
