"""Multi-node clusters on loopback: several traintld processes, each with its own data dir
and ports, sharing one bearer token (written into every data dir before the start)."""
import os
import secrets
import sys

from harness import Daemon, wait_for

LOSS_MS = 2000
HEARTBEAT_MS = 200


class Cluster:
    def __init__(self, voters=3, agents=2, num_cpus=2, voter_args=(), agent_args=()):
        self.token = secrets.token_hex(32)
        self.n_voters = voters
        self.n_agents = agents
        self.num_cpus = num_cpus
        self.voter_args = list(voter_args)
        self.agent_args = list(agent_args)
        self.daemons = []

    def _new(self, args, num_cpus=None):
        d = Daemon(num_cpus=num_cpus or self.num_cpus,
                   extra_args=args + ["--heartbeat-interval-ms", str(HEARTBEAT_MS),
                                      "--node-loss-timeout-ms", str(LOSS_MS)])
        path = os.path.join(d.data_dir, "token")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, (self.token + "\n").encode())
        os.close(fd)
        self.daemons.append(d)
        return d

    def start(self):
        first = self._new(["--server"] + self.voter_args).start(role="head")
        self.voters = [first]
        for _ in range(self.n_voters - 1):
            d = self._new(["--server", "--join", first.address] + self.voter_args)
            self.voters.append(d.start(role="voter"))
        self.agents = []
        joins = ",".join(v.address for v in self.voters)
        for _ in range(self.n_agents):
            d = self._new(["--join", joins] + self.agent_args)
            self.agents.append(d.start(role="agent"))
        self.wait_nodes(len(self.daemons))
        return self

    def alive(self):
        return [d for d in self.daemons if d.proc and d.proc.poll() is None]

    def head(self, timeout=15):
        def find():
            for d in self.alive():
                try:
                    if d.get("/healthz", auth=False)[1].get("role") == "head":
                        return d
                except OSError:
                    pass
            return None
        return wait_for(find, timeout, interval=0.02, what="a head")

    def nodes(self, via=None):
        status, body = (via or self.head()).get("/v1/nodes")
        assert status == 200, (status, body)
        return body["nodes"]

    def wait_nodes(self, n, timeout=30):
        return wait_for(lambda: (lambda ns: ns if sum(x["state"] == "ALIVE" for x in ns) >= n
                                 else None)(self.nodes()), timeout, what=f"{n} alive nodes")

    def ranks_by_daemon(self, job_id, attempt=1):
        """Which daemons ran which ranks (from the rank logs in their data dirs)."""
        out = {}
        for i, d in enumerate(self.daemons):
            path = os.path.join(d.data_dir, "jobs", job_id, f"attempt_{attempt}")
            if os.path.isdir(path):
                ranks = sorted(int(f[5:-4]) for f in os.listdir(path)
                               if f.startswith("rank_") and f.endswith(".log"))
                if ranks:
                    out[i] = ranks
        return out

    def dump_logs(self):
        for i, d in enumerate(self.daemons):
            sys.stderr.write(f"---- traintld {i} ({d.data_dir}) ----\n" + d.log()[-8000:] + "\n")

    def cleanup(self):
        for d in self.daemons:
            d.cleanup()
