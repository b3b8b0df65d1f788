"""Multi-node clusters on loopback: joining, the nodes view, SPREAD across nodes, fractional
GPUs packed per node, kill -9 of the head and of an agent mid-job, self-fencing of a node
that loses the head, and (where the machine allows) a network-namespace partition."""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from cluster_harness import LOSS_MS, Cluster, NetnsClusterTestCase
from harness import bin_path, main, train_spec, wait_for, worker_pids


def worker_env(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
    return {k.decode(): v.decode() for k, v in pairs}


def spread(spec):
    spec["scaling_config"]["placement_strategy"] = "SPREAD"
    return spec


class ClusterTestCase(unittest.TestCase):
    voters, agents, num_cpus = 3, 2, 2
    agent_args = ()

    def setUp(self):
        result = getattr(self._outcome, "result", None)
        self._failures_before = len(getattr(result, "failures", [])) + \
            len(getattr(result, "errors", []))
        self.cluster = Cluster(self.voters, self.agents, self.num_cpus,
                               agent_args=self.agent_args)
        try:
            self.cluster.start()
        except BaseException:
            self.cluster.dump_logs()
            self.cluster.cleanup()
            raise

    def tearDown(self):
        result = getattr(self._outcome, "result", None)
        failed = any(err for _, err in getattr(self._outcome, "errors", []) if err) or \
            len(getattr(result, "failures", [])) + len(getattr(result, "errors", [])) > \
            self._failures_before
        if failed:
            self.cluster.dump_logs()
        for d in self.cluster.daemons:
            d.stop()
        leftover = [p for d in self.cluster.daemons for p in d.worker_pids()]
        self.cluster.cleanup()
        self.assertEqual(leftover, [], "worker processes left behind")

    def records(self, via, job_id):
        job = via.job(job_id)
        cks = via.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
        metrics = via.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        return job, cks, metrics

    def assert_sequential_attempts(self, job):
        attempts = job["attempts"]
        for a, b in zip(attempts, attempts[1:]):
            self.assertIsNotNone(a["ended_at"], job)
            self.assertLessEqual(a["ended_at"], b["started_at"], job)


class FiveNodeTest(ClusterTestCase):
    def test_nodes_view_and_spread_job_on_four_nodes(self):
        c = self.cluster
        head = c.head()
        # Every daemon answers; roles, addresses and resources are shown.
        for d in c.daemons:
            p = d.cli("nodes", "--json", check=True)
            self.assertIn('"head"', p.stdout)
        nodes = c.nodes(via=c.agents[0])
        roles = sorted(n["role"] for n in nodes)
        self.assertEqual(roles, ["agent", "agent", "head", "voter", "voter"])
        self.assertTrue(all(n["state"] == "ALIVE" for n in nodes))
        self.assertTrue(all(n["resources_total"]["CPU"] == 2 for n in nodes))
        table = c.agents[1].cli("nodes", check=True).stdout
        self.assertIn("agent", table)
        self.assertIn("head", table)

        # Submitted through an agent: forwarded to the head.
        job_id = c.agents[0].submit_spec(spread(train_spec(workers=4, epochs=3)))
        job = head.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        placed = c.ranks_by_daemon(job_id)
        self.assertEqual(len(placed), 4, placed)
        self.assertEqual(sorted(r for rs in placed.values() for r in rs), [0, 1, 2, 3])
        # Every node's view agrees; status works through any daemon, and so do the logs of
        # all four ranks, each on its own node.
        for d in c.daemons:
            self.assertEqual(d.job(job_id)["state"], "SUCCEEDED")
            d.cli("status", job_id, check=True)
            logs = d.cli("logs", job_id, check=True).stdout
            for r in range(4):
                self.assertIn(f"[rank {r}] epoch 2 rank {r} loss", logs)
        history = head.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        self.assertEqual(len(history), 3)

    def test_kill9_head_mid_job(self):
        c = self.cluster
        head = c.head()
        job_id = head.submit_spec(spread(train_spec(workers=4, epochs=16, sleep_ms=250,
                                                    max_failures=2)))
        head.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1) >= 2,
                      what="checkpoint 2")
        before, before_cks, before_metrics = self.records(head, job_id)
        t0 = time.monotonic()
        head.kill9()
        new_head = c.head()
        took = time.monotonic() - t0
        self.assertIsNot(new_head, head)
        print(f"new head after {took:.2f}s")
        # Every committed record survived, and every daemon serves it.
        for d in c.alive():
            after, after_cks, after_metrics = self.records(d, job_id)
            self.assertEqual(after["submitted_at"], before["submitted_at"])
            ids = [x["id"] for x in after_cks]
            for ck in before_cks:
                self.assertIn(ck["id"], ids)
            self.assertGreaterEqual(len(after_metrics), len(before_metrics))
            d.cli("status", job_id, check=True)
        job = c.agents[0].wait_terminal(job_id, timeout=120)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 2, job)
        # The new head names what happened: a failover, not a daemon restart.
        self.assertIn("head failover", job["attempts"][0]["reason"])
        self.assertIn("checkpoint_a001_", job["attempts"][1]["restored_from"])
        self.assert_sequential_attempts(job)
        # The library reached the nodes of attempt 2 from the new head.
        self.assertEqual(len(c.ranks_by_daemon(job_id, attempt=2)), 4)


