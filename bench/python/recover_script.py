"""Measure 3, script shape (torchrun with --max_restarts, and traintl's command entry point
with failure_config.max_failures): a DDP job that checkpoints itself, as torchrun users do.

    recover_script.py OUT_DIR CKPT_DIR STEPS EVERY AFTER

bench/ddp/train_ddp.py's model, data and step (batch 64 per rank). Rank 0 writes
CKPT_DIR/ckpt.pt (torch.save of model + optimizer state + step, tmp + rename) every EVERY
steps, then all ranks pass a barrier. After the first checkpoint of the first run, rank 1
writes OUT_DIR/marker.json with its pid: the driver SIGKILLs that process. A restarted run
(TORCHELASTIC_RESTART_COUNT > 0, which traintl sets to attempt - 1) loads CKPT_DIR/ckpt.pt
before wrapping the model in DDP and, when its first step is done, writes
OUT_DIR/resumed.r<R>.a<restart>.json (the time, the step it resumed from, and times for the
breakdown); it trains AFTER more steps and exits 0.
"""
import time

T_FIRST_LINE = time.time()
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

T_IMPORTED = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recover_common as rc  # noqa: E402
import stamps  # noqa: E402


def main():
    out, ckpt_dir = sys.argv[1], sys.argv[2]
    steps, every, after = (int(a) for a in sys.argv[3:6])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")
    t_pg = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()
    model, xs, ys = rc.build(rank, world, 64)
    path = os.path.join(ckpt_dir, "ckpt.pt")
    start, loaded, saved = 0, None, None
    if os.path.exists(path):
        saved = torch.load(path)
        model.load_state_dict(saved["model"])
        start = loaded = saved["step"]
    t_loaded = time.time()
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    if saved is not None:
        opt.load_state_dict(saved["opt"])
    step = rc.make_step(ddp, opt, xs, ys)
    end = steps if restart == 0 else start + after
    for s in range(start, end):
        step(s)
        if s == start and restart > 0:
            stamps.write(out, f"resumed.r{rank}.a{restart}", first_step=time.time(),
                         loaded_step=loaded, loaded=t_loaded, pg_ready=t_pg,
                         imported=T_IMPORTED, first_line=T_FIRST_LINE,
                         proc_start=stamps.process_start(),
                         parent_start=stamps.process_start(os.getppid()))
        if (s + 1) % every == 0:
            if rank == 0:
                torch.save(rc.state(model, opt, s + 1), path + ".tmp")
                os.replace(path + ".tmp", path)
            dist.barrier()
            if rank == 1 and restart == 0 and s + 1 == every:
                stamps.write(out, "marker", step=s + 1, t=time.time())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
