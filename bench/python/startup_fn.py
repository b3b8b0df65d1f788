"""Measure 2, Python entry point: `"entrypoint": {"python": "startup_fn:train_fn"}`.

The module imports torch, so traintl initializes the gloo process group from the job's
rendezvous before it calls train_fn (as Ray's TorchTrainer does); the first statement of
train_fn takes the time, and the rank writes OUT_DIR/rank<R>.json (config["out"]) with it
and the breakdown (this module's first line ran, `import torch` finished, the process
forked: here the traintl-worker itself, which embeds Python; its parent is traintld).
"""
import time

T_FIRST_LINE = time.time()
import os  # noqa: E402

import torch  # noqa: E402,F401
import torch.distributed as dist  # noqa: E402

T_IMPORTED = time.time()
import stamps  # noqa: E402
from traintl import train  # noqa: E402


def train_fn(config):
    t_in = time.time()
    rank = train.get_context().get_world_rank()
    stamps.write(config["out"], f"rank{rank}", in_fn=t_in, imported=T_IMPORTED,
                 first_line=T_FIRST_LINE, proc_start=stamps.process_start(),
                 parent_start=stamps.process_start(os.getppid()),
                 pg_ready=dist.is_initialized())
    dist.barrier()
