"""XGBoost jobs, end to end, on a one-node cluster through the real `traintl` CLI:

- the C++ example (examples/xgboost: libxgboost_train.so, job.json, the breast cancer data
  from fetch_data.sh) on 2 workers gives the model 1 worker gives on the same rows;
- a rank SIGKILLed mid-training: the next attempt resumes after the checkpoint's round and
  the final model has exactly num_boost_round trees;
- a rank killed mid-training with max_failures 0 fails the attempt at once, naming the rank;
  a rank frozen (SIGSTOP) mid-training fails it at the collective timeout, not never;
- a label column holding text fails the job at attempt 1 although restarts remain;
- Python: a train_fn calling xgboost.train (traintl joins it to the tracker) and a command
  entry point calling xgboost.collective.init() from the DMLC_* environment.

The daemons here run with --collective-timeout COLLECTIVE_TIMEOUT_S. Skipped, with the
reason, when the example library is not built (the `xgboost_train` target needs
libxgboost-dev), when fetch_data.sh cannot produce the data, or (the Python cases) when
/usr/bin/python3 cannot import xgboost and numpy.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import (JobCliMixin, BIN, Daemon, DaemonTestCase, kill_job_processes,
                     main, merge, proc_read, wait_for)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE_DIR = os.path.join(REPO, "examples", "xgboost")
# Build outputs sit beside bin/: <build>/examples/libxgboost_train.so.
EXAMPLE_LIB = os.path.normpath(os.path.join(BIN or ".", "..", "examples",
                                            "libxgboost_train.so"))
PYTHON = "/usr/bin/python3"  # the interpreter traintl embeds and command jobs find in PATH
COLLECTIVE_TIMEOUT_S = 10
JOB_ID = re.compile(r"\b([0-9a-f]{12})\b")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")

# Module state: the data directory (fetch_data.sh output) or why there is none.
DATA = {"dir": None, "skip": None}


def setUpModule():
    if not os.path.isfile(EXAMPLE_LIB):
        DATA["skip"] = (f"{EXAMPLE_LIB} is not built (the xgboost_train target needs Debian's "
                        "libxgboost-dev: apt-get install libxgboost-dev)")
        return
    d = tempfile.mkdtemp(prefix="traintl-e2e-xgb-data-")
    try:
        p = subprocess.run([os.path.join(EXAMPLE_DIR, "fetch_data.sh"), d], capture_output=True,
                           text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        DATA["skip"] = f"examples/xgboost/fetch_data.sh failed: {e}"
        shutil.rmtree(d, ignore_errors=True)
        return
    if p.returncode != 0 or not os.path.isfile(os.path.join(d, "train.csv")):
        DATA["skip"] = (f"examples/xgboost/fetch_data.sh could not get the breast cancer data "
                        f"(exit {p.returncode}): {p.stderr.strip()[-500:]}")
        shutil.rmtree(d, ignore_errors=True)
        return
    DATA["dir"] = d


def tearDownModule():
    if DATA["dir"]:
        shutil.rmtree(DATA["dir"], ignore_errors=True)


def _python_has(*modules):
    if not os.access(PYTHON, os.X_OK):
        return False
    try:
        return subprocess.run([PYTHON, "-c", "import " + ", ".join(modules)],
                              capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class XGBoostDaemon(Daemon):
    """The harness's daemon with a short collective timeout."""

    def command(self, host="127.0.0.1"):
        cmd = super().command(host)
        cmd[cmd.index("--collective-timeout") + 1] = str(COLLECTIVE_TIMEOUT_S)
        return cmd