class RemoteLogsTest(ClusterTestCase):
    """`traintl logs` through any daemon shows every rank, also those that ran on another
    node: fetched from that node's daemon, interleaved, followed while the job runs."""
    voters, agents, num_cpus = 1, 1, 1  # one CPU each: a 2-rank job spans both nodes

    def test_logs_of_ranks_on_other_nodes_through_head_and_agent(self):
        c = self.cluster
        head, agent = c.voters[0], c.agents[0]
        job_id = head.submit_spec(train_spec(name="remote-logs", workers=2, epochs=8,
                                             sleep_ms=500))
        head.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        placed = c.ranks_by_daemon(job_id)
        self.assertEqual(sorted(placed.values()), [[0], [1]], placed)
        on_agent = placed[c.daemons.index(agent)][0]  # the rank the head reads remotely

        # -f through the head (which reads the agent's rank from the agent) and through
        # the agent (which relays the head's stream) shows the remote rank's lines while
        # the job runs.
        follows = []
        for via in (head, agent):
            p = subprocess.Popen(
                [bin_path("traintl"), "--data-dir", via.data_dir, "logs", job_id, "-f"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            f = {"proc": p, "seen": [], "live": []}
            def read(f=f):
                for line in f["proc"].stdout:
                    f["seen"].append(line.rstrip("\n"))
                    if line.startswith(f"[rank {on_agent}] epoch ") and \
                            head.job(job_id)["state"] == "RUNNING":
                        f["live"].append(line)
            f["reader"] = threading.Thread(target=read, daemon=True)
            f["reader"].start()
            follows.append(f)
        try:
            for f in follows:
                wait_for(lambda: len(f["live"]) >= 2, 30, what="the remote rank's lines, followed")
            job = head.wait_terminal(job_id)
            for f in follows:
                f["proc"].wait(timeout=30)  # ends with the job
                f["reader"].join(timeout=10)
        finally:
            for f in follows:
                if f["proc"].poll() is None:
                    f["proc"].kill()
                    f["proc"].wait()
                f["err"] = f["proc"].stderr.read()
                f["proc"].stdout.close()
                f["proc"].stderr.close()
        self.assertEqual(job["state"], "SUCCEEDED", job)
        for f in follows:
            self.assertEqual(f["proc"].returncode, 0, f["err"])
            for r in (0, 1):
                self.assertIn(f"[rank {r}] epoch 7 rank {r}", "\n".join(f["seen"]), f["seen"])

        def epochs(lines, rank):
            return [int(l.split()[3]) for l in lines
                    if l.startswith(f"[rank {rank}] epoch ") and " loss " in l]
        # The whole log, through the head and through the agent: both ranks, interleaved.
        for via in (head, agent):
            lines = via.cli("logs", job_id, check=True).stdout.splitlines()
            self.assertTrue(all(l.startswith(("[rank 0] ", "[rank 1] ")) for l in lines), lines)
            self.assertEqual(epochs(lines, 0), list(range(8)), lines)
            self.assertEqual(epochs(lines, 1), list(range(8)), lines)
            # Interleaved by time (the ranks run side by side), not one rank after the other.
            order = [int(l[6]) for l in lines if " epoch " in l and " loss " in l]
            self.assertLess(order.index(1), len(order) - 1 - order[::-1].index(0), lines)
            self.assertLess(order.index(0), len(order) - 1 - order[::-1].index(1), lines)
            # One rank by number, local or remote to the daemon asked.
            for r in (0, 1):
                one = via.cli("logs", job_id, "--rank", str(r), check=True).stdout.splitlines()
                self.assertEqual(one, [l[len(f"[rank {r}] "):] for l in lines
                                       if l.startswith(f"[rank {r}] ")])
            tail = via.cli("logs", job_id, "-n", "3", check=True).stdout.splitlines()
            self.assertEqual(tail, lines[-3:])
            # A tail bounded in bytes (the dashboard's): the newest whole lines that fit.
            status, body = via.get(f"/v1/jobs/{job_id}/logs?ranks=all&tail=5&max_bytes=120",
                                   raw=True)
            self.assertEqual(status, 200, body)
            want = [l + "\n" for l in lines[-5:]]
            while sum(len(l.encode()) for l in want) > 120:
                want.pop(0)
            self.assertTrue(want)
            self.assertEqual(body.decode(), "".join(want))
        for f in follows:
            self.assertEqual(sorted(f["seen"]), sorted(
                head.cli("logs", job_id, check=True).stdout.splitlines()))

        # The daemon-to-daemon endpoint behind it: the cluster credential only (without
        # --cluster-secret-file, the token: test_security.py has the case with one), job ids
        # only.
        target = f"/v1/internal/logs/{job_id}/1/{on_agent}?offset=0"
        cluster = agent.cluster_token()
        self.assertEqual(agent.get(target, auth=False, raw=True)[0], 401)
        self.assertEqual(agent.get(target, token="0" * 64, raw=True)[0], 401)
        status, body = agent.get(target, token=cluster, raw=True)
        self.assertEqual(status, 200)
        self.assertIn(f"epoch 7 rank {on_agent}".encode(), body)
        # A bounded tail's history starts at the line that holds the byte max_bytes + 1
        # before the end: a node sends no more of a remote log than the tail can show.
        status, body = agent.get(f"/v1/internal/logs/{job_id}/1/{on_agent}?offset=-1"
                                 "&tail=1000&max_bytes=40", token=cluster, raw=True)
        self.assertEqual(status, 200)
        header, data = body.split(b"\n", 1)
        offset, size = int(header.split()[0]), int(header.split()[1])
        self.assertGreater(size, 200)
        self.assertEqual(len(data), size - offset)
        self.assertGreaterEqual(len(data), 41)
        self.assertLess(len(data), 41 + 100)  # the lines are short
        status, whole = agent.get(f"/v1/internal/logs/{job_id}/1/{on_agent}?offset=0",
                                  token=cluster, raw=True)
        self.assertEqual(whole.split(b"\n", 1)[1][offset - 1:offset], b"\n")  # a line start
        for bad in ("..%2f..%2ftoken/1/0", "..%2F..%2Ftoken/1/0", "%2e%2e/1/0",
                    f"{job_id}/..%2f..%2f..%2ftoken/0", f"{job_id}/1/-1", f"{job_id}/1/0%00",
                    f"{job_id}/1/0?offset=-5", f"{job_id}/1/0?max=abc", f"{job_id}/1/0?tail=-1",
                    f"{job_id}/1/0?offset=-1&tail=3&max_bytes=-2"):
            status, body = agent.get("/v1/internal/logs/" + bad, token=cluster, raw=True)
            self.assertIn(status, (400, 404), (bad, body))
            self.assertNotIn(agent.token.encode(), body, bad)

        # The dashboard on the agent: its session (cookie + X-Traintl-Ui) goes with the calls
        # the agent forwards to the head, the log relay included.
        session = agent.ui_login(token=agent.token)
        self.assertIsNotNone(session)
        session["Cookie"] = "other=1; " + session["Cookie"]
        status, body = agent.request("GET", "/v1/nodes", auth=False, headers=session)
        self.assertEqual(status, 200, body)
        self.assertEqual(len(body["nodes"]), 2)
        status, body = agent.request("GET", f"/v1/jobs/{job_id}/logs?ranks=all", auth=False,
                                     headers=session, raw=True)
        self.assertEqual(status, 200, body)
        self.assertIn(f"[rank {on_agent}] epoch 7 rank {on_agent}".encode(), body)
        self.assertEqual(agent.request("GET", "/v1/nodes", auth=False,
                                       headers={"Cookie": session["Cookie"]})[0], 401)

        # The agent is gone: the head still serves its own rank, and says so for the other.
        agent.stop()
        p = head.cli("logs", job_id, check=True, timeout=60)
        lines = p.stdout.splitlines()
        other = 1 - on_agent
        self.assertEqual(epochs(lines, other), list(range(8)), lines)
        self.assertEqual(epochs(lines, on_agent), [], lines)
        down = [l for l in lines if "cannot be reached" in l]
        self.assertEqual(len(down), 1, lines)
        self.assertIn("did not answer: connection refused", down[0])
        self.assertTrue(down[0].startswith(f"[rank {on_agent}] --- rank {on_agent} ran on node"),
                        down)
        # Following the ended job ends too, with the same one line for the missing rank.
        p = head.cli("logs", job_id, "-f", check=True, timeout=60)
        self.assertEqual(sorted(p.stdout.splitlines()), sorted(lines))


    def test_a_remote_rank_log_that_is_not_utf8_fails_its_job_not_a_daemon(self):
        c = self.cluster
        head, agent = c.voters[0], c.agents[0]
        job_id = head.submit_spec(train_spec(name="binary", workers=2, fail_at_epoch=1,
                                             fail_rank=-1, fail_mode="binary", sleep_ms=300))
        job = head.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED", job)
        self.assertIn("\ufffd not text", json.dumps(job, ensure_ascii=False))
        for d in (head, agent):
            self.assertIsNone(d.proc.poll(), d.log()[-3000:])
        # The agent's events still reach the head.
        job_id = head.submit_spec(train_spec(name="after", workers=2, epochs=2, sleep_ms=10))
        self.assertEqual(head.wait_terminal(job_id)["state"], "SUCCEEDED")

    def test_worker_events_count_only_from_the_node_that_holds_the_rank(self):
        """A worker event that claims to come from another node than the one the rank runs
        on now (a lost node's old worker reporting late) is ignored; an exit is taken once
        per worker process."""
        c = self.cluster
        head, agent = c.voters[0], c.agents[0]
        job_id = head.submit_spec(train_spec(name="late-exit", workers=2, epochs=40,
                                             sleep_ms=200))
        head.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        placed = c.ranks_by_daemon(job_id)
        on_head = placed[c.daemons.index(head)][0]
        nodes = head.get("/v1/nodes")[1]["nodes"]
        agent_node = next(n["node_id"] for n in nodes if n["address"] == agent.address)
        exit_event = {"type": "exit", "job_id": job_id, "attempt": 1, "rank": on_head,
                      "exit_code": None, "signal": 9, "done_seen": False, "done_ok": False,
                      "done_error": "", "retryable": True, "stopped_by_agent": False,
                      "log_tail": "", "pid": 999999}
        status, body = head.post("/v1/internal/events",
                                 {"node_id": agent_node, "partial": True,
                                  "events": [exit_event]}, token=head.cluster_token())
        self.assertEqual(status, 200, body)
        time.sleep(1.5)
        job = head.job(job_id)
        self.assertEqual(job["state"], "RUNNING", job)
        self.assertIn("the rank was moved to another node", head.log())
        head.post(f"/v1/jobs/{job_id}/stop")
        self.assertEqual(head.wait_terminal(job_id)["state"], "STOPPED")

    def test_a_remote_command_rank_records_its_own_exit_code(self):
        """A command entry point's exit code reaches the head from the node that ran it (the
        exit event's command_exit_code), as the attempt's exit_code."""
        c = self.cluster
        head = c.voters[0]
        work = tempfile.mkdtemp(prefix="traintl-e2e-cmd-")
        try:
            flags = os.path.join(work, "flags")
            os.makedirs(flags)
            # Each rank waits for its flag; the test raises the one on the agent's node.
            script = (f"while [ ! -e {flags}/$RANK ]; do sleep 0.05; done; "
                      "echo rank $RANK gives up; exit 42")
            spec = {"name": "remote-exit",
                    "entrypoint": {"command": ["sh", "-c", script], "working_dir": "."},
                    "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
                    "run_config": {"failure_config": {"max_failures": 0}}}
            with open(os.path.join(work, "job.json"), "w") as f:
                json.dump(spec, f)
            p = subprocess.run([bin_path("traintl"), "--data-dir", head.data_dir, "submit",
                                "job.json"], cwd=work, capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            job_id = re.search(r"\b([0-9a-f]{12})\b", p.stdout).group(1)
            head.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
            placed = c.ranks_by_daemon(job_id)
            on_agent = placed[c.daemons.index(c.agents[0])][0]
            open(os.path.join(flags, str(on_agent)), "w").close()
            job = head.wait_terminal(job_id)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.assertEqual(job["state"], "FAILED", job)
        attempt = job["attempts"][-1]
        self.assertEqual((attempt["failed_rank"], attempt["exit_code"], attempt["signal"]),
                         (on_agent, 42, None), attempt)
        self.assertIn("the command exited with code 42", job["message"])


class AgentLossTest(ClusterTestCase):
    voters, agents, num_cpus = 1, 2, 2

    def test_kill9_agent_mid_job_restarts_from_checkpoint(self):
        c = self.cluster
        head = c.head()
        # 2 + 2 + 2 CPUs; 4 workers SPREAD use every node, and fit on two after a loss.
        job_id = head.submit_spec(spread(train_spec(workers=4, epochs=14, sleep_ms=250,
                                                    max_failures=1)))
        head.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1) >= 1,
                      what="checkpoint 1")
        placed = c.ranks_by_daemon(job_id)
        victim = c.agents[0]
        self.assertIn(c.daemons.index(victim), placed)
        victim.kill9()
        wait_for(lambda: victim.worker_pids() == [], timeout=10, what="its workers to die")
        nodes = wait_for(lambda: (lambda ns: ns if any(n["state"] == "LOST" for n in ns)
                                  else None)(c.nodes()), timeout=LOSS_MS / 1000 + 10,
                         what="a LOST node")
        self.assertEqual(sum(n["state"] == "LOST" for n in nodes), 1)
        job = head.wait_terminal(job_id, timeout=120)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 2)
        self.assertIn("lost", job["attempts"][0]["reason"])
        self.assertIn("checkpoint_a001_", job["attempts"][1]["restored_from"])
        self.assert_sequential_attempts(job)
        self.assertNotIn(c.daemons.index(victim), c.ranks_by_daemon(job_id, attempt=2))


