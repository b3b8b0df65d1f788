"""Shared parts of the bench/startup benchmarks (Python 3 stdlib only).

A daemon under test (traintld on 127.0.0.1 port 0, its own temporary data dir), its HTTP
API, job submission through the real CLI, process memory from /proc, percentiles, and the
RESULTS.md writer. Every process started here is ended by its own pid (or its own process
group) when the benchmark ends.
"""
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "RESULTS.md")
TORCHRUN = os.path.join(HERE, "torchrun.py")
PEER = os.path.join(HERE, "torchrun_peer.py")
# Debian's python3-torch lives in the system interpreter, not in a pyenv/venv one.
TORCH_PYTHON = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def log(msg):
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def wait_for(predicate, timeout, what, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- statistics --------------------------------------------------------------------------

def median(xs):
    return statistics.median(xs)


def p90(xs):
    """Nearest-rank 90th percentile: the ceil(0.9 n)-th smallest value."""
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


# ---- process memory ----------------------------------------------------------------------

def memory_kb(pid):
    """VmRSS and VmHWM (/proc/pid/status), Rss, Pss, Pss_Anon, Pss_File (smaps_rollup), kB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Pss_Anon", "Pss_File"):
                out[key] = int(rest.split()[0])
    return out


def max_memory(samples):
    return {k: max(s[k] for s in samples) for k in samples[0]}


def mib(kb):
    return kb / 1024.0


# ---- the daemon --------------------------------------------------------------------------

def pids_with_cmdline(marker, exe_name):
    """Live processes whose argv[0] ends with exe_name and whose command line has marker."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or not argv or not argv[0]:
            continue
        joined = b" ".join(argv).decode(errors="replace")
        if os.path.basename(argv[0].decode(errors="replace")) == exe_name and marker in joined:
            pids.append(int(entry))
    return pids


def proc_refs(pid):
    """argv, cwd and exe of a live non-zombie process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").replace("\0", " ")
        refs = [argv]
        for link in ("cwd", "exe"):
            try:
                refs.append(os.readlink(f"/proc/{pid}/{link}"))
            except OSError:
                pass
        return refs
    except OSError:
        return None


def pids_under(root):
    """Live processes (not this one) whose command line, cwd or executable is under root."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        refs = proc_refs(entry)
        if refs and any(root in r for r in refs):
            out.append(int(entry))
    return out


class Daemon:
    """One traintld on loopback with a private data dir; the CLI and HTTP against it.

    num_cpus None leaves --num-cpus out (traintld then counts the machine's). data_dir: the
    caller's directory (created if missing) instead of a fresh temporary one; stop() removes
    it either way unless told to keep it.
    """

    def __init__(self, bin_dir, num_cpus=4, extra_args=(), data_dir=None, request_timeout=30):
        self.bin_dir = bin_dir
        self.num_cpus = num_cpus
        self.extra_args = list(extra_args)
        if data_dir is None:
            self.data_dir = tempfile.mkdtemp(prefix="traintl-bench-")
        else:
            os.makedirs(data_dir, exist_ok=True)
            self.data_dir = data_dir
        self.request_timeout = request_timeout
        self.log_path = os.path.join(self.data_dir, "daemon.log")
        self.proc = None
        self.address = None
        self.token = None

    def start(self, timeout=30):
        cpus = [] if self.num_cpus is None else ["--num-cpus", str(self.num_cpus)]
        log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [os.path.join(self.bin_dir, "traintld"), "--data-dir", self.data_dir,
             "--api-address", "127.0.0.1:0", "--raft-address", "127.0.0.1:0",
             *cpus, *self.extra_args],
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        log_file.close()
        addr_file = os.path.join(self.data_dir, "api_address")

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"traintld exited with {self.proc.returncode}:\n{self.log()}")
            if not os.path.exists(addr_file):
                return False
            with open(addr_file) as f:
                self.address = f.read().strip()
            try:
                return self.get("/healthz", auth=False)[1].get("role") == "head"
            except OSError:
                return False
        wait_for(ready, timeout, "traintld to become head", interval=0.05)
        with open(os.path.join(self.data_dir, "token")) as f:
            self.token = f.read().strip()
        return self

    @property
    def pid(self):
        return self.proc.pid

    def log(self, tail=20000):
        """The last `tail` characters of traintld's log."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-tail:]
        except OSError:
            return ""

    def log_tail(self, n=40):
        """The last n lines of traintld's log."""
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def log_lines(self, job_id):
        """Every line of traintld's log that names job_id."""
        try:
            with open(self.log_path, errors="replace") as f:
                return [line.rstrip("\n") for line in f if job_id in line]
        except OSError:
            return []

    def request(self, method, path, body=None, auth=True, content_type="application/json"):
        """(status, the answer's JSON); a bytes body goes as it is, any other as JSON."""
        data = None
        headers = {}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(f"http://{self.address}{path}", data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout) as r:
                status, payload = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, payload = e.code, e.read()
        try:
            return status, json.loads(payload or b"{}")
        except ValueError:
            # Not the API's answer (a proxy's error page, say): as text, so that the caller's
            # error shows it next to the status instead of failing on a JSONDecodeError.
            return status, {"_raw": payload.decode(errors="replace")}

    def get(self, path, auth=True):
        return self.request("GET", path, auth=auth)

    def call(self, method, path, body=None, ok=(200,), content_type="application/json"):
        """The answer's JSON, for a caller that cannot go on without it: a status not in ok
        raises."""
        status, answer = self.request(method, path, body, content_type=content_type)
        if status not in ok:
            raise RuntimeError(f"{method} {path}: {status} {answer}")
        return answer

    def get_ok(self, path):
        return self.call("GET", path)

    def post_ok(self, path, body):
        return self.call("POST", path, body, ok=(200, 201))

    def upload(self, path):
        """Stores the file as a blob (PUT /v1/blobs/<sha256>); returns its sha256."""
        with open(path, "rb") as f:
            blob = f.read()
        sha = hashlib.sha256(blob).hexdigest()
        self.call("PUT", f"/v1/blobs/{sha}", blob, ok=(200, 201, 204),
                  content_type="application/octet-stream")
        return sha

    def cli(self, *args, timeout=120, check=False):
        """`traintl --data-dir <ours> args...`; check: a non-zero exit raises, with the
        output."""
        env = dict(os.environ)
        # Set in the caller's shell, these would aim the CLI at some other daemon.
        for key in ("TRAINTL_TOKEN", "TRAINTL_ADDRESS", "TRAINTL_DATA_DIR"):
            env.pop(key, None)
        p = subprocess.run([os.path.join(self.bin_dir, "traintl"), "--data-dir",
                            self.data_dir] + list(args),
                           capture_output=True, text=True, timeout=timeout, env=env)
        if check and p.returncode != 0:
            raise RuntimeError(f"traintl {' '.join(args)}: {p.returncode}\n{p.stdout}{p.stderr}")
        return p

    def job(self, job_id):
        return self.get_ok(f"/v1/jobs/{job_id}")

    def jobs(self):
        return self.get_ok("/v1/jobs")["jobs"]

    def wait_all_terminal(self, timeout=120):
        def done():
            jobs = self.jobs()
            return all(j["state"] in TERMINAL for j in jobs) and jobs
        return wait_for(done, timeout, "every job to end", interval=0.1)

    def worker_pids(self):
        return pids_with_cmdline(self.data_dir, "traintl-worker")

    def job_pids(self):
        """Every process the jobs started, not only the traintl-workers: a command entry
        point's child has only its cwd under the data dir (the working-dir cache). Not
        traintld itself, nor any helper it forked."""
        daemon = os.path.join(self.bin_dir, "traintld")
        return [p for p in pids_under(self.data_dir)
                if p != self.proc.pid and daemon not in (proc_refs(p) or [""])[-1:]]

    def wait_idle(self, timeout=60):
        """Every job ended and every worker process gone."""
        self.wait_all_terminal(timeout)
        wait_for(lambda: not self.worker_pids(), timeout, "worker processes to exit")

    def wait_end(self, job_id, timeout=180, interval=0.05):
        """The job, once it has ended and every process of it has exited."""
        job = wait_for(lambda: (lambda j: j if j["state"] in TERMINAL else None)(
            self.job(job_id)), timeout, f"job {job_id} to end", interval=interval)
        try:
            wait_for(lambda: not self.job_pids(), 30, "the job's processes to exit",
                     interval=0.02)
        except RuntimeError:
            left = {p: proc_refs(p) for p in self.job_pids()}
            raise RuntimeError(f"job {job_id} ended but these processes remain: {left}")
        return job

    def stop(self, keep=False):
        """Ends traintld and any traintl-worker it left; removes the data dir unless keep."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                log("traintld did not exit 20 s after SIGTERM: SIGKILL")
                self.proc.kill()
                self.proc.wait()
        for pid in self.worker_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def write_spec(path, library, function, config, workers, name):
    spec = {
        "name": name,
        "entrypoint": {"library": library, "function": function},
        "train_loop_config": config,
        "scaling_config": {"num_workers": workers, "resources_per_worker": {"CPU": 1}},
        "run_config": {"failure_config": {"max_failures": 0}},
        # torchrun sets this for its workers by default; the same here.
        "env": {"OMP_NUM_THREADS": "1"},
    }
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return path


def stop_process_group(proc, timeout=10):
    """Ends a process started with start_new_session=True, with its children."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def read_stamps(out_dir, ranks):
    """Per rank, (in loop, entry, process forked) in wall-clock ns; None until all wrote."""
    stamps = []
    for r in range(ranks):
        path = os.path.join(out_dir, f"rank{r}.ns")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            stamps.append(tuple(int(x) for x in f.read().split()))
    return stamps


# ---- RESULTS.md --------------------------------------------------------------------------

def machine_line():
    load = os.getloadavg()
    cpus = os.cpu_count()
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = cpus
    mem_total = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_total = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB RAM"
    return (f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {platform.node()}; "
            f"Linux {platform.release()}; {affinity} of {cpus} CPUs usable; {mem_total}; "
            f"load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}")


RESULTS_HEADER = """# bench/startup results

Written by `bench/startup/run.sh <build_dir>`; each section is replaced by its own
benchmark's latest run. See bench/README.md for what is measured and how.
"""


def write_section(name, text):
    """Replaces the section `name` of RESULTS.md (or appends it) and prints it."""
    begin, end = f"<!-- begin:{name} -->", f"<!-- end:{name} -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    try:
        with open(RESULTS) as f:
            current = f.read()
    except FileNotFoundError:
        current = RESULTS_HEADER
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        current = head + block + ("\n" + tail if tail else "")
    else:
        current = current.rstrip("\n") + "\n\n" + block
    with open(RESULTS, "w") as f:
        f.write(current)
    print(text)
