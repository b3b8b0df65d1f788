"""Elastic sizes, first part (scaling_config.num_workers {"min": m, "max": n}): a job starts
with as many ranks in [m, n] as fit now instead of waiting for n, waits only while fewer
than m fit, and a restart after a failure starts again with what fits then. Going on with
fewer ranks without a restart, and growing back, are not built yet (README)."""
from harness import DaemonTestCase, main, train_spec


def elastic(name, lo, hi, **config):
    spec = train_spec(name=name, **config)
    spec["scaling_config"]["num_workers"] = {"min": lo, "max": hi}
    return spec


class ElasticStartTest(DaemonTestCase):
    num_cpus = 3

    def test_starts_with_what_fits_and_every_rank_knows_the_size(self):
        job_id = self.daemon.submit_spec(elastic("e", 2, 4, epochs=2, sleep_ms=50))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["spec"]["scaling_config"]["num_workers"], {"min": 2, "max": 4})
        # 3 CPUs, 1 per rank: 3 ranks, each told the world size 3.
        self.assertEqual(job["metrics"]["world_size"], 3, job)
        self.assertEqual(job["attempt"], 1, job)

    def test_waits_while_fewer_than_its_minimum_fit(self):
        hog = self.daemon.submit_spec(train_spec(name="hog", workers=2, epochs=50,
                                                 sleep_ms=100))
        self.daemon.wait_job(hog, lambda j: j["state"] == "RUNNING", what="hog running")
        job_id = self.daemon.submit_spec(elastic("e", 2, 3, epochs=1, sleep_ms=10))
        job = self.daemon.wait_job(job_id, lambda j: "CPU" in j["pending_reason"],
                                   what="a pending reason")
        self.assertEqual(job["state"], "PENDING", job)
        self.assertIn("CPU: 2 needed, 1 free", job["pending_reason"])
        self.daemon.post(f"/v1/jobs/{hog}/stop")
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["metrics"]["world_size"], 3, job)

    def test_a_minimum_that_can_never_fit_is_refused(self):
        status, body = self.daemon.post("/v1/jobs", {"spec": elastic("e", 4, 6)})
        self.assertEqual(status, 400, body)
        self.assertIn("infeasible", body["error"])
        self.assertIn("CPU: 4 needed", body["error"])


if __name__ == "__main__":
    main()
