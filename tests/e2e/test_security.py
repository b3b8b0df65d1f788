"""Security of a running traintld: authentication, limits, hostile input, TLS, Raft
authentication and the worker user (docs/SECURITY.md).

The worker-user test needs root and skips (saying so) without it; every other test runs
everywhere.
"""
import hashlib
import json
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from harness import (Daemon, DaemonTestCase, bin_path, lib_path, main, raw_exchange,
                     train_spec, wait_for)

ZERO_SHA = "0" * 64
ENDPOINTS = [
    ("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/jobs/{job}"),
    ("POST", "/v1/jobs/{job}/stop"), ("GET", "/v1/jobs/{job}/logs"),
    ("GET", "/v1/jobs/{job}/logs?follow=1"),
    ("GET", "/v1/jobs/{job}/checkpoints"), ("GET", "/v1/jobs/{job}/metrics"),
    ("GET", "/v1/nodes"), ("PUT", "/v1/blobs/{sha}"), ("HEAD", "/v1/blobs/{sha}"),
]
BAD_AUTH = [
    None, "Bearer", "Bearer ", "Bearer wrong-token", "Basic dG9rZW46dG9rZW4=",
    "bearer  {token}x", "{token}", "Bearer {token_prefix}",
]


def daemon_flags():
    try:
        out = subprocess.run([bin_path("traintld"), "--help"], capture_output=True, text=True,
                             timeout=30).stdout
    except OSError:
        return ""
    return out


def status_of(response):
    line = response.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


