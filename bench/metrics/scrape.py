#!/usr/bin/env python3
"""GET /metrics at scale: a head with --agents simulated agents heartbeating at 1 Hz (the
registry's nodes, as bench/cluster's heartbeat scenario makes them) and --jobs jobs (one
RUNNING, the rest PENDING behind it: every active job is in the answer, the worst case for
its size). Times --scrapes scrapes of GET /metrics over one keep-alive connection, and, as
the peer in the same run, as many GET /v1/jobs (the job list's default page of 100) and
GET /v1/nodes. Target (issue 17): /metrics p99 < 50 ms at 1000 jobs and 100 nodes.

Usage: TRAINTL_BIN_DIR=build/bin TRAINTL_TEST_LIBS=build/tests/e2e/libs \\
       /usr/bin/python3 bench/metrics/scrape.py [--agents 100] [--jobs 1000] [--scrapes 300]
"""
import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
from bench_cluster import Conn, pct, submit_many, upload  # noqa: E402
from cluster_harness import Cluster  # noqa: E402
from harness import train_spec, wait_for  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=300)
    a = ap.parse_args()
    c = Cluster(voters=1, agents=0, num_cpus=1).start()
    stop = threading.Event()
    try:
        head = c.head()

        def heartbeats():
            conn = Conn(head)
            while not stop.is_set():
                t0 = time.monotonic()
                for i in range(a.agents):
                    conn.call("POST", "/v1/internal/heartbeat", {
                        "node_id": f"sim-{i:05d}", "api_address": f"127.0.0.1:{20000 + i}",
                        "host": "127.0.0.1", "role": "agent", "raft_id": 0,
                        "resources_total": {"CPU": 0.001, "memory": 1 << 30}, "gpus": [],
                        "num_gpus": 0, "running": []})
                time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
        hb = threading.Thread(target=heartbeats, daemon=True)
        hb.start()
        wait_for(lambda: len(c.nodes()) >= a.agents, timeout=60, what="simulated agents")
        sha = upload(head)
        # One long job holds the head's CPU; every other one waits behind it.
        conn = Conn(head)
        long_job = train_spec(name="holder", workers=1, epochs=100000, sleep_ms=100)
        st, _ = conn.call("POST", "/v1/jobs", {"spec": long_job, "library_sha256": sha})
        assert st == 201, st
        ids, errors, took, _ = submit_many(head, sha, a.jobs - 1, (2, 8))
        assert not errors, errors[:3]
        print(f"{a.agents} simulated agents, {len(ids) + 1} jobs ({took:.1f} s to submit)")
        time.sleep(2)  # the scheduler's pass over the queue, the pending reasons

        def timed(path):
            out = []
            size = 0
            for _ in range(a.scrapes):
                t0 = time.perf_counter()
                st, body = conn.call("GET", path)
                out.append((time.perf_counter() - t0) * 1000)
                assert st == 200, (path, st)
                size = len(body)
            return out, size

        rows = []
        for path in ("/metrics", "/v1/jobs", "/v1/nodes"):
            ms, size = timed(path)
            rows.append((path, pct(ms, 50), pct(ms, 99), max(ms), size))
        print(f"\n| request | p50 ms | p99 ms | max ms | answer bytes |\n|---|---|---|---|---|")
        for path, p50, p99, mx, size in rows:
            print(f"| GET {path} | {p50:.2f} | {p99:.2f} | {mx:.2f} | {size} |")
        p99 = rows[0][2]
        print(f"\n/metrics p99 {p99:.2f} ms: target < 50 ms {'met' if p99 < 50 else 'NOT met'}")
    finally:
        stop.set()
        for d in c.daemons:
            d.stop()
        c.cleanup()


if __name__ == "__main__":
    main()
