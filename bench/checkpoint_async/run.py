#!/usr/bin/env python3
"""Loop stall per checkpoint, async vs sync, same state, same run (issue 18, item 3).

A single-node daemon runs libckpt_stall_bench.so (ckpt_stall.cc) as a 1-rank job once per
mode, the modes one after the other, --rounds times: sync (write files + report), async
(write files + report with async_upload) and staged (report_deferred + an in-memory copy
of the state into a reusable buffer; a thread writes the files). Each job takes
--checkpoints checkpoints of --mb MiB; the first of each job is left out (page faults of
fresh buffers). Prints the median stall per mode, and each mode's ratio to sync.

The same with tensors: --lib build/tests/e2e/libs/libtest_torch_ckpt.so, whose modes save
a list of --files float tensors with torch::save (sync, async) or stage them with
traintl::torch::AsyncCheckpointer (staged).

Usage: TRAINTL_BIN_DIR=build/bin python3 bench/checkpoint_async/run.py \
           --lib build/bench/checkpoint_async/libckpt_stall_bench.so [--mb 500]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
from harness import Daemon  # noqa: E402


def run_job(daemon, lib, storage, tmp, mode, args):
    spec = {
        "name": f"stall-{mode}",
        "entrypoint": {"library": lib},
        "train_loop_config": {"mode": mode, "state_mb": args.mb, "files": args.files,
                              "tensors": args.files,
                              "checkpoints": args.checkpoints, "step_ms": args.step_ms,
                              "tmp_dir": tmp},
        "scaling_config": {"num_workers": 1, "resources_per_worker": {"CPU": 1}},
        "run_config": {"storage_path": storage, "checkpoint_config": {"num_to_keep": 1}},
    }
    job_id = daemon.submit_spec(spec)
    job = daemon.wait_terminal(job_id, timeout=900)
    if job["state"] != "SUCCEEDED":
        raise SystemExit(f"{mode}: {job['state']}: {job.get('attempts')}")
    history = daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
    last = history[-1]["metrics"]
    cks = daemon.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
    assert cks and cks[-1]["seq"] == args.checkpoints - 1, cks
    return last["stalls_ms"][1:], last["report_ms"][1:]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True)
    p.add_argument("--mb", type=int, default=500)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--checkpoints", type=int, default=5)
    p.add_argument("--step-ms", type=int, default=1500)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="traintl-stall-bench-")
    storage = os.path.join(tmp, "storage")
    os.makedirs(storage)
    daemon = Daemon(num_cpus=2).start()
    stalls = {"sync": [], "async": [], "staged": []}
    in_report = {"sync": [], "async": [], "staged": []}
    try:
        for r in range(args.rounds):
            for mode in stalls:
                s, rep = run_job(daemon, os.path.abspath(args.lib), storage, tmp, mode, args)
                stalls[mode] += s
                in_report[mode] += rep
                print(f"round {r} {mode:6s} stalls ms: {' '.join(f'{x:.0f}' for x in s)}"
                      f"  (report call: {' '.join(f'{x:.0f}' for x in rep)})", flush=True)
    finally:
        daemon.stop()
        daemon.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(stalls["sync"])
    print(f"\n{args.mb} MiB state in {args.files} files, {args.rounds} rounds x "
          f"{args.checkpoints - 1} checkpoints per mode (first of each job left out)")
    for mode in stalls:
        m = statistics.median(stalls[mode])
        rep = statistics.median(in_report[mode])
        print(f"{mode:6s} stall median {m:8.1f} ms (report call {rep:7.1f} ms)  "
              f"ratio to sync {m / base:5.3f}")


if __name__ == "__main__":
    main()