class SecurityTest(DaemonTestCase):
    def assert_healthy(self):
        status, body = self.daemon.get("/healthz", auth=False)
        self.assertEqual(status, 200)
        self.assertEqual(body.get("role"), "head")
        self.assertEqual(self.daemon.get("/v1/nodes")[0], 200)

    def test_unauthenticated_requests_get_401_and_change_nothing(self):
        d = self.daemon
        job_id = d.submit_spec(train_spec(name="victim", workers=1, epochs=200, sleep_ms=100))
        d.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        blob = b"\x7fELF not really a library"
        sha = hashlib.sha256(blob).hexdigest()
        for method, template in ENDPOINTS:
            path = template.format(job=job_id, sha=sha)
            for auth in BAD_AUTH:
                headers = {}
                if auth is not None:
                    headers["Authorization"] = auth.format(token=d.token,
                                                           token_prefix=d.token[:-1])
                body = None
                if method == "POST" and path == "/v1/jobs":
                    body = {"spec": train_spec(name="intruder")}
                elif method == "PUT":
                    body = blob
                status, _ = d.request(method, path, body=body, auth=False, headers=headers)
                self.assertEqual(status, 401, (method, path, auth))
            # The token in the query string is not a credential either.
            status, _ = d.request(method, path + ("&" if "?" in path else "?") +
                                  "token=" + d.token, auth=False)
            self.assertEqual(status, 401, (method, path, "query token"))
        # Nothing changed: one job, still running; the blob was not stored.
        jobs = d.get("/v1/jobs")[1]["jobs"]
        self.assertEqual([j["job_id"] for j in jobs], [job_id])
        self.assertEqual(d.job(job_id)["state"], "RUNNING")
        self.assertEqual(d.request("HEAD", f"/v1/blobs/{sha}")[0], 404)
        self.assertNotIn(d.token, d.log(), "the token must never be logged")
        self.assertEqual(d.post(f"/v1/jobs/{job_id}/stop")[0], 200)
        d.wait_terminal(job_id)

    def test_oversize_bodies_are_refused(self):
        d = self.daemon
        # POST /v1/jobs takes at most 1 MiB; the Content-Length alone decides.
        big = json.dumps({"spec": train_spec(), "pad": "x" * (2 << 20)}).encode()
        status, _ = d.request("POST", "/v1/jobs", body=big)
        self.assertEqual(status, 413)
        header_only = (f"PUT /v1/blobs/{ZERO_SHA} HTTP/1.1\r\nHost: x\r\n"
                       f"Authorization: Bearer {d.token}\r\n"
                       "Content-Length: 1000000000000\r\n\r\n").encode()
        self.assertEqual(status_of(raw_exchange(d.address, header_only)), 413)
        chunked = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {d.token}\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n").encode()
        chunked += b"".join(b"100000\r\n" + b"x" * 0x100000 + b"\r\n" for _ in range(2))
        chunked += b"0\r\n\r\n"
        self.assertEqual(status_of(raw_exchange(d.address, chunked)), 413)
        huge_header = (f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Pad: {'a' * 70000}\r\n"
                       f"Authorization: Bearer {d.token}\r\n\r\n").encode()
        self.assertEqual(status_of(raw_exchange(d.address, huge_header)), 431)
        self.assertEqual(d.get("/v1/jobs")[1]["jobs"], [])
        self.assert_healthy()

    def test_upload_limit_is_configurable(self):
        d = Daemon(extra_args=["--max-upload-mb", "1"]).start()
        try:
            blob = os.urandom((1 << 20) + 1)
            sha = hashlib.sha256(blob).hexdigest()
            status, _ = d.request("PUT", f"/v1/blobs/{sha}", body=blob,
                                  headers={"Content-Type": "application/octet-stream"})
            self.assertEqual(status, 413)
            self.assertEqual(d.request("HEAD", f"/v1/blobs/{sha}")[0], 404)
            small = os.urandom(1000)
            status, _ = d.request("PUT", f"/v1/blobs/{hashlib.sha256(small).hexdigest()}",
                                  body=small, headers={"Content-Type": "application/octet-stream"})
            self.assertEqual(status, 201)
        finally:
            d.stop()
            d.cleanup()

    def test_slow_loris_connections_are_cut_and_do_not_block_others(self):
        d = self.daemon
        host, port = d.address.rsplit(":", 1)
        slow = []
        for i in range(40):
            s = socket.create_connection((host, int(port)), timeout=60)
            s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        idle = socket.create_connection((host, int(port)), timeout=60)  # sends nothing at all
        # While they trickle, others are served.
        for _ in range(5):
            for s in slow:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass
            self.assert_healthy()
            time.sleep(0.5)
        # The server ends every one of them (header timeout) without an answer.
        closed = 0
        for s in slow + [idle]:
            try:
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    self.assertNotIn(b"HTTP/1.1 200", chunk)
            except (ConnectionResetError, socket.timeout):
                pass
            closed += 1
            s.close()
        self.assertEqual(closed, len(slow) + 1)
        self.assert_healthy()

    def test_path_traversal_ids_are_refused(self):
        d = self.daemon
        job_id = d.submit_spec(train_spec(name="pt", workers=1, epochs=1, sleep_ms=10))
        d.wait_terminal(job_id)
        auth = f"Authorization: Bearer {d.token}\r\n"
        targets = [
            "/v1/jobs/../token", "/v1/jobs/..", "/v1/jobs/%2e%2e", "/v1/jobs/%2E%2e/logs",
            "/v1/jobs/.%2e/logs", "/v1/jobs/..%2f..%2ftoken", "/v1/jobs/..%2F..%2Ftoken/logs",
            "/v1/jobs/%252e%252e%252ftoken/logs", "/v1/jobs/%2e%2e%5c..%5ctoken/logs",
            "/v1/jobs/a%00b/logs", "/v1/jobs/%c0%ae%c0%ae/logs", "/v1/jobs/..%c0%af/logs",
            f"/v1/jobs/{job_id}/logs?rank=../../token", f"/v1/jobs/{job_id}/logs?rank=-1",
            f"/v1/jobs/{job_id}/logs?attempt=../..", f"/v1/jobs/{job_id}/logs?rank=0%00",
            f"/v1/jobs/{job_id}/logs?tail=-5", f"/v1/jobs/{job_id}/logs?rank=99999999999999999999",
            "/v1/blobs/..%2f..%2ftoken", "/v1/blobs/../../token", "/v1/blobs/%2e%2e",
            "/v1/blobs/" + "0" * 63 + "%2f", "//v1/jobs", "/v1//jobs", "/v1/jobs/./" + job_id,
        ]
        for target in targets:
            for method in ("GET", "HEAD"):
                req = f"{method} {target} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode()
                resp = raw_exchange(d.address, req)
                status = status_of(resp)
                self.assertIsNotNone(status, (method, target, resp[:200]))
                self.assertIn(status, (400, 404, 405), (method, target, resp[:300]))
                self.assertNotIn(d.token.encode(), resp, (method, target))
        self.assert_healthy()

    def test_invalid_utf8_and_deep_json_are_refused(self):
        d = self.daemon
        cases = [
            b'{"spec": {"name": "\xff\xfe", "entrypoint": {"library": "/x.so"}}}',
            b'{"spec": {"name": "a", "entrypoint": {"library": "/x\xc3\x28.so"}}}',
            b'{"spec": {"name": "a", "entrypoint": {"library": "/x.so"}, "env": {"K": "\xed\xa0\x80"}}}',
            b'{"spec": ' + b"[" * 100000 + b"]" * 100000 + b"}",
            b'{"spec": ' + b'{"a":' * 50000 + b"1" + b"}" * 50000 + b"}",
            b'{"spec": {"name": "a", "name": "b", "entrypoint": {"library": "/x.so"}}}',
            b"\x00\x01\x02",
        ]
        for body in cases:
            status, resp = d.request("POST", "/v1/jobs", body=body)
            self.assertEqual(status, 400, (body[:60], resp))
            self.assertIn("error", resp)
        # Invalid UTF-8 in the request line and headers.
        for raw in (b"GET /v1/jobs/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /v1/jobs HTTP/1.1\r\nHost: \xff\r\nAuthorization: Bearer \xff\r\n\r\n"):
            status = status_of(raw_exchange(d.address, raw))
            self.assertIn(status, (400, 401, 404), raw)
        self.assertEqual(d.get("/v1/jobs")[1]["jobs"], [])
        self.assert_healthy()

    def test_plain_http_on_a_non_loopback_address_is_refused(self):
        data_dir = tempfile.mkdtemp(prefix="traintl-e2e-")
        try:
            # The refusal comes before any socket is bound.
            p = subprocess.run(
                [bin_path("traintld"), "--data-dir", data_dir, "--api-address", "0.0.0.0:0",
                 "--raft-address", "127.0.0.1:0", "--num-cpus", "1"],
                capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("insecure-allow-remote-without-tls", p.stdout + p.stderr)
        finally:
            subprocess.run(["rm", "-rf", data_dir])

    def test_raft_port_requires_the_cluster_secret(self):
        d = self.daemon
        with open(os.path.join(d.data_dir, "raft", "raft_address")) as f:
            raft_address = f.read().strip()
        host, port = raft_address.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=5)
        try:
            try:
                hello = s.recv(40)
            except socket.timeout:
                hello = b""
            if not hello.startswith(b"TRAUTH1\0"):
                self.skipTest("this traintld runs Raft without a cluster secret")
            # C-Raft's own handshake and a forged RequestVote: refused, connection closed.
            forged = (1).to_bytes(8, "little") + (99).to_bytes(8, "little") + \
                (16).to_bytes(8, "little") + b"127.0.0.1:9".ljust(16, b"\0") + b"\x02" * 200
            s.sendall(forged)
            s.settimeout(30)
            rest = b""
            try:
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    rest += chunk
            except ConnectionResetError:
                pass
            self.assertEqual(rest, b"")
        finally:
            s.close()
        self.assert_healthy()
        job_id = d.submit_spec(train_spec(name="after-raft-probe", workers=1, epochs=1,
                                          sleep_ms=10))
        self.assertEqual(d.wait_terminal(job_id)["state"], "SUCCEEDED")


