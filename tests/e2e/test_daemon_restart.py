"""kill -9 of the daemon mid-job: workers die with it; a restart keeps every record and
resumes the job from its latest checkpoint."""
import time

from harness import Daemon, DaemonTestCase, main, train_spec, wait_for


class DaemonRestartTest(DaemonTestCase):
    def test_kill9_daemon_mid_job_then_restart(self):
        d = self.daemon
        job_id = d.submit_spec(train_spec(epochs=12, sleep_ms=200, max_failures=2))
        d.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1) >= 2,
                   what="checkpoint 2")
        before = d.job(job_id)
        before_cks = d.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
        before_metrics = d.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        d.kill9()
        # Workers cannot outlive their daemon.
        wait_for(lambda: d.worker_pids() == [], timeout=10, what="workers to die")
        d.start()
        after = d.job(job_id)
        # Every committed record survived.
        self.assertEqual(after["submitted_at"], before["submitted_at"])
        after_cks = d.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
        self.assertLessEqual(len(before_cks), len(after_cks))
        for c in before_cks:
            self.assertIn(c["id"], [x["id"] for x in after_cks])
        after_metrics = d.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        self.assertGreaterEqual(len(after_metrics), len(before_metrics))
        job = d.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 2)
        self.assertIn("daemon on node", job["attempts"][0]["reason"])
        self.assertIn("restarted", job["attempts"][0]["reason"])
        latest_before_restart = max(after_cks, key=lambda c: c["id"]) if after_cks else None
        self.assertIsNotNone(job["attempts"][1]["restored_from"])
        self.assertIn("checkpoint_a001_", job["attempts"][1]["restored_from"])
        history = d.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        second = [h["metrics"] for h in history if h["attempt"] == 2]
        self.assertEqual(second[0]["restored_path"], job["attempts"][1]["restored_from"])


if __name__ == "__main__":
    main()