class FencingTest(ClusterTestCase):
    """A node that cannot reach any head stops its own workers (SIGSTOP of the only voter
    stands in for a partition; see PartitionTest for the namespace version)."""
    voters, agents, num_cpus = 1, 1, 2

    def test_node_without_head_stops_its_workers(self):
        c = self.cluster
        head = c.head()
        job_id = head.submit_spec(spread(train_spec(workers=2, epochs=40, sleep_ms=250,
                                                    max_failures=1)))
        head.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        agent = c.agents[0]
        wait_for(lambda: len(agent.worker_pids()) == 1, what="a worker on the agent")
        os.killpg(head.proc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: agent.worker_pids() == [], timeout=LOSS_MS / 1000 + 5,
                     what="the agent to stop its worker")
        finally:
            os.killpg(head.proc.pid, signal.SIGCONT)
        head.post(f"/v1/jobs/{job_id}/stop")
        job = head.wait_terminal(job_id, timeout=60)
        self.assert_sequential_attempts(job)


class FractionalGpuTest(ClusterTestCase):
    voters, agents, num_cpus = 1, 2, 4
    agent_args = ("--num-gpus", "1")

    def test_half_gpus_packed_per_agent_device(self):
        c = self.cluster
        head = c.head()
        spec = train_spec(workers=4, epochs=1000)
        spec["scaling_config"]["resources_per_worker"]["GPU"] = 0.5
        job_id = head.submit_spec(spec)
        head.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        per_agent = []
        for a in c.agents:
            pids = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(a.worker_pids()),
                            what="2 workers on an agent")
            per_agent.append(sorted(worker_env(p)["CUDA_VISIBLE_DEVICES"] for p in pids))
        self.assertEqual(per_agent, [["0", "0"], ["0", "0"]])
        self.assertEqual(c.voters[0].worker_pids(), [])
        nodes = c.nodes()
        used = sorted(n["resources_used"].get("GPU", 0) for n in nodes)
        self.assertEqual(used, [0, 1, 1])
        # A whole GPU more does not fit anywhere now; it waits saying why.
        whole = train_spec(name="whole", workers=1, epochs=1)
        whole["scaling_config"]["resources_per_worker"]["GPU"] = 1
        second = head.submit_spec(whole)
        job = head.wait_job(second, lambda j: "GPU" in j["pending_reason"], what="GPU reason")
        self.assertEqual(job["state"], "PENDING")
        head.post(f"/v1/jobs/{job_id}/stop")
        self.assertEqual(head.wait_terminal(second)["state"], "SUCCEEDED")


