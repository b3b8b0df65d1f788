"""Issue 18's fault injection for asynchronous checkpoints: kill -9 a worker (25 trials)
and, separately, the daemon (25 trials) at random points of the background write of a
checkpoint, restart what was killed, and check that every committed checkpoint is complete
(every rank's files, each of the size and CRC its rank's manifest says) and that each new
attempt resumes from the latest committed one, itself complete.

One job runs through all the trials of a kind (max_failures -1): 2 ranks, 8 MiB per rank
per checkpoint, the background write slowed to ~25 ms per MiB (TEST_TRAINTL_UPLOAD_DELAY_
MS_PER_MIB, a test-only knob of traintl-worker) so that it lasts ~0.2 s; the test waits
until a rank's staged blob exists but is not full (the write has begun) and kills after a
uniformly random 0-250 ms more, so kills land at every point of the write and some just
after it (the report on its way, the head's merge). TRAINTL_ASYNC_FAULT_TRIALS=N runs N
trials of each kind instead of 25.
"""
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time

from async_ckpt_common import async_spec, incomplete_reason, staged_uploads
from harness import DaemonTestCase, main, wait_for, worker_pids

TRIALS = int(os.environ.get("TRAINTL_ASYNC_FAULT_TRIALS", "25"))
WORLD = 2


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().decode(errors="replace")
    except OSError:
        return None
    m = re.search(r"rank_(\d+)\.context\.json", cmd)
    return int(m.group(1)) if m else None


class AsyncCheckpointFaultTest(DaemonTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="traintl-async-faults-")
        self.storage = os.path.join(self.tmp, "storage")
        os.makedirs(self.storage)
        super().setUp()
        self.verified = {}  # checkpoint path -> None (complete)
        self.rng = random.Random(int(os.environ.get("TRAINTL_ASYNC_FAULT_SEED", "0")) or None)
        self.kill_points = []
        self.mid_write = 0  # kills that found a staged blob not yet full

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def submit(self):
        spec = async_spec(self.storage, self.tmp, epochs=100000, ckpt_mb=8, max_failures=-1,
                          env={"TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB": "25"})
        spec["run_config"]["checkpoint_config"] = {"num_to_keep": 3}
        return self.daemon.submit_spec(spec)

    def verify_committed(self, job_id):
        """Every committed checkpoint is complete (each checked once; retention may delete
        one between the listing and the check: then it is no longer committed)."""
        cks = self.daemon.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
        for c in cks:
            if c["path"] in self.verified:
                continue
            reason = incomplete_reason(c["path"], WORLD)
            if reason is not None:
                still = [x["path"] for x in
                         self.daemon.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]]
                if c["path"] not in still and not os.path.exists(c["path"]):
                    continue
                self.fail(f"committed checkpoint {c['path']} is incomplete: {reason}")
            self.verified[c["path"]] = None
        return cks

    def wait_upload_running(self, job_id, timeout=30):
        """The attempt whose background write has begun (a staged blob not yet full)."""
        full = 8 << 20

        def running():
            attempt = self.daemon.job(job_id)["attempt"]
            for _, size in staged_uploads(self.storage, job_id, attempt):
                if size < full:
                    return attempt
            return None
        return wait_for(running, timeout, interval=0.005, what="a background write")

    def wait_resumed(self, job_id, attempt, timeout=60):
        """Attempt `attempt` (or a later one) reported once; returns its job record."""
        def resumed():
            job = self.daemon.job(job_id)
            if job["state"] in ("FAILED", "STOPPED", "SUCCEEDED"):
                raise AssertionError(f"job ended: {job}")
            if job["attempt"] < attempt:
                return None
            history = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
            return job if any(h["attempt"] >= attempt for h in history) else None
        return wait_for(resumed, timeout, interval=0.05, what=f"attempt {attempt} to report")

    def check_resume(self, job, job_id):
        """The new attempt restored the latest checkpoint its predecessors committed (the
        head waits for merges in flight before it ends an attempt), and that one is
        complete; no attempt ever failed on an incomplete restore (the library checks)."""
        current = job["attempt"]
        cks = self.daemon.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
        earlier = [c for c in cks if c["attempt"] < current]
        restored = job["attempts"][-1].get("restored_from")
        if earlier:
            self.assertEqual(restored, max(earlier, key=lambda c: (c["attempt"], c["seq"]))["path"],
                             job)
        if restored and os.path.exists(restored):  # (retention may have removed it since)
            self.assertIsNone(incomplete_reason(restored, WORLD))
        for a in job["attempts"]:
            self.assertNotIn("incomplete", a.get("reason") or "", job)

    def note_mid_write(self, job_id, attempt):
        if any(size < (8 << 20) for _, size in staged_uploads(self.storage, job_id, attempt)):
            self.mid_write += 1

    def test_kill9_worker_during_background_write(self):
        job_id = self.submit()
        for trial in range(TRIALS):
            attempt = self.wait_upload_running(job_id)
            delay = self.rng.uniform(0, 0.25)
            time.sleep(delay)
            pids = [p for p in self.daemon.worker_pids() if rank_of(p) is not None]
            self.assertTrue(pids, "no worker to kill")
            victim = self.rng.choice(pids)
            self.note_mid_write(job_id, attempt)
            os.kill(victim, signal.SIGKILL)
            self.kill_points.append(delay)
            # The head ends the attempt and starts the next from the latest committed one.
            job = self.wait_resumed(job_id, attempt + 1)
            self.verify_committed(job_id)
            self.check_resume(job, job_id)
        self.finish(job_id)

    def test_kill9_daemon_during_background_write(self):
        job_id = self.submit()
        for trial in range(TRIALS):
            attempt = self.wait_upload_running(job_id)
            delay = self.rng.uniform(0, 0.25)
            time.sleep(delay)
            self.note_mid_write(job_id, attempt)
            self.daemon.kill9()
            self.kill_points.append(delay)
            wait_for(lambda: self.daemon.worker_pids() == [], timeout=10,
                     what="workers to die with their daemon")
            self.daemon.start()
            self.verify_committed(job_id)
            job = self.wait_resumed(job_id, attempt + 1)
            self.verify_committed(job_id)
            self.check_resume(job, job_id)
        self.finish(job_id)

    def finish(self, job_id):
        cks = self.verify_committed(job_id)
        self.assertTrue(cks, "nothing was ever committed")
        p = self.daemon.cli("stop", job_id)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "STOPPED", job)
        wait_for(lambda: self.daemon.worker_pids() == [], timeout=15, what="workers to end")
        self.verify_committed(job_id)
        sys.stderr.write(f"{len(self.kill_points)} kills 0-250 ms after a write began, "
                         f"{self.mid_write} of them with a staged file half written; "
                         f"{len(self.verified)} committed checkpoints verified complete\n")
        # Most kills must land inside a write, or the test proves little.
        self.assertGreaterEqual(self.mid_write, len(self.kill_points) // 2)


if __name__ == "__main__":
    main()
