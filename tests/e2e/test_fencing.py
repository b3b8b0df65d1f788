"""Fencing of a frozen head (issue 12, defect 3): SIGSTOP the head of 3 voters while its
node runs a rank. A new head restarts the job elsewhere; the frozen node's rank must be
gone before any rank of the next attempt starts (its lease on the frozen daemon lapses),
and the old head, once resumed, must not touch the new attempt's files.

Each rank of the test library records its live interval (CLOCK_MONOTONIC, every 10 ms), so
an overlap of two attempts' processes is measured, not inferred. TRAINTL_FENCING_TRIALS
sets the number of trials (default 2; the issue's figure is 10: see docs/SECURITY.md).
"""
import os
import signal
import tempfile
import time
import unittest

from cluster_harness import Cluster
from harness import main, train_spec, wait_for

TRIALS = int(os.environ.get("TRAINTL_FENCING_TRIALS", "2"))
FREEZE_S = 8


def read_live(tmp, attempt):
    """rank -> (first, last) monotonic ms of every rank of `attempt`."""
    out = {}
    for name in os.listdir(tmp):
        if name.startswith(f"live_a{attempt}_r") and not name.endswith(".tmp"):
            with open(os.path.join(tmp, name)) as f:
                first, last = (int(x) for x in f.read().split())
            out[int(name.rsplit("_r", 1)[1])] = (first, last)
    return out


class FrozenHeadTest(unittest.TestCase):
    def run_trial(self, trial):
        c = Cluster(voters=3, agents=0, num_cpus=2).start()
        frozen = None
        try:
            head = c.head()
            tmp = tempfile.mkdtemp(prefix="traintl-fence-", dir=head.data_dir)
            os.chmod(tmp, 0o777)
            spec = train_spec(name="fence", workers=3, epochs=100000, sleep_ms=50,
                              max_failures=5, checkpoint_every=5, record_live=True,
                              tmp_dir=tmp)
            spec["scaling_config"]["placement_strategy"] = "SPREAD"
            job_id = head.submit_spec(spec)
            head.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1) >= 2,
                          what="checkpoint 2")
            attempt = head.job(job_id)["attempt"]
            placed = c.ranks_by_daemon(job_id, attempt)
            self.assertIn(c.daemons.index(head), placed, "the head runs a rank")
            others = [d for d in c.daemons if d is not head]

            frozen = head
            os.kill(head.proc.pid, signal.SIGSTOP)
            stopped_at = time.monotonic()

            nh = c.head(among=others)
            nh.wait_job(job_id, lambda j: j["attempt"] > attempt and j["state"] == "RUNNING",
                        timeout=30, what="the next attempt running")
            wait_for(lambda: len(read_live(tmp, attempt + 1)) == 3, 30,
                     what="every rank of the next attempt alive")
            time.sleep(max(0.0, FREEZE_S - (time.monotonic() - stopped_at)))
            os.kill(head.proc.pid, signal.SIGCONT)
            frozen = None
            # The old head wakes up: the new attempt must go on (no deleted files).
            seq_at_wake = (nh.job(job_id)["latest_checkpoint"] or {}).get("seq", -1)
            nh.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1)
                        >= seq_at_wake + 3, timeout=60, what="checkpoints after the wake-up")
            job = nh.job(job_id)
            self.assertEqual(job["state"], "RUNNING", job)
            self.assertEqual(job["attempt"], attempt + 1, job)

            # The frozen node's rank ended itself: its daemon could not.
            rank_dir = os.path.join(head.data_dir, "jobs", job_id, f"attempt_{attempt}")
            logs = "".join(open(os.path.join(rank_dir, f), errors="replace").read()
                           for f in os.listdir(rank_dir) if f.endswith(".log"))
            self.assertIn("lease lapsed", logs)

            old = read_live(tmp, attempt)
            new = read_live(tmp, attempt + 1)
            self.assertEqual(len(old), 3)
            old_end = max(last for _, last in old.values())
            new_start = min(first for first, _ in new.values())
            gap = new_start - old_end
            print(f"trial {trial}: last rank of attempt {attempt} gone {gap} ms before the "
                  f"first rank of attempt {attempt + 1} started", flush=True)
            # 10 ms: the recorder's period (a rank's last write may trail its death by that).
            self.assertGreater(gap, -10, f"attempts overlapped by {-gap} ms")
            nh.post(f"/v1/jobs/{job_id}/stop")
            nh.wait_terminal(job_id, timeout=60)
        except BaseException:
            c.dump_logs()
            raise
        finally:
            if frozen is not None:
                os.kill(frozen.proc.pid, signal.SIGCONT)
            for d in c.daemons:
                d.stop()
            leftover = [p for d in c.daemons for p in d.worker_pids()]
            c.cleanup()
            self.assertEqual(leftover, [], "worker processes left behind")

    def test_frozen_head_never_overlaps_the_next_attempt(self):
        for trial in range(TRIALS):
            with self.subTest(trial=trial):
                self.run_trial(trial)


if __name__ == "__main__":
    main()
