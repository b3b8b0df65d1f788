#!/usr/bin/env python3
"""What per-rank progress (steps and collectives reported to the head) costs a DDP loop.

Runs tests/e2e/libs' libtest_ddp.so (real LibTorch DDP over Gloo, a small linear model) as
a job of --workers ranks for --steps steps, with progress on and off (NO_TRAINTL_PROGRESS=1 in
the job's env), alternating, --rounds times each, against one daemon. Steps/s of a run: its
reports' daemon timestamps, from the first report after --warmup steps to the last. Prints
each run and the ratio of the medians (target: on/off >= 0.99, i.e. <= 1 % overhead).

Usage: bench/progress/run.py [--build build] [--rounds 5] [--steps 3000] [--workers 2]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "startup"))
from benchlib import Daemon  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    lib = os.path.join(build, "tests/e2e/libs/libtest_ddp.so")
    daemon = Daemon(os.path.join(build, "bin"), num_cpus=a.workers)
    try:
        daemon.start()

        def call(method, path, body=None):
            status, answer = daemon.request(method, path, body)
            if status // 100 != 2:
                raise SystemExit(f"{method} {path}: {status} {answer}")
            return answer

        def run(progress):
            env = {"OMP_NUM_THREADS": "1"}
            if not progress:
                env["NO_TRAINTL_PROGRESS"] = "1"
            spec = {"name": "bench-progress", "entrypoint": {"library": lib},
                    "train_loop_config": {"steps": a.steps, "report_every": 100},
                    "scaling_config": {"num_workers": a.workers}, "env": env}
            job = call("POST", "/v1/jobs", {"spec": spec})["job_id"]
            while call("GET", f"/v1/jobs/{job}")["state"] not in ("SUCCEEDED", "FAILED", "STOPPED"):
                time.sleep(0.5)
            state = call("GET", f"/v1/jobs/{job}")["state"]
            if state != "SUCCEEDED":
                raise SystemExit(f"job {job} {state}")
            history = call("GET", f"/v1/jobs/{job}/metrics")["history"]
            points = [(h["metrics"]["step"], h["time"]) for h in history
                      if h["metrics"]["step"] >= a.warmup]
            (s0, t0), (s1, t1) = points[0], points[-1]
            return (s1 - s0) / ((t1 - t0) / 1000.0)

        on, off = [], []
        for i in range(a.rounds):
            # Alternate which goes first: a drift in the machine's load hits both alike.
            for progress in ((True, False) if i % 2 == 0 else (False, True)):
                rate = run(progress)
                (on if progress else off).append(rate)
                print(f"round {i + 1} progress {'on ' if progress else 'off'}: {rate:8.1f} steps/s",
                      flush=True)
        ratio = statistics.median(on) / statistics.median(off)
        print(f"\nmedian steps/s: on {statistics.median(on):.1f}, off {statistics.median(off):.1f}; "
              f"on/off {ratio:.3f} (target >= 0.99)")
        per_round = [x / y for x, y in zip(on, off)]
        print(f"per-round on/off: {', '.join(f'{r:.3f}' for r in per_round)}; "
              f"median {statistics.median(per_round):.3f}")
    finally:
        daemon.stop()

if __name__ == "__main__":
    sys.exit(main())
