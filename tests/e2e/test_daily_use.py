"""Daily use against a real daemon: jobs called by name, the job list's filters and pages,
and the lifecycle verbs."""
import json

from harness import DaemonTestCase, main, train_spec


class DailyUseTest(DaemonTestCase):
    def test_jobs_by_name_and_the_list_filters_and_pages(self):
        quick = dict(epochs=1, sleep_ms=0)
        first = self.daemon.submit_spec(train_spec(name="digits", **quick))
        self.daemon.wait_terminal(first)
        other = self.daemon.submit_spec(train_spec(name="sweep", **quick))
        self.daemon.wait_terminal(other)
        second = self.daemon.submit_spec(train_spec(name="digits", **quick))
        self.daemon.wait_terminal(second)
        failing = self.daemon.submit_spec(train_spec(name="sweep", fail_at_epoch=0, **quick))
        self.assertEqual(self.daemon.wait_terminal(failing)["state"], "FAILED")

        # A name means its newest job, in every verb.
        p = self.daemon.cli("--json", "status", "digits", check=True)
        self.assertEqual(json.loads(p.stdout)["job_id"], second)
        p = self.daemon.cli("logs", "digits", "--rank", "1", check=True)
        self.assertIn("rank 1", p.stdout)
        p = self.daemon.cli("--json", "checkpoints", "sweep", check=True)
        self.assertEqual(json.loads(p.stdout)["job_id"], failing)
        p = self.daemon.cli("status", "nosuchjob")
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("no job with the id, id prefix or name nosuchjob", p.stderr)

        # Filters apply in the daemon; pages go newest first and end.
        p = self.daemon.cli("--json", "list", "--state", "failed", check=True)
        self.assertEqual([j["job_id"] for j in json.loads(p.stdout)["jobs"]], [failing])
        p = self.daemon.cli("--json", "list", "--name", "digits", check=True)
        self.assertEqual([j["job_id"] for j in json.loads(p.stdout)["jobs"]], [second, first])
        p = self.daemon.cli("list", "--limit", "2", check=True)
        self.assertEqual(len(p.stdout.strip().splitlines()), 3, p.stdout)  # header + 2
        self.assertIn("--all for more", p.stderr)
        p = self.daemon.cli("--json", "list", "--all", check=True)
        self.assertEqual([j["job_id"] for j in json.loads(p.stdout)["jobs"]],
                         [failing, second, other, first])
        status, body = self.daemon.get("/v1/jobs?limit=3")
        self.assertEqual(status, 200)
        self.assertEqual(len(body["jobs"]), 3)
        status, rest = self.daemon.get("/v1/jobs?limit=3&cursor=" + body["next_cursor"])
        self.assertEqual([j["job_id"] for j in rest["jobs"]], [first])
        self.assertIsNone(rest["next_cursor"])
        self.assertEqual(self.daemon.get("/v1/jobs?state=sideways")[0], 400)
        self.assertEqual(self.daemon.get("/v1/jobs?cursor=xyz")[0], 400)
        self.assertEqual(self.daemon.get("/v1/jobs?limit=0")[0], 400)


if __name__ == "__main__":
    main()
