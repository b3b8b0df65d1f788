"""Plays the traintl agent for Python programs that use traintl in standalone mode.

A RankProcess is one `python3 -c SCRIPT` started as a {"command": [...]} entry point's
program would be: its rank context in a file (TRAINTL_CONTEXT_FILE) and one end of a unix
socketpair as the agent channel (TRAINTL_CHANNEL_FD). The test holds the other end and
speaks docs/WORKER_PROTOCOL.md on it: it reads report lines and answers with acks and stops.

Used by native_standalone_test.py and torch_ddp_test.py. Every process started here is
killed and reaped by close(); every temporary directory is removed.
"""

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PYTHON_DIR = os.environ.get("TRAINTL_PYTHON_DIR", "")
# Guards against a hung rank; never a measure of speed.
HANG_GUARD_S = 120


def free_port():
    """A TCP port free on 127.0.0.1 at the time of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankProcess:
    """One rank's program and the agent's end of its channel."""

    def __init__(self, script, root, rank=0, world_size=1, context=None, env=None,
                 with_channel=True):
        self.root = root
        self.rank = rank
        self.staging_dir = os.path.join(root, "staging", "attempt_1")
        os.makedirs(self.staging_dir, exist_ok=True)
        ctx = {
            "job_id": "3f9c2a1b7d4e",
            "job_name": "py-test",
            "attempt": 1,
            "world_rank": rank,
            "world_size": world_size,
            "local_rank": rank,
            "local_world_size": world_size,
            "node_rank": 0,
            "library": "/nonexistent/libtraintl_python.so",
            "python": "train:train_func",
            "working_dir": "",
            "config": {},
            "checkpoint_dir": None,
            "trial_dir": os.path.join(root, "trial"),
            "staging_dir": self.staging_dir,
            "master_addr": "127.0.0.1",
            "master_port": 0,
            "collective_timeout_s": 60,
            "use_gpu": False,
            "datasets": {},
            "lease": None,
        }
        ctx.update(context or {})
        self.context_path = os.path.join(root, f"rank_{rank}.context.json")
        with open(self.context_path, "w") as f:
            json.dump(ctx, f)
        self.log_path = os.path.join(root, f"rank_{rank}.log")
        self._buffer = b""
        self.sock = None
        run_env = dict(os.environ)
        run_env["PYTHONPATH"] = PYTHON_DIR
        run_env["PYTHONUNBUFFERED"] = "1"
        pass_fds = ()
        child = None
        if with_channel:
            self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            run_env["TRAINTL_CONTEXT_FILE"] = self.context_path
            run_env["TRAINTL_CHANNEL_FD"] = str(child.fileno())
            pass_fds = (child.fileno(),)
        else:
            run_env.pop("TRAINTL_CONTEXT_FILE", None)
            run_env.pop("TRAINTL_CHANNEL_FD", None)
        run_env.update(env or {})
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", script], cwd=root, env=run_env, pass_fds=pass_fds,
                stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        if child is not None:
            child.close()
        self._out_fd = self.proc.stdout.fileno()
        self._out = b""
        self._out_eof = False

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def next_message(self, timeout=HANG_GUARD_S):
        """The next line the rank sent on the channel, decoded; None on EOF or timeout."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, message):
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def ack(self, seq):
        """A report of metrics alone does not wait for its ack: the rank may be gone."""
        try:
            self.send({"type": "ack", "seq": seq})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _read_stdout(self, timeout):
        """Reads what the rank's stdout has within `timeout`; False on EOF or timeout."""
        ready, _, _ = select.select([self._out_fd], [], [], max(timeout, 0))
        if not ready:
            return False
        chunk = os.read(self._out_fd, 65536)
        if not chunk:
            self._out_eof = True
            return False
        self._out += chunk
        return True

    def read_stdout_line(self, timeout=HANG_GUARD_S):
        """The next line of the rank's stdout, or None on EOF or timeout."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._out:
            if self._out_eof or not self._read_stdout(deadline - time.monotonic()):
                return None
        line, self._out = self._out.split(b"\n", 1)
        return line.decode(errors="replace")

    def stdout_ready(self, timeout):
        """True when the rank wrote to stdout within `timeout` seconds."""
        return bool(self._out) or self._read_stdout(timeout)

    def finish(self, timeout=HANG_GUARD_S):
        """(exit code, the rest of stdout) once the rank exits; kills it after `timeout`."""
        deadline = time.monotonic() + timeout
        while not self._out_eof:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise AssertionError(f"rank {self.rank} did not exit; log:\n{self.log()}")
            self._read_stdout(left)
        try:
            code = self.proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            self.close()
            raise AssertionError(f"rank {self.rank} did not exit; log:\n{self.log()}")
        out, self._out = self._out, b""
        return code, out.decode(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class TempRoot:
    """A temporary directory, removed with everything in it."""

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="traintl-python-test-")

    def cleanup(self):
        shutil.rmtree(self.path, ignore_errors=True)