def make_pki(directory):
    """A CA and a server certificate for 127.0.0.1 / localhost, with the openssl CLI."""
    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, cwd=directory)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=traintl e2e CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=traintl e2e server")
    with open(os.path.join(directory, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "other.key", "-out", "other-ca.pem", "-days", "2", "-subj", "/CN=other CA")
    os.chmod(os.path.join(directory, "server.key"), 0o600)
    return {k: os.path.join(directory, v) for k, v in
            (("ca", "ca.pem"), ("cert", "server.pem"), ("key", "server.key"),
             ("other_ca", "other-ca.pem"))}


class TlsDaemon(Daemon):
    """A daemon serving HTTPS; requests verify it against `ca`."""

    def __init__(self, pki, extra_args=(), **kw):
        super().__init__(extra_args=["--tls-cert", pki["cert"], "--tls-key", pki["key"]] +
                         list(extra_args), **kw)
        self.context = ssl.create_default_context(cafile=pki["ca"])

    def request(self, method, path, body=None, auth=True, token=None, headers=None, raw=False):
        address = self.address.split("://", 1)[-1]
        url = f"https://{address}{path}"
        data = None
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if auth:
            hdrs["Authorization"] = f"Bearer {token or self.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.context) as r:
                payload, status = r.read(), r.status
        except urllib.error.HTTPError as e:
            payload, status = e.read(), e.code
        if raw:
            return status, payload
        return status, json.loads(payload) if payload else {}


class TlsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="traintl-e2e-pki-")
        self.pki = make_pki(self.dir)
        self.daemon = TlsDaemon(self.pki).start()

    def tearDown(self):
        if hasattr(self, "daemon"):
            self.daemon.stop()
            self.daemon.cleanup()
        if hasattr(self, "dir"):
            subprocess.run(["rm", "-rf", self.dir])

    def test_tls_round_trip_with_a_generated_ca(self):
        d = self.daemon
        self.assertEqual(d.get("/healthz", auth=False)[0], 200)
        self.assertEqual(d.get("/v1/jobs")[0], 200)
        self.assertEqual(d.get("/v1/jobs", auth=False)[0], 401)
        job_id = d.submit_spec(train_spec(name="over-tls", workers=2, epochs=2, sleep_ms=10))
        self.assertEqual(d.wait_terminal(job_id)["state"], "SUCCEEDED")
        address = d.address.split("://", 1)[-1]
        # Plain HTTP to the TLS port gets no HTTP answer.
        with self.assertRaises(Exception):
            urllib.request.urlopen(f"http://{address}/healthz", timeout=10).read()
        # A client trusting another CA refuses the daemon.
        other = ssl.create_default_context(cafile=self.pki["other_ca"])
        with self.assertRaises(urllib.error.URLError):
            urllib.request.urlopen(f"https://{address}/healthz", timeout=10, context=other)
        # The CLI finds "https://" in the daemon's api_address file and verifies the
        # daemon against --ca-file, else $TRAINTL_CA_FILE, else the system store.
        with open(os.path.join(d.data_dir, "api_address")) as f:
            self.assertTrue(f.read().startswith("https://127.0.0.1:"))
        p = d.cli("--ca-file", self.pki["ca"], "list")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(job_id, p.stdout)
        p = d.cli("status", job_id, env={"TRAINTL_CA_FILE": self.pki["ca"]})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("SUCCEEDED", p.stdout)
        p = d.cli("--ca-file", self.pki["ca"], "--address", f"https://{address}", "nodes")
        self.assertEqual(p.returncode, 0, p.stderr)
        for bad in (["--ca-file", self.pki["other_ca"]], []):
            p = d.cli(*bad, "list")
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn("certificate", p.stderr)
        # Plain HTTP from the CLI to the TLS port gets no answer either.
        p = d.cli("--address", f"http://{address}", "list")
        self.assertNotEqual(p.returncode, 0)


