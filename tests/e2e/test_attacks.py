"""Regression tests of the attack findings (issue 12) against the real binaries: a trailer
that aborted traintld without a token, a CLI that crashed on deep JSON, names that become
hidden or option-like directories, a library FIFO that hung submit, and a full disk that
crashed the daemon inside libraft.

The full-disk test needs root (it mounts a small tmpfs for the data directory) and skips,
saying so, without it.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import Daemon, DaemonTestCase, main, raw_exchange, train_spec, wait_for


class AttackTest(DaemonTestCase):
    def assert_alive(self):
        self.assertIsNone(self.daemon.proc.poll(), "traintld died:\n" + self.daemon.log()[-3000:])
        self.assertEqual(self.daemon.get("/healthz", auth=False)[0], 200)

    def test_huge_trailers_and_chunk_extensions_get_431_not_an_abort(self):
        d = self.daemon
        te = b"Transfer-Encoding: chunked\r\n\r\n"
        healthz = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
        submit = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                  d.token.encode() + b"\r\n")
        bodies = {
            "70 kB trailer": b"0\r\nX-T: " + b"a" * 70000 + b"\r\n\r\n",
            "65,535-byte trailer": b"0\r\nX-T: " + b"a" * 65535 + b"\r\n\r\n",
            "many trailers": b"0\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(3000)) + b"\r\n",
            "huge chunk extension": b"2;e=" + b"x" * 70000 + b"\r\n{}\r\n0\r\n\r\n",
            "huge last-chunk extension": b"0;e=" + b"x" * 70000 + b"\r\n\r\n",
        }
        for name, body in bodies.items():
            for head in (healthz, submit):
                with self.subTest(name=name, request=head.split(b" ")[0]):
                    answer = raw_exchange(d.address, head + te + body)
                    self.assertTrue(answer.startswith(b"HTTP/1.1 431"), answer[:200])
                    self.assert_alive()

    def test_cli_refuses_a_spec_nested_100000_deep_without_crashing(self):
        spec = train_spec(name="deep")
        text = json.dumps(spec)
        deep = "[" * 100000 + "]" * 100000
        text = text.replace('"epochs": 3', '"epochs": 3, "deep": ' + deep, 1)
        path = os.path.join(self.daemon.data_dir, "deep.json")
        with open(path, "w") as f:
            f.write(text)
        p = self.daemon.cli("submit", path)
        self.assertEqual(p.returncode, 2, p.stderr)  # usage error, not SIGSEGV (-11)
        self.assertIn("nested deeper than 100 levels", p.stderr)
        self.assert_alive()

    def test_names_that_hide_or_look_like_options_are_refused(self):
        for name in ("-rf", ".hidden", ".", ".."):
            with self.subTest(name=name):
                status, body = self.daemon.post("/v1/jobs", {"spec": train_spec(name=name)})
                self.assertEqual(status, 400, body)
                self.assertEqual(body.get("field"), "name")
                self.assertIn("must not start with", body.get("error", ""))

    def test_a_rank_log_that_is_not_utf8_fails_its_job_not_the_daemon(self):
        d = self.daemon
        job_id = d.submit_spec(train_spec(name="binary", workers=2, fail_at_epoch=0,
                                          fail_rank=-1, fail_mode="binary"))
        job = d.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED", job)
        # The log tail in the job's message: the bytes that are not text replaced.
        self.assertIn("\ufffd not text", json.dumps(job, ensure_ascii=False))
        self.assert_alive()
        self.assertEqual(d.wait_terminal(d.submit_spec(train_spec(name="after", epochs=1)))
                         ["state"], "SUCCEEDED")

    def test_a_job_reporting_thousands_of_metrics_adds_at_most_100_series(self):
        d = self.daemon
        job_id = d.submit_spec(train_spec(name="wide", workers=1, epochs=200, sleep_ms=100,
                                          checkpoint_every=0, extra_metrics=3000))
        d.wait_job(job_id, lambda j: j.get("metrics"), what="a report")

        def series():
            status, body = d.get("/metrics", raw=True)
            self.assertEqual(status, 200)
            return [l for l in body.decode().splitlines()
                    if l.startswith(f'traintl_job_metric{{job_id="{job_id}"')]
        lines = wait_for(lambda: series() or None, 30, what="the job's series")
        self.assertLessEqual(len(lines), 100)
        self.assertGreater(len(lines), 10)
        d.post(f"/v1/jobs/{job_id}/stop")
        d.wait_terminal(job_id)
        self.assert_alive()

    def test_a_report_over_64_kib_of_metrics_fails_its_job_saying_why(self):
        d = self.daemon
        # 5000 metrics take about 86 KiB as JSON: report() refuses them.
        job_id = d.submit_spec(train_spec(name="huge", workers=1, epochs=1, checkpoint_every=0,
                                          extra_metrics=5000))
        job = d.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED", job)
        self.assertIn("over the 64 KiB a report may carry", job["message"])
        status, body = d.get(f"/v1/jobs/{job_id}/metrics")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["history"], [])
        self.assert_alive()

    def test_a_fifo_or_device_as_library_is_refused_at_once(self):
        d = self.daemon
        fifo = os.path.join(d.data_dir, "lib.fifo")
        os.mkfifo(fifo)
        for lib in (fifo, "/dev/zero"):
            with self.subTest(library=lib):
                spec = train_spec(name="fifo", library=lib)
                path = os.path.join(d.data_dir, "fifo.json")
                with open(path, "w") as f:
                    json.dump(spec, f)
                p = d.cli("submit", path, timeout=30)  # used to hang (FIFO) or bad_alloc
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("not a regular file", p.stderr)
                # Without an upload, the library is a path on the node: refused at submit.
                status, body = d.post("/v1/jobs", {"spec": spec})
                self.assertEqual(status, 400, body)
                self.assertIn("not a regular file", body.get("error", ""))
        self.assert_alive()


def alive(pid):
    """False for a dead process or a zombie (an orphan's zombie waits for init)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class LogBoundTest(unittest.TestCase):
    def test_a_chatty_rank_log_stays_within_max_rank_log_mb(self):
        d = Daemon(extra_args=["--max-rank-log-mb", "1"]).start()
        try:
            job_id = d.submit_spec(train_spec(name="chatty", workers=1, epochs=4, sleep_ms=400,
                                              checkpoint_every=0, print_kb=2048))
            self.assertEqual(d.wait_terminal(job_id)["state"], "SUCCEEDED")
            log = os.path.join(d.data_dir, "jobs", job_id, "attempt_1", "rank_0.log")
            st = os.stat(log)
            self.assertGreater(st.st_size, 8 << 20)  # offsets stay
            self.assertLessEqual(st.st_blocks * 512, (1 << 20) + (128 << 10))
            self.assertIn("its oldest part is dropped", d.log())
            out = d.cli("logs", job_id, check=True).stdout
            self.assertNotIn("\x00", out)
            lines = out.splitlines()
            self.assertTrue(lines[0].startswith("[rank 0] epoch "), lines[0])  # a whole line
            self.assertIn(f"line {2048 * 16 - 1:10d}", out)  # the last epoch's last line
            self.assertLess(len(out), 1 << 20)
        finally:
            d.stop()
            d.cleanup()


class EscapeTest(DaemonTestCase):
    """Processes a training library starts (in its process group, or in a session of its
    own with setsid) never outlive their attempt or their daemon."""

    def start_job(self, workers=2):
        """Two jobs: one whose ranks leave a child in their process group, one whose ranks
        leave a child in a session of its own (setsid). Returns every pid involved."""
        d = self.daemon
        dirs = []
        for mode in ("group", "setsid"):
            tmp = tempfile.mkdtemp(prefix=f"traintl-escape-{mode}-", dir=d.data_dir)
            spec = train_spec(name="escape-" + mode, workers=workers, epochs=1000,
                              sleep_ms=100, checkpoint_every=0, tmp_dir=tmp)
            spec["train_loop_config"]["spawn_child"] = mode
            job_id = d.submit_spec(spec)
            d.wait_job(job_id, lambda x: x["state"] == "RUNNING", what="RUNNING")
            dirs.append(tmp)
        pids = []
        for tmp in dirs:
            files = wait_for(lambda: (lambda f: f if len(f) >= workers else None)(
                [x for x in os.listdir(tmp) if x.startswith("child_")]), 30,
                what="children started")
            for name in files:
                with open(os.path.join(tmp, name)) as f:
                    pids.append(int(f.read()))
        pids = sorted(set(pids + d.worker_pids()))  # forked children look like workers
        self.assertEqual(len(pids), 4 * workers)
        for p in pids:
            self.assertTrue(alive(p), p)
        return pids

    def assert_all_gone(self, pids, timeout=5):
        wait_for(lambda: not any(alive(p) for p in pids), timeout,
                 what="every worker and child to be gone: " +
                 str([p for p in pids if alive(p)]))

    def test_a_second_daemon_on_the_same_data_dir_leaves_the_first_alone(self):
        pids = self.start_job()
        second = Daemon(data_dir=self.daemon.data_dir)
        with self.assertRaises(AssertionError):
            second.start(timeout=10)
        self.assertIn("another traintld uses the data dir", second.log())
        for p in pids:
            self.assertTrue(alive(p), p)
        self.daemon.stop()
        self.assert_all_gone(pids)

    def uses_cgroups(self):
        return "workers run in cgroups" in self.daemon.log()

    def test_kill9_of_the_daemon_leaves_no_process(self):
        if not self.uses_cgroups():
            self.skipTest("no cgroups here (a setsid child can outlive a kill -9)")
        pids = self.start_job()
        self.daemon.kill9()
        self.assert_all_gone(pids)

    def test_sigterm_of_the_daemon_leaves_no_process(self):
        pids = self.start_job()
        self.daemon.stop()
        self.assert_all_gone(pids)

    def test_kill9_with_the_reaper_gone_is_cleaned_up_at_restart(self):
        if not self.uses_cgroups():
            self.skipTest("no cgroups here (a setsid child can outlive a kill -9)")
        pids = self.start_job()
        d = self.daemon
        reapers = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)
                comm = fields[0].split("(", 1)[1]
                ppid = int(fields[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if comm == "traintld-reaper" and ppid == d.proc.pid:
                reapers.append(int(entry))
        self.assertEqual(len(reapers), 1, "the daemon's reaper")
        os.kill(reapers[0], signal.SIGKILL)  # as if the OOM killer took both
        d.kill9()
        time.sleep(1)
        self.assertTrue(any(alive(p) for p in pids), "something else cleaned up")
        d.start()
        self.assert_all_gone(pids)


@unittest.skipUnless(os.geteuid() == 0, "needs root to mount a tmpfs (runs as root in CI)")
class FullDiskTest(unittest.TestCase):
    SIZE_MB = 160

    def setUp(self):
        self.mnt = tempfile.mkdtemp(prefix="traintl-fulldisk-")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.SIZE_MB}m", "tmpfs",
                            self.mnt], capture_output=True, text=True)
        if r.returncode != 0:
            os.rmdir(self.mnt)
            self.skipTest("cannot mount a tmpfs here: " + r.stderr.strip())
        self.daemon = None

    def tearDown(self):
        if self.daemon is not None:
            self.daemon.stop()
            leftover = self.daemon.worker_pids()
            self.daemon.cleanup()
            self.assertEqual(leftover, [], "worker processes left behind")
        subprocess.run(["umount", "-l", self.mnt])
        shutil.rmtree(self.mnt, ignore_errors=True)

    def fill(self, leave_mb):
        st = os.statvfs(self.mnt)
        free = st.f_bavail * st.f_frsize
        size = max(0, free - leave_mb * (1 << 20))
        with open(os.path.join(self.mnt, "filler"), "wb") as f:
            chunk = b"\0" * (1 << 20)
            for _ in range(size >> 20):
                f.write(chunk)

    def test_full_disk_refuses_writes_with_507_and_recovers(self):
        data_dir = os.path.join(self.mnt, "data")
        os.makedirs(data_dir)
        d = self.daemon = Daemon(data_dir=data_dir, extra_args=["--min-free-disk-mb", "48"])
        d.start()
        big = train_spec(name="big")
        big["train_loop_config"]["pad"] = "x" * 500000  # 500 KB submissions, as in the attack
        accepted = []
        self.fill(leave_mb=96)
        saw_507 = False
        for _ in range(120):  # ~60 MB of log: past the reserve, never past the disk
            status, body = d.post("/v1/jobs", {"spec": big})
            self.assertIsNone(d.proc.poll(), "traintld died:\n" + d.log()[-3000:])
            if status == 201:
                accepted.append(body["job_id"])
                continue
            self.assertEqual(status, 507, body)
            self.assertIn("disk full", body.get("error", ""))
            saw_507 = True
            break
        self.assertTrue(saw_507, "the disk never filled")
        status, health = d.get("/healthz", auth=False)
        self.assertEqual(status, 200)
        self.assertEqual(health["status"], "disk_full")
        # A library upload that would eat into the reserve is refused too (it goes to
        # data_dir/blobs, beside the log), before its bytes are written.
        blob = os.urandom(8 << 20)
        status, body = d.request("PUT", f"/v1/blobs/{hashlib.sha256(blob).hexdigest()}", blob)
        self.assertEqual(status, 507, body)
        self.assertIn("for the upload", body.get("error", ""))
        blobs = os.path.join(data_dir, "blobs")
        self.assertEqual(os.listdir(blobs) if os.path.isdir(blobs) else [], [])
        # (Jobs whose checkpoints it could not record fail, saying so at info level.)
        warnings = [l for l in d.log().splitlines() if "disk full:" in l and " W [" in l]
        self.assertEqual(len(warnings), 1, "warned once: " + "\n".join(warnings))
        # Reads still work, and no acknowledged submission is lost.
        for job_id in accepted[:3] + accepted[-3:]:
            self.assertEqual(d.get(f"/v1/jobs/{job_id}")[0], 200)
        os.unlink(os.path.join(self.mnt, "filler"))
        wait_for(lambda: d.get("/healthz", auth=False)[1]["status"] == "ok", 10,
                 what="healthz ok after space returned")
        small = train_spec(name="after", workers=1, epochs=1)
        status, body = d.post("/v1/jobs", {"spec": small})
        self.assertEqual(status, 201, body)
        # A restart replays the log: every acknowledged submission is still there.
        d.stop()
        d.start()
        status, body = d.get("/v1/jobs")
        self.assertEqual(status, 200)
        listed = {j["job_id"] if "job_id" in j else j.get("id") for j in body.get("jobs", [])}
        for job_id in accepted:
            self.assertIn(job_id, listed)

    def test_a_full_disk_past_the_guard_stops_the_daemon_cleanly_and_a_restart_recovers(self):
        # Without the guard (or when something else fills the disk), a write of the log or
        # of the state fails. traintld used to abort there (SQLite), or run on with a log
        # writer that never wrote again (C-Raft); now it stops with exit status 3.
        data_dir = os.path.join(self.mnt, "data")
        os.makedirs(data_dir)
        d = self.daemon = Daemon(data_dir=data_dir, extra_args=["--min-free-disk-mb", "0"])
        log_dir = tempfile.mkdtemp(prefix="traintl-fulldisk-log-")
        self.addCleanup(shutil.rmtree, log_dir, True)
        d.log_path = os.path.join(log_dir, "daemon.log")  # off the full disk
        d.start()
        big = train_spec(name="big")
        big["train_loop_config"]["pad"] = "x" * 500000
        accepted = []
        self.fill(leave_mb=12)
        for _ in range(200):  # ~100 MB: more than the disk has left
            if d.proc.poll() is not None:
                break
            try:
                status, body = d.post("/v1/jobs", {"spec": big})
            except OSError:
                break
            if status == 201:
                accepted.append(body["job_id"])
        try:
            d.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.fail("traintld did not stop on a full disk:\n" + d.log()[-3000:])
        self.assertEqual(d.proc.returncode, 3, d.log()[-3000:])
        self.assertIn("stopping: ", d.log())
        self.assertNotIn("FATAL sqlite", d.log())
        self.assertTrue(accepted, "nothing was accepted before the disk filled")
        # Space back, a restart replays the log: no acknowledged submission is lost.
        os.unlink(os.path.join(self.mnt, "filler"))
        d.start()
        for job_id in accepted:
            self.assertEqual(d.get(f"/v1/jobs/{job_id}")[0], 200, job_id)
        status, body = d.post("/v1/jobs", {"spec": train_spec(name="after", workers=1,
                                                              epochs=1)})
        self.assertEqual(status, 201, body)

    def test_a_checkpoint_the_head_cannot_record_fails_its_attempt(self):
        # Checkpoint files fill the disk past the log's reserve: the head cannot record one
        # of them (the second or third). It used to drop it without a word (the tracker
        # counted it as committed when proposed) and the job succeeded, a restart resuming
        # from an older one; now the attempt fails, naming it.
        data_dir = os.path.join(self.mnt, "data")
        os.makedirs(data_dir)
        d = self.daemon = Daemon(data_dir=data_dir, extra_args=["--min-free-disk-mb", "48"])
        d.start()
        self.fill(leave_mb=92)
        status, body = d.post("/v1/jobs", {"spec": train_spec(name="ckpts", workers=1,
                                                              epochs=4, sleep_ms=50,
                                                              ckpt_mb=20)})
        self.assertEqual(status, 201, body)
        job_id = body["job_id"]
        wait_for(lambda: "could not be committed: it was not recorded" in d.log(), 60,
                 what="a refused checkpoint record")
        os.unlink(os.path.join(self.mnt, "filler"))  # the end of the attempt needs room too
        job = d.wait_terminal(job_id, timeout=60)
        self.assertEqual(job["state"], "FAILED", job)
        m = re.search(r"checkpoint (\d+) could not be committed: it was not recorded: disk full",
                      job["message"])
        self.assertIsNotNone(m, job["message"])
        # Those before it are recorded (how many fit depends on the log's own writes).
        recorded = d.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
        self.assertEqual([c["seq"] for c in recorded], list(range(int(m.group(1)))), recorded)
        # The merged directory no record names goes with the attempt's cleanup.
        paths = {c["path"] for c in recorded}
        def leftovers():
            return [n for n in os.listdir(job["trial_dir"]) if n.startswith("checkpoint_")
                    and os.path.join(job["trial_dir"], n) not in paths]
        wait_for(lambda: not leftovers(), 10, what="the unrecorded checkpoint removed")

if __name__ == "__main__":
    main()
