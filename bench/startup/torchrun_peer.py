"""The torchrun side of the startup benchmark: the same program as startup_train.cc.

Launched as `torchrun --nproc_per_node 2 ... torchrun_peer.py --out-dir DIR [--hold-ms N]`.
Every rank imports torch, joins the process group (dist.init_process_group("gloo"), the
rendezvous that traintl::torch::process_group() also performs) and, on entry to its
training loop, writes the wall-clock time (ns since the Unix epoch) to DIR/rank<R>.ns,
followed by two earlier times for the breakdown: when `import torch` had finished (where
the traintl library's entry point is called), and when the process was forked (from /proc,
10 ms resolution). The loop allreduces a small tensor until hold_ms have passed (at least
once).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

ENTRY_NS = time.time_ns()


def process_start_ns():
    """When this process was forked, as wall-clock ns (starttime counts CLOCK_BOOTTIME ticks)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[19])  # field 22, starttime
    boot_wall_ns = time.time_ns() - time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    return boot_wall_ns + ticks * (1000000000 // os.sysconf("SC_CLK_TCK"))


def write_stamp(out_dir, rank, loop_ns):
    path = os.path.join(out_dir, f"rank{rank}.ns")
    with open(path + ".tmp", "w") as f:
        f.write(f"{loop_ns} {ENTRY_NS} {process_start_ns()}\n")
    os.rename(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--hold-ms", type=int, default=0)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    write_stamp(args.out_dir, dist.get_rank(), time.time_ns())

    until = time.monotonic() + args.hold_ms / 1000.0
    t = torch.ones(16)
    steps = 0
    while True:
        dist.all_reduce(t)
        steps += 1
        if args.hold_ms > 0:
            time.sleep(0.02)
        if time.monotonic() >= until:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
