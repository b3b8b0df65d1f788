"""Measure 2, script shape (torchrun, and traintl's command entry point): submit/launch ->
every rank in its training code with the process group ready.

    startup_script.py OUT_DIR

Imports torch, then main() joins the process group (dist.init_process_group("gloo") from
torchrun's environment: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and writes
OUT_DIR/rank<R>.json with time.time() as its first statement after that, plus earlier
times for the breakdown: the interpreter reached this file's first line, `import torch`
finished, this process and its parent were forked (/proc, 10 ms resolution).
"""
import time

T_FIRST_LINE = time.time()
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402,F401
import torch.distributed as dist  # noqa: E402

T_IMPORTED = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stamps  # noqa: E402


def main():
    dist.init_process_group("gloo")
    t_in = time.time()
    rank = dist.get_rank()
    stamps.write(sys.argv[1], f"rank{rank}", in_fn=t_in, imported=T_IMPORTED,
                 first_line=T_FIRST_LINE, proc_start=stamps.process_start(),
                 parent_start=stamps.process_start(os.getppid()))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
