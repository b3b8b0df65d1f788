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

Before/after (issue 13): two builds side by side in the same run, on the same scenarios:
       python3 bench/cluster/bench_cluster.py --bin-dir NEW/bin --baseline-bin-dir BASE/bin
Each build's training library is <bin-dir>/../tests/e2e/libs/libtest_train.so unless
--libs / --baseline-libs say otherwise. --pairs N (default 3) repeats every scenario N times
for each build, interleaved: within a repetition each scenario runs once for each build,
and which build goes first alternates from one scenario and repetition to the next (base,
new; new, base; ...), so a load change on a shared machine hits both builds alike. At the
end a table gives each figure for both builds (pooled over the repetitions), the ratio
new / base, the median of the per-repetition ratios (the most robust to drift), and each
target with whether each build meets it. --quick shrinks every scenario (3 kills, 2 rounds
of 500 submissions, 2000 jobs stored, 200 agents for 3 s, 2 repetitions) to check the
harness in about a minute; its figures are not at the targets' sizes. --out FILE appends
the table (Markdown) to FILE. The exit status is 1 when a scenario run failed.
"""
import argparse
import hashlib
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
import harness  # noqa: E402
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


def bench_failover(kills, tag=""):
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
        print(f"{tag}failover: {kills} kills of the head; new head after median "
              f"{statistics.median(times) * 1000:.0f} ms, worst {max(times) * 1000:.0f} ms "
              f"(target median < 1000 ms); all: "
              + ", ".join(f"{t * 1000:.0f}" for t in times))
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()
    return {"failover_ms": [t * 1000 for t in times]}


def spec_for(i):
    s = train_spec(name=f"bench{i}", workers=1, epochs=1)
    return s


def upload(head):
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


def bench_control_plane(n_submit, n_jobs, clients, rounds, tag=""):
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
                print(f"{tag}round {r}: {len(errors)} errors, first: {errors[0]}")
        head_i = c.daemons.index(head)
        print(f"{tag}submissions: {rounds} rounds of {n_submit} with {clients[0]}x{clients[1]} "
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
        conn = Conn(head)  # the daemon closes a connection left idle while the store filled
        total = list_all(conn)
        lat = []
        for i in range(2000):
            jid = all_ids[(i * 7919) % len(all_ids)]
            t0 = time.perf_counter()
            st, _ = conn.call("GET", f"/v1/jobs/{jid}")
            lat.append((time.perf_counter() - t0) * 1000)
            assert st == 200
        print(f"{tag}status latency: GET /v1/jobs/<id> with {len(total)} jobs in the store: "
              f"p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms, max {max(lat):.2f} ms "
              f"(target p99 < 20 ms)")
        # Listing: the API's default answer (a page, in builds that page) and the CLI's.
        list_ms = []
        for _ in range(200):
            t0 = time.perf_counter()
            st, body = conn.call("GET", "/v1/jobs")
            list_ms.append((time.perf_counter() - t0) * 1000)
            assert st == 200
        shown = len(json.loads(body)["jobs"])
        cli_ms = []
        for _ in range(30):
            t0 = time.perf_counter()
            subprocess.run([harness.bin_path("traintl"), "--data-dir", head.data_dir, "list"],
                           capture_output=True, check=True)
            cli_ms.append((time.perf_counter() - t0) * 1000)
        print(f"{tag}listing with {len(total)} jobs: GET /v1/jobs ({shown} jobs in the answer) "
              f"p50 {pct(list_ms, 50):.2f} ms, p99 {pct(list_ms, 99):.2f} ms; `traintl list` "
              f"p50 {pct(cli_ms, 50):.1f} ms, p99 {pct(cli_ms, 99):.1f} ms (target p99 < 20 ms)")
        head.post(f"/v1/jobs/{bid}/stop")
        head.wait_terminal(bid)
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()
    return {"submit_rates": rates, "status_ms": lat, "jobs_stored": len(total),
            "list_ms": list_ms, "list_cli_ms": cli_ms,
            "head_cpu": [x[head_i] for x in cpu],
            "head_ms_per_submit": [x[head_i] * 10 / r for x, r in zip(cpu, rates) if r]}


def list_all(conn):
    """Every job, page by page (a build without pages answers all at once)."""
    jobs, cursor = [], None
    while True:
        path = "/v1/jobs?limit=1000" + (f"&cursor={cursor}" if cursor else "")
        body = json.loads(conn.call("GET", path)[1])
        jobs += body["jobs"]
        cursor = body.get("next_cursor")
        if not cursor:
            return jobs


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reaped_children_cpu():
    """CPU seconds of the child processes this one has waited for (the daemons still run,
    so a difference around submit_many is its client processes' CPU)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_heartbeats(n_agents, seconds, threads=8, tag=""):
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
        print(f"{tag}heartbeats: {n_agents} simulated agents at 1 Hz ({rate:.0f} heartbeats/s "
              f"delivered): head CPU {cpu:.1f}% of one core over {t1 - t0:.1f} s "
              f"(target < 10%); {alive} nodes ALIVE")
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()
    return {"hb_cpu": cpu, "hb_rate": rate}


class Build:
    """One build under test: traintld, traintl and traintl-worker in bin_dir, the training
    library libtest_train.so in libs (default <bin_dir>/../tests/e2e/libs)."""

    def __init__(self, name, bin_dir, libs=None):
        self.name = name
        self.bin_dir = os.path.abspath(bin_dir)
        self.libs = os.path.abspath(libs or os.path.join(bin_dir, "..", "tests", "e2e", "libs"))
        need = [os.path.join(self.bin_dir, b) for b in ("traintld", "traintl", "traintl-worker")]
        need.append(os.path.join(self.libs, "libtest_train.so"))
        missing = [p for p in need if not os.path.exists(p)]
        if missing:
            sys.exit(f"{name} build: missing " + ", ".join(missing))
        with open(need[0], "rb") as f:
            self.sha = hashlib.sha256(f.read()).hexdigest()[:12]

    def use(self):
        # bin_path() and lib_path() read these at each call (Daemon.command, train_spec);
        # submit_many's client processes are forked after this, so they see them too.
        harness.BIN = self.bin_dir
        harness.LIBS = self.libs

    def describe(self):
        return f"{self.bin_dir} (traintld sha256 {self.sha}), library {self.libs}"


SIZES = {  # the default run (today's scenarios) and --quick
    "full": dict(kills=10, submit=3000, rounds=3, jobs=10000, agents=1000, seconds=10.0),
    "quick": dict(kills=3, submit=500, rounds=2, jobs=2000, agents=200, seconds=3.0),
}
SCENARIOS = ["failover", "control", "heartbeats"]


def run_scenario(name, a, tag=""):
    if name == "failover":
        return bench_failover(a.kills, tag=tag)
    if name == "control":
        return bench_control_plane(a.submit, a.jobs, (a.procs, a.threads), a.rounds, tag=tag)
    return bench_heartbeats(a.agents, a.seconds, tag=tag)


def _all(reps, key):
    return [v for r in reps if r for v in r[key]]


# One row per figure: label, scenario, pooled over the repetitions, one repetition's
# figure, whether lower is better, target (text, test) or None.
FIGURES = [
    ("head failover, median ms", "failover",
     lambda reps: statistics.median(_all(reps, "failover_ms")),
     lambda r: statistics.median(r["failover_ms"]), True, ("< 1000 ms", lambda v: v < 1000)),
    ("head failover, worst ms", "failover",
     lambda reps: max(_all(reps, "failover_ms")),
     lambda r: max(r["failover_ms"]), True, None),
    ("committed submissions/s, median of rounds", "control",
     lambda reps: statistics.median(_all(reps, "submit_rates")),
     lambda r: statistics.median(r["submit_rates"]), False, (">= 1000/s", lambda v: v >= 1000)),
    ("committed submissions/s, slowest round", "control",
     lambda reps: min(_all(reps, "submit_rates")),
     lambda r: min(r["submit_rates"]), False, None),
    ("head CPU per committed submission, median of rounds, ms", "control",
     lambda reps: statistics.median(_all(reps, "head_ms_per_submit")),
     lambda r: statistics.median(r["head_ms_per_submit"]), True, None),
    ("status GET /v1/jobs/<id>, p50 ms", "control",
     lambda reps: pct(_all(reps, "status_ms"), 50),
     lambda r: pct(r["status_ms"], 50), True, None),
    ("status GET /v1/jobs/<id>, p99 ms", "control",
     lambda reps: pct(_all(reps, "status_ms"), 99),
     lambda r: pct(r["status_ms"], 99), True, ("< 20 ms", lambda v: v < 20)),
    ("list GET /v1/jobs (default answer), p99 ms", "control",
     lambda reps: pct(_all(reps, "list_ms"), 99),
     lambda r: pct(r["list_ms"], 99), True, ("< 20 ms", lambda v: v < 20)),
    ("`traintl list`, p99 ms", "control",
     lambda reps: pct(_all(reps, "list_cli_ms"), 99),
     lambda r: pct(r["list_cli_ms"], 99), True, None),
    ("head CPU with simulated agents at 1 Hz, % of a core", "heartbeats",
     lambda reps: statistics.median([r["hb_cpu"] for r in reps if r]),
     lambda r: r["hb_cpu"], True, ("< 10 %", lambda v: v < 10)),
]


def fmt(v):
    if v is None:
        return "failed"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def report(results, builds, a, pairs, scenarios, elapsed, load0, load1):
    """The comparison table (Markdown) and the distributions behind it."""
    base, new = builds
    jobs = sorted({r["jobs_stored"] for b in builds for r in results[b.name].get("control", [])
                   if r})
    jobs = "?" if not jobs else f"{jobs[0]}" if len(jobs) == 1 else f"{jobs[0]}-{jobs[-1]}"
    lines = [
        f"bench/cluster before/after: {pairs} repetition(s) of each scenario per build, "
        f"interleaved; {'QUICK (reduced sizes: a harness check, not the targets) ' if a.quick else ''}"
        f"{a.kills} kills; {a.rounds} rounds of {a.submit} submissions from "
        f"{a.procs}x{a.threads} clients; {jobs} jobs stored for status; {a.agents} agents "
        f"for {a.seconds:g} s.",
        f"base: {base.describe()}",
        f"new:  {new.describe()}",
        f"{os.cpu_count()} CPUs; load average {load0} at the start, {load1} at the end; "
        f"{elapsed / 60:.1f} min.",
        "",
        "| figure | base | new | new / base | median of per-repetition ratios | better | target "
        "| base meets | new meets |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, scen, pooled, one, lower, target in FIGURES:
        if scen not in scenarios:
            continue
        vals = []
        for b in builds:
            reps = results[b.name][scen]
            vals.append(pooled(reps) if any(reps) else None)
        ratio = vals[1] / vals[0] if None not in vals and vals[0] else None
        per = [one(rn) / one(rb) for rb, rn in zip(results[base.name][scen],
                                                     results[new.name][scen])
               if rb and rn and one(rb)]
        per_s = f"{statistics.median(per):.2f}" if per else "-"
        if target:
            meets = ["-" if v is None else ("yes" if target[1](v) else "**no**") for v in vals]
            ttext = target[0]
        else:
            meets, ttext = ["", ""], ""
        lines.append(f"| {label} | {fmt(vals[0])} | {fmt(vals[1])} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}'} | {per_s} | "
                     f"{'lower' if lower else 'higher'} | {ttext} | {meets[0]} | {meets[1]} |")
    lines.append("")
    lines.append("Distributions (one entry per repetition, separated by ';'):")
    for b in builds:
        r = results[b.name]
        if "failover" in scenarios:
            lines.append(f"- {b.name} failover ms: " + "; ".join(
                ", ".join(f"{t:.0f}" for t in x["failover_ms"]) if x else "failed"
                for x in r["failover"]))
        if "control" in scenarios:
            lines.append(f"- {b.name} submissions/s per round: " + "; ".join(
                ", ".join(f"{t:.0f}" for t in x["submit_rates"]) if x else "failed"
                for x in r["control"]) + "; head CPU % per round: " + "; ".join(
                ", ".join(f"{t:.0f}" for t in x["head_cpu"]) if x else "failed"
                for x in r["control"]))
            lines.append(f"- {b.name} status p50/p99/max ms: " + "; ".join(
                f"{pct(x['status_ms'], 50):.2f}/{pct(x['status_ms'], 99):.2f}/"
                f"{max(x['status_ms']):.2f} ({x['jobs_stored']} jobs)" if x else "failed"
                for x in r["control"]))
        if "heartbeats" in scenarios:
            lines.append(f"- {b.name} heartbeat head CPU %: " + "; ".join(
                f"{x['hb_cpu']:.1f} ({x['hb_rate']:.0f}/s)" if x else "failed"
                for x in r["heartbeats"]))
    return "\n".join(lines) + "\n"


def compare(a, builds, scenarios):
    """Runs every scenario `a.pairs` times for each build, interleaved: the build that goes
    first alternates from one (repetition, scenario) to the next."""
    results = {b.name: {s: [] for s in scenarios} for b in builds}
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    t0 = time.monotonic()
    for rep in range(a.pairs):
        for si, scen in enumerate(scenarios):
            order = builds if (rep + si) % 2 == 0 else builds[::-1]
            for b in order:
                print(f"== repetition {rep + 1}/{a.pairs}, {scen}, {b.name} "
                      f"(load average {os.getloadavg()[0]:.2f})", flush=True)
                b.use()
                t1 = time.monotonic()
                try:
                    res = run_scenario(scen, a, tag=f"[{b.name}] ")
                except Exception:  # one failed run must not lose the others
                    print(f"[{b.name}] {scen} FAILED:")
                    traceback.print_exc()
                    res = None
                results[b.name][scen].append(res)
                print(f"[{b.name}] {scen}: {time.monotonic() - t1:.0f} s", flush=True)
    load1 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = report(results, builds, a, a.pairs, scenarios, time.monotonic() - t0, load0, load1)
    print()
    print(text, end="")
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")
    return 0 if all(r for b in builds for s in scenarios for r in results[b.name][s]) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int)
    ap.add_argument("--submit", type=int)
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--procs", type=int, default=4, help="client processes")
    ap.add_argument("--threads", type=int, default=32, help="connections per client process")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--agents", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--only", choices=SCENARIOS)
    ap.add_argument("--bin-dir", default=os.environ.get("TRAINTL_BIN_DIR"),
                    help="the build measured (default $TRAINTL_BIN_DIR)")
    ap.add_argument("--libs", help="its libtest_train.so's directory (default "
                    "<bin-dir>/../tests/e2e/libs, else $TRAINTL_TEST_LIBS)")
    ap.add_argument("--baseline-bin-dir", help="a second build, measured in the same run "
                    "(before/after): the figures of both, side by side")
    ap.add_argument("--baseline-libs", help="default <baseline-bin-dir>/../tests/e2e/libs")
    ap.add_argument("--pairs", type=int, help="repetitions of each scenario per build "
                    "(default 3 with --baseline-bin-dir, 2 with --quick, else 1)")
    ap.add_argument("--quick", action="store_true", help="reduced sizes: a harness check")
    ap.add_argument("--out", help="append the comparison table (Markdown) to this file")
    a = ap.parse_args()
    for k, v in SIZES["quick" if a.quick else "full"].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.pairs is None:
        a.pairs = 2 if a.quick else 3 if a.baseline_bin_dir else 1
    if not a.bin_dir:
        sys.exit("no build: --bin-dir or TRAINTL_BIN_DIR")
    libs = a.libs
    if not libs:
        derived = os.path.join(a.bin_dir, "..", "tests", "e2e", "libs")
        libs = derived if os.path.exists(os.path.join(derived, "libtest_train.so")) \
            else os.environ.get("TRAINTL_TEST_LIBS")
    new = Build("new", a.bin_dir, libs)
    scenarios = [s for s in SCENARIOS if a.only in (None, s)]
    print(f"machine: {os.cpu_count()} CPUs, load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if a.baseline_bin_dir:
        base = Build("base", a.baseline_bin_dir, a.baseline_libs)
        print(f"base: {base.describe()}\nnew:  {new.describe()}")
        if base.sha == new.sha:
            print("note: both builds have the same traintld")
        return compare(a, [base, new], scenarios)
    new.use()
    for _ in range(a.pairs):
        for scen in scenarios:
            run_scenario(scen, a)
    return 0


if __name__ == "__main__":
    rc = main()
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    sys.exit(rc)
