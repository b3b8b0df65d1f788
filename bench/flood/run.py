#!/usr/bin/env python3
"""Connection floods against a traintl cluster on loopback (issue 12, defect 5), each next
to an unflooded baseline measured in the same run on the same cluster.

  a. Raft port: 3 voters; `--kills` rounds, alternating baseline and flooded: kill -9 of
     the head, time until a survivor answers /healthz as head. Flooded rounds first open
     `--raft-conns` silent connections to each follower's Raft port (reconnecting each one
     the follower closes). Reported: failover median and worst. Target <= 1.5 s.
  b. Head API, slow connections: 1 voter + 2 agents, a 3-rank SPREAD job running
     (unlimited restarts). `--seconds` of no flood, then `--seconds` with `--slow-conns` slow
     connections to the head's API (one header byte per second, reconnecting when closed).
  c. Head API, reconnecting slow clients: same cluster, `--seconds` of no flood, then
     `--seconds` with `--clients` connections trickling a byte every 0.2 s, reconnecting at
     once when closed.
  For b and c, in each phase: `traintl status JOB` against the head and against an agent
  (forwarded to the head), and authenticated GET /v1/jobs/JOB over HTTP, in a loop;
  answered = exit code 0 / HTTP 200. Reported: % answered within 1 s (target >= 95 %),
  p50/p99 latency, nodes the head marked lost (target 0), attempts failed (target 0).

Usage: TRAINTL_BIN_DIR=build/bin TRAINTL_TEST_LIBS=build/tests/e2e/libs \\
       python3 bench/flood/run.py [--kills 8] [--seconds 20] [--label after] [--out FILE]
--out appends a Markdown section (the tables below) to FILE.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
from cluster_harness import HEARTBEAT_MS, LOSS_MS, Cluster  # noqa: E402
from flood_harness import Flood  # noqa: E402
from harness import bin_path, train_spec, wait_for  # noqa: E402


def ms(seconds):
    return "-" if seconds != seconds else f"{seconds * 1000:.0f} ms"


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


# A failover that has not happened after this long is reported as "> NO_HEAD_S".
NO_HEAD_S = 30


def raft_port(daemon):
    with open(os.path.join(daemon.data_dir, "raft", "raft_address")) as f:
        return int(f.read().strip().rsplit(":", 1)[1])


def lost_count(daemon):
    return daemon.log().count(" lost: no heartbeat")


# ---- a. Raft port flood during failover ----

def bench_failover(kills, conns):
    c = Cluster(voters=3, agents=0, num_cpus=1).start()
    rows = {"baseline": [], "flooded": []}
    try:
        for i in range(kills):
            kind = "flooded" if i % 2 else "baseline"
            head = c.head()
            floods = []
            if kind == "flooded":
                for f in (v for v in c.voters if v is not head):
                    floods.append(Flood("127.0.0.1", raft_port(f), conns, "silent").start())
                wait_for(lambda: all(x.established >= conns for x in floods), 20,
                         what="flood up")
                time.sleep(1.0)
            t0 = time.monotonic()
            head.kill9()
            try:
                new = c.head(timeout=NO_HEAD_S)
                took = time.monotonic() - t0
                assert new is not head
            except AssertionError:
                took = float("inf")  # no head within NO_HEAD_S
            for x in floods:
                x.stop()
            if took == float("inf"):
                c.head(timeout=60)
            rows[kind].append(took)
            print(f"  failover {i + 1}/{kills} ({kind}): {took * 1000:.0f} ms", flush=True)
            head.start(role="voter")
            c.wait_nodes(3)
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()
    return rows


# ---- b, c. API floods while a job runs ----

def timed_cli(daemon, job_id, via):
    t0 = time.monotonic()
    try:
        p = subprocess.run([bin_path("traintl"), "--data-dir", via.data_dir, "status", job_id],
                           capture_output=True, text=True, timeout=30,
                           env={k: v for k, v in os.environ.items()
                                if k not in ("TRAINTL_TOKEN", "TRAINTL_ADDRESS")})
        ok = p.returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    return ok, time.monotonic() - t0


def timed_http(via, job_id):
    req = urllib.request.Request(f"http://{via.address}/v1/jobs/{job_id}",
                                 headers={"Authorization": f"Bearer {via.token}"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            ok = r.status == 200
    except (urllib.error.URLError, OSError):
        ok = False
    return ok, time.monotonic() - t0


def attempts_ended(head, job_id):
    """How many attempts of the job have ended (the job never ends by itself: every ended
    attempt failed), or None when the head did not answer."""
    import json
    try:
        with urllib.request.urlopen(urllib.request.Request(
                f"http://{head.address}/v1/jobs/{job_id}",
                headers={"Authorization": f"Bearer {head.token}"}), timeout=30) as r:
            job = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return sum(1 for a in job.get("attempts", []) if a.get("ended_at") is not None)


def measure_phase(c, job_id, seconds):
    head, agent = c.voters[0], c.agents[0]
    samples = {"cli_head": [], "cli_agent": [], "http_head": []}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples["cli_head"].append(timed_cli(head, job_id, head))
        samples["cli_agent"].append(timed_cli(head, job_id, agent))
        samples["http_head"].append(timed_http(head, job_id))
        time.sleep(0.1)
    return {"samples": samples}


def settled_attempts(head, job_id):
    # Asked with no flood on: the answer is always there.
    return wait_for(lambda: (lambda v: None if v is None else (v,))(
        attempts_ended(head, job_id)), 60, what="the job's record")[0]


def bench_api(seconds, slow_conns, clients):
    c = Cluster(voters=1, agents=2, num_cpus=2).start()
    out = {}
    try:
        head = c.voters[0]
        spec = train_spec(name="flood-bench", workers=3, epochs=100000, sleep_ms=500,
                          checkpoint_every=10, max_failures=-1)
        spec["scaling_config"]["placement_strategy"] = "SPREAD"
        job_id = head.submit_spec(spec)
        head.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="running")
        host, port = head.address.rsplit(":", 1)
        phases = [("b baseline", None), ("b flooded", dict(count=slow_conns, trickle_s=1.0)),
                  ("c baseline", None), ("c flooded", dict(count=clients, trickle_s=0.2))]
        for name, flood_args in phases:
            flood = None
            lost0, failed0 = lost_count(head), settled_attempts(head, job_id)
            if flood_args:
                flood = Flood(host, int(port), flood_args["count"], "slow",
                              trickle_s=flood_args["trickle_s"]).start()
                wait_for(lambda: flood.connects >= flood_args["count"], 20, what="flood up")
            print(f"  phase {name}: {seconds} s", flush=True)
            r = measure_phase(c, job_id, seconds)
            if flood:
                flood.stop()
                r["flood"] = (flood.connects, flood.closed_by_server)
            r["lost"] = lost_count(head) - lost0
            r["failed"] = settled_attempts(head, job_id) - failed0
            out[name] = r
            time.sleep(2.0)  # let the head settle between phases
        head.post(f"/v1/jobs/{job_id}/stop")
    finally:
        for d in c.daemons:
            d.stop()
        c.cleanup()
    return out


def summarize(label, kills, failover, api, args):
    lines = [f"### {label}", ""]
    load = os.getloadavg()
    lines.append(f"Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; "
                 f"heartbeats every {HEARTBEAT_MS} ms, node loss after {LOSS_MS} ms "
                 f"(tests/e2e/cluster_harness.py).")
    lines.append("")
    if failover:
        lines += ["| a. head failover (kill -9) | rounds | median | worst | all (ms) |",
                  "|---|---|---|---|---|"]
        for kind in ("baseline", "flooded"):
            t = failover[kind]
            if not t:
                continue
            name = "no flood" if kind == "baseline" else \
                f"{args.raft_conns} silent connections on each follower's Raft port"
            def fmt(x):
                return f"> {NO_HEAD_S} s" if x == float("inf") else f"{x:.2f} s"
            lines.append(f"| {name} | {len(t)} | {fmt(statistics.median(t))} | {fmt(max(t))} | "
                         + ", ".join(f"> {NO_HEAD_S * 1000}" if x == float("inf")
                                     else f"{x * 1000:.0f}" for x in t) + " |")
        lines.append("")
    if api:
        lines += ["| phase | requests | answered | answered within 1 s | p50 | p99 | "
                  "nodes lost | attempts failed | flood connections opened / closed by the "
                  "head |", "|---|---|---|---|---|---|---|---|---|"]
        for name, r in api.items():
            for kind, s in r["samples"].items():
                n = len(s)
                ok = sum(1 for a, _ in s if a)
                fast = sum(1 for a, t in s if a and t <= 1.0)
                lat = [t for a, t in s if a]
                flood = r.get("flood")
                lines.append(
                    f"| {name}, {kind} | {n} | {ok} | {100.0 * fast / max(1, n):.1f} % | "
                    f"{ms(pct(lat, 50))} | {ms(pct(lat, 99))} | "
                    f"{r['lost']} | {r['failed']} | "
                    + (f"{flood[0]} / {flood[1]}" if flood else "-") + " |")
        lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--raft-conns", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--slow-conns", type=int, default=300)
    ap.add_argument("--clients", type=int, default=400)
    ap.add_argument("--skip", default="", help="a, api: scenarios to skip")
    ap.add_argument("--label", default="run")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    failover = api = None
    if "a" not in args.skip.split(","):
        print("a. failover under a Raft port flood", flush=True)
        failover = bench_failover(args.kills, args.raft_conns)
    if "api" not in args.skip.split(","):
        print("b, c. API floods while a job runs", flush=True)
        api = bench_api(args.seconds, args.slow_conns, args.clients)
    text = summarize(args.label, args.kills, failover, api, args)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