class XGBoostTestCase(JobCliMixin, DaemonTestCase):
    """A one-node cluster per test; jobs are written as job.json into a temp dir and
    submitted there with `traintl submit`."""

    def setUp(self):
        if DATA["skip"]:
            self.skipTest(DATA["skip"])
        self.daemon = XGBoostDaemon(num_cpus=self.num_cpus).start()
        self.tmp = tempfile.mkdtemp(prefix="traintl-e2e-xgb-")

    def tearDown(self):
        leftover = kill_job_processes(self.daemon)
        shutil.rmtree(self.tmp, ignore_errors=True)
        super().tearDown()
        self.assertEqual(leftover, [], "job processes left behind")

    # --- submitting and looking ------------------------------------------------------------

    def write_job(self, name, spec, files=None):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        for fname, text in (files or {}).items():
            with open(os.path.join(d, fname), "w") as f:
                f.write(text)
        with open(os.path.join(d, "job.json"), "w") as f:
            json.dump(spec, f, indent=2)
        return d

    def submit(self, name, spec, files=None, wait=False, expect_rc=0):
        """`traintl submit job.json [--wait]` in a new directory holding `spec` and `files`;
        returns the job id."""
        d = self.write_job(name, spec, files)
        p = self.cli_in(d, "submit", "job.json", *(["--wait"] if wait else []), timeout=300)
        m = JOB_ID.search(p.stdout)
        if m is None:
            self.fail(f"traintl submit printed no job id (rc {p.returncode})\n"
                      f"stdout: {p.stdout}\nstderr: {p.stderr}")
        if expect_rc is not None and p.returncode != expect_rc:
            self.fail(f"traintl submit exited with {p.returncode}, expected {expect_rc}\n"
                      f"stdout: {p.stdout}\nstderr: {p.stderr}\n" + self.describe(m.group(1)))
        return m.group(1)

    def assert_state(self, job_id, state, timeout=120):
        job = self.daemon.wait_terminal(job_id, timeout=timeout)
        if job["state"] != state:
            self.fail(f"job {job_id} is {job['state']} ({job['message']}), expected {state}\n" +
                      self.describe(job_id))
        return job

    def history(self, job_id):
        status, body = self.daemon.get(f"/v1/jobs/{job_id}/metrics")
        self.assertEqual(status, 200, body)
        return body["history"]

    def checkpoints(self, job_id):
        status, body = self.daemon.get(f"/v1/jobs/{job_id}/checkpoints")
        self.assertEqual(status, 200, body)
        return body["checkpoints"]

    def rank_pid(self, rank):
        """The pid of rank `rank`'s traintl-worker (there must be exactly one)."""
        pids = [p for p in self.daemon.worker_pids()
                if re.search(rb"rank_%d\b" % rank, proc_read(p, "cmdline"))]
        self.assertEqual(len(pids), 1, f"rank {rank}'s worker among {self.daemon.worker_pids()}")
        return pids[0]

    def wait_checkpoint(self, job_id, timeout=60):
        """Waits for attempt 1's first committed checkpoint; the job must still run."""
        def first():
            job = self.daemon.job(job_id)
            if job["state"] in TERMINAL:
                self.fail(f"the job ended before its first checkpoint: {job['state']} "
                          f"{job['message']}\n" + self.describe(job_id))
            return job["latest_checkpoint"]
        return wait_for(first, timeout=timeout, interval=0.02, what="a checkpoint")


def example_spec(overrides=None):
    """examples/xgboost/job.json with the built library and the test's data directory."""
    with open(os.path.join(EXAMPLE_DIR, "job.json")) as f:
        spec = json.load(f)
    spec["entrypoint"]["library"] = EXAMPLE_LIB
    for ds in spec["datasets"].values():
        ds["uri"] = "file://" + os.path.join(DATA["dir"], os.path.basename(ds["uri"]))
    return merge(spec, overrides or {})


# A run slow enough to be interrupted (the example has no per-round sleep; ~3 ms a round
# here): 1500 rounds, a checkpoint every 100, every checkpoint kept.
SLOW = {"train_loop_config": {"num_boost_round": 1500, "eta": 0.02, "checkpoint_every": 100},
        "run_config": {"checkpoint_config": {"num_to_keep": 100}}}


