"""Asynchronous checkpoints (report(..., async_upload=true)) with a real daemon: they are
committed complete, a job does not end before its last one is, and a restarted attempt
resumes from the latest committed one. The kill -9 trials are in
test_async_checkpoint_faults.py."""
import os
import shutil
import tempfile
import time
import unittest

from async_ckpt_common import async_spec, incomplete_reason, staged_uploads
from harness import DaemonTestCase, lib_path, main, wait_for


class AsyncCheckpointTest(DaemonTestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="traintl-async-ckpt-")
        self.storage = os.path.join(self.tmp, "storage")
        os.makedirs(self.storage)

    def tearDown(self):
        super().tearDown()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def checkpoints(self, job_id):
        return self.daemon.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]

    def assert_complete(self, checkpoints, world_size=2):
        for c in checkpoints:
            self.assertIsNone(incomplete_reason(c["path"], world_size), c)

    def test_every_checkpoint_committed_complete_and_the_last_before_the_end(self):
        # 4 MiB per rank at 50 ms/MiB: each upload takes ~0.2 s, longer than an epoch, so
        # the loop runs ahead of its uploads and ends while the last one is in flight.
        spec = async_spec(self.storage, self.tmp, epochs=4, ckpt_mb=4, metrics_between=1,
                          env={"TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB": "50"})
        job_id = self.daemon.submit_spec(spec)
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        cks = self.checkpoints(job_id)
        # Every epoch's checkpoint: seqs 0, 2, 4, 6 (a metrics-only report between each).
        self.assertEqual([c["seq"] for c in cks], [0, 2, 4, 6])
        self.assertEqual([c["metrics"]["epoch"] for c in cks], [0, 1, 2, 3])
        self.assert_complete(cks)
        history = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        self.assertEqual(len([h for h in history if h["attempt"] == 1]), 8)
        # The memory snapshots are unlinked files: nothing of this job stays in /dev/shm.
        self.assertEqual([n for n in os.listdir("/dev/shm") if "traintl-snapshot" in n], [])

    def test_a_restarted_attempt_resumes_from_the_latest_committed_async_checkpoint(self):
        spec = async_spec(self.storage, self.tmp, epochs=6, ckpt_mb=2, max_failures=1,
                          fail_at_epoch=4, fail_rank=1, fail_mode="exit")
        job_id = self.daemon.submit_spec(spec)
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 2)
        cks = self.checkpoints(job_id)
        self.assert_complete(cks)
        first = [c for c in cks if c["attempt"] == 1]
        self.assertTrue(first, cks)
        # Rank 1 died at the start of epoch 4, perhaps while epoch 3's upload ran: attempt 2
        # resumes from whatever attempt 1 committed last, never from more.
        restored = job["attempts"][1]["restored_from"]
        self.assertEqual(restored, max(first, key=lambda c: c["seq"])["path"])
        history = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        second = [h["metrics"] for h in history if h["attempt"] == 2]
        restored_epoch = max(first, key=lambda c: c["seq"])["metrics"]["epoch"]
        self.assertEqual(second[0]["restored_epoch"], restored_epoch)
        self.assertEqual(second[0]["epoch"], restored_epoch + 1)
        self.assertEqual(max(c["metrics"]["epoch"] for c in cks), 5)

    def test_a_stop_during_a_slow_upload_ends_the_job_promptly(self):
        # 4 MiB at 2 s/MiB: the upload would take 8 s; a stop must not wait for it.
        spec = async_spec(self.storage, self.tmp, epochs=1000, ckpt_mb=4,
                          env={"TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB": "2000"})
        job_id = self.daemon.submit_spec(spec)
        wait_for(lambda: staged_uploads(self.storage, job_id, 1), timeout=60,
                 what="an upload to begin")
        t0 = time.monotonic()
        p = self.daemon.cli("stop", job_id)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        job = self.daemon.wait_terminal(job_id, timeout=30)
        self.assertEqual(job["state"], "STOPPED", job)
        self.assertLess(time.monotonic() - t0, 8)
        wait_for(lambda: self.daemon.worker_pids() == [], timeout=10, what="workers to end")
        # Nothing half-uploaded was committed.
        self.assertEqual(self.checkpoints(job_id), [])

    @unittest.skipUnless(os.path.exists(lib_path("libtest_torch_ckpt.so")),
                         "built without LibTorch")
    def test_torch_async_checkpointer_stages_tensors_and_a_new_job_resumes_from_them(self):
        spec = {
            "name": "torch-staged",
            "entrypoint": {"library": lib_path("libtest_torch_ckpt.so")},
            "train_loop_config": {"mode": "staged", "state_mb": 4, "checkpoints": 3,
                                  "step_ms": 20, "verify": True, "tmp_dir": self.tmp},
            "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
            "run_config": {"storage_path": self.storage},
        }
        job_id = self.daemon.submit_spec(spec)
        job = self.daemon.wait_terminal(job_id, timeout=180)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        last = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"][-1]["metrics"]
        # Each save's file holds the tensors as they were at save(), not as changed after.
        self.assertEqual(last["verified"], 3)
        cks = self.checkpoints(job_id)
        self.assertEqual([c["metrics"]["step"] for c in cks], [0, 1, 2])
        for c in cks:
            self.assertEqual(sorted(os.listdir(c["path"])),
                             ["manifest.json", "state_r0.pt", "state_r1.pt"])
        # A new job resumes from the last one: its tensors load, consistent, as step 2.
        spec["name"] = "torch-staged-resumed"
        spec["resume_from_checkpoint"] = f"job:{job_id}"
        spec["train_loop_config"]["checkpoints"] = 1
        job2 = self.daemon.submit_spec(spec)
        job = self.daemon.wait_terminal(job2, timeout=180)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        last = self.daemon.get(f"/v1/jobs/{job2}/metrics")[1]["history"][-1]["metrics"]
        self.assertEqual(last["restored_step"], 2)


if __name__ == "__main__":
    main()
