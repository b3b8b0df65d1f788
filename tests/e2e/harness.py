"""End-to-end test harness: runs the real traintld / traintl / traintl-worker binaries.

Every daemon gets a temp data dir, the API on 127.0.0.1 port 0 and Raft on port 0; tests
talk to it over HTTP (urllib) and through the real CLI. On failure the daemon's log is
printed. Every process a test starts is killed at the end, and tests check that no worker
process outlives its job.
"""
import copy
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

BIN = os.environ.get("TRAINTL_BIN_DIR", "")
LIBS = os.environ.get("TRAINTL_TEST_LIBS", "")


def bin_path(name):
    return os.path.join(BIN, name)


def lib_path(name):
    return os.path.join(LIBS, name)


def wait_for(predicate, timeout=30.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def worker_pids(marker):
    """PIDs of traintl-worker processes whose command line contains `marker`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        joined = b" ".join(cmd).decode(errors="replace")
        if "traintl-worker" in joined and marker in joined:
            pids.append(int(entry))
    return pids


def raw_exchange(address, data, read_timeout=30.0):
    """Sends raw bytes on a new connection and returns everything read until the server
    closes it (or read_timeout passes). A server that answers and closes before reading
    everything (a refused request) is not an error."""
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=read_timeout)
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        deadline = time.monotonic() + read_timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


class Daemon:
    def __init__(self, data_dir=None, num_cpus=4, extra_args=()):
        self.owns_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="traintl-e2e-")
        self.num_cpus = num_cpus
        self.extra_args = list(extra_args)
        self.proc = None
        self.log_path = os.path.join(self.data_dir, "daemon.log")
        self.address = None
        self.token = None

    def command(self, host="127.0.0.1"):
        """The traintld command line (subclasses wrap it or change the host)."""
        return [bin_path("traintld"), "--data-dir", self.data_dir, "--api-address", f"{host}:0",
                "--raft-address", f"{host}:0", "--num-cpus", str(self.num_cpus),
                "--worker-stop-grace-ms", "500", "--collective-timeout", "20"] + self.extra_args

    def start(self, timeout=20, role="head"):
        addr_file = os.path.join(self.data_dir, "api_address")
        if os.path.exists(addr_file):
            os.unlink(addr_file)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"traintld exited with {self.proc.returncode}:\n" + self.log())
            if not os.path.exists(addr_file):
                return False
            with open(addr_file) as f:
                self.address = f.read().strip()
            try:
                return self.get("/healthz", auth=False)[0] == 200
            except OSError:
                return False
        wait_for(ready, timeout, what="traintld /healthz")
        with open(os.path.join(self.data_dir, "token")) as f:
            self.token = f.read().strip()
        # The head takes its role once the log is replayed: wait for it.
        if role:
            wait_for(lambda: self.get("/healthz", auth=False)[1].get("role") == role, timeout,
                     what=f"{role} role")
        return self

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def cluster_token(self, secret=None):
        """The credential daemons send each other's /v1/internal routes: the API token, or
        with --cluster-secret-file one derived from its `secret`. See daemon.cc."""
        if secret is None:
            return self.token
        return hashlib.sha256(("traintl cluster api v1\n" + secret).encode()).hexdigest()

    def request(self, method, path, body=None, auth=True, token=None, headers=None, raw=False):
        url = f"http://{self.address}{path}"
        data = None
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if auth:
            hdrs["Authorization"] = f"Bearer {token or self.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                payload = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            payload = e.read()
            status = e.code
        if raw:
            return status, payload
        try:
            return status, json.loads(payload) if payload else {}
        except ValueError:
            return status, {"_raw": payload.decode(errors="replace")}

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def ui_login(self, **fields):
        """POST /ui/login with token=... or code=... (the dashboard's login, as its page
        does): the headers of the browser session, or None when refused."""
        host, port = self.address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("POST", "/ui/login", body=urllib.parse.urlencode(fields),
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                return None
            cookie = r.getheader("Set-Cookie").split(";", 1)[0]
            return {"Cookie": cookie, "X-Traintl-Ui": json.loads(body)["page_key"]}
        finally:
            conn.close()

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body if body is not None else {}, **kw)

    def job(self, job_id):
        status, body = self.get(f"/v1/jobs/{job_id}")
        if status != 200:
            raise AssertionError(f"GET job {job_id}: {status} {body}")
        return body

    def wait_job(self, job_id, predicate, timeout=60, what="job condition"):
        return wait_for(lambda: (lambda j: j if predicate(j) else None)(self.job(job_id)),
                        timeout, interval=0.1, what=f"{what} of {job_id}")

    def wait_terminal(self, job_id, timeout=90):
        return self.wait_job(job_id, lambda j: j["state"] in ("SUCCEEDED", "FAILED", "STOPPED"),
                             timeout, what="terminal state")

    def cli(self, *args, check=False, timeout=120, env=None):
        e = dict(os.environ)
        e.pop("TRAINTL_TOKEN", None)
        e.pop("TRAINTL_ADDRESS", None)
        if env:
            e.update(env)
        p = subprocess.run([bin_path("traintl"), "--data-dir", self.data_dir] + list(args),
                           capture_output=True, text=True, timeout=timeout, env=e)
        if check and p.returncode != 0:
            raise AssertionError(f"traintl {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
        return p

    def submit_spec(self, spec, library=None):
        """Uploads `library` (default: spec's entrypoint.library) and submits over HTTP."""
        lib = library or spec["entrypoint"]["library"]
        with open(lib, "rb") as f:
            blob = f.read()
        import hashlib
        sha = hashlib.sha256(blob).hexdigest()
        status, body = self.request("PUT", f"/v1/blobs/{sha}", body=blob,
                                    headers={"Content-Type": "application/octet-stream"})
        assert status == 201, (status, body)
        status, body = self.post("/v1/jobs", {"spec": spec, "library_sha256": sha})
        assert status == 201, (status, body)
        return body["job_id"]

    def worker_pids(self):
        return worker_pids(self.data_dir)

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("traintld did not exit on SIGTERM:\n" + self.log())
        return self.proc.returncode if self.proc else 0

    def cleanup(self):
        self.kill9()
        for pid in self.worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def train_spec(name="e2e", workers=2, max_failures=0, library=None, **config):
    cfg = {"epochs": 3, "sleep_ms": 100}
    cfg.update(config)
    return {
        "name": name,
        "entrypoint": {"library": library or lib_path("libtest_train.so")},
        "train_loop_config": cfg,
        "scaling_config": {"num_workers": workers, "resources_per_worker": {"CPU": 1}},
        "run_config": {"failure_config": {"max_failures": max_failures}},
    }


class DaemonTestCase(unittest.TestCase):
    """Starts one daemon per test; prints its log when the test fails."""
    num_cpus = 4

    def setUp(self):
        self.daemon = Daemon(num_cpus=self.num_cpus).start()

    def tearDown(self):
        # Python 3.11 keeps a test's failures and errors (an exception such as a refused
        # connection to a daemon that died) only in the result object.
        result = getattr(self._outcome, "result", None)
        failed = any(err for _, err in getattr(self._outcome, "errors", []) if err) or any(
            test is self for test, _ in getattr(result, "failures", []) +
            getattr(result, "errors", []))
        if failed:
            sys.stderr.write("---- traintld log ----\n" + self.daemon.log()[-20000:] + "\n")
        leftover = self.daemon.worker_pids()
        self.daemon.stop()
        self.daemon.cleanup()
        self.assertEqual(leftover, [], "worker processes left behind")



def merge(base, overrides):
    """`overrides` merged into a copy of `base`, recursively for objects."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def proc_read(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def job_processes(data_dir, exclude=()):
    """Live processes a job of the daemon in `data_dir` started: any whose environment
    names a context file there (a command entry's program and its children), or whose
    command line or working directory is below it; `exclude`d pids left out."""
    marker = data_dir.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude or int(entry) == os.getpid():
            continue
        stat = proc_read(entry, "stat")
        if not stat or stat.rsplit(b")", 1)[-1].split()[0:1] == [b"Z"]:
            continue
        argv = proc_read(entry, "cmdline").split(b"\0")
        if os.path.basename(argv[0]) == b"traintld":
            continue  # the daemon, or a process it forked (its reaper)
        env = proc_read(entry, "environ").split(b"\0")
        in_env = any(v.startswith(b"TRAINTL_CONTEXT_FILE=") and marker in v for v in env)
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd").encode()
        except OSError:
            cwd = b""
        if in_env or marker in proc_read(entry, "cmdline") or cwd.startswith(marker):
            found.append(int(entry))
    return found

def kill_job_processes(daemon):
    """Waits up to 10 s for the processes of `daemon`'s jobs to end (a command job's
    programs, and anything they started, must go with the job); SIGKILLs what is left
    and returns it as [(pid, command line)] for the test to fail on."""
    daemon_pid = daemon.proc.pid if daemon.proc else -1
    try:
        wait_for(lambda: not job_processes(daemon.data_dir, exclude={daemon_pid}),
                 timeout=10, what="the jobs' processes to end")
        return []
    except AssertionError:
        pass
    leftover = job_processes(daemon.data_dir, exclude={daemon_pid})
    descr = [proc_read(p, "cmdline").replace(b"\0", b" ").decode(errors="replace")
             for p in leftover]
    for pid in leftover:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return list(zip(leftover, descr))


def cli_in(daemon, cwd, *args, timeout=120):
    """Runs `traintl` against `daemon` in `cwd` (relative working_dirs resolve there)."""
    env = dict(os.environ)
    env.pop("TRAINTL_TOKEN", None)
    env.pop("TRAINTL_ADDRESS", None)
    return subprocess.run([bin_path("traintl"), "--data-dir", daemon.data_dir] + list(args),
                          cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def final_weights(out, ranks):
    """The final weights that the peer-recovery and elastic test loops write
    (final_rank<r>.bin in `out`), one bytes object per rank of `ranks`."""
    weights = []
    for r in ranks:
        with open(os.path.join(out, f"final_rank{r}.bin"), "rb") as f:
            weights.append(f.read())
    return weights


def python_has_torch():
    """Whether Debian's /usr/bin/python3 (the one traintl embeds) can import torch."""
    try:
        return subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def submit_python(daemon, src, spec):
    """Writes `spec` as src/job.json and submits it with `traintl submit` in `src` (its
    working_dir is packed from there); returns the job id."""
    with open(os.path.join(src, "job.json"), "w") as f:
        json.dump(spec, f)
    p = cli_in(daemon, src, "submit", "job.json", timeout=300)
    m = re.search(r"\b([0-9a-f]{12})\b", p.stdout)
    assert m is not None, f"traintl submit printed no job id:\n{p.stdout}\n{p.stderr}"
    return m.group(1)


class JobCliMixin:
    """The CLI as a test of a 2-rank job uses it: for DaemonTestCase subclasses that keep
    their working directories in self.tmp."""

    def cli_in(self, cwd, *args, timeout=120):
        return cli_in(self.daemon, cwd, *args, timeout=timeout)

    def logs(self, job_id, rank, attempt=None):
        args = ["logs", job_id, "--rank", str(rank)]
        if attempt is not None:
            args += ["--attempt", str(attempt)]
        p = self.cli_in(self.tmp, *args)
        self.assertEqual(p.returncode, 0, f"traintl logs: {p.stdout}\n{p.stderr}")
        return p.stdout

    def describe(self, job_id):
        """`traintl status` and every rank's log, for failure messages."""
        out = ["---- traintl status ----", self.cli_in(self.tmp, "status", job_id).stdout]
        for rank in range(2):
            p = self.cli_in(self.tmp, "logs", job_id, "--rank", str(rank))
            out += [f"---- rank {rank} log ----", p.stdout[-6000:] + p.stderr[-2000:]]
        return "\n".join(out)


def main():
    unittest.main(verbosity=2)
