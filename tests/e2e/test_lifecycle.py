"""Submit -> SUCCEEDED with metrics, checkpoints, logs; stop; bad specs refused."""
import json
import os
import tempfile
import time

from harness import DaemonTestCase, lib_path, main, train_spec, wait_for


class LifecycleTest(DaemonTestCase):
    def write_spec(self, spec):
        path = os.path.join(self.daemon.data_dir, "job.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return path

    def test_submit_wait_succeeds_with_metrics_checkpoints_and_logs(self):
        spec = train_spec(epochs=4, sleep_ms=50)
        spec["run_config"]["checkpoint_config"] = {"num_to_keep": 2}
        p = self.daemon.cli("submit", self.write_spec(spec), "--wait")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCEEDED", p.stdout)
        jobs = self.daemon.get("/v1/jobs")[1]["jobs"]
        self.assertEqual(len(jobs), 1)
        job = self.daemon.job(jobs[0]["job_id"])
        self.assertEqual(job["state"], "SUCCEEDED")
        self.assertEqual(job["attempt"], 1)
        self.assertEqual(job["metrics"]["epoch"], 3)
        self.assertEqual(job["metrics"]["rank"], 0)
        self.assertEqual(job["metrics"]["world_size"], 2)
        # Retention: num_to_keep=2 keeps the last two of four.
        cks = self.daemon.get(f"/v1/jobs/{job['job_id']}/checkpoints")[1]["checkpoints"]
        self.assertEqual([c["seq"] for c in cks], [2, 3])
        self.assertTrue(cks[-1]["latest"])
        for c in cks:
            files = sorted(os.listdir(c["path"]))
            # Both ranks' files merged, plus the manifest.
            self.assertIn("rank_0.json", files)
            self.assertIn("rank_1.json", files)
            self.assertIn("manifest.json", files)
        dirs = [d for d in os.listdir(job["trial_dir"]) if d.startswith("checkpoint_")]
        self.assertEqual(len(dirs), 2, dirs)
        # Metrics history: 4 reports.
        m = self.daemon.get(f"/v1/jobs/{job['job_id']}/metrics")[1]
        self.assertEqual(len(m["history"]), 4)
        # Logs of both ranks, through the CLI with a prefix of the id.
        for rank in (0, 1):
            p = self.daemon.cli("logs", job["job_id"][:6], "--rank", str(rank))
            self.assertEqual(p.returncode, 0, p.stderr)
        p = self.daemon.cli("status", job["job_id"][:4])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("SUCCEEDED", p.stdout)
        p = self.daemon.cli("--json", "status", job["job_id"])
        self.assertEqual(json.loads(p.stdout)["state"], "SUCCEEDED")

    def test_stop_leaves_no_worker(self):
        job_id = self.daemon.submit_spec(train_spec(epochs=1000, sleep_ms=100))
        self.daemon.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        wait_for(lambda: len(self.daemon.worker_pids()) == 2, what="2 workers")
        p = self.daemon.cli("stop", job_id)
        self.assertEqual(p.returncode, 0, p.stderr)
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "STOPPED")
        self.assertEqual(self.daemon.worker_pids(), [])

    def test_stop_of_a_hanging_worker_escalates_to_signals(self):
        job_id = self.daemon.submit_spec(
            train_spec(epochs=1000, fail_at_epoch=0, fail_rank=1, fail_mode="hang"))
        self.daemon.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        self.assertEqual(self.daemon.post(f"/v1/jobs/{job_id}/stop")[0], 200)
        job = self.daemon.wait_terminal(job_id, timeout=30)
        self.assertEqual(job["state"], "STOPPED")
        self.assertEqual(self.daemon.worker_pids(), [])

    def test_pending_when_it_does_not_fit_now_and_infeasible_when_never(self):
        big = self.daemon.submit_spec(train_spec(workers=3, epochs=1000))
        self.daemon.wait_job(big, lambda j: j["state"] == "RUNNING", what="RUNNING")
        second = self.daemon.submit_spec(train_spec(name="second", workers=2, epochs=1))
        job = self.daemon.wait_job(second, lambda j: "CPU" in j["pending_reason"],
                                   what="pending reason")
        self.assertEqual(job["state"], "PENDING")
        self.assertIn("waiting for resources", job["pending_reason"])
        # Never fits: refused at submit, nothing stored.
        status, body = self.daemon.post("/v1/jobs", {"spec": train_spec(workers=9)})
        self.assertEqual(status, 400)
        self.assertIn("infeasible", body["error"])
        self.daemon.post(f"/v1/jobs/{big}/stop")
        self.assertEqual(self.daemon.wait_terminal(second)["state"], "SUCCEEDED")
        self.assertEqual(len(self.daemon.get("/v1/jobs")[1]["jobs"]), 2)

    def test_invalid_specs_are_refused_with_the_field_and_nothing_is_stored(self):
        cases = [
            ({"name": "x"}, "entrypoint"),
            (dict(train_spec(), scaling_config={"num_workers": "two"}), "scaling_config.num_workers"),
            (dict(train_spec(), bogus=1), "bogus"),
            (dict(train_spec(), run_config={"failure_config": {"max_failures": -2}}),
             "run_config.failure_config.max_failures"),
        ]
        for spec, field in cases:
            status, body = self.daemon.post("/v1/jobs", {"spec": spec})
            self.assertEqual(status, 400, body)
            self.assertEqual(body.get("field"), field, body)
            p = self.daemon.cli("submit", self.write_spec(spec))
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(field, p.stderr)
        path = os.path.join(self.daemon.data_dir, "broken.json")
        with open(path, "w") as f:
            f.write('{"name": "x",\n  "entrypoint": }')
        p = self.daemon.cli("submit", path)
        self.assertEqual(p.returncode, 2)
        self.assertIn("broken.json:2:", p.stderr)
        self.assertEqual(self.daemon.get("/v1/jobs")[1]["jobs"], [])


if __name__ == "__main__":
    main()
