"""`traintl tune` against a real daemon: trials are jobs; ASHA stops the bad ones early,
PBT restarts bottom trials from a top trial's checkpoint, grid search walks its points in
Ray's order, the experiment survives kill -9 of the head, stop and resume continue trials
from their checkpoints, delete forgets an ended experiment with its trial jobs, and bad
specs are refused with the field named."""
import csv
import json
import os
import re
import shutil
import tempfile
import unittest

from cluster_harness import Cluster
from harness import DaemonTestCase, main, train_spec, wait_for


def tune_spec(trainer, param_space, **tune_config):
    tc = {"metric": "loss", "mode": "min"}
    tc.update(tune_config)
    return {"trainer": trainer, "param_space": param_space, "tune_config": tc}


class TuneTest(DaemonTestCase):
    def write(self, spec, name="tune.json"):
        path = os.path.join(self.daemon.data_dir, name)
        with open(path, "w") as f:
            json.dump(spec, f)
        return path

    def start(self, spec):
        p = self.daemon.cli("tune", self.write(spec))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return p.stdout.strip()

    def experiment(self, exp):
        status, body = self.daemon.get(f"/v1/tune/{exp}")
        self.assertEqual(status, 200, body)
        return body

    def wait_ended(self, exp, timeout=120):
        return wait_for(lambda: (lambda e: e if e["state"] != "RUNNING" else None)(
            self.experiment(exp)), timeout, interval=0.2, what=f"experiment {exp} to end")

    def trial_jobs(self, exp):
        """Every job of the experiment's trials, as the job list shows them."""
        e = self.experiment(exp)
        names = {t["name"] for t in e["trials"]}
        status, body = self.daemon.get("/v1/jobs?limit=1000")
        self.assertEqual(status, 200)
        return [j for j in body["jobs"] if j["name"] in names]

    def test_asha_stops_bad_trials_early_and_writes_rays_files(self):
        trainer = train_spec(name="asha", workers=1, epochs=6, sleep_ms=100)
        spec = tune_spec(trainer,
                         {"train_loop_config": {"loss_scale": {"grid_search": [1, 2, 4, 8, 16]}}},
                         max_concurrent_trials=2,
                         scheduler={"type": "asha", "max_t": 6, "grace_period": 1,
                                    "reduction_factor": 2})
        p = self.daemon.cli("tune", self.write(spec), "--wait", timeout=180)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("best trial: asha_00000", p.stdout)
        exp = self.experiment("asha")
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        trials = {t["name"]: t for t in exp["trials"]}
        self.assertEqual(len(trials), 5)
        # The best (loss_scale 1) ran to max_t; the worst were stopped by ASHA well before.
        self.assertEqual(exp["best_trial"]["config"]["train_loop_config"]["loss_scale"], 1)
        self.assertEqual(trials["asha_00000"]["iterations"], 6)
        stopped = [t for t in trials.values() if "ASHA" in t["reason"]]
        self.assertGreaterEqual(len(stopped), 3, exp["trials"])
        for t in stopped:
            self.assertEqual(t["state"], "TERMINATED")
            self.assertLess(t["iterations"], 6, t)
            self.assertEqual(t["job_state"], "STOPPED")
            # Held reports: the rank waited for ASHA's decision, so a stopped trial trained
            # no epoch past the result that stopped it.
            decided_at = int(re.search(r"at training_iteration (\d+)", t["reason"]).group(1))
            self.assertEqual(t["iterations"], decided_at, t)
        # Trials are sorted by the metric, best first.
        bests = [t["best"] for t in exp["trials"]]
        self.assertEqual(bests, sorted(bests))
        self.assertIn("checkpoint_a001_", exp["best_trial"]["checkpoint"]["path"])
        # Ray's files in every trial dir.
        def progress(t):
            try:
                with open(os.path.join(t["trial_dir"], "progress.csv")) as f:
                    rows = list(csv.DictReader(f))
            except OSError:
                return None
            return rows if len(rows) == t["iterations"] else None
        for t in trials.values():
            # Written by the head off its event loop: at most moments after the end.
            rows = wait_for(lambda: progress(t), timeout=10, what=f"{t['name']}'s progress.csv")
            self.assertEqual([int(r["training_iteration"]) for r in rows],
                             list(range(1, len(rows) + 1)))
            self.assertEqual(rows[-1]["trial_id"], t["name"])
            self.assertAlmostEqual(float(rows[0]["loss"]),
                                   t["config"]["train_loop_config"]["loss_scale"])
            with open(os.path.join(t["trial_dir"], "result.json")) as f:
                results = [json.loads(line) for line in f]
            self.assertEqual(len(results), len(rows))
            self.assertEqual(results[0]["config"], t["config"])
            with open(os.path.join(t["trial_dir"], "params.json")) as f:
                self.assertEqual(json.load(f), t["config"])
        # tune status shows the table; --json the same as the API.
        p = self.daemon.cli("tune", "status", "asha", check=True)
        self.assertIn("asha_00004", p.stdout)
        self.assertIn("TERMINATED", p.stdout)
        p = self.daemon.cli("--json", "tune", "status", "asha", check=True)
        self.assertEqual(json.loads(p.stdout)["experiment_id"], exp["experiment_id"])
        p = self.daemon.cli("tune", "list", check=True)
        self.assertIn(exp["experiment_id"], p.stdout)

    def test_grid_search_count_order_and_seeded_random_configs(self):
        trainer = train_spec(name="grid", workers=1, epochs=1, sleep_ms=0)
        spec = tune_spec(trainer, {"train_loop_config": {
            "loss_scale": {"grid_search": [1, 3]}, "tag": {"grid_search": ["a", "b"]},
            "noise": {"uniform": [0, 1]}}}, num_samples=2, max_concurrent_trials=3,
            search_alg={"type": "random", "seed": 7})
        exp = self.wait_ended(self.start(spec))
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        self.assertEqual(exp["num_trials"], 8)
        by_index = sorted(exp["trials"], key=lambda t: t["index"])
        points = [(t["config"]["train_loop_config"]["loss_scale"],
                   t["config"]["train_loop_config"]["tag"]) for t in by_index]
        # Ray's order: the first grid variable (by path) varies fastest; the grid repeats
        # num_samples times.
        self.assertEqual(points, [(1, "a"), (3, "a"), (1, "b"), (3, "b")] * 2)
        noise = [t["config"]["train_loop_config"]["noise"] for t in by_index]
        self.assertEqual(len(set(noise)), 8)
        self.assertTrue(all(0 <= n < 1 for n in noise))
        # Each trial ran as exactly one job.
        self.assertEqual(sorted(j["name"] for j in self.trial_jobs(exp["experiment_id"])),
                         sorted(t["name"] for t in by_index))
        # The same seed gives the same configs.
        spec["trainer"]["name"] = "grid2"
        again = self.wait_ended(self.start(spec))
        again_noise = [t["config"]["train_loop_config"]["noise"]
                       for t in sorted(again["trials"], key=lambda t: t["index"])]
        self.assertEqual(again_noise, noise)

    def test_time_budget_ends_an_open_ended_experiment(self):
        trainer = train_spec(name="budget", workers=1, epochs=40, sleep_ms=100)
        spec = tune_spec(trainer, {"train_loop_config": {"loss_scale": {"uniform": [1, 2]}}},
                         num_samples=-1, time_budget_s=3, max_concurrent_trials=2)
        exp = self.wait_ended(self.start(spec), timeout=60)
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        self.assertIn("time budget of 3 s", exp["message"])
        self.assertLess((exp["ended_at"] - exp["created_at"]) / 1000, 15)
        self.assertGreaterEqual(exp["num_trials"], 2)
        jobs = self.trial_jobs(exp["experiment_id"])
        self.assertTrue(all(j["state"] in ("SUCCEEDED", "STOPPED") for j in jobs), jobs)
        # Never more than max_concurrent_trials at once.
        spans = [(self.daemon.job(j["job_id"])["started_at"], self.daemon.job(j["job_id"])["ended_at"])
                 for j in jobs if j.get("started_at")]
        self.assertGreaterEqual(len(spans), 2, jobs)
        for start, _ in spans:
            running = sum(1 for a, b in spans if a <= start < b)
            self.assertLessEqual(running, 2, spans)
        p = self.daemon.cli("tune", "--help")
        self.assertIn("resume", p.stdout)

    def test_pbt_restarts_bottom_trials_from_a_top_trials_checkpoint(self):
        trainer = train_spec(name="pbt", workers=1, epochs=10, sleep_ms=150)
        spec = tune_spec(
            trainer, {"train_loop_config": {"loss_scale": {"grid_search": [1, 1.5, 20, 30]}}},
            max_concurrent_trials=4,
            scheduler={"type": "pbt", "time_attr": "training_iteration",
                       "perturbation_interval": 2, "quantile_fraction": 0.5,
                       "hyperparam_mutations": {"train_loop_config": {
                           "loss_scale": [1, 1.5, 2, 20, 30]}}})
        exp = self.wait_ended(self.start(spec), timeout=180)
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        exploited = [t for t in exp["trials"] if len(t["jobs"]) > 1]
        self.assertTrue(exploited, exp["trials"])
        dirs = {t["name"]: t["trial_dir"] for t in exp["trials"]}
        for t in exploited:
            job = self.daemon.job(t["jobs"][1])
            restored = job["attempts"][0]["restored_from"]
            self.assertTrue(restored, job)
            donors = [n for n, d in dirs.items() if restored.startswith(d + "/") and n != t["name"]]
            self.assertTrue(donors, (restored, dirs))
            # The exploited job's first report resumes after the donor's checkpoint (none
            # when that checkpoint was already the last epoch's).
            history = self.daemon.get(f"/v1/jobs/{t['jobs'][1]}/metrics")[1]["history"]
            if history:
                self.assertGreaterEqual(history[0]["metrics"]["restored_epoch"], 1)
            self.assertIn("PBT", self.daemon.job(t["jobs"][0])["message"])
        # The bottom trials were the exploited ones.
        scales = {t["config"]["train_loop_config"]["loss_scale"] for t in exploited}
        self.assertTrue(scales, exploited)

    def test_hyperband_pauses_trials_and_continues_the_promoted_ones(self):
        trainer = train_spec(name="hb", workers=1, epochs=9, sleep_ms=100)
        spec = tune_spec(
            trainer,
            {"train_loop_config": {"loss_scale": {"grid_search": [1, 2, 4, 8, 16, 32]}}},
            max_concurrent_trials=3,
            scheduler={"type": "hyperband", "max_t": 9, "reduction_factor": 3})
        exp = self.wait_ended(self.start(spec), timeout=180)
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        continued = [t for t in exp["trials"] if len(t["jobs"]) > 1]
        self.assertTrue(continued, exp["trials"])
        for t in continued:
            # A promoted trial goes on from its own checkpoint, to max_t.
            job = self.daemon.job(t["jobs"][1])
            self.assertIn(t["trial_dir"] + "/", job["attempts"][0]["restored_from"])
            self.assertEqual(t["iterations"], 9, t)
        losers = [t for t in exp["trials"] if "not among the top" in t["reason"]]
        self.assertTrue(losers, exp["trials"])
        self.assertTrue(all(t["iterations"] < 9 for t in losers), losers)
        self.assertEqual(exp["best_trial"]["config"]["train_loop_config"]["loss_scale"], 1)

    def test_head_kill9_mid_experiment_loses_no_trial_and_runs_none_twice(self):
        d = self.daemon
        trainer = train_spec(name="crash", workers=1, epochs=6, sleep_ms=200, max_failures=3)
        spec = tune_spec(trainer, {"train_loop_config": {"loss_scale": {"grid_search": [1, 2, 3, 4]}}},
                         max_concurrent_trials=2,
                         scheduler={"type": "asha", "max_t": 6, "grace_period": 3,
                                    "reduction_factor": 2})
        exp_id = self.start(spec)
        wait_for(lambda: any(t["iterations"] >= 2 for t in self.experiment(exp_id)["trials"]),
                 timeout=60, what="a trial's second result")
        d.kill9()
        wait_for(lambda: d.worker_pids() == [], timeout=10, what="workers to die")
        d.start()
        exp = self.wait_ended(exp_id, timeout=180)
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        self.assertEqual(exp["num_trials"], 4)
        self.assertEqual(sorted(t["index"] for t in exp["trials"]), [0, 1, 2, 3])
        # One job per trial: the restart resumed trials' jobs, it did not create new ones.
        jobs = self.trial_jobs(exp_id)
        self.assertEqual(sorted(j["name"] for j in jobs),
                         ["crash_00000", "crash_00001", "crash_00002", "crash_00003"])
        for t in exp["trials"]:
            self.assertEqual(len(t["jobs"]), 1, t)
            self.assertIn(t["state"], ("TERMINATED",), t)
        self.assertEqual(exp["best_trial"]["config"]["train_loop_config"]["loss_scale"], 1)

    def test_stop_and_resume_continue_trials_from_their_checkpoints(self):
        trainer = train_spec(name="pause", workers=1, epochs=12, sleep_ms=150)
        spec = tune_spec(trainer, {"train_loop_config": {"loss_scale": {"grid_search": [1, 2]}}},
                         max_concurrent_trials=2)
        exp_id = self.start(spec)
        wait_for(lambda: sum(t["iterations"] >= 2 for t in self.experiment(exp_id)["trials"]) == 2,
                 timeout=60, what="both trials' second result")
        # A RUNNING experiment cannot be deleted.
        p = self.daemon.cli("tune", "delete", exp_id)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("RUNNING; stop it first", p.stderr)
        p = self.daemon.cli("tune", "stop", exp_id)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("STOPPED", p.stdout)
        wait_for(lambda: all(j["state"] == "STOPPED" for j in self.trial_jobs(exp_id)),
                 timeout=30, what="trial jobs to stop")
        before = {t["name"]: t["iterations"] for t in self.experiment(exp_id)["trials"]}
        # A stopped experiment's trial files hold every result its jobs reported (they are
        # written when each job ends, not only by the experiment's passes).
        for t in self.experiment(exp_id)["trials"]:
            def rows(t=t):
                try:
                    with open(os.path.join(t["trial_dir"], "progress.csv")) as f:
                        n = len(list(csv.DictReader(f)))
                except OSError:
                    return None
                return n if n == before[t["name"]] else None
            wait_for(rows, timeout=10, what=f"{t['name']}'s progress.csv after the stop")
        p = self.daemon.cli("tune", "resume", exp_id, "--wait", timeout=180)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        exp = self.experiment(exp_id)
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        for t in exp["trials"]:
            self.assertEqual(len(t["jobs"]), 2, t)
            second = self.daemon.job(t["jobs"][1])
            self.assertEqual(second["state"], "SUCCEEDED")
            self.assertIn(t["trial_dir"], second["attempts"][0]["restored_from"])
            # Iterations go on from where the stop left them.
            self.assertGreater(t["iterations"], before[t["name"]])
        # A finished experiment cannot be stopped or resumed.
        p = self.daemon.cli("tune", "resume", exp_id)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("only a STOPPED experiment", p.stderr)

        # delete --checkpoints: the experiment, its four trial jobs (with their logs) and
        # its dir go; nothing else.
        jobs = [j for t in exp["trials"] for j in t["jobs"]]
        other = self.daemon.submit_spec(train_spec(name="other", workers=1, epochs=1, sleep_ms=0))
        self.daemon.wait_terminal(other)
        log_dirs = [os.path.join(self.daemon.data_dir, "jobs", j) for j in jobs]
        self.assertTrue(all(os.path.isdir(d) for d in log_dirs))
        self.assertTrue(os.path.isdir(exp["exp_dir"]))
        p = self.daemon.cli("tune", "delete", exp_id, "--checkpoints")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stdout.strip(),
                         f"{exp_id}: deleted with 4 trial jobs and its dir {exp['exp_dir']}")
        self.assertEqual(self.daemon.get(f"/v1/tune/{exp_id}")[0], 404)
        for j in jobs:
            self.assertEqual(self.daemon.get(f"/v1/jobs/{j}")[0], 404)
        wait_for(lambda: not os.path.exists(exp["exp_dir"]), what="the experiment dir removed")
        wait_for(lambda: not any(os.path.exists(d) for d in log_dirs), what="trial logs removed")
        self.assertEqual([j["job_id"] for j in self.daemon.get("/v1/jobs")[1]["jobs"]], [other])
        p = self.daemon.cli("tune", "delete", exp_id)
        self.assertEqual(p.returncode, 5, p.stderr)

    def test_bad_specs_are_refused_naming_the_field(self):
        trainer = train_spec(name="bad", workers=1, epochs=1, sleep_ms=0)
        cases = [
            ({"train_loop_config": {"lr": {"logunifrm": [1e-4, 0.1]}}}, {},
             "param_space.train_loop_config.lr", "loguniform"),
            ({"scaling_config": {"num_worker": {"choice": [1, 2]}}}, {},
             "param_space.scaling_config.num_worker", "num_workers"),
            ({"train_loop_config": {"lr": {"grid_search": 0.1}}}, {},
             "param_space.train_loop_config.lr", "grid_search"),
            ({}, {"mode": "minimum"}, "tune_config.mode", "min"),
            ({}, {"scheduler": {"type": "asha", "reduction_factr": 2}},
             "tune_config.scheduler.reduction_factr", "reduction_factor"),
            ({"scaling_config": {"num_workers": {"grid_search": [1, 64]}}}, {},
             "trial 1", "CPU"),
        ]
        for i, (space, config, field, hint) in enumerate(cases):
            p = self.daemon.cli("tune", self.write(tune_spec(trainer, space, **config),
                                                   f"bad{i}.json"))
            self.assertNotEqual(p.returncode, 0, (space, config, p.stdout))
            self.assertIn(field, p.stderr, (space, config))
            self.assertIn(hint, p.stderr, (space, config))
        status, body = self.daemon.get("/v1/tune")
        self.assertEqual(body["experiments"], [])
        # A metric that is never reported fails the trial after its first report.
        exp = self.wait_ended(self.start(tune_spec(trainer, {}, metric="accuracy", mode="max")))
        trial = exp["trials"][0]
        self.assertEqual(trial["state"], "ERROR", trial)
        self.assertIn('"accuracy"', trial["reason"])
        self.assertIn("loss", trial["reason"])
        # Deleted without --checkpoints: its dir stays.
        p = self.daemon.cli("--json", "tune", "delete", exp["name"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        answer = json.loads(p.stdout)
        self.assertEqual(answer["job_ids"], [trial["job_id"]])
        self.assertFalse(answer["exp_dir_removed"])
        self.assertEqual(self.daemon.get("/v1/tune")[1]["experiments"], [])
        self.assertTrue(os.path.isdir(exp["exp_dir"]))


class ClusterTuneCase(unittest.TestCase):
    """A cluster per test (`voters`, `agents`, `num_cpus` each) and a storage dir for its
    experiments; logs dumped when the test failed, no worker left behind."""
    voters, agents, num_cpus = 3, 0, 2

    def setUp(self):
        self.storage = tempfile.mkdtemp(prefix="traintl-tune-storage-")
        self.cluster = Cluster(voters=self.voters, agents=self.agents,
                               num_cpus=self.num_cpus).start()
        self.cluster.wait_nodes(self.voters + self.agents)

    def tearDown(self):
        if any(err for _, err in getattr(self._outcome, "errors", []) if err):
            self.cluster.dump_logs()
        for d in self.cluster.daemons:
            d.stop()
        leftover = [p for d in self.cluster.daemons for p in d.worker_pids()]
        self.cluster.cleanup()
        shutil.rmtree(self.storage, ignore_errors=True)
        self.assertEqual(leftover, [], "worker processes left behind")


class TuneFailoverTest(ClusterTuneCase):
    """kill -9 of the head of a three-voter cluster mid-experiment: the new head loads the
    experiment from the replicated store and finishes it."""

    def test_kill9_head_mid_experiment(self):
        c = self.cluster
        head = c.head()
        trainer = train_spec(name="failover", workers=1, epochs=8, sleep_ms=250, max_failures=2)
        trainer["run_config"]["storage_path"] = self.storage
        spec = tune_spec(trainer, {"train_loop_config": {"loss_scale": {"grid_search": [1, 2, 3, 4]}}},
                         max_concurrent_trials=2)
        path = os.path.join(self.storage, "tune.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = head.cli("tune", path)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        exp_id = p.stdout.strip()

        def experiment(via):
            status, body = via.get(f"/v1/tune/{exp_id}")
            return body if status == 200 else None
        wait_for(lambda: any(t["iterations"] >= 2 for t in experiment(head)["trials"]),
                 timeout=60, what="a trial's second result")
        head.kill9()
        new_head = c.head(among=[d for d in c.alive() if d is not head], timeout=30)
        exp = wait_for(lambda: (lambda e: e if e and e["state"] != "RUNNING" else None)(
            experiment(new_head)), timeout=180, interval=0.3, what="the experiment to end")
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        self.assertEqual(sorted(t["index"] for t in exp["trials"]), [0, 1, 2, 3])
        for t in exp["trials"]:
            self.assertEqual(len(t["jobs"]), 1, t)  # no trial ran twice
            self.assertEqual(t["state"], "TERMINATED", t)
            # A report committed without its checkpoint is trained again after the
            # failover: 8 or more results, the last of the last epoch.
            self.assertGreaterEqual(t["iterations"], 8, t)
            self.assertEqual(t["last_result"]["epoch"], 7, t)
            self.assertEqual(new_head.job(t["job_id"])["state"], "SUCCEEDED")
        status, jobs = new_head.get("/v1/jobs?limit=1000")
        names = sorted(j["name"] for j in jobs["jobs"])
        self.assertEqual(names, [f"failover_0000{i}" for i in range(4)])
        self.assertEqual(exp["best_trial"]["config"]["train_loop_config"]["loss_scale"], 1)


class TuneTwoNodeTest(ClusterTuneCase):
    """ASHA's trials with a rank on another node: that rank's reports are held too, and
    released by the head over POST /v1/internal/ack as soon as ASHA decided."""
    # One CPU each: a two-rank trial has rank 1 on the other node.
    voters, agents, num_cpus = 1, 1, 1

    def test_remote_ranks_wait_for_ashas_decision(self):
        head = self.cluster.head()
        trainer = train_spec(name="held", workers=2, epochs=6, sleep_ms=50)
        trainer["run_config"]["storage_path"] = self.storage
        spec = tune_spec(trainer,
                         {"train_loop_config": {"loss_scale": {"grid_search": [1, 4, 2, 8]}}},
                         max_concurrent_trials=1,
                         scheduler={"type": "asha", "max_t": 6, "grace_period": 1,
                                    "reduction_factor": 2})
        path = os.path.join(self.storage, "tune.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = head.cli("tune", path, "--wait", timeout=180)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        status, exp = head.get("/v1/tune/held")
        self.assertEqual(status, 200, exp)
        stopped = [t for t in exp["trials"] if "ASHA" in t["reason"]]
        self.assertGreaterEqual(len(stopped), 1, exp["trials"])
        for t in exp["trials"]:
            status, m = head.get(f"/v1/jobs/{t['job_id']}/metrics?ranks=all")
            self.assertEqual(status, 200, m)
            remote = m["ranks"]["1"]
            # Rank 1 ran on the agent (one CPU per node).
            ranks = self.cluster.ranks_by_daemon(t["job_id"])
            self.assertEqual(len(ranks), 2, ranks)
            if t in stopped:
                decided_at = int(re.search(r"at training_iteration (\d+)",
                                           t["reason"]).group(1))
                # Neither rank trained past the result ASHA stopped the trial at.
                self.assertEqual(t["iterations"], decided_at, t)
                self.assertEqual(len(remote), decided_at, remote)
            # Released by the head's decision, not by its 5 s bound on a hold.
            times = [r["time"] for r in remote]
            gaps = [b - a for a, b in zip(times, times[1:])]
            self.assertLess(max(gaps, default=0), 4000, gaps)


if __name__ == "__main__":
    main()
