"""Daily use against a real daemon: jobs called by name, the job list's filters and pages,
and the lifecycle verbs."""
import json
import os
import subprocess
import time

from harness import (Daemon, DaemonTestCase, bin_path, lib_path, main, merge, train_spec,
                     wait_for)


def warnings(daemon):
    """The daemon's warning lines ("<time> W ..."): what journalctl -p warning shows."""
    return [l for l in daemon.log().splitlines() if " W " in l[:30]]


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

    def test_logs_interleave_every_rank_and_follow_a_job_from_before_its_start_across_restarts(self):
        # A job that waits (the CPUs are taken), then fails once and restarts.
        blocker = self.daemon.submit_spec(train_spec(name="blocker", workers=4, epochs=1000,
                                                     sleep_ms=100))
        self.daemon.wait_job(blocker, lambda j: j["state"] == "RUNNING", what="RUNNING")
        spec = merge(train_spec(name="restarts", epochs=6, sleep_ms=1000, fail_at_epoch=2,
                                checkpoint_every=1, max_failures=1), {})
        job_id = self.daemon.submit_spec(spec)
        self.assertEqual(self.daemon.job(job_id)["state"], "PENDING")
        follow = subprocess.Popen(
            [bin_path("traintl"), "--data-dir", self.daemon.data_dir, "logs", "restarts", "-f"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)
            self.assertIsNone(follow.poll(), "logs -f must wait for the job to start")
            self.daemon.cli("stop", blocker, "--wait", check=True)
            out, err = follow.communicate(timeout=60)  # ends with the job
        finally:
            if follow.poll() is None:
                follow.kill()
                follow.wait()
        self.assertEqual(follow.returncode, 0, err)
        self.assertEqual(self.daemon.job(job_id)["state"], "SUCCEEDED")
        lines = out.splitlines()
        marker = lines.index("--- attempt 2 ---")
        first, second = lines[:marker], lines[marker + 1:]
        for part in (first, second):
            self.assertTrue(all(l.startswith(("[rank 0] ", "[rank 1] ")) for l in part), part)
            self.assertTrue(any(l.startswith("[rank 0] ") for l in part), part)
            self.assertTrue(any(l.startswith("[rank 1] ") for l in part), part)
        self.assertIn("[rank 0] injecting failure 'throw' at epoch 2 on rank 0", first)
        self.assertTrue(any("attempt 2 starting at epoch" in l for l in second), second)
        self.assertIn("[rank 1] epoch 5 rank 1 loss", "\n".join(second))
        # Interleaved as written: the ranks' epoch lines alternate epoch by epoch (an epoch
        # takes 1 s; lines are placed to within the 250 ms of the log index's samples).
        def epochs(lines):
            return [int(l.split()[3]) for l in lines if " epoch " in l and " loss " in l]
        self.assertEqual(epochs(second), sorted(epochs(second)), second)

        # The whole log again, from the index: the same lines, in the same epoch order
        # (within one sample the ranks' order may differ from their arrival's).
        p = self.daemon.cli("logs", "restarts", "--attempt", "2", check=True)
        again = p.stdout.splitlines()
        self.assertEqual(sorted(again), sorted(second))
        self.assertEqual(epochs(again), sorted(epochs(again)), again)
        p = self.daemon.cli("logs", "restarts", "-n", "3", check=True)
        self.assertEqual(p.stdout.splitlines(), again[-3:])
        p = self.daemon.cli("logs", "restarts", "--rank", "1", check=True)
        self.assertEqual(p.stdout.splitlines(),
                         [l[len("[rank 1] "):] for l in second if l.startswith("[rank 1] ")])
        # --since: nothing was written in the future, everything since a minute ago.
        future = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
        self.assertEqual(self.daemon.cli("logs", "restarts", "--since", future,
                                         check=True).stdout, "")
        self.assertEqual(self.daemon.cli("logs", "restarts", "--since", "1m",
                                         check=True).stdout.splitlines(), again)
        # A time between two epochs of attempt 1, half an epoch after epoch 0's report
        # (two samples; the next epoch's lines come half an epoch later): epoch 0's lines
        # are left out, epoch 1's are there.
        history = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        t0 = [h["time"] for h in history if h["attempt"] == 1 and h["metrics"]["epoch"] == 0][0]
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((t0 + 500) // 1000)) + \
            ".%03d" % ((t0 + 500) % 1000)
        p = self.daemon.cli("logs", "restarts", "--attempt", "1", "--since", since, check=True)
        self.assertNotIn("epoch 0 rank", p.stdout)
        self.assertIn("[rank 0] epoch 1 rank 0", p.stdout)
        status, body = self.daemon.request(
            "GET", f"/v1/jobs/{job_id}/logs?ranks=all&attempt=1&since={t0 + 500}", raw=True)
        self.assertEqual(status, 200)
        self.assertNotIn(b"epoch 0 rank", body)
        self.assertIn(b"[rank 0] epoch 1 rank 0", body)  # rank 1 may die before its flush

    def test_submit_wait_logs_streams_rank_0_between_the_progress_lines(self):
        path = os.path.join(self.daemon.data_dir, "job.json")
        with open(path, "w") as f:
            json.dump(train_spec(name="chatty", epochs=4, sleep_ms=300, fail_at_epoch=1,
                                 max_failures=1), f)
        p = self.daemon.cli("submit", path, "--wait", "--logs")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        # Rank 0's lines of both attempts (and none of rank 1's), then the outcome.
        self.assertIn("rank 0/2 attempt 1 starting at epoch 0", out)
        self.assertIn("injecting failure 'throw' at epoch 1 on rank 0", out)
        self.assertIn("rank 0/2 attempt 2 starting at epoch", out)
        self.assertIn("--- attempt 2 ---", out)
        self.assertIn("epoch 3 rank 0 loss", out)
        self.assertNotIn("rank 1 loss", out)
        self.assertLess(out.index("epoch 3 rank 0 loss"), out.index(" SUCCEEDED after "))
        self.assertIn("attempt 1 FAILED", out)
        p = self.daemon.cli("submit", path, "--logs")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--logs goes with --wait", p.stderr)

    def test_stop_wait_resubmit_and_delete(self):
        job_id = self.daemon.submit_spec(train_spec(name="long", epochs=1000, sleep_ms=100))
        self.daemon.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        # A running job cannot be deleted.
        p = self.daemon.cli("delete", "long")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("stop it and let it end first", p.stderr)
        # stop --wait returns once the job has ended and its workers are gone.
        p = self.daemon.cli("stop", "long", "--wait", check=True)
        self.assertEqual(p.stdout.strip(), f"{job_id}: STOPPED")
        self.assertEqual(self.daemon.job(job_id)["state"], "STOPPED")
        self.assertEqual(self.daemon.worker_pids(), [])

        # resubmit: a new job with the same spec and library.
        p = self.daemon.cli("resubmit", job_id, check=True)
        again = p.stdout.strip()
        self.assertNotEqual(again, job_id)
        first, second = self.daemon.job(job_id), self.daemon.job(again)
        self.assertEqual(second["spec"], first["spec"])
        self.assertEqual(second["library_sha256"], first["library_sha256"])
        self.daemon.wait_job(again, lambda j: j["state"] == "RUNNING", what="RUNNING")
        self.daemon.cli("stop", again, "--wait", check=True)
        # "long" now names the resubmitted job.
        p = self.daemon.cli("--json", "status", "long", check=True)
        self.assertEqual(json.loads(p.stdout)["job_id"], again)

        # delete: records and logs go; the trial dir only with --checkpoints.
        log_dir = os.path.join(self.daemon.data_dir, "jobs", job_id)
        self.assertTrue(os.path.isdir(log_dir))
        p = self.daemon.cli("delete", job_id, check=True)
        self.assertIn("stays", p.stdout)
        self.assertEqual(self.daemon.get(f"/v1/jobs/{job_id}")[0], 404)
        wait_for(lambda: not os.path.exists(log_dir), what="the job's logs removed")
        self.assertTrue(os.path.isdir(first["trial_dir"]))
        p = self.daemon.cli("delete", again, "--checkpoints", check=True)
        wait_for(lambda: not os.path.exists(second["trial_dir"]), what="the trial dir removed")
        self.assertEqual(self.daemon.get("/v1/jobs")[1]["jobs"], [])
        p = self.daemon.cli("delete", again)
        self.assertEqual(p.returncode, 5, p.stderr)

    def test_a_job_past_its_time_limit_is_stopped_with_that_reason(self):
        spec = train_spec(name="limited", epochs=1000, sleep_ms=100)
        spec["run_config"]["time_limit_s"] = 1.5
        job_id = self.daemon.submit_spec(spec)
        started = time.monotonic()
        job = self.daemon.wait_terminal(job_id, timeout=30)
        self.assertEqual(job["state"], "STOPPED", job)
        self.assertIn("time limit of 1.5 s", job["message"])
        self.assertLess(time.monotonic() - started, 15)
        self.assertEqual(job["spec"]["run_config"]["time_limit_s"], 1.5)
        self.assertIn("time limit of 1.5 s", job["attempts"][-1]["reason"])
        status, body = self.daemon.post("/v1/jobs", {"spec": dict(spec, run_config={
            "time_limit_s": -1})})
        self.assertEqual(status, 400)
        self.assertEqual(body["field"], "run_config.time_limit_s")

    def test_validate_checks_the_library_and_the_cluster_and_stores_nothing(self):
        def validate(spec):
            path = os.path.join(self.daemon.data_dir, "validate.json")
            with open(path, "w") as f:
                json.dump(spec, f)
            return self.daemon.cli("validate", path)

        p = validate(train_spec())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("valid; " + lib_path("libtest_train.so") + " exports", p.stdout)
        # What submit would only find when the job runs.
        spec = train_spec()
        spec["entrypoint"]["function"] = "no_such_function"
        p = validate(spec)
        self.assertEqual(p.returncode, 2, p.stdout)
        self.assertIn("exports no entry point no_such_function", p.stderr)
        p = validate(train_spec(library=lib_path("not_a_library.so")))
        self.assertEqual(p.returncode, 2)
        self.assertIn("not an ELF file", p.stderr)
        p = validate(train_spec(library=lib_path("libtest_noentry.so")))
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a traintl training library", p.stderr)
        p = validate(train_spec(library=lib_path("libtest_multi.so")))
        self.assertEqual(p.returncode, 2)
        self.assertIn("several entry points", p.stderr)
        # The daemon's checks: a job the cluster can never run.
        p = validate(train_spec(workers=64))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("infeasible", p.stderr)
        # Nothing was stored or uploaded.
        self.assertEqual(self.daemon.get("/v1/jobs")[1]["jobs"], [])
        self.assertEqual(os.listdir(os.path.join(self.daemon.data_dir, "blobs"))
                         if os.path.isdir(os.path.join(self.daemon.data_dir, "blobs")) else [], [])

    def test_retention_deletes_the_oldest_finished_jobs(self):
        self.daemon.stop()
        self.daemon = Daemon(num_cpus=4, extra_args=["--retain-jobs", "2"]).start()
        ids = []
        for i in range(4):
            ids.append(self.daemon.submit_spec(train_spec(name=f"r{i}", epochs=1, sleep_ms=0)))
            self.daemon.wait_terminal(ids[-1])
        running = self.daemon.submit_spec(train_spec(name="running", epochs=1000, sleep_ms=100))
        wait_for(lambda: [j["job_id"] for j in self.daemon.get("/v1/jobs")[1]["jobs"]] ==
                 [running, ids[3], ids[2]], timeout=30, what="the two oldest jobs deleted")
        # Records and logs go; the trial dirs stay (they hold the checkpoints).
        wait_for(lambda: not os.path.exists(os.path.join(self.daemon.data_dir, "jobs", ids[0])),
                 what="the deleted job's logs removed")
        self.assertIn("deleted", self.daemon.log())
        self.daemon.cli("stop", running, "--wait", check=True)

    def test_operators_find_trouble_among_the_warnings(self):
        failing = self.daemon.submit_spec(train_spec(name="doomed", epochs=2, fail_at_epoch=0))
        self.daemon.wait_terminal(failing)
        status, _ = self.daemon.post("/v1/jobs", {"spec": {"name": "bad"}})
        self.assertEqual(status, 400)
        self.assertEqual(self.daemon.get("/v1/jobs", token="not-the-token")[0], 401)
        self.assertEqual(self.daemon.get("/v1/jobs", token="still-not-it")[0], 401)
        lines = "\n".join(warnings(self.daemon))
        self.assertIn("this node is now the head", lines)
        self.assertIn(f"job {failing} FAILED in attempt 1", lines)
        self.assertIn("refused a job spec from 127.0.0.1", lines)
        self.assertIn("rejected a request from 127.0.0.1", lines)
        # A client retrying in a loop does not flood the journal.
        self.assertEqual(lines.count("rejected a request"), 1, lines)


if __name__ == "__main__":
    main()