class TlsClusterTest(unittest.TestCase):
    """Daemon-to-daemon calls (join, heartbeats, launch, library fetch, forwarding) are
    HTTPS when the daemons serve TLS."""

    def setUp(self):
        import secrets
        self.pki_dir = tempfile.mkdtemp(prefix="traintl-e2e-pki-")
        self.pki = make_pki(self.pki_dir)
        self.token = secrets.token_hex(32)
        self.daemons = []

    def tearDown(self):
        for d in reversed(self.daemons):
            d.stop()
            d.cleanup()
        subprocess.run(["rm", "-rf", self.pki_dir])

    def node(self, kind, role, *args):
        """A 1-CPU daemon of the cluster's token; TlsDaemon nodes serve the test's cert."""
        data_dir = tempfile.mkdtemp(prefix="traintl-e2e-")
        write_secret(data_dir, "token", self.token)
        pki = (self.pki,) if kind is TlsDaemon else ()
        d = kind(*pki, data_dir=data_dir, num_cpus=1, extra_args=list(args))
        d.owns_dir = True
        self.daemons.append(d)
        return d.start(role=role)

    def test_a_tls_cluster_runs_a_job_across_two_nodes(self):
        head = self.node(TlsDaemon, "head", "--server", "--tls-ca-file", self.pki["ca"])
        agent = self.node(TlsDaemon, "agent", "--join", head.address.split("://", 1)[-1],
                          "--tls-ca-file", self.pki["ca"])
        wait_for(lambda: len(head.get("/v1/nodes")[1]["nodes"]) == 2, 30,
                 what="the agent registered over HTTPS")
        # Two 1-CPU workers need both nodes: the head launches rank 1 on the agent,
        # which fetches the library from the head, all over HTTPS.
        job_id = head.submit_spec(train_spec(name="tls-cluster", workers=2, epochs=2,
                                             sleep_ms=10))
        self.assertEqual(head.wait_terminal(job_id)["state"], "SUCCEEDED",
                         head.job(job_id))
        # A read through the agent is forwarded to the head over HTTPS.
        status, job = agent.get(f"/v1/jobs/{job_id}")
        self.assertEqual(status, 200)
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertNotIn("raft auth:", head.log())

    def test_a_plain_agent_cannot_join_a_tls_head(self):
        head = self.node(TlsDaemon, "head", "--server")
        self.node(Daemon, None, "--join", head.address.split("://", 1)[-1])
        time.sleep(3)
        self.assertEqual(len(head.get("/v1/nodes")[1]["nodes"]), 1)


class LogStreamLimitTest(unittest.TestCase):
    def test_log_streams_beyond_the_limit_get_503(self):
        d = Daemon(extra_args=["--max-log-streams", "2"]).start()
        streams = []
        try:
            job_id = d.submit_spec(train_spec(name="logs", workers=1, epochs=100, sleep_ms=100))
            d.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
            wait_for(lambda: d.get(f"/v1/jobs/{job_id}/logs", raw=True)[0] == 200, 30,
                     what="a log")
            host, port = d.address.rsplit(":", 1)
            import http.client
            for _ in range(2):
                c = http.client.HTTPConnection(host, int(port), timeout=30)
                c.request("GET", f"/v1/jobs/{job_id}/logs?follow=1",
                          headers={"Authorization": f"Bearer {d.token}"})
                r = c.getresponse()
                self.assertEqual(r.status, 200)
                streams.append((c, r))
            status, body = d.get(f"/v1/jobs/{job_id}/logs", raw=True)
            self.assertEqual(status, 503, body)
            self.assertIn(b"too many log streams", body)
            # Closing one frees its place.
            c, _ = streams.pop()
            c.close()
            wait_for(lambda: d.get(f"/v1/jobs/{job_id}/logs", raw=True)[0] == 200, 10,
                     what="a free log stream")
            self.assertEqual(d.get("/healthz", auth=False)[0], 200)
            d.post(f"/v1/jobs/{job_id}/stop")
            d.wait_terminal(job_id)
        finally:
            for c, _ in streams:
                c.close()
            leftover = d.worker_pids()
            d.stop()
            d.cleanup()
            self.assertEqual(leftover, [])


