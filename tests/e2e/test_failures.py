"""Worker failures: restart from the latest checkpoint, max_failures, broken libraries."""
import os
import signal
import time

from harness import DaemonTestCase, lib_path, main, train_spec, wait_for


class FailureTest(DaemonTestCase):
    def test_kill9_of_a_worker_restarts_from_the_latest_checkpoint(self):
        job_id = self.daemon.submit_spec(train_spec(epochs=8, sleep_ms=250, max_failures=2))
        # Let a few checkpoints commit, then kill rank 1.
        self.daemon.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1) >= 2,
                             what="checkpoint 2")
        victims = [p for p in self.daemon.worker_pids() if b"rank_1" in
                   open(f"/proc/{p}/cmdline", "rb").read()]
        self.assertEqual(len(victims), 1)
        # The latest checkpoint at the moment of the kill (one more may commit meanwhile).
        before = self.daemon.job(job_id)["latest_checkpoint"]
        os.kill(victims[0], signal.SIGKILL)
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 2)
        a1, a2 = job["attempts"]
        self.assertEqual(a1["state"], "FAILED")
        self.assertEqual(a1["failed_rank"], 1)
        self.assertEqual(a1["signal"], signal.SIGKILL)
        self.assertIn("SIGKILL", a1["reason"])
        self.assertIsNone(a1["restored_from"])
        # Attempt 2 got the latest committed checkpoint of attempt 1 ...
        self.assertIsNotNone(a2["restored_from"])
        self.assertIn("checkpoint_a001_", a2["restored_from"])
        self.assertGreaterEqual(a2["restored_from"], before["path"])
        # ... and the library saw exactly that directory and resumed after its epoch.
        history = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        second = [h["metrics"] for h in history if h["attempt"] == 2]
        self.assertTrue(second)
        self.assertEqual(second[0]["restored_path"], a2["restored_from"])
        self.assertEqual(second[0]["epoch"], second[0]["restored_epoch"] + 1)
        self.assertEqual(second[-1]["epoch"], 7)

    def test_max_failures_zero_fails_with_rank_code_and_log_tail(self):
        job_id = self.daemon.submit_spec(
            train_spec(epochs=5, fail_at_epoch=1, fail_rank=1, fail_mode="exit"))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("rank 1 exited with code 7", job["message"])
        a = job["attempts"][0]
        self.assertEqual(a["failed_rank"], 1)
        self.assertEqual(a["exit_code"], 7)
        self.assertIn("injecting failure", a["log_tail"])
        p = self.daemon.cli("status", job_id)
        self.assertIn("FAILED", p.stdout)
        self.assertIn("injecting failure", p.stdout)

    def test_failure_in_every_attempt_exhausts_max_failures(self):
        job_id = self.daemon.submit_spec(
            train_spec(epochs=3, fail_at_epoch=0, fail_rank=0, fail_mode="throw",
                       fail_only_attempt=0, max_failures=2))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED")
        self.assertEqual(job["attempt"], 3)
        self.assertIn("max_failures=2", job["message"])
        self.assertIn("rank 0 failed", job["message"])

    def assert_fails_with(self, spec, fragment, expect_attempts=1):
        job_id = self.daemon.submit_spec(spec, library=spec["entrypoint"]["library"])
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED", job)
        self.assertIn(fragment, job["message"])
        self.assertEqual(job["attempt"], expect_attempts)
        # The daemon is unaffected.
        self.assertEqual(self.daemon.get("/healthz", auth=False)[0], 200)
        return job

    def test_broken_libraries_fail_their_job_not_the_daemon(self):
        # Load failures are not retried even with max_failures left: retrying cannot help.
        self.assert_fails_with(train_spec(workers=1, max_failures=3,
                                          library=lib_path("not_a_library.so")),
                               "could not load the training library")
        self.assert_fails_with(train_spec(workers=1, max_failures=3,
                                          library=lib_path("libtest_noentry.so")),
                               "could not load the training library")
        self.assert_fails_with(train_spec(workers=1, library=lib_path("libtest_badabi.so")),
                               "ABI version 999")
        self.assert_fails_with(train_spec(workers=1, fail_at_epoch=0, fail_mode="throw"),
                               "rank 0 failed")
        self.assert_fails_with(train_spec(workers=1, fail_at_epoch=0, fail_mode="abort"),
                               "SIGABRT")
        self.assert_fails_with(train_spec(workers=1, fail_at_epoch=0, fail_mode="segfault"),
                               "SIGSEGV")
        # A library path that does not exist on the node (no upload).
        spec = train_spec(workers=1, library="/nonexistent/libmissing.so")
        status, body = self.daemon.post("/v1/jobs", {"spec": spec})
        self.assertEqual(status, 201, body)
        job = self.daemon.wait_terminal(body["job_id"])
        self.assertEqual(job["state"], "FAILED")
        self.assertIn("could not load the training library", job["message"])
        # Several entry points and none named; then the right one named.
        multi = train_spec(workers=1, library=lib_path("libtest_multi.so"))
        self.assert_fails_with(multi, "train_a")
        multi["entrypoint"]["function"] = "train_b"
        job_id = self.daemon.submit_spec(multi)
        self.assertEqual(self.daemon.wait_terminal(job_id)["state"], "SUCCEEDED")


if __name__ == "__main__":
    main()