def attempts_alive(job_id):
    """Attempt numbers of the job's live worker processes, on any node of this machine
    (a rank's context file lies in <data-dir>/jobs/<job>/attempt_<n>/, on its command line)."""
    marker = f"/jobs/{job_id}/attempt_"
    out = set()
    for pid in worker_pids(marker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if marker not in cmd:  # it exited between the two reads
            continue
        tail = cmd.split(marker, 1)[1]
        out.add(int(tail.split("/", 1)[0]))
    return out


class AttemptWatcher(threading.Thread):
    """Samples which attempts of a job have live workers, every 20 ms, until stopped."""

    def __init__(self, job_id):
        super().__init__(daemon=True)
        self.job_id = job_id
        self.overlaps = []  # samples that saw two attempts at once
        self.seen = set()
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            alive = attempts_alive(self.job_id)
            self.seen |= alive
            if len(alive) > 1:
                self.overlaps.append(sorted(alive))
            self._halt.wait(0.02)

    def stop(self):
        self._halt.set()
        self.join(5)


class PartitionTest(NetnsClusterTestCase):
    """An agent in its own network namespace is cut off from the head (its veth link goes
    down). The agent stops its workers itself (fencing, within 60% of the node-loss
    bound), the head declares it lost and runs the next attempt on another node, and no
    two attempts of the job ever run at once. Head and the other agent live in a second
    namespace; both namespaces (and their 10.213.0.0/24 addresses) are the test's own."""

    def test_partitioned_agent_fences_and_job_moves(self):
        c, net = self.cluster, self.net
        head = self.daemon(net.hub, net.HUB_IP, 1, ["--server"]).start(role="head")
        c.voters = [head]
        edge = self.daemon(net.edge, net.EDGE_IP, 2, ["--join", head.address])
        edge.start(role="agent")
        c.wait_nodes(2)
        # 2 workers on one node: only the edge agent has 2 CPUs, so attempt 1 runs there.
        spec = train_spec(workers=2, epochs=60, sleep_ms=250, max_failures=2)
        spec["scaling_config"]["placement_strategy"] = "STRICT_PACK"
        job_id = head.submit_spec(spec)
        head.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1) >= 1,
                      what="checkpoint 1")
        self.assertEqual(c.ranks_by_daemon(job_id), {c.daemons.index(edge): [0, 1]})
        # A second agent in the hub, where attempt 2 can go.
        other = self.daemon(net.hub, net.HUB_IP, 2, ["--join", head.address])
        other.start(role="agent")
        c.wait_nodes(3)
        watcher = AttemptWatcher(job_id)
        watcher.start()
        try:
            self.assertEqual(len(edge.worker_pids()), 2)
            net.cut()
            # The agent, still running, stops its own workers: it cannot reach a head.
            wait_for(lambda: edge.worker_pids() == [], timeout=LOSS_MS / 1000 + 5,
                     what="the partitioned agent to stop its workers")
            self.assertIsNone(edge.proc.poll(), "the partitioned agent must stay up")
            self.assertIn("stopping every worker here", edge.log())
            job = head.wait_job(job_id, lambda j: j["attempt"] >= 2 and j["state"] == "RUNNING",
                                timeout=60, what="attempt 2 RUNNING")
            self.assertIn("lost", job["attempts"][0]["reason"], job)
            self.assertIn("checkpoint_a001_", job["attempts"][1]["restored_from"], job)
            self.assertEqual(c.ranks_by_daemon(job_id, attempt=2),
                             {c.daemons.index(other): [0, 1]})
            lost = [n for n in c.nodes(via=head) if n["state"] == "LOST"]
            self.assertEqual([n["address"] for n in lost], [edge.address])
            # Healed, the agent rejoins and is not given (or left with) an old attempt.
            net.heal()
            c.wait_nodes(3)
            self.assertEqual(edge.worker_pids(), [])
            head.post(f"/v1/jobs/{job_id}/stop")
            job = head.wait_terminal(job_id, timeout=60)
        finally:
            watcher.stop()
        self.assertEqual(job["state"], "STOPPED", job)
        self.assertEqual(watcher.overlaps, [], "two attempts ran at once")
        self.assertEqual(watcher.seen, {1, 2})
        self.assertEqual([a["attempt"] for a in job["attempts"]], [1, 2])
        for a, b in zip(job["attempts"], job["attempts"][1:]):
            self.assertLessEqual(a["ended_at"], b["started_at"], job)


if __name__ == "__main__":
    main()