class XGBoostExampleTest(XGBoostTestCase):
    def test_two_workers_give_one_workers_model(self):
        two_id = self.submit("two", example_spec(), wait=True)
        one_id = self.submit("one", example_spec({"name": "breast-cancer-xgboost-1",
                                                  "scaling_config": {"num_workers": 1}}),
                             wait=True)
        runs = {}
        for workers, job_id in ((2, two_id), (1, one_id)):
            job = self.assert_state(job_id, "SUCCEEDED")
            self.assertEqual(job["attempt"], 1, job)
            self.assertEqual(job["num_workers"], workers, job)
            history = [h["metrics"] for h in self.history(job_id)]
            self.assertEqual([m["training_iteration"] for m in history], list(range(1, 51)))
            runs[workers] = history
            log0 = self.logs(job_id, 0)
            self.assertIn("after 50 rounds", log0)
            if workers == 2:
                self.assertIn("XGBoost rank 0 of 2", log0)
                self.assertIn("XGBoost rank 1 of 2", self.logs(job_id, 1))
        two, one = runs[2][-1], runs[1][-1]
        for name in ("validation-logloss", "train-logloss"):
            diff = two[name] - one[name]
            if diff != 0.0:
                # Not bit-equal: with 2 workers hist's quantile sketch is built per worker
                # and merged (other bin edges than one worker's sketch of all rows), and the
                # gradient sums and metrics are added in another order (per rank, then
                # allreduced), so floats round differently.
                print(f"\n{name} at round 50: 2 workers {two[name]!r}, 1 worker {one[name]!r}, "
                      f"difference {diff:.3e}", file=sys.stderr)
            self.assertLess(abs(diff), 1e-3, (name, two, one))
        # A model that learned something: most of the 113 validation tumours right.
        self.assertLess(two["validation-error"], 0.1, two)
        self.assertLess(two["validation-logloss"], runs[2][0]["validation-logloss"], runs[2])

    def test_sigkilled_rank_resumes_after_the_checkpoints_round(self):
        rounds = SLOW["train_loop_config"]["num_boost_round"]
        job_id = self.submit("resume", example_spec(SLOW))
        seen = self.wait_checkpoint(job_id)
        os.kill(self.rank_pid(1), signal.SIGKILL)

        job = self.assert_state(job_id, "SUCCEEDED", timeout=180)
        self.assertEqual(job["attempt"], 2, job)
        a1, a2 = job["attempts"]
        self.assertEqual(a1["state"], "FAILED", a1)
        self.assertEqual(a1["failed_rank"], 1, a1)
        self.assertEqual(a1["signal"], signal.SIGKILL, a1)
        self.assertIsNone(a1["restored_from"], a1)
        self.assertIsNotNone(a2["restored_from"], a2)
        self.assertIn("checkpoint_a001_", a2["restored_from"])

        # The round of the checkpoint attempt 2 restored, by its record and its meta.json.
        restored = [c for c in self.checkpoints(job_id) if c["path"] == a2["restored_from"]]
        self.assertEqual(len(restored), 1, (a2, self.checkpoints(job_id)))
        resumed = restored[0]["metrics"]["training_iteration"]
        with open(os.path.join(a2["restored_from"], "meta.json")) as f:
            self.assertEqual(json.load(f)["training_iteration"], resumed)
        self.assertEqual(resumed % 100, 0, resumed)
        self.assertGreaterEqual(resumed, seen["metrics"]["training_iteration"])
        self.assertLess(resumed, rounds)
        self.assertIn(f"resuming after round {resumed} from", self.logs(job_id, 0, attempt=2))

        history = self.history(job_id)
        one = [h["metrics"] for h in history if h["attempt"] == 1]
        two = [h["metrics"] for h in history if h["attempt"] == 2]
        self.assertEqual([m["training_iteration"] for m in one], list(range(1, len(one) + 1)))
        self.assertLess(len(one), rounds, "attempt 1 was not interrupted")
        # Attempt 2 starts at the round after the checkpoint's and trains each round once.
        self.assertEqual(two[0]["training_iteration"], resumed + 1, two[:3])
        self.assertEqual([m["training_iteration"] for m in two], list(range(resumed + 1,
                                                                            rounds + 1)))
        # hist is deterministic: rounds both attempts trained have the same metrics.
        by_round = {m["training_iteration"]: m for m in one}
        overlap = [m for m in two if m["training_iteration"] in by_round]
        for m in overlap:
            self.assertEqual(m["validation-logloss"],
                             by_round[m["training_iteration"]]["validation-logloss"], m)
        self.assertEqual(job["metrics"]["training_iteration"], rounds, job["metrics"])

        # The final model: exactly num_boost_round trees, readable by XGBoost's Python
        # package when /usr/bin/python3 has it.
        latest = job["latest_checkpoint"]
        self.assertEqual(latest["attempt"], 2, latest)
        self.assertEqual(latest["metrics"]["training_iteration"], rounds, latest)
        trial_dir = os.path.dirname(latest["path"])
        model = os.path.join(trial_dir, "model.ubj")
        self.assertTrue(os.path.isfile(model), os.listdir(trial_dir))
        if _python_has("xgboost"):
            p = subprocess.run([PYTHON, "-c", "import sys, xgboost; print(xgboost.Booster("
                                "model_file=sys.argv[1]).num_boosted_rounds())", model],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(int(p.stdout.strip()), rounds, p.stdout)
        self.assertIn(f"after {rounds} rounds", self.logs(job_id, 0, attempt=2))

    def test_killed_rank_fails_the_attempt_at_once(self):
        rounds = SLOW["train_loop_config"]["num_boost_round"]
        job_id = self.submit("killed", example_spec(merge(SLOW, {
            "run_config": {"failure_config": {"max_failures": 0}}})))
        self.wait_checkpoint(job_id)
        victim = self.rank_pid(1)
        start = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        job = self.daemon.wait_terminal(job_id, timeout=COLLECTIVE_TIMEOUT_S * 3)
        elapsed = time.monotonic() - start
        self.assertEqual(job["state"], "FAILED", f"{job}\n" + self.describe(job_id))
        # Rank 0 was in XGBoost's collectives with a dead peer: the attempt ends long before
        # the collective timeout would have ended it.
        self.assertLess(elapsed, COLLECTIVE_TIMEOUT_S / 2,
                        f"the job took {elapsed:.1f}s to fail\n" + self.describe(job_id))
        self.assertEqual(job["attempt"], 1, job)
        a1 = job["attempts"][0]
        self.assertEqual(a1["failed_rank"], 1, a1)
        self.assertEqual(a1["signal"], signal.SIGKILL, a1)
        self.assertIn("rank 1", job["message"])
        self.assertIn("SIGKILL", job["message"])
        self.assertLess(job["metrics"]["training_iteration"], rounds, job["metrics"])

    def test_frozen_rank_fails_the_attempt_at_the_collective_timeout(self):
        rounds = SLOW["train_loop_config"]["num_boost_round"]
        job_id = self.submit("frozen", example_spec(merge(SLOW, {
            "run_config": {"failure_config": {"max_failures": 0}}})))
        self.wait_checkpoint(job_id)
        victim = self.rank_pid(1)
        def kill_victim():
            # Leave nothing stopped behind, whatever happened (SIGKILL ends a stopped
            # process).
            try:
                os.kill(victim, signal.SIGKILL)
            except OSError:
                pass
        self.addCleanup(kill_victim)
        start = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        job = self.daemon.wait_terminal(job_id, timeout=COLLECTIVE_TIMEOUT_S * 4)
        elapsed = time.monotonic() - start
        self.assertEqual(job["state"], "FAILED", f"{job}\n" + self.describe(job_id))
        # Nobody died: rank 0 waited for its silent peer for the collective timeout (the
        # daemon's --collective-timeout, XGBoost's rabit_timeout_sec), then gave up.
        self.assertGreaterEqual(elapsed, COLLECTIVE_TIMEOUT_S - 1,
                                f"failed after {elapsed:.1f}s: {job['message']}")
        self.assertLess(elapsed, COLLECTIVE_TIMEOUT_S + 10,
                        f"failed after {elapsed:.1f}s\n" + self.describe(job_id))
        a1 = job["attempts"][0]
        self.assertEqual(a1["failed_rank"], 0, a1)
        self.assertIn("rank 0", job["message"])
        self.assertIn("timeout", job["message"].lower())
        self.assertLess(job["metrics"]["training_iteration"], rounds, job["metrics"])

    def test_text_label_column_fails_without_retry(self):
        # The training CSV with its label column as class names: text, not numbers.
        bad = os.path.join(self.tmp, "train_text_label.csv")
        with open(os.path.join(DATA["dir"], "train.csv")) as src, open(bad, "w") as dst:
            dst.write(src.readline())
            for line in src:
                fields = line.rstrip("\n").split(",")
                fields[-1] = {"0": "malignant", "1": "benign"}[fields[-1]]
                dst.write(",".join(fields) + "\n")
        spec = example_spec({"name": "text-label",
                             "datasets": {"train": {"uri": "file://" + bad}},
                             "run_config": {"failure_config": {"max_failures": 2}}})
        job_id = self.submit("text_label", spec, wait=True, expect_rc=1)
        job = self.assert_state(job_id, "FAILED")
        self.assertEqual(job["attempt"], 1, f"retried data that cannot be trained on: {job}")
        self.assertEqual(len(job["attempts"]), 1, job)
        self.assertEqual(job["max_failures"], 2, job)
        self.assertIn("label column 'label'", job["message"])
        self.assertIn("holds text", job["message"])
        self.assertIn("label column 'label'", self.cli_in(self.tmp, "status", job_id).stdout)


# --- Python ------------------------------------------------------------------------------

COMMON = """import numpy as np
import xgboost

PARAMS = {"objective": "binary:logistic", "tree_method": "hist", "max_depth": 3, "eta": 0.1,
          "seed": 0, "nthread": 1, "eval_metric": ["logloss", "error"]}


def load(path):
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32)
    return data[:, :-1], data[:, -1]


def fit(train_csv, valid_csv, rounds, rank=0, world=1, callbacks=None):
    x, y = load(train_csv)
    xv, yv = load(valid_csv)
    dtrain = xgboost.DMatrix(x[rank::world], label=y[rank::world])
    dvalid = xgboost.DMatrix(xv, label=yv)
    log = {}
    booster = xgboost.train(PARAMS, dtrain, num_boost_round=rounds,
                            evals=[(dtrain, "train"), (dvalid, "validation")],
                            evals_result=log, verbose_eval=False, callbacks=callbacks or [])
    return booster, len(y[rank::world]), log
"""

TRAIN_FN = """import numpy as np
import xgboost
import xgboost.collective as collective
from traintl import train

import common


class Report(xgboost.callback.TrainingCallback):
    def after_iteration(self, model, epoch, evals_log):
        train.report({"training_iteration": epoch + 1,
                      "validation-logloss": evals_log["validation"]["logloss"][-1],
                      "world_size": collective.get_world_size(),
                      "xgboost_rank": collective.get_rank()})
        return False


def train_fn(config):
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    booster, rows, log = common.fit(config["train"], config["valid"], config["rounds"],
                                    rank, world, [Report()])
    total = collective.allreduce(np.array([rows], dtype=np.float64), collective.Op.SUM)
    train.report({"training_iteration": config["rounds"], "rows": rows,
                  "total_rows": int(total[0]), "world_size": collective.get_world_size(),
                  "xgboost_rank": collective.get_rank(),
                  "validation-logloss": log["validation"]["logloss"][-1],
                  "rounds_in_model": booster.num_boosted_rounds()})
"""

TRAIN_CMD = """import os
import sys

import numpy as np
import xgboost.collective as collective
from traintl import train

import common


def main():
    train_csv, valid_csv, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    collective.init()  # from DMLC_TRACKER_URI, DMLC_TRACKER_PORT, DMLC_TASK_ID, ...
    try:
        rank, world = collective.get_rank(), collective.get_world_size()
        booster, rows, log = common.fit(train_csv, valid_csv, rounds, rank, world)
        total = collective.allreduce(np.array([rows], dtype=np.float64), collective.Op.SUM)
        train.report({"world_size": world, "xgboost_rank": rank,
                      "task_id": int(os.environ["DMLC_TASK_ID"]),
                      "traintl_rank": train.get_context().get_world_rank(),
                      "rows": rows, "total_rows": int(total[0]),
                      "validation-logloss": log["validation"]["logloss"][-1],
                      "rounds_in_model": booster.num_boosted_rounds()})
        print(f"rank {rank} of {world}: done", flush=True)
    finally:
        collective.finalize()


if __name__ == "__main__":
    main()
"""

HAS_PY_XGBOOST = None


def needs_python_xgboost(test):
    def wrapper(self):
        global HAS_PY_XGBOOST
        if HAS_PY_XGBOOST is None:
            HAS_PY_XGBOOST = _python_has("xgboost", "numpy")
        if not HAS_PY_XGBOOST:
            self.skipTest(f"{PYTHON} cannot import xgboost and numpy (Debian: apt-get install "
                          "python3-xgboost)")
        return test(self)
    wrapper.__name__ = test.__name__
    wrapper.__doc__ = test.__doc__
    return wrapper


class XGBoostPythonTest(XGBoostTestCase):
    ROUNDS = 20

    def reference_logloss(self, d):
        """The final validation-logloss of one process on all the training rows."""
        p = subprocess.run([PYTHON, "-c", "import sys, common; "
                            "print(repr(common.fit(sys.argv[1], sys.argv[2], int(sys.argv[3]))"
                            "[2]['validation']['logloss'][-1]))",
                            self.train_csv, self.valid_csv, str(self.ROUNDS)],
                           cwd=d, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        return float(p.stdout.strip())

    def setUp(self):
        super().setUp()
        self.train_csv = os.path.join(DATA["dir"], "train.csv")
        self.valid_csv = os.path.join(DATA["dir"], "valid.csv")
        with open(self.train_csv) as f:
            self.train_rows = sum(1 for _ in f) - 1

    def check_against_reference(self, d, distributed):
        reference = self.reference_logloss(d)
        diff = distributed - reference
        if diff != 0.0:
            # Not bit-equal: 2 workers' merged quantile sketches and allreduced sums differ
            # from one process's in bin edges and float summation order.
            print(f"\nvalidation-logloss after {self.ROUNDS} rounds: 2 workers "
                  f"{distributed!r}, 1 process {reference!r}, difference {diff:.3e}",
                  file=sys.stderr)
        self.assertLess(abs(diff), 1e-3)

    @needs_python_xgboost
    def test_train_fn_joins_the_tracker(self):
        spec = {"name": "py-xgboost", "framework": "xgboost",
                "entrypoint": {"python": "train:train_fn", "working_dir": "."},
                "train_loop_config": {"train": self.train_csv, "valid": self.valid_csv,
                                      "rounds": self.ROUNDS},
                "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
                "run_config": {"failure_config": {"max_failures": 0}},
                "env": {"OMP_NUM_THREADS": "1"}}
        job_id = self.submit("py_train_fn", spec, {"common.py": COMMON, "train.py": TRAIN_FN},
                             wait=True)
        job = self.assert_state(job_id, "SUCCEEDED")
        self.assertEqual(job["attempt"], 1, job)
        history = [h["metrics"] for h in self.history(job_id)]
        rounds = [m for m in history if "rows" not in m]
        self.assertEqual([m["training_iteration"] for m in rounds],
                         list(range(1, self.ROUNDS + 1)))
        # Inside the function XGBoost's collective spans both ranks, every round.
        self.assertEqual({m["world_size"] for m in history}, {2}, history)
        self.assertEqual(history[-1]["xgboost_rank"], 0, history[-1])
        final = job["metrics"]
        self.assertEqual(final["rows"], (self.train_rows + 1) // 2, final)
        self.assertEqual(final["total_rows"], self.train_rows, final)
        self.assertEqual(final["rounds_in_model"], self.ROUNDS, final)
        self.assertEqual(final["validation-logloss"], rounds[-1]["validation-logloss"])
        self.check_against_reference(os.path.join(self.tmp, "py_train_fn"),
                                     final["validation-logloss"])

    @needs_python_xgboost
    def test_command_entry_point_inits_the_collective_from_the_environment(self):
        spec = {"name": "py-xgboost-command", "framework": "xgboost",
                "entrypoint": {"command": ["python3", "train_cmd.py", self.train_csv,
                                           self.valid_csv, str(self.ROUNDS)],
                               "working_dir": "."},
                "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
                "run_config": {"failure_config": {"max_failures": 0}},
                "env": {"OMP_NUM_THREADS": "1"}}
        job_id = self.submit("py_command", spec,
                             {"common.py": COMMON, "train_cmd.py": TRAIN_CMD}, wait=True)
        job = self.assert_state(job_id, "SUCCEEDED")
        self.assertEqual(job["attempt"], 1, job)
        m = job["metrics"]
        self.assertEqual(m["world_size"], 2, m)
        self.assertEqual((m["xgboost_rank"], m["task_id"], m["traintl_rank"]), (0, 0, 0), m)
        self.assertEqual(m["rows"], (self.train_rows + 1) // 2, m)
        self.assertEqual(m["total_rows"], self.train_rows, m)
        self.assertEqual(m["rounds_in_model"], self.ROUNDS, m)
        for rank in range(2):
            self.assertIn(f"rank {rank} of 2: done", self.logs(job_id, rank))
        self.check_against_reference(os.path.join(self.tmp, "py_command"),
                                     m["validation-logloss"])


if __name__ == "__main__":
    main()
