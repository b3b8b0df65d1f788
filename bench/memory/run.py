#!/usr/bin/env python3
"""The head daemon's memory as finished jobs accumulate (issue 20).

One voter on loopback (its own data dir on the same disk as the build), a blocker job holding
its CPU so that submitted jobs stay PENDING; each job is submitted and stopped at once, so it
ends STOPPED: a finished job with its records (spec, definition, request ids, the stop). Then
`--real N` short jobs that really run (1 rank, `--reports` metric reports each) add the bulky
parts of a finished job: attempts, metrics history, worker events.

Reported (VmRSS and VmHWM of the daemon from /proc, after a pause so that snapshots and the
retention pass have run): idle, after the first `--jobs`, after twice that, the growth per
additional job between the two, and the same for the real jobs. Each build given with
--bin-dir (repeatable) runs the same scenario, one after the other, in the same run.

Usage: TRAINTL_TEST_LIBS=build/tests/e2e/libs python3 bench/memory/run.py \
           [--jobs 10000] [--real 200] [--bin-dir build/bin] [--bin-dir /tmp/old/bin]
Targets: <= 30 MiB RSS with 10k finished jobs retained, <= 2 KiB per additional job.
"""
import argparse
import hashlib
import json
import os
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import harness  # noqa: E402
from bench_cluster import Conn, submit_many, upload  # noqa: E402
from cluster_harness import Cluster  # noqa: E402
from harness import train_spec, wait_for  # noqa: E402


def kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def settle(pid, seconds):
    """RSS after `seconds` of quiet (the daemon's snapshot and retention passes run)."""
    time.sleep(seconds)
    return kib(pid, "VmRSS"), kib(pid, "VmHWM")


def run_real(head, sha, n, reports):
    """n one-rank jobs that run to the end, `reports` reports each; one at a time (the
    blocker is stopped for them)."""
    conn = Conn(head)
    for i in range(n):
        spec = train_spec(name=f"real{i}", workers=1, epochs=reports, sleep_ms=0,
                          checkpoint_every=10)
        st, body = conn.call("POST", "/v1/jobs", {"spec": spec, "library_sha256": sha,
                                                  "submission_id": uuid.uuid4().hex})
        assert st == 201, body
        jid = json.loads(body)["job_id"]
        wait_for(lambda: json.loads(conn.call("GET", f"/v1/jobs/{jid}")[1])["state"]
                 in ("SUCCEEDED", "FAILED", "STOPPED"), timeout=120, what=f"real job {i}")


def scenario(bin_dir, n_jobs, n_real, reports, pause):
    harness.BIN = bin_dir
    os.environ["TRAINTL_BIN_DIR"] = bin_dir
    c = Cluster(voters=1, agents=0, num_cpus=1).start()
    out = {"bin_dir": bin_dir}
    try:
        head = c.head()
        pid = head.proc.pid
        out["idle"] = settle(pid, pause)
        sha = upload(head)
        blocker = train_spec(name="blocker", workers=1, epochs=1000000, sleep_ms=1000)
        bid = head.submit_spec(blocker)
        head.wait_job(bid, lambda j: j["state"] == "RUNNING", what="blocker RUNNING")
        for step in ("first", "second"):
            ids, errors, _, _ = submit_many(head, sha, n_jobs, (2, 4), stop_after=True)
            if errors:
                raise RuntimeError(f"{len(errors)} submissions failed, first: {errors[0]}")
            out[step] = settle(pid, pause)
            db = os.path.join(head.data_dir, "state.sqlite3")
            out[step + "_file"] = os.path.getsize(db) if os.path.exists(db) else 0
            print(f"  {bin_dir}: {step} {n_jobs} finished jobs: RSS {out[step][0] / 1024:.1f} "
                  f"MiB", flush=True)
        head.post(f"/v1/jobs/{bid}/stop")
        head.wait_terminal(bid)
        if n_real:
            before = settle(pid, pause)
            run_real(head, sha, n_real, reports)
            out["real_before"], out["real_after"] = before, settle(pid, pause)
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--real", type=int, default=200)
    ap.add_argument("--reports", type=int, default=50)
    ap.add_argument("--pause", type=float, default=8.0)
    ap.add_argument("--bin-dir", action="append")
    a = ap.parse_args()
    bins = a.bin_dir or [os.environ.get("TRAINTL_BIN_DIR", "build/bin")]
    print(f"# bench/memory: {a.jobs} + {a.jobs} submitted-and-stopped jobs, then {a.real} "
          f"real one-rank jobs of {a.reports} reports; RSS {a.pause:.0f} s after each step")
    rows = []
    for b in bins:
        r = scenario(os.path.abspath(b), a.jobs, a.real, a.reports, a.pause)
        rows.append(r)
    print()
    print("| build | idle | 1st N jobs | 2N jobs | per additional job | peak (VmHWM) | "
          "store file at 2N |" + (" per real job |" if a.real else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if a.real else ""))
    for r in rows:
        per = (r["second"][0] - r["first"][0]) * 1024 / a.jobs
        line = (f"| {r['bin_dir']} | {r['idle'][0] / 1024:.1f} MiB | "
                f"{r['first'][0] / 1024:.1f} MiB | {r['second'][0] / 1024:.1f} MiB | "
                f"{per:.0f} B | {max(r['second'][1], r.get('real_after', (0, 0))[1]) / 1024:.1f}"
                f" MiB | {r['second_file'] / 2**20:.1f} MiB |")
        if a.real:
            pr = (r["real_after"][0] - r["real_before"][0]) * 1024 / a.real
            line += f" {pr:.0f} B |"
        print(line)
    print(f"\nN = {a.jobs}. Targets: <= 30 MiB RSS with 10k finished jobs retained, "
          f"<= 2 KiB (2048 B) per additional job.")


if __name__ == "__main__":
    main()
