"""GET /metrics scraped by Debian's real Prometheus server (scripts/fetch_prometheus.sh;
TRAINTL_PROMETHEUS names the binary): the series are checked through Prometheus's query
API, so the text format, the auth and the values are what a real scraper sees."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request

from harness import Daemon, DaemonTestCase, main, train_spec, wait_for


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MetricsTest(DaemonTestCase):
    def setUp(self):
        super().setUp()
        self.prom = None
        self.prom_dir = tempfile.mkdtemp(prefix="traintl-prom-")

    def tearDown(self):
        if self.prom and self.prom.poll() is None:
            self.prom.terminate()
            try:
                self.prom.wait(10)
            except subprocess.TimeoutExpired:
                self.prom.kill()
                self.prom.wait()
        shutil.rmtree(self.prom_dir, ignore_errors=True)
        super().tearDown()

    def start_prometheus(self):
        binary = os.environ.get("TRAINTL_PROMETHEUS", "")
        self.assertTrue(binary and os.access(binary, os.X_OK),
                        f"no prometheus at TRAINTL_PROMETHEUS={binary!r} "
                        "(scripts/fetch_prometheus.sh fetches it; scripts/test.sh runs it)")
        config = os.path.join(self.prom_dir, "prometheus.yml")
        with open(config, "w") as f:
            json.dump({  # YAML is a superset of JSON
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [{
                    "job_name": "traintl",
                    "scrape_interval": "1s",
                    "authorization": {"credentials_file":
                                      os.path.join(self.daemon.data_dir, "token")},
                    "static_configs": [{"targets": [self.daemon.address]}]}]}, f)
        for _ in range(5):  # the port may be taken between free_port() and the bind
            port = free_port()
            log = open(os.path.join(self.prom_dir, "prometheus.log"), "ab")
            self.prom = subprocess.Popen(
                [binary, f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(self.prom_dir, 'data')}",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            self.prom_url = f"http://127.0.0.1:{port}"

            def ready():
                if self.prom.poll() is not None:
                    return "exited"
                try:
                    with urllib.request.urlopen(self.prom_url + "/-/ready", timeout=2) as r:
                        return r.status == 200
                except OSError:
                    return False
            state = wait_for(ready, timeout=30, what="prometheus to be ready")
            if state is True:
                return
        self.fail("prometheus did not start:\n" + open(os.path.join(self.prom_dir,
                                                                      "prometheus.log")).read())

    def query(self, promql):
        url = self.prom_url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        self.assertEqual(body["status"], "success", body)
        return {json.dumps(s["metric"], sort_keys=True): float(s["value"][1])
                for s in body["data"]["result"]}

    def wait_value(self, promql, predicate, what):
        return wait_for(lambda: (lambda r: r if r and all(predicate(v) for v in r.values())
                                 else None)(self.query(promql)),
                        timeout=30, interval=0.5, what=what)

    def test_prometheus_scrapes_the_daemon(self):
        d = self.daemon
        # Without the token: refused, like every other route.
        self.assertEqual(d.get("/metrics", auth=False, raw=True)[0], 401)
        job_id = d.submit_spec(train_spec(name="scraped", workers=2, epochs=60, sleep_ms=200))
        d.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", 0) >= 1,
                   what="a checkpoint")
        self.start_prometheus()
        # The scrape works (auth from the credentials file) and the series are there.
        self.wait_value('up{job="traintl"}', lambda v: v == 1, "a successful scrape")
        running = self.wait_value('traintl_jobs{state="RUNNING"}', lambda v: v == 1,
                                  "one RUNNING job")
        self.assertEqual(len(running), 1)
        cpus = self.query('traintl_node_resource_total{resource="CPU"}')
        self.assertEqual(list(cpus.values()), [4.0])
        used = self.query('traintl_node_resource_used{resource="CPU"}')
        self.assertEqual(list(used.values()), [2.0])
        loss = self.wait_value(f'traintl_job_metric{{job_id="{job_id}",metric="loss"}}',
                               lambda v: 0 < v <= 1, "the job's loss")
        # "job" is Prometheus's own target label: ours is job_name.
        self.assertIn('"job_name": "scraped"', next(iter(loss)))
        self.assertGreaterEqual(list(self.query("traintl_raft_term").values())[0], 1)
        applied = self.query("traintl_raft_applied_index")
        self.assertGreater(list(applied.values())[0], 5)
        self.assertGreaterEqual(
            list(self.query("traintl_checkpoint_commit_seconds_count").values())[0], 1)
        age = self.query("traintl_node_heartbeat_age_seconds")
        self.assertLess(list(age.values())[0], 5)
        # The values follow the cluster: the job stopped, no job runs any more.
        p = d.cli("stop", job_id, "--wait")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.wait_value('traintl_jobs{state="STOPPED"}', lambda v: v == 1, "one STOPPED job")
        self.wait_value('traintl_jobs{state="RUNNING"}', lambda v: v == 0, "no RUNNING job")

    def test_every_ranks_reports_are_kept(self):
        d = self.daemon
        job_id = d.submit_spec(train_spec(name="ranks", workers=3, epochs=4, sleep_ms=0))
        self.assertEqual(d.wait_terminal(job_id)["state"], "SUCCEEDED")
        status, body = d.get(f"/v1/jobs/{job_id}/metrics?ranks=all")
        self.assertEqual(status, 200, body)
        self.assertEqual(sorted(body["ranks"]), ["0", "1", "2"])
        for rank, reports in body["ranks"].items():
            self.assertEqual([r["metrics"]["epoch"] for r in reports], [0, 1, 2, 3])
            self.assertTrue(all(r["metrics"]["rank"] == int(rank) for r in reports))
            self.assertTrue(all(r["attempt"] == 1 for r in reports))
        status, body = d.get(f"/v1/jobs/{job_id}/metrics?ranks=2")
        self.assertEqual(list(body["ranks"]), ["2"])
        self.assertEqual(d.get(f"/v1/jobs/{job_id}/metrics?ranks=x")[0], 400)
        # Without ?ranks= the answer is as before: rank 0's replicated history.
        status, body = d.get(f"/v1/jobs/{job_id}/metrics")
        self.assertNotIn("ranks", body)
        self.assertEqual(len(body["history"]), 4)
        # since=T: only what was reported at or after T (the dashboard polls so).
        t = body["history"][2]["time"]
        status, later = d.get(f"/v1/jobs/{job_id}/metrics?ranks=all&since={t}")
        self.assertEqual(status, 200, later)
        self.assertEqual(later["history"], [h for h in body["history"] if h["time"] >= t])
        self.assertIn(body["history"][2], later["history"])
        for reports in later["ranks"].values():
            self.assertTrue(all(r["time"] >= t for r in reports), reports)
        status, none = d.get(f"/v1/jobs/{job_id}/metrics?ranks=all&since=99999999999999")
        self.assertEqual((none["history"], list(none["ranks"].values())), ([], [[], [], []]))
        self.assertEqual(d.get(f"/v1/jobs/{job_id}/metrics?since=-1")[0], 400)

    def test_the_ring_per_rank_is_configurable(self):
        d = Daemon(num_cpus=4, extra_args=["--metrics-per-rank", "2"]).start()
        try:
            job_id = d.submit_spec(train_spec(name="ring", workers=2, epochs=5, sleep_ms=0))
            self.assertEqual(d.wait_terminal(job_id)["state"], "SUCCEEDED")
            status, body = d.get(f"/v1/jobs/{job_id}/metrics?ranks=all")
            self.assertEqual(status, 200, body)
            for reports in body["ranks"].values():  # the latest 2 of 5
                self.assertEqual([r["metrics"]["epoch"] for r in reports], [3, 4])
            self.assertEqual(len(body["history"]), 5)  # rank 0's, replicated, in full
        finally:
            d.stop()
            d.cleanup()


if __name__ == "__main__":
    main()
