"""traintld as a systemd service, without systemd: the test plays the service manager.

It binds the NOTIFY_SOCKET datagram socket itself, sets WATCHDOG_USEC and JOURNAL_STREAM
as systemd would, and checks what the daemon says and does: READY=1 only once the API
answers as head, STATUS= naming the role, WATCHDOG=1 pings, journal priority prefixes,
SIGHUP re-reading the log level (RELOADING=1 ... READY=1), and SIGTERM mid-job (STOPPING=1,
workers stopped, exit 0, the job resumes from its checkpoint after a restart).
"""
import os
import signal
import socket
import sys
import tempfile
import time
import unittest

SOURCE = os.environ.get("TRAINTL_SOURCE_DIR", "")
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
from harness import Daemon, train_spec, wait_for  # noqa: E402


class NotifyListener:
    """The service manager's end of NOTIFY_SOCKET."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages = []  # everything received, in order

    def receive(self, timeout=30.0):
        self.sock.settimeout(timeout)
        try:
            msg = self.sock.recv(4096).decode()
        except socket.timeout:
            return None
        self.messages.append(msg)
        return msg

    def wait_for(self, predicate, timeout=60.0, what="message"):
        """Receives until predicate(msg) holds; returns that message."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.receive(max(0.1, deadline - time.monotonic()))
            if msg is not None and predicate(msg):
                return msg
        raise AssertionError(f"no {what} within {timeout}s; got {self.messages}")

    def close(self):
        self.sock.close()


def fields(msg):
    return dict(line.split("=", 1) for line in msg.split("\n") if "=" in line)


class ServiceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="traintl-svc-")
        self.listener = NotifyListener(self.tmp)
        self.conf = os.path.join(self.tmp, "traintld.conf")
        with open(self.conf, "w") as f:
            f.write("log-level = info\n")
        self.daemon = Daemon(num_cpus=2, extra_args=["--config", self.conf])
        # The daemon's stderr is this file: JOURNAL_STREAM names it, as systemd names
        # the journal's stream socket.
        open(self.daemon.log_path, "ab").close()
        st = os.stat(self.daemon.log_path)
        self.saved_env = {k: os.environ.get(k) for k in
                          ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM")}
        os.environ["NOTIFY_SOCKET"] = self.listener.path
        os.environ["WATCHDOG_USEC"] = "1000000"  # a ping every 0.5 s
        os.environ.pop("WATCHDOG_PID", None)     # unset: the watchdog is the daemon's
        os.environ["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"

    def tearDown(self):
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        failed = any(err for _, err in getattr(self._outcome, "errors", []) if err)
        if failed:
            sys.stderr.write("---- notifications ----\n" + repr(self.listener.messages) + "\n")
            sys.stderr.write("---- traintld log ----\n" + self.daemon.log()[-20000:] + "\n")
        self.daemon.cleanup()
        self.listener.close()
        import shutil
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_and_wait_ready(self):
        self.daemon.start()
        ready = self.listener.wait_for(
            lambda m: "READY=1" in m.split("\n"), timeout=30,
            what="READY=1 (is traintl_systemd's Notifier wired into daemon/main.cc?)")
        return ready

    def test_ready_status_watchdog_journal_and_reload(self):
        d = self.daemon
        ready = self.start_and_wait_ready()
        # READY=1 came with the status, and only once the API answers as head.
        self.assertIn("role=head", fields(ready).get("STATUS", ""), ready)
        self.assertIn(d.address, fields(ready)["STATUS"])
        before = [m for m in self.listener.messages[:-1] if "READY=1" in m.split("\n")]
        self.assertEqual(before, [])
        status, health = d.get("/healthz", auth=False)
        self.assertEqual((status, health.get("role")), (200, "head"))
        # Nothing may be announced as ready before it is: every message before READY is
        # a STATUS of a starting node.
        for m in self.listener.messages[:-1]:
            self.assertNotIn("role=head", m)

        # The event loop pings.
        self.listener.wait_for(lambda m: m == "WATCHDOG=1", what="WATCHDOG=1")
        self.listener.wait_for(lambda m: m == "WATCHDOG=1", what="a second WATCHDOG=1")

        # Journal format: every line carries a syslog priority, no timestamp.
        lines = [l for l in d.log().splitlines() if l.strip()]
        self.assertTrue(lines)
        for l in lines:
            self.assertRegex(l, r"^<[0-7]>", "a log line without a priority prefix")
        # At info, a request is not logged (the HTTP server logs requests at debug).
        d.get("/healthz", auth=False)
        self.assertNotIn("<7>", d.log())

        # SIGHUP: the config file's new log level applies without a restart.
        with open(self.conf, "w") as f:
            f.write("log-level = debug\n")
        d.proc.send_signal(signal.SIGHUP)
        reloading = self.listener.wait_for(lambda m: "RELOADING=1" in m.split("\n"),
                                           what="RELOADING=1")
        self.assertIn("MONOTONIC_USEC", fields(reloading))
        self.listener.wait_for(lambda m: "READY=1" in m.split("\n"), what="READY=1 after reload")
        wait_for(lambda: "log level debug" in d.log(), timeout=10, what="reload logged")
        d.get("/healthz", auth=False)
        wait_for(lambda: any(l.startswith("<7>") and "/healthz" in l
                             for l in d.log().splitlines()),
                 timeout=10, what="a debug line after SIGHUP")
        self.assertIsNone(d.proc.poll(), "SIGHUP ended the daemon")

        # A broken config file is refused on reload; the daemon keeps running.
        with open(self.conf, "w") as f:
            f.write("log-level = loud\n")
        d.proc.send_signal(signal.SIGHUP)
        self.listener.wait_for(lambda m: "READY=1" in m.split("\n"), what="READY=1 after a bad reload")
        wait_for(lambda: "keeping the running settings" in d.log(), timeout=10,
                 what="bad reload logged")
        self.assertIsNone(d.proc.poll())

        self.assertEqual(d.stop(), 0)
        self.listener.wait_for(lambda m: "STOPPING=1" in m.split("\n"), timeout=5,
                               what="STOPPING=1")

    def test_sigterm_mid_job_stops_workers_and_the_job_resumes_after_restart(self):
        d = self.daemon
        self.start_and_wait_ready()
        job_id = d.submit_spec(train_spec(workers=2, max_failures=2, epochs=40, sleep_ms=150,
                                          echo_env=["NOTIFY_SOCKET", "WATCHDOG_USEC",
                                                    "JOURNAL_STREAM"]))
        d.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1) >= 1,
                   what="a checkpoint")
        self.assertEqual(len(d.worker_pids()), 2)
        history = d.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        # Workers never see the daemon's systemd variables.
        env = history[-1]["metrics"].get("env", {})
        self.assertFalse(env.get("NOTIFY_SOCKET"), env)
        self.assertFalse(env.get("WATCHDOG_USEC"), env)

        d.proc.send_signal(signal.SIGTERM)
        self.listener.wait_for(lambda m: "STOPPING=1" in m.split("\n"), what="STOPPING=1")
        code = d.proc.wait(45)  # the unit's TimeoutStopSec
        self.assertEqual(code, 0, d.log())
        self.assertEqual(d.worker_pids(), [], "workers outlived the daemon")
        self.assertFalse(os.path.exists(os.path.join(d.data_dir, "api_address")))
        # The workers were asked to stop (should_stop()) and ended by themselves, not
        # killed.
        log = d.log()
        self.assertIn("received SIGTERM", log)
        after = log[log.index("received SIGTERM"):].splitlines()
        exits = [l for l in after if "worker exited" in l]
        self.assertEqual(len(exits), 2, after)
        for l in exits:
            self.assertIn("code=0", l)

        # Started again (here; on a cluster another node takes the job over), the job
        # continues from its latest checkpoint instead of starting over or failing.
        os.environ.pop("NOTIFY_SOCKET", None)
        d.start()
        job = d.wait_terminal(job_id, timeout=120)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertGreaterEqual(job["attempt"], 2, job)
        self.assertIsNotNone(job["attempts"][-1]["restored_from"], job)
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    if not SOURCE:
        sys.exit("TRAINTL_SOURCE_DIR is not set (run through ctest)")
    unittest.main(verbosity=2)