class LogShrinkTest(DaemonTestCase):
    def test_a_log_cut_short_while_it_is_read_ends_the_read_and_blocks_nothing(self):
        """Training code may truncate its own log (its stdout), and a delete removes it,
        while a slow `traintl logs` reads it: the read ends where the file did, and the
        daemon (one io thread) keeps serving."""
        job_id = self.daemon.submit_spec(train_spec(name="shrink", workers=1, epochs=1,
                                                    sleep_ms=0))
        self.daemon.wait_terminal(job_id)
        log = os.path.join(self.daemon.data_dir, "jobs", job_id, "attempt_1", "rank_0.log")
        with open(log, "a") as f:  # 8 MiB of history: more than the socket buffers hold
            for i in range(8 * 1024):
                f.write(f"line {i:06d} " + "x" * 1009 + "\n")
        host, port = self.daemon.address.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
        s.settimeout(30)
        s.connect((host, int(port)))
        try:
            s.sendall(f"GET /v1/jobs/{job_id}/logs HTTP/1.1\r\nHost: x\r\n"
                      f"Authorization: Bearer {self.daemon.token}\r\n\r\n".encode())
            got = s.recv(4096)
            self.assertIn(b"200", got.split(b"\r\n", 1)[0])
            time.sleep(0.5)  # the daemon's writes now wait for this reader
            os.truncate(log, 0)
            got += s.recv(65536)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
                if got.endswith(b"\r\n0\r\n\r\n"):
                    break
            self.assertTrue(got.endswith(b"\r\n0\r\n\r\n"), "the read did not end")
            self.assertLess(len(got), 8 * 1024 * 1024)
        finally:
            s.close()
        started = time.monotonic()
        self.assertEqual(self.daemon.get("/healthz", auth=False)[0], 200)
        self.assertLess(time.monotonic() - started, 5)


class LongLineTest(DaemonTestCase):
    def test_a_line_longer_than_1_mib_comes_in_pieces(self):
        """A log line of 3.5 MiB without a newline (a progress bar redrawn with \\r, a
        tensor printed whole) is shown in pieces of 1 MiB, so a reader's buffer and its
        search for the next newline stay bounded."""
        job_id = self.daemon.submit_spec(train_spec(name="long-line", workers=1, epochs=1,
                                                    sleep_ms=0))
        self.daemon.wait_terminal(job_id)
        log = os.path.join(self.daemon.data_dir, "jobs", job_id, "attempt_1", "rank_0.log")
        with open(log) as f:
            before = f.read()
        long_line = "".join(chr(ord("a") + i % 26) for i in range(3 * 1024 * 1024 + 512 * 1024))
        exact = "b" * (1 << 20)  # exactly 1 MiB before its newline: one line
        # A 2-byte character across the 1 MiB mark: the piece ends before it.
        straddle = "c" * ((1 << 20) - 1) + "\u00e9tail"
        with open(log, "a", encoding="utf-8") as f:
            f.write(long_line + "\n" + exact + "\n" + straddle + "\nthe end\n")
        for query in ("", "?tail=999999999"):
            status, body = self.daemon.get(f"/v1/jobs/{job_id}/logs{query}", raw=True)
            self.assertEqual(status, 200)
            text = body.decode("utf-8")  # never cut inside a character
            self.assertTrue(text.endswith("the end\n"), text[-100:])
            if query:
                continue
            pieces = text[len(before):].split("\n")[:-2]
            self.assertEqual([len(p) for p in pieces],
                             [1 << 20] * 3 + [512 * 1024, 1 << 20, (1 << 20) - 1, 5])
            self.assertEqual("".join(pieces[:4]), long_line)
            self.assertEqual(pieces[4], exact)
            self.assertEqual(pieces[5] + pieces[6], straddle)
        # max_bytes bounds a tail (the dashboard polls with it): whole lines while they fit,
        # the end of a line longer than the bound.
        for query, want in (("?tail=3&max_bytes=100", "\u00e9tail\nthe end\n"),
                            ("?tail=1&max_bytes=4", "end\n"),
                            ("?tail=2&max_bytes=64", "\u00e9tail\nthe end\n")):
            status, body = self.daemon.get(f"/v1/jobs/{job_id}/logs{query}", raw=True)
            self.assertEqual(status, 200)
            self.assertEqual(body.decode("utf-8"), want, query)
        status, body = self.daemon.get(f"/v1/jobs/{job_id}/logs?tail=5&max_bytes=1500000",
                                       raw=True)
        self.assertEqual(status, 200)
        self.assertLessEqual(len(body), 1500000)
        self.assertTrue(body.decode("utf-8").endswith("\u00e9tail\nthe end\n"))


def write_secret(data_dir, name, value):
    path = os.path.join(data_dir, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, (value + "\n").encode())
    os.close(fd)


