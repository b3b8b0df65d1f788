#!/usr/bin/env python3
"""`traintl status` latency while the head commits large checkpoints (issue 13, item 4).

A single-node daemon runs a 2-rank job of tests/e2e/libs/libtest_train.so whose every
epoch reports a checkpoint of --mb MiB per rank (default 512: 1 GiB per checkpoint) in
--files files, keeping 1 (so retention deletes a 1 GiB checkpoint at every commit). A
client meanwhile sends GET /v1/jobs/{id} (what `traintl status JOB` asks) back to back on
a keep-alive connection. The same is measured, in the same run, for the same job without
checkpoints: the difference is what committing checkpoints costs the API.

The head merges (renames, directory fsyncs) and deletes checkpoints on its
CheckpointCommitter thread, not on the thread that serves HTTP; target: p99 < 20 ms.

Usage: TRAINTL_BIN_DIR=build/bin TRAINTL_TEST_LIBS=build/tests/e2e/libs \
       python3 bench/checkpoint/status_during_commit.py [--mb 512] [--epochs 4]
"""
import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
from bench_cluster import Conn, pct  # noqa: E402
from harness import Daemon, train_spec  # noqa: E402


def measure(daemon, spec, label):
    job_id = daemon.submit_spec(spec)
    conn = Conn(daemon)
    samples = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            job = daemon.job(job_id)
            if job["state"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                done.set()
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    while not done.is_set():
        t0 = time.perf_counter()
        status, _ = conn.call("GET", f"/v1/jobs/{job_id}")
        samples.append((time.perf_counter() - t0) * 1000)
        assert status == 200, status
        time.sleep(0.002)
    watcher.join()
    job = daemon.job(job_id)
    cks = daemon.get(f"/v1/jobs/{job_id}/checkpoints")[1]
    n_ck = len(cks.get("checkpoints", cks) if isinstance(cks, dict) else cks)
    print(f"{label:32s} state={job['state']:9s} requests={len(samples):6d} "
          f"p50={pct(samples, 50):6.2f} ms p99={pct(samples, 99):6.2f} ms "
          f"max={max(samples):7.2f} ms  checkpoints kept={n_ck}")
    return samples, job


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=512, help="MiB per rank per checkpoint")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args()
    daemon = Daemon(num_cpus=4).start()
    try:
        base = dict(workers=2, epochs=args.epochs, sleep_ms=500, tmp_dir=daemon.data_dir)
        plain = train_spec(name="plain", checkpoint_every=0, **base)
        big = train_spec(name="big", ckpt_mb=args.mb, ckpt_files=args.files, **base)
        big["run_config"]["checkpoint_config"] = {"num_to_keep": 1}
        print(f"2 ranks x {args.epochs} epochs; checkpoints of {2 * args.mb} MiB "
              f"({args.files} files per rank), num_to_keep 1")
        base_s, _ = measure(daemon, plain, "no checkpoints (baseline)")
        big_s, job = measure(daemon, big, f"{2 * args.mb} MiB checkpoint per epoch")
        assert job["state"] == "SUCCEEDED", job
        print(f"p99 ratio (checkpointing / baseline): {pct(big_s, 99) / pct(base_s, 99):.2f}x; "
              f"target p99 < 20 ms: {'met' if pct(big_s, 99) < 20 else 'MISSED'}")
    finally:
        daemon.stop()
        daemon.cleanup()


if __name__ == "__main__":
    main()
