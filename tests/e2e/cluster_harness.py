"""Multi-node clusters on loopback: several traintld processes, each with its own data dir
and ports, sharing one bearer token (written into every data dir before the start).

For partitions and real addresses, NetnsPair makes a hub network namespace and one or
more edge namespaces on one bridged segment, and NetnsDaemon runs a daemon inside one of
them on that namespace's address."""
import ctypes
import os
import secrets
import shutil
import subprocess
import sys
import unittest

from harness import Daemon, bin_path, wait_for

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

    def _new(self, args, num_cpus=None, factory=Daemon):
        d = factory(num_cpus=num_cpus or self.num_cpus,
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

    def head(self, timeout=15, among=None):
        """The daemon that says it is the head, among `among` (default: every live one;
        pass a subset to leave out one that would not answer, e.g. a stopped one)."""
        def find():
            for d in among or self.alive():
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


# ---- network namespaces -------------------------------------------------------------

CLONE_NEWNET = 0x40000000


def _ip(*args, check=True):
    p = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")
    return p


def _setns(fd):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns: " + os.strerror(err))


def netns_unavailable():
    """Why this machine cannot run namespace tests, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) to create network namespaces"
    if shutil.which("ip") is None:
        return "no ip(8) binary (apt-get install iproute2)"
    probe = f"ttl-probe-{os.getpid()}"
    p = _ip("netns", "add", probe, check=False)
    if p.returncode != 0:
        return "ip netns add failed: " + p.stderr.strip()
    try:
        fd = os.open(f"/run/netns/{probe}", os.O_RDONLY)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            _setns(fd)
            _setns(own)
        except OSError as e:
            return str(e)
        finally:
            os.close(fd)
            os.close(own)
    finally:
        _ip("netns", "del", probe, check=False)
    return None


class NetnsPair:
    """Namespaces "hub" and `edges` edge namespaces ("edge", "edge2", ...) on one
    10.213.0.0/24 segment: a bridge in the hub (HUB_IP) and a veth pair from it into each
    edge (EDGE_IP, EDGE2_IP, ...). The test process (its calling thread, and so every
    process it starts) enters the hub with enter_hub(); cut() takes the first edge's link
    down: a partition. destroy() removes them all (the links go with them) and always
    runs, also after a failed create()."""
    HUB_IP = "10.213.0.1"
    EDGE_IP = "10.213.0.2"
    EDGE2_IP = "10.213.0.3"

    def __init__(self, edges=1):
        tag = str(os.getpid() % 100000)
        self.hub = f"ttl-hub-{tag}"
        self.edges = [f"ttl-edge{'' if i == 0 else i + 1}-{tag}" for i in range(edges)]
        self.edge = self.edges[0]
        self.edge2 = self.edges[1] if edges > 1 else None
        self.bridge = f"ttlb{tag}"
        # (hub side, edge side) of each edge's veth pair; at most 15 characters.
        self.links = [(f"ttlh{i}{tag}", f"ttle{i}{tag}") for i in range(edges)]
        self.edge_if = self.links[0][1]
        self._home = None

    def edge_ip(self, i):
        return f"10.213.0.{i + 2}"

    def create(self):
        try:
            for ns in [self.hub] + self.edges:
                _ip("netns", "del", ns, check=False)  # left over by a killed earlier run
                _ip("netns", "add", ns)
                _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", self.hub, "link", "add", self.bridge, "type", "bridge")
            _ip("-n", self.hub, "addr", "add", self.HUB_IP + "/24", "dev", self.bridge)
            _ip("-n", self.hub, "link", "set", self.bridge, "up")
            for i, (ns, (hub_if, edge_if)) in enumerate(zip(self.edges, self.links)):
                _ip("link", "add", hub_if, "netns", self.hub, "type", "veth", "peer", "name",
                    edge_if, "netns", ns)
                _ip("-n", self.hub, "link", "set", hub_if, "master", self.bridge)
                _ip("-n", self.hub, "link", "set", hub_if, "up")
                _ip("-n", ns, "addr", "add", self.edge_ip(i) + "/24", "dev", edge_if)
                _ip("-n", ns, "link", "set", edge_if, "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def enter_hub(self):
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.hub}", os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)

    def leave(self):
        if self._home is not None:
            _setns(self._home)
            os.close(self._home)
            self._home = None

    def cut(self):
        _ip("-n", self.edge, "link", "set", self.edge_if, "down")

    def heal(self):
        _ip("-n", self.edge, "link", "set", self.edge_if, "up")

    def destroy(self):
        self.leave()
        for ns in [self.hub] + self.edges:
            _ip("netns", "del", ns, check=False)


class NetnsDaemon(Daemon):
    """A traintld inside network namespace `netns`, with its API (and Raft) on `host`.
    Plain HTTP on that address is allowed: it exists only inside namespaces the test made."""

    def __init__(self, netns, host, **kw):
        super().__init__(**kw)
        self.netns = netns
        self.host = host

    def command(self, host=None):
        # ip netns exec execs traintld: proc.pid is the daemon's pid.
        return ["ip", "netns", "exec", self.netns] + super().command(self.host) + [
            "--insecure-allow-remote-without-tls"]


class NetnsClusterTestCase(unittest.TestCase):
    """A cluster whose daemons live in the namespaces of a NetnsPair (the test enters
    the hub). Skipped, with the reason printed, where namespaces cannot be made or
    skip_reason() says so; tearDown heals the link, stops every daemon and checks that no
    worker is left."""

    edges = 1  # edge namespaces besides the hub

    def skip_reason(self):
        return None

    def setUp(self):
        reason = netns_unavailable() or self.skip_reason()
        if reason:
            print(f"SKIPPED {type(self).__name__}: {reason}")
            self.skipTest(reason)
        self.net = NetnsPair(self.edges).create()
        self.cluster = None
        try:
            self.net.enter_hub()
            self.cluster = Cluster(voters=1, agents=0)
        except BaseException:
            self.net.destroy()
            raise

    def tearDown(self):
        try:
            c = self.cluster
            failed = any(err for _, err in getattr(self._outcome, "errors", []) if err) or \
                bool(getattr(getattr(self._outcome, "result", None), "failures", []))
            if failed:
                c.dump_logs()
            try:
                self.net.heal()  # a test that failed mid-partition: let the daemons talk
            except RuntimeError:
                pass
            errors = []
            for d in c.daemons:
                try:
                    d.stop()
                except AssertionError as e:  # stop() killed it after its timeout
                    errors.append(str(e)[:2000])
            leftover = [p for d in c.daemons for p in d.worker_pids()]
            c.cleanup()
            self.assertEqual(leftover, [], "worker processes left behind")
            self.assertEqual(errors, [])
        finally:
            self.net.destroy()

    def daemon(self, ns, host, num_cpus, args, node_id=None):
        """A daemon (not started) in namespace `ns` on `host`; `node_id` fixes its id (the
        scheduler numbers ranks in node-id order)."""
        d = self.cluster._new(args, num_cpus=num_cpus,
                              factory=lambda **kw: NetnsDaemon(ns, host, **kw))
        if node_id:
            with open(os.path.join(d.data_dir, "node_id"), "w") as f:
                f.write(node_id + "\n")
        return d