class ClusterSecretTest(unittest.TestCase):
    def test_a_daemon_without_the_cluster_secret_cannot_join(self):
        import secrets
        token = secrets.token_hex(32)
        head_dir = tempfile.mkdtemp(prefix="traintl-e2e-")
        head = Daemon(data_dir=head_dir, extra_args=[
            "--server", "--cluster-secret-file", os.path.join(head_dir, "cluster_secret")])
        head.owns_dir = True
        write_secret(head.data_dir, "token", token)
        write_secret(head.data_dir, "cluster_secret", secrets.token_hex(32))
        intruder = None
        try:
            head.start(role="head")
            # The intruder even holds the API token; only the cluster secret differs.
            intruder_dir = tempfile.mkdtemp(prefix="traintl-e2e-")
            intruder = Daemon(data_dir=intruder_dir, extra_args=[
                "--server", "--join", head.address,
                "--cluster-secret-file", os.path.join(intruder_dir, "cluster_secret")])
            intruder.owns_dir = True
            write_secret(intruder.data_dir, "token", token)
            write_secret(intruder.data_dir, "cluster_secret", secrets.token_hex(32))
            try:
                intruder.start(role="voter", timeout=15)
            except AssertionError:
                pass  # refusing to start is as good as failing to join
            # Its join is refused: the daemon-to-daemon routes take the cluster credential,
            # derived from the secret, and the API token does not open them (a Raft
            # connection would fail its handshake too: test_raft_port_requires_the_cluster_secret)...
            wait_for(lambda: "cluster credential is not the head's" in intruder.log(), 30,
                     what="a refused join")
            # ... so it never hears from the leader or becomes a voter (its /healthz role
            # is only what it was started as), and the group is undisturbed.
            self.assertNotIn("sees leader", intruder.log())
            for node in head.get("/v1/nodes")[1]["nodes"]:
                if node["address"] == intruder.address:
                    self.assertNotEqual(node["role"], "voter")
            self.assertEqual(head.get("/healthz", auth=False)[1].get("role"), "head")
            job_id = head.submit_spec(train_spec(name="after-intruder", workers=1, epochs=1,
                                                 sleep_ms=10))
            self.assertEqual(head.wait_terminal(job_id)["state"], "SUCCEEDED")
        finally:
            for d in (intruder, head):
                if d is not None:
                    d.stop()
                    d.cleanup()


    def test_the_api_token_does_not_open_the_daemon_to_daemon_routes(self):
        import secrets
        data_dir = tempfile.mkdtemp(prefix="traintl-e2e-")
        secret = secrets.token_hex(32)
        d = Daemon(data_dir=data_dir, extra_args=[
            "--server", "--cluster-secret-file", os.path.join(data_dir, "cluster_secret")])
        d.owns_dir = True
        write_secret(data_dir, "cluster_secret", secret)
        try:
            d.start(role="head")
            cluster = d.cluster_token(secret)
            # A guess from the token (the credential as if the secret were derived from it)
            # is no credential.
            from_token = hashlib.sha256(("traintl cluster api v1\n" + hashlib.sha256(
                ("traintl raft cluster secret v1\n" + d.token).encode()).hexdigest()).encode()
            ).hexdigest()
            routes = [("POST", "/v1/internal/events", {"events": []}, 200),
                      ("POST", "/v1/internal/heartbeat", {}, 400),
                      ("POST", "/v1/internal/launch", {}, 400),
                      ("POST", "/v1/internal/stop", {}, 400),
                      ("GET", "/v1/internal/logs/job-x/1/0", None, 200),  # an empty chunk
                      ("GET", "/v1/blobs/" + "0" * 64, None, 404)]
            for method, path, body, expected in routes:
                def status(**kw):
                    return d.request(method, path, body=body, raw=True, **kw)[0]
                self.assertEqual(status(auth=False), 401, path)
                self.assertEqual(status(token=from_token), 401, path)
                self.assertEqual(status(), 403, path)  # the API token
                self.assertEqual(status(token=cluster), expected, path)
            # And the cluster credential is not an API token.
            self.assertEqual(d.get("/v1/jobs", token=cluster, raw=True)[0], 403)
            self.assertEqual(d.get("/v1/jobs", raw=True)[0], 200)
            self.assertNotIn(cluster, d.log())
        finally:
            d.stop()
            d.cleanup()


