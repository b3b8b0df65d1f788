#!/usr/bin/env python3
"""Control-plane benchmarks of a traintl cluster on loopback (issue 4).

  1. Head failover: kill -9 of the head of a 3-voter cluster, N times (default 10): time
     from the kill until a survivor answers /healthz as head. Median and worst.
  2. Committed job submissions per second through the head (concurrent clients, keep-alive,
     several client processes), with the cluster's CPUs held by a blocker job so that
     submitted jobs stay PENDING; several rounds, each into the queue the earlier left.
  3. GET /v1/jobs/{id} latency (what `traintl status JOB` does) with 10,000 jobs in the store.
  4. Head CPU with 1,000 simulated agents heartbeating at 1 Hz.
Each figure is printed next to its target, with the distribution it comes from.

Usage: TRAINTL_BIN_DIR=build/bin TRAINTL_TEST_LIBS=build/tests/e2e/libs \
       python3 bench/cluster/bench_cluster.py [--kills 10] [--jobs 10000] [--agents 1000]
"""
import argparse
import json
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
from cluster_harness import Cluster  # noqa: E402
from harness import lib_path, train_spec, wait_for  # noqa: E402


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


class Conn:
    """A keep-alive HTTP/1.1 connection to one daemon over a bare socket. http.client
    spends ~0.5 ms of CPU per request here (header parsing through email.parser), which
    on a small machine takes the CPU the daemons being measured need."""

    def __init__(self, daemon):
        host, port = daemon.address.rsplit(":", 1)
        self.host = daemon.address
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.auth = "Bearer " + daemon.token
        self.buf = b""

    def call(self, method, path, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Authorization: {self.auth}\r\nContent-Length: {len(data)}\r\n")
        if body is not None:
            head += "Content-Type: application/json\r\n"
        self.sock.sendall(head.encode() + b"\r\n" + data)
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        header, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = header.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError(f"{method} {path}: response without Content-Length")
        while len(self.buf) < length:
            self._recv()
        payload, self.buf = self.buf[:length], self.buf[length:]
        return status, payload

    def _recv(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        self.buf += chunk


def bench_failover(kills):
    c = Cluster(voters=3, agents=0, num_cpus=1).start()
    times = []
    try:
        for i in range(kills):
            head = c.head()
            t0 = time.monotonic()
            head.kill9()
            new = c.head(timeout=30)
            times.append(time.monotonic() - t0)
            assert new is not head
            head.start(role="voter")  # back as a follower, for the next round
            c.wait_nodes(3)
        print(f"failover: {kills} kills of the head; new head after median "
              f"{statistics.median(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms "
              f"(target median < 1000 ms); all: "
              + ", ".join(f"{t * 1000:.0f}" for t in times))
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()
    return times


def spec_for(i):
    s = train_spec(name=f"bench{i}", workers=1, epochs=1)
    return s


def upload(head):
    import hashlib
    with open(lib_path("libtest_train.so"), "rb") as f:
        blob = f.read()
    sha = hashlib.sha256(blob).hexdigest()
    status, _ = head.request("PUT", f"/v1/blobs/{sha}", body=blob,
                             headers={"Content-Type": "application/octet-stream"})
    assert status == 201
    return sha


def _submit_proc(address, token, sha, indices, threads, stop_after, out):
    """One client process: `threads` keep-alive connections submitting jobs `indices`."""
    class Target:
        pass
    target = Target()
    target.address, target.token = address, token
    ids, errors, lock = [], [], threading.Lock()
    counter = iter(indices)

    def work():
        conn = Conn(target)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            st, body = conn.call("POST", "/v1/jobs", {"spec": spec_for(i), "library_sha256": sha,
                                                      "submission_id": uuid.uuid4().hex})
            if st != 201:
                with lock:
                    errors.append((st, body[:200]))
                continue
            jid = json.loads(body)["job_id"]
            if stop_after:
                conn.call("POST", f"/v1/jobs/{jid}/stop", {})
            with lock:
                ids.append(jid)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((ids, errors))


def submit_many(head, sha, n, clients, stop_after=False):
    """Submits n jobs from `clients` (processes, threads) keep-alive connections. Several
    processes: one Python process cannot keep enough requests in flight (its threads
    queue for the GIL), so the client, not the head, would be what is measured."""
    procs, threads = clients
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    ps = [ctx.Process(target=_submit_proc,
                      args=(head.address, head.token, sha, range(k, n, procs), threads,
                            stop_after, out)) for k in range(procs)]
    cpu0 = reaped_children_cpu()
    t0 = time.monotonic()
    for p in ps:
        p.start()
    results = [out.get() for _ in ps]  # before join: a full pipe would block the child
    took = time.monotonic() - t0
    for p in ps:
        p.join()
    ids = [i for r in results for i in r[0]]
    errors = [e for r in results for e in r[1]]
    return ids, errors, took, reaped_children_cpu() - cpu0


def bench_control_plane(n_submit, n_jobs, clients, rounds):
    c = Cluster(voters=3, agents=0, num_cpus=1).start()
    try:
        head = c.head()
        sha = upload(head)
        # Hold every CPU so that submitted jobs stay PENDING (no workers start).
        blocker = train_spec(name="blocker", workers=3, epochs=100000, sleep_ms=1000)
        blocker["scaling_config"]["placement_strategy"] = "SPREAD"
        bid = head.submit_spec(blocker)
        head.wait_job(bid, lambda j: j["state"] == "RUNNING", what="blocker RUNNING")
        # Each round adds n_submit PENDING jobs to those of the rounds before: the later
        # rounds submit into a queue of thousands of waiting jobs.
        ids, rates, cpu, client_cpu = [], [], [], []
        for r in range(rounds):
            pids = [d.proc.pid for d in c.daemons]
            s0 = [cpu_seconds(p) for p in pids]
            got, errors, took, client = submit_many(head, sha, n_submit, clients)
            s1 = [cpu_seconds(p) for p in pids]
            ids += got
            rates.append(len(got) / took)
            cpu.append([(b - a) / took * 100 for a, b in zip(s0, s1)])
            client_cpu.append(client / took * 100)
            if errors:
                print(f"round {r}: {len(errors)} errors, first: {errors[0]}")
        head_i = c.daemons.index(head)
        print(f"submissions: {rounds} rounds of {n_submit} with {clients[0]}x{clients[1]} "
              f"keep-alive clients (processes x threads): "
              f"median {statistics.median(rates):.0f}/s, min {min(rates):.0f}/s committed through "
              f"the head (target >= 1000/s; Slurm's documented figure); rounds: "
              + ", ".join(f"{x:.0f}" for x in rates)
              + f"; {len(ids)} jobs PENDING at the end; head CPU per round "
              + ", ".join(f"{x[head_i]:.0f}%" for x in cpu)
              + "; followers " + ", ".join(
                  "/".join(f"{v:.0f}%" for i, v in enumerate(x) if i != head_i) for x in cpu)
              + "; the Python clients " + ", ".join(f"{x:.0f}%" for x in client_cpu))
        # Fill the store to n_jobs, stopping them as they go (terminal records).
        conn = Conn(head)
        for jid in ids:
            conn.call("POST", f"/v1/jobs/{jid}/stop", {})
        more, errors2, _, _ = submit_many(head, sha, max(0, n_jobs - len(ids)), clients,
                                          stop_after=True)
        all_ids = ids + more
        total = json.loads(conn.call("GET", "/v1/jobs")[1])["jobs"]
        lat = []
        for i in range(2000):
            jid = all_ids[(i * 7919) % len(all_ids)]
            t0 = time.perf_counter()
            st, _ = conn.call("GET", f"/v1/jobs/{jid}")
            lat.append((time.perf_counter() - t0) * 1000)
            assert st == 200
        print(f"status latency: GET /v1/jobs/<id> with {len(total)} jobs in the store: "
              f"p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms, max {max(lat):.2f} ms "
              f"(target p99 < 20 ms)")
        head.post(f"/v1/jobs/{bid}/stop")
        head.wait_terminal(bid)
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")



def reaped_children_cpu():
    """CPU seconds of the child processes this one has waited for (the daemons still run,
    so a difference around submit_many is its client processes' CPU)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_heartbeats(n_agents, seconds, threads=8):
    c = Cluster(voters=1, agents=0, num_cpus=1).start()
    try:
        head = c.head()
        stop = threading.Event()
        sent = [0] * threads

        def body(i):
            return {"node_id": f"sim-{i:05d}", "api_address": f"127.0.0.1:{20000 + i}",
                    "host": "127.0.0.1", "role": "agent", "raft_id": 0,
                    "resources_total": {"CPU": 0.001, "memory": 1 << 30}, "gpus": [],
                    "num_gpus": 0, "running": []}

        def work(k):
            conn = Conn(head)
            mine = list(range(k, n_agents, threads))
            period = 1.0
            next_round = time.monotonic()
            while not stop.is_set():
                for i in mine:
                    st, _ = conn.call("POST", "/v1/internal/heartbeat", body(i))
                    sent[k] += 1
                next_round += period
                time.sleep(max(0.0, next_round - time.monotonic()))

        ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        wait_for(lambda: len(c.nodes()) >= n_agents, timeout=60, what="simulated agents")
        pid = head.proc.pid
        s0, t0, n0 = cpu_seconds(pid), time.monotonic(), sum(sent)
        time.sleep(seconds)
        s1, t1, n1 = cpu_seconds(pid), time.monotonic(), sum(sent)
        stop.set()
        for t in ts:
            t.join()
        rate = (n1 - n0) / (t1 - t0)
        cpu = (s1 - s0) / (t1 - t0) * 100
        alive = sum(n["state"] == "ALIVE" for n in c.nodes())
        print(f"heartbeats: {n_agents} simulated agents at 1 Hz ({rate:.0f} heartbeats/s "
              f"delivered): head CPU {cpu:.1f}% of one core over {t1 - t0:.1f} s "
              f"(target < 10%); {alive} nodes ALIVE")
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--submit", type=int, default=3000)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--procs", type=int, default=4, help="client processes")
    ap.add_argument("--threads", type=int, default=32, help="connections per client process")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--only", choices=["failover", "control", "heartbeats"])
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if a.only in (None, "failover"):
        bench_failover(a.kills)
    if a.only in (None, "control"):
        bench_control_plane(a.submit, a.jobs, (a.procs, a.threads), a.rounds)
    if a.only in (None, "heartbeats"):
        bench_heartbeats(a.agents, a.seconds)


if __name__ == "__main__":
    main()
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
