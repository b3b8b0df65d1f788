"""Measure 3, Python entry point: `"entrypoint": {"python": "recover_fn:train_fn"}` with
`"failure_config": {"max_failures": 3}`; the same job as recover_script.py, checkpointed
the Ray Train way.

Every config["every"] steps rank 0 torch.saves model + optimizer state + step into a fresh
temporary directory and reports it (train.report(metrics,
checkpoint=train.Checkpoint.from_directory(d))); the other ranks report the same metrics
without a checkpoint. After the first checkpoint of attempt 1, rank 1 writes
OUT_DIR/marker.json with its pid (the traintl-worker process, which embeds Python): the
driver SIGKILLs it. A later attempt resumes from train.get_checkpoint() (as_directory),
loads it before train.torch.prepare_model, writes OUT_DIR/resumed.r<R>.a<attempt-1>.json
when its first step is done, trains config["after"] more steps and returns.
"""
import time

T_FIRST_LINE = time.time()
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402,F401

T_IMPORTED = time.time()
import recover_common as rc  # noqa: E402
import stamps  # noqa: E402
from traintl import train  # noqa: E402


def train_fn(config):
    t_pg = time.time()  # traintl set up the process group before calling train_fn
    out, steps = config["out"], int(config["steps"])
    every, after = int(config["every"]), int(config["after"])
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    restart = ctx.get_attempt() - 1
    model, xs, ys = rc.build(rank, world, 64)
    start, loaded, saved = 0, None, None
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            saved = torch.load(os.path.join(d, "ckpt.pt"))
        model.load_state_dict(saved["model"])
        start = loaded = saved["step"]
    t_loaded = time.time()
    ddp = train.torch.prepare_model(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    if saved is not None:
        opt.load_state_dict(saved["opt"])
    step = rc.make_step(ddp, opt, xs, ys)
    end = steps if restart == 0 else start + after
    for s in range(start, end):
        loss = step(s)
        if s == start and restart > 0:
            stamps.write(out, f"resumed.r{rank}.a{restart}", first_step=time.time(),
                         loaded_step=loaded, loaded=t_loaded, pg_ready=t_pg,
                         imported=T_IMPORTED, first_line=T_FIRST_LINE,
                         proc_start=stamps.process_start(),
                         parent_start=stamps.process_start(os.getppid()))
        if (s + 1) % every == 0:
            metrics = {"step": s + 1, "loss": loss.item()}
            if rank == 0:
                d = tempfile.mkdtemp(prefix="bench-ckpt-")
                torch.save(rc.state(model, opt, s + 1), os.path.join(d, "ckpt.pt"))
                train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))
                shutil.rmtree(d, ignore_errors=True)
            else:
                train.report(metrics)
            if rank == 1 and restart == 0 and s + 1 == every:
                stamps.write(out, "marker", step=s + 1, t=time.time())