class WorkerUserTest(unittest.TestCase):
    def test_a_chosen_storage_path_is_used_with_the_worker_users_access(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        nobody = pwd.getpwnam("nobody")
        d = Daemon(extra_args=["--worker-user", "nobody"]).start()
        roots = tempfile.mkdtemp(prefix="traintl-e2e-roots-")  # root's: nobody cannot write
        shared = tempfile.mkdtemp(prefix="traintl-e2e-shared-")
        try:
            os.chmod(roots, 0o755)
            os.chmod(shared, 0o1777)  # like /tmp
            spec = train_spec(name="chosen", workers=1, epochs=1, sleep_ms=10)
            spec["run_config"]["storage_path"] = os.path.join(roots, "results")
            job = d.wait_terminal(d.submit_spec(spec))
            self.assertEqual(job["state"], "FAILED", job)
            self.assertIn("making the trial dir as nobody", json.dumps(job))
            self.assertEqual(os.listdir(roots), [])  # a root daemon would have made it
            spec["run_config"]["storage_path"] = os.path.join(shared, "results")
            job = d.wait_terminal(d.submit_spec(spec))
            self.assertEqual(job["state"], "SUCCEEDED", job)
            self.assertEqual(os.stat(os.path.join(shared, "results")).st_uid, nobody.pw_uid)
            self.assertEqual(os.stat(job["trial_dir"]).st_uid, nobody.pw_uid)
            # The default storage path is the daemon's: made by it, given to the worker.
            job = d.wait_terminal(d.submit_spec(train_spec(name="default", workers=1,
                                                           epochs=1, sleep_ms=10)))
            self.assertEqual(job["state"], "SUCCEEDED", job)
            self.assertEqual(os.stat(os.path.dirname(job["trial_dir"])).st_uid, 0)
        finally:
            d.stop()
            d.cleanup()
            subprocess.run(["rm", "-rf", roots, shared], timeout=30)

    def test_submit_looks_at_a_library_path_as_the_worker_user(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        d = Daemon(extra_args=["--worker-user", "nobody"]).start()
        hidden = tempfile.mkdtemp(prefix="traintl-e2e-root-only-")  # 0700, root's
        shown = tempfile.mkdtemp(prefix="traintl-e2e-open-")
        try:
            os.chmod(shown, 0o755)
            for where in (hidden, shown):
                os.mkfifo(os.path.join(where, "lib.fifo"))

            def submit(library):
                return d.post("/v1/jobs", {"spec": train_spec(name="fifo", library=library)})
            # Where nobody can look, a FIFO is answered as a path that does not exist:
            # accepted, and the job fails where it runs. Root's view would have told the
            # caller it is there.
            for library in (os.path.join(hidden, "lib.fifo"), os.path.join(hidden, "none.so")):
                status, body = submit(library)
                self.assertEqual(status, 201, body)
                job = d.wait_terminal(body["job_id"])
                self.assertEqual(job["state"], "FAILED", job)
            # Where nobody can look, the FIFO is still refused at once.
            status, body = submit(os.path.join(shown, "lib.fifo"))
            self.assertEqual(status, 400, body)
            self.assertIn("not a regular file", body.get("error", ""))
        finally:
            d.stop()
            d.cleanup()
            shutil.rmtree(hidden, ignore_errors=True)
            shutil.rmtree(shown, ignore_errors=True)

    def test_worker_started_by_a_root_daemon_runs_as_the_configured_user(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        nobody = pwd.getpwnam("nobody")
        d = Daemon(extra_args=["--worker-user", "nobody"]).start()
        try:
            job_id = d.submit_spec(train_spec(name="as-nobody", workers=2, epochs=30,
                                              sleep_ms=100))
            pids = wait_for(lambda: len(d.worker_pids()) == 2 and d.worker_pids(), 60,
                            what="two workers")
            for pid in pids:
                with open(f"/proc/{pid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                uids = fields["Uid"].split()
                gids = fields["Gid"].split()
                self.assertEqual({int(u) for u in uids}, {nobody.pw_uid}, (pid, uids))
                self.assertEqual({int(g) for g in gids}, {nobody.pw_gid}, (pid, gids))
                self.assertNotIn("0", fields.get("Groups", "").split())
            d.post(f"/v1/jobs/{job_id}/stop")
            d.wait_terminal(job_id)
            job = d.job(job_id)
            self.assertEqual(job["state"], "STOPPED", job)
            # Checkpoints written by nobody's workers are merged and committed (the daemon
            # does it with nobody's file access), and their files belong to nobody.
            job_id = d.submit_spec(train_spec(name="ckpt-as-nobody", workers=2, epochs=3,
                                              sleep_ms=10))
            self.assertEqual(d.wait_terminal(job_id)["state"], "SUCCEEDED")
            status, ckpts = d.get(f"/v1/jobs/{job_id}/checkpoints")
            self.assertEqual(status, 200)
            paths = [c["path"] for c in ckpts["checkpoints"]]
            self.assertTrue(paths, ckpts)
            for path in paths:
                self.assertEqual(os.stat(os.path.join(path, "manifest.json")).st_uid,
                                 nobody.pw_uid)
            # The node's row index directory is nobody's alone, and nobody's workers store
            # the index of a split CSV there.
            data = tempfile.mkdtemp(prefix="traintl-e2e-nobody-data-")
            try:
                os.chmod(data, 0o755)
                with open(os.path.join(data, "t.csv"), "w") as f:
                    f.write("id,x\n" + "".join(f"{i},{i}\n" for i in range(500)))
                time.sleep(2.2)  # entries are stored for files unchanged for 2 s
                job_id = d.submit_spec({
                    "name": "data-as-nobody",
                    "entrypoint": {"library": lib_path("libtest_data.so")},
                    "train_loop_config": {"batch_size": 50, "epochs": 1},
                    "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
                    "datasets": {"train": {"uri": f"file://{data}/t.csv"}}})
                self.assertEqual(d.wait_terminal(job_id)["state"], "SUCCEEDED")
            finally:
                shutil.rmtree(data, ignore_errors=True)
            index_dir = os.path.join(d.data_dir, "data_index")
            st = os.stat(index_dir)
            self.assertEqual((st.st_uid, st.st_mode & 0o777), (nobody.pw_uid, 0o700))
            entries = [e for e in os.listdir(index_dir) if e.endswith(".idx")]
            self.assertEqual(len(entries), 1, os.listdir(index_dir))
            self.assertEqual(os.stat(os.path.join(index_dir, entries[0])).st_uid, nobody.pw_uid)
            # Deleting a job with its checkpoints removes its trial dir (nobody's, in the
            # daemon's storage dir) and its logs (root's): with the daemon's own access,
            # which nobody's could not do.
            job_id = d.submit_spec(train_spec(name="delete-as-nobody", workers=1, epochs=2,
                                              sleep_ms=10))
            trial_dir = d.wait_terminal(job_id)["trial_dir"]
            self.assertEqual(os.stat(trial_dir).st_uid, nobody.pw_uid)
            logs = os.path.join(d.data_dir, "jobs", job_id)
            self.assertTrue(os.path.isdir(logs))
            self.assertEqual(d.request("DELETE", f"/v1/jobs/{job_id}?checkpoints=1")[0], 200)
            wait_for(lambda: not os.path.exists(trial_dir) and not os.path.exists(logs), 20,
                     what="the trial dir and the logs removed")
        finally:
            leftover = d.worker_pids()
            d.stop()
            d.cleanup()
            self.assertEqual(leftover, [])

    def test_a_row_index_dir_left_by_another_worker_user_is_made_again(self):
        """<data_dir>/data_index is only a cache: one owned by an account the daemon no longer
        runs workers as (an earlier --worker-user) is removed and made again for the current
        one, and jobs start."""
        if os.geteuid() != 0:
            self.skipTest("needs root")
        nobody = pwd.getpwnam("nobody")
        d = Daemon()
        try:
            os.makedirs(os.path.join(d.data_dir, "data_index"), mode=0o700)
            os.chown(os.path.join(d.data_dir, "data_index"), nobody.pw_uid, nobody.pw_gid)
            d.start()
            job_id = d.submit_spec(train_spec(name="stale-index-dir", workers=1, epochs=2))
            self.assertEqual(d.wait_terminal(job_id)["state"], "SUCCEEDED")
            self.assertIn("data_index (", d.log())
            self.assertIn("making it again", d.log())
            self.assertNotIn("no shared row index", d.log())
            st = os.stat(os.path.join(d.data_dir, "data_index"))
            self.assertEqual((st.st_uid, st.st_mode & 0o777), (os.geteuid(), 0o700))
        finally:
            d.stop()
            d.cleanup()

    def test_a_symlink_planted_at_a_pending_jobs_trial_dir_takes_over_nothing(self):
        """Issue 12, defect 2: nobody plants <storage_path>/<name>-<id> -> a root-only
        directory while the job is pending; when it starts, the daemon must refuse the link
        instead of creating, chowning or writing anything through it."""
        if os.geteuid() != 0:
            self.skipTest("needs root")
        nobody = pwd.getpwnam("nobody")
        storage = tempfile.mkdtemp(prefix="traintl-e2e-storage-")
        os.chmod(storage, 0o1777)  # like /tmp
        victim = tempfile.mkdtemp(prefix="traintl-e2e-victim-")
        os.chmod(victim, 0o700)
        with open(os.path.join(victim, "id_rsa"), "w") as f:
            f.write("secret")
        os.chmod(os.path.join(victim, "id_rsa"), 0o600)

        def snapshot():
            out = []
            for root, dirs, files in os.walk(victim):
                for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                    st = os.lstat(name)
                    out.append((name, st.st_mode, st.st_uid, st.st_gid))
            return sorted(out)
        before = snapshot()
        d = Daemon(num_cpus=2, extra_args=["--worker-user", "nobody"]).start()
        try:
            # Two workers take both CPUs, so that the next job waits.
            blocker = d.submit_spec(train_spec(name="blocker", workers=2, epochs=300,
                                               sleep_ms=100))
            wait_for(lambda: len(d.worker_pids()) == 2, 60, what="the blocker's workers")
            spec = train_spec(name="pending", workers=1, epochs=1, sleep_ms=10)
            spec["run_config"]["storage_path"] = storage
            job_id = d.submit_spec(spec)
            self.assertEqual(d.job(job_id)["state"], "PENDING")
            trial = os.path.join(storage, f"pending-{job_id}")
            subprocess.run(["ln", "-s", victim, trial], check=True, user=nobody.pw_uid,
                           group=nobody.pw_gid, timeout=30)
            self.assertEqual(os.lstat(trial).st_uid, nobody.pw_uid)
            d.post(f"/v1/jobs/{blocker}/stop")
            job = d.wait_terminal(job_id)
            self.assertEqual(job["state"], "FAILED", job)
            self.assertIn("refusing to follow a symlink at " + trial, json.dumps(job))
            self.assertEqual(snapshot(), before)
            self.assertEqual(os.stat(victim).st_uid, 0)
            self.assertEqual(os.stat(victim).st_mode & 0o777, 0o700)
            status, _ = d.get("/healthz", auth=False)
            self.assertEqual(status, 200)
        finally:
            leftover = d.worker_pids()
            d.stop()
            d.cleanup()
            subprocess.run(["rm", "-rf", storage, victim], timeout=30)
            self.assertEqual(leftover, [])


if __name__ == "__main__":
    main()
