"""Python entry points, end to end: every example in examples/python/ runs through the real
`traintl` CLI (`traintl submit job.json` from the example's directory, as its README says)
on a one-node cluster, and the outcomes are checked - metrics, checkpoint/resume after a
SIGKILL of a rank, torchrun's and TF_CONFIG's environment for command entry points - as
well as bad input: what `traintl submit` refuses (a missing module, a syntax error, a
missing function, a symlink out of the working_dir) and what fails the job (a Python
exception, a command that is not there).

Each example is copied into a temp dir first (so nothing is written into the source tree
and job.json can be adjusted: the dataset's absolute URI, a slower checkpointing run).
Tests that run torch are skipped, with the reason, when /usr/bin/python3 has no torch.
"""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest

from harness import JobCliMixin, DaemonTestCase, kill_job_processes, main, merge, proc_read, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples", "python")
PYTHON = "/usr/bin/python3"  # the interpreter traintl embeds and command jobs find in PATH


def _python_has(module):
    if not os.access(PYTHON, os.X_OK):
        return False
    try:
        return subprocess.run([PYTHON, "-c", f"import {module}"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


HAS_PYTHON = os.access(PYTHON, os.X_OK)
HAS_TORCH = _python_has("torch")
needs_torch = unittest.skipUnless(
    HAS_TORCH, f"{PYTHON} cannot import torch (Debian: apt-get install python3-torch); "
    "the torch examples are skipped")

JOB_ID = re.compile(r"\b([0-9a-f]{12})\b")
SUBMIT_TIMEOUT_S = 300


class PythonTestCase(JobCliMixin, DaemonTestCase):
    """A one-node cluster per test, and helpers to run examples through the CLI."""

    def setUp(self):
        if not HAS_PYTHON:
            self.skipTest(f"{PYTHON} is missing: traintl's Python entry points need Debian's "
                          "python3")
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="traintl-e2e-py-")

    def tearDown(self):
        # A command job's programs (and anything they started) must be gone with the job.
        leftover = kill_job_processes(self.daemon)
        shutil.rmtree(self.tmp, ignore_errors=True)
        super().tearDown()
        self.assertEqual(leftover, [], "job processes left behind")

    # --- the CLI ---------------------------------------------------------------------------

    def prepare(self, example, overrides=None, name=None):
        """Copies examples/python/<example> into the temp dir, applies `overrides` to its
        job.json; returns the copy's directory."""
        src = os.path.join(EXAMPLES, example)
        dst = os.path.join(self.tmp, name or example)
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        if overrides:
            path = os.path.join(dst, "job.json")
            with open(path) as f:
                spec = json.load(f)
            with open(path, "w") as f:
                json.dump(merge(spec, overrides), f, indent=2)
        return dst

    def write_dir(self, name, files, spec=None):
        """A working_dir made of `files` (name -> text) and its job.json `spec`."""
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        for fname, text in files.items():
            with open(os.path.join(d, fname), "w") as f:
                f.write(text)
        if spec is not None:
            with open(os.path.join(d, "job.json"), "w") as f:
                json.dump(spec, f, indent=2)
        return d

    def submit(self, cwd, wait=False, expect_rc=0):
        """`traintl submit job.json [--wait]` in `cwd`; returns (job_id, process)."""
        args = ["submit", "job.json"] + (["--wait"] if wait else [])
        p = self.cli_in(cwd, *args, timeout=SUBMIT_TIMEOUT_S)
        m = JOB_ID.search(p.stdout)
        if m is None:
            self.fail(f"traintl submit printed no job id (rc {p.returncode})\n"
                      f"stdout: {p.stdout}\nstderr: {p.stderr}")
        job_id = m.group(1)
        if expect_rc is not None and p.returncode != expect_rc:
            self.fail(f"traintl submit{' --wait' if wait else ''} exited with {p.returncode}, "
                      f"expected {expect_rc}\nstdout: {p.stdout}\nstderr: {p.stderr}\n" +
                      self.describe(job_id))
        return job_id, p

    def refused(self, cwd, *fragments):
        """`traintl submit job.json` in `cwd` must be refused (exit 2) with every fragment in
        its message, and submit nothing."""
        before = len(self.daemon.get("/v1/jobs")[1]["jobs"])
        p = self.cli_in(cwd, "submit", "job.json")
        self.assertEqual(p.returncode, 2, f"stdout: {p.stdout}\nstderr: {p.stderr}")
        for fragment in fragments:
            self.assertIn(fragment, p.stderr)
        self.assertEqual(len(self.daemon.get("/v1/jobs")[1]["jobs"]), before,
                         "a refused submission created a job")
        return p.stderr

    def assert_state(self, job_id, state):
        job = self.daemon.wait_terminal(job_id, timeout=SUBMIT_TIMEOUT_S)
        if job["state"] != state:
            self.fail(f"job {job_id} is {job['state']} ({job['message']}), expected {state}\n" +
                      self.describe(job_id))
        return job

    def history(self, job_id):
        status, body = self.daemon.get(f"/v1/jobs/{job_id}/metrics")
        self.assertEqual(status, 200, body)
        return body["history"]

    def run_example(self, example, overrides=None):
        """Runs the example as its README says (`traintl submit job.json --wait` in its
        directory); it must succeed. Returns (job, rank 0's metrics history)."""
        d = self.prepare(example, overrides)
        job_id, _ = self.submit(d, wait=True)
        job = self.assert_state(job_id, "SUCCEEDED")
        self.assertEqual(job["attempt"], 1, job)
        return job, [h["metrics"] for h in self.history(job_id)]


class PythonExamplesTest(PythonTestCase):
    @needs_torch
    def test_basic_loss_decreases_every_epoch(self):
        job, history = self.run_example("basic")
        self.assertEqual([m["epoch"] for m in history], [0, 1, 2, 3, 4])
        losses = [m["loss"] for m in history]
        self.assertTrue(all(math.isfinite(x) for x in losses), losses)
        for earlier, later in zip(losses, losses[1:]):
            self.assertLess(later, earlier, f"the loss went up: {losses}")
        self.assertLess(losses[-1], losses[0] / 4, losses)
        self.assertEqual(job["metrics"]["epoch"], 4)
        # Rank 0 printed each epoch's metrics into its log.
        self.assertIn("'epoch': 4", self.logs(job["job_id"], 0))

    @needs_torch
    def test_data_loader_gives_each_rank_half_the_samples(self):
        _, history = self.run_example("data_loader")
        self.assertEqual([m["epoch"] for m in history], [0, 1, 2, 3])
        # 512 samples, a DistributedSampler over 2 ranks: 256 each, every epoch.
        self.assertEqual({m["samples"] for m in history}, {256}, history)
        self.assertLess(history[-1]["loss"], history[0]["loss"], history)
        self.assertGreater(history[-1]["accuracy"], 0.9, history)

    @needs_torch
    def test_ddp_parameters_equal_and_gradients_averaged_across_ranks(self):
        _, history = self.run_example("ddp")
        self.assertEqual(len(history), 3, history)
        for m in history:
            self.assertEqual(m["world_size"], 2, m)
            self.assertTrue(m["wrapped_in_ddp"], f"prepare_model did not wrap in DDP: {m}")
            # Both ranks on this node: torch DDP runs on traintl's shared-memory backend.
            self.assertEqual((m["backend"], m["transport"]), ("traintl", "shm"), m)
            # The ranks' local gradients differ (different data) ...
            self.assertGreater(m["local_grad_spread"], 1e-4, m)
            # ... yet DDP's gradient is their all_reduce average, and the parameters stay
            # identical on both ranks after every step.
            self.assertLess(m["grad_allreduce_max_error"], 1e-5, m)
            self.assertTrue(m["grads_averaged"], m)
            self.assertEqual(m["param_max_diff"], 0.0, m)
            self.assertTrue(m["params_equal"], m)
        self.assertLess(history[-1]["loss"], history[0]["loss"], history)

    @needs_torch
    def test_ddp_on_gloo_when_shared_memory_collectives_are_off(self):
        _, history = self.run_example(
            "ddp", {"env": {"TRAINTL_SHM_COLLECTIVES": "0"}})
        for m in history:
            self.assertEqual((m["backend"], m["transport"]), ("gloo", "gloo"), m)
            self.assertTrue(m["grads_averaged"], m)
            self.assertTrue(m["params_equal"], m)

    @needs_torch
    def test_dataset_shard_rows_add_up_to_the_csv(self):
        # The example's job.json names its CSV with a placeholder: put the copy's real path.
        d = self.prepare("dataset_shard")
        csv_path = os.path.join(d, "data.csv")
        with open(os.path.join(d, "job.json")) as f:
            spec = json.load(f)
        self.assertIn("/REPLACE/", spec["datasets"]["train"]["uri"])
        spec["datasets"]["train"]["uri"] = "file://" + csv_path
        with open(os.path.join(d, "job.json"), "w") as f:
            json.dump(spec, f)
        with open(csv_path) as f:
            header = f.readline().strip().split(",")
            rows = [dict(zip(header, map(float, line.split(",")))) for line in f if line.strip()]
        self.assertEqual(len(rows), 256)

        job_id, _ = self.submit(d, wait=True)
        self.assert_state(job_id, "SUCCEEDED")
        history = [h["metrics"] for h in self.history(job_id)]
        self.assertEqual([m["epoch"] for m in history], [0, 1])
        for m in history:
            # Split: 128 rows per rank in 4 batches of 32, together the whole file ...
            self.assertEqual(m["rows_per_rank"], [128, 128], m)
            self.assertEqual(m["total_rows"], len(rows), m)
            self.assertEqual(m["rows"], 128, m)
            self.assertEqual(m["batches"], 4, m)
            # ... and disjoint: the ranks' sums add up to the file's.
            self.assertAlmostEqual(sum(m["positives_per_rank"]), sum(r["label"] for r in rows))
            self.assertAlmostEqual(sum(m["f0_sum_per_rank"]), sum(r["f0"] for r in rows),
                                   delta=1e-2)
            self.assertTrue(math.isfinite(m["loss"]), m)
        self.assertLess(history[-1]["loss"], history[0]["loss"], history)
        self.assertIn("rank 1 epoch 1: 128 rows in 4 batches", self.logs(job_id, 1))

    @needs_torch
    def test_checkpointing_resumes_after_sigkill_of_a_rank(self):
        d = self.prepare("checkpointing", {"train_loop_config": {"epochs": 8, "sleep_s": 1.0}})
        job_id, _ = self.submit(d)
        with open(os.path.join(d, "job.json")) as f:
            self.assertGreaterEqual(json.load(f)["run_config"]["failure_config"]["max_failures"], 1)

        # Let two checkpoints commit, then SIGKILL rank 1's worker.
        def checkpoints():
            job = self.daemon.job(job_id)
            if job["state"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                self.fail(f"the job ended before 2 checkpoints: {job['state']}\n" +
                          self.describe(job_id))
            cps = self.daemon.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
            return cps if len(cps) >= 2 else None
        wait_for(checkpoints, timeout=180, interval=0.2, what="2 checkpoints")
        victims = [p for p in self.daemon.worker_pids()
                   if re.search(rb"rank_1\b", proc_read(p, "cmdline"))]
        self.assertEqual(len(victims), 1, f"rank 1's worker among {self.daemon.worker_pids()}")
        before = self.daemon.job(job_id)["latest_checkpoint"]
        self.assertIsNotNone(before)
        self.assertEqual(before["attempt"], 1, before)
        os.kill(victims[0], signal.SIGKILL)

        job = self.assert_state(job_id, "SUCCEEDED")
        self.assertEqual(job["attempt"], 2, job)
        a1, a2 = job["attempts"]
        self.assertEqual(a1["state"], "FAILED", a1)
        self.assertEqual(a1["failed_rank"], 1, a1)
        self.assertEqual(a1["signal"], signal.SIGKILL, a1)
        self.assertIsNone(a1["restored_from"], a1)
        self.assertIsNotNone(a2["restored_from"], a2)
        self.assertIn("checkpoint_a001_", a2["restored_from"])
        self.assertGreaterEqual(a2["restored_from"], before["path"])

        history = self.history(job_id)
        self.assertEqual({h["attempt"] for h in history}, {1, 2}, history)
        one = [h["metrics"] for h in history if h["attempt"] == 1]
        two = [h["metrics"] for h in history if h["attempt"] == 2]
        self.assertEqual([m["epoch"] for m in one], list(range(len(one))))
        self.assertTrue(all(m["resumed_from_epoch"] == -1 for m in one), one)
        # Attempt 2 started from the checkpointed epoch, not from epoch 0 ...
        start = two[0]
        self.assertEqual(start["attempt"], 2, start)
        self.assertGreater(start["epoch"], 0, start)
        self.assertGreaterEqual(start["resumed_from_epoch"], before["metrics"]["epoch"], start)
        self.assertEqual(start["epoch"], start["resumed_from_epoch"] + 1, start)
        self.assertEqual(start["start_epoch"], start["epoch"], start)
        # ... with the optimizer's state too (Adam's step count went on) ...
        self.assertEqual(start["optimizer_steps"], (start["epoch"] + 1) * start["steps_per_epoch"],
                         start)
        # ... and the model's: where attempt 1 got to the same epoch, the loss is the same.
        for m in two:
            same = [o for o in one if o["epoch"] == m["epoch"]]
            if same:
                self.assertTrue(math.isclose(same[0]["loss"], m["loss"], rel_tol=1e-5),
                                (same[0], m))
        # It finished the requested 8 epochs, each one once in attempt 2.
        self.assertEqual([m["epoch"] for m in two], list(range(start["epoch"], 8)))
        self.assertEqual(job["metrics"]["epoch"], 7)
        # The last checkpoint is attempt 2's epoch 7, restorable by get_checkpoint().
        latest = job["latest_checkpoint"]
        self.assertEqual(latest["attempt"], 2, latest)
        self.assertEqual(latest["metrics"]["epoch"], 7, latest)
        for name in ("model.pt", "optimizer.pt", "extra_state.pt"):
            self.assertTrue(os.path.isfile(os.path.join(latest["path"], name)), latest)

    @needs_torch
    def test_torchrun_script_runs_with_torchruns_environment(self):
        d = self.prepare("torchrun_script")
        job_id, p = self.submit(d, wait=True)
        job = self.assert_state(job_id, "SUCCEEDED")
        self.assertEqual(job["attempt"], 1)
        log0 = self.logs(job_id, 0)
        m = re.search(r"steps 20 first_loss ([0-9.]+) final_loss ([0-9.]+)", log0)
        self.assertIsNotNone(m, log0)
        first, final = float(m.group(1)), float(m.group(2))
        self.assertTrue(math.isfinite(final))
        self.assertLess(final, first, log0)
        self.assertIn("rank 0/2 local_rank 0 master", log0)
        log1 = self.logs(job_id, 1)
        self.assertIn("rank 1/2 local_rank 1 master", log1)
        self.assertNotIn("final_loss", log1)
        # Both ranks met at the same rendezvous address.
        masters = {re.search(r"master (\S+)", text).group(1) for text in (log0, log1)}
        self.assertEqual(len(masters), 1, masters)

    def test_tf_config_probe_connects_every_rank(self):
        d = self.prepare("tf_config_probe")
        job_id, _ = self.submit(d, wait=True)
        job = self.assert_state(job_id, "SUCCEEDED")
        self.assertEqual(job["metrics"].get("peers"), 1, job["metrics"])
        self.assertEqual(job["metrics"].get("world_size"), 2, job["metrics"])
        configs = []
        for rank in range(2):
            log = self.logs(job_id, rank)
            self.assertIn(f"probe: rank {rank} exchanged ranks with 1 peers: OK", log)
            m = re.search(r"TF_CONFIG (\{.*\})", log)
            self.assertIsNotNone(m, log)
            configs.append(json.loads(m.group(1)))
        # One cluster, two distinct addresses on this node's host, each rank its own index.
        self.assertEqual(configs[0]["cluster"], configs[1]["cluster"])
        workers = configs[0]["cluster"]["worker"]
        self.assertEqual(len(set(workers)), 2, workers)
        self.assertTrue(all(w.startswith("127.0.0.1:") for w in workers), workers)
        self.assertEqual([c["task"] for c in configs],
                         [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}])


def python_spec(name, entry, workers=2, max_failures=0, **extra):
    spec = {"name": name, "entrypoint": {"python": entry, "working_dir": "."},
            "scaling_config": {"num_workers": workers, "resources_per_worker": {"CPU": 1}},
            "run_config": {"failure_config": {"max_failures": max_failures}}}
    spec.update(extra)
    return spec


GOOD_MODULE = """from traintl import train


def train_fn(config):
    train.report({"ok": 1})
"""


class PythonBadInputTest(PythonTestCase):
    def test_submit_refuses_an_entrypoint_that_cannot_load(self):
        files = {"train.py": GOOD_MODULE,
                 "broken.py": "def train_fn(config):\n    return (1,\n\nx = 2\n"}
        # A module that is not in the working_dir.
        d = self.write_dir("missing_module", files, python_spec("bad", "nosuch:train_fn"))
        self.refused(d, "entrypoint.python", "nosuch")
        # A module with a syntax error.
        d = self.write_dir("syntax_error", files, python_spec("bad", "broken:train_fn"))
        err = self.refused(d, "entrypoint.python", "broken")
        self.assertIn("SyntaxError", err)
        # A function the module does not define.
        d = self.write_dir("missing_function", files, python_spec("bad", "train:no_such_fn"))
        self.refused(d, "entrypoint.python", "no_such_fn")
        # The good one is accepted and runs.
        d = self.write_dir("good", files, python_spec("good", "train:train_fn"))
        job_id, _ = self.submit(d, wait=True)
        self.assertEqual(self.daemon.job(job_id)["metrics"].get("ok"), 1)

    def test_submit_refuses_a_symlink_out_of_the_working_dir(self):
        outside = os.path.join(self.tmp, "outside.txt")
        with open(outside, "w") as f:
            f.write("not part of the job\n")
        d = self.write_dir("linked", {"train.py": GOOD_MODULE},
                           python_spec("linked", "train:train_fn"))
        os.symlink(outside, os.path.join(d, "leak.txt"))
        self.refused(d, "leak.txt")
        # A link to a directory outside, one level down.
        os.unlink(os.path.join(d, "leak.txt"))
        os.makedirs(os.path.join(d, "sub"))
        os.symlink("/etc", os.path.join(d, "sub", "etc_link"))
        self.refused(d, "etc_link")

    def test_python_exception_fails_the_job_with_its_traceback(self):
        module = """from traintl import train


def train_fn(config):
    rank = train.get_context().get_world_rank()
    for epoch in range(3):
        train.report({"epoch": epoch})
        if epoch == 1 and rank == 1:
            raise ValueError(f"bad batch at epoch {epoch} on rank {rank}")
"""
        d = self.write_dir("raises", {"train.py": module},
                           python_spec("raises", "train:train_fn"))
        job_id, p = self.submit(d, wait=True, expect_rc=1)
        job = self.assert_state(job_id, "FAILED")
        self.assertEqual(job["attempt"], 1, job)
        self.assertEqual(job["attempts"][0]["failed_rank"], 1, job)
        line = "ValueError: bad batch at epoch 1 on rank 1"
        status = self.cli_in(self.tmp, "status", job_id)
        self.assertIn("FAILED", status.stdout)
        self.assertIn(line, status.stdout)
        log = self.logs(job_id, 1)
        self.assertIn("Traceback (most recent call last):", log)
        self.assertIn(line, log)
        self.assertRegex(log, r'File ".*train\.py", line 9, in train_fn')

    def test_command_not_found_fails_without_retry(self):
        spec = {"name": "nocmd",
                "entrypoint": {"command": ["traintl-e2e-no-such-program", "--flag"],
                               "working_dir": "."},
                "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
                "run_config": {"failure_config": {"max_failures": 2}}}
        d = self.write_dir("nocmd", {"README": "nothing to run here\n"}, spec)
        job_id, _ = self.submit(d, wait=True, expect_rc=1)
        job = self.assert_state(job_id, "FAILED")
        self.assertEqual(job["attempt"], 1, f"retried a command that is not there: {job}")
        self.assertIn("command not found", job["message"])
        self.assertIn("traintl-e2e-no-such-program", job["message"])
        self.assertIn("command not found", self.cli_in(self.tmp, "status", job_id).stdout)

    def test_a_failed_command_records_its_own_exit_code(self):
        spec = {"name": "exit42",
                "entrypoint": {"command": ["sh", "-c", "echo giving up; exit 42"],
                               "working_dir": "."},
                "scaling_config": {"num_workers": 1, "resources_per_worker": {"CPU": 1}},
                "run_config": {"failure_config": {"max_failures": 0}}}
        d = self.write_dir("exit42", {"README": "a command that fails\n"}, spec)
        job_id, _ = self.submit(d, wait=True, expect_rc=1)
        job = self.assert_state(job_id, "FAILED")
        attempt = job["attempts"][-1]
        # The command's code, not its traintl-worker's 1.
        self.assertEqual((attempt["exit_code"], attempt["signal"]), (42, None), attempt)
        self.assertIn("the command exited with code 42", job["message"])


DDP_PROGRESS_MODULE = """import os
import time

import torch

from traintl import train


def train_fn(config):
    rank = train.get_context().get_world_rank()
    with open(os.path.join(config["pid_dir"], f"rank_{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(0)
    model = train.torch.prepare_model(torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    while not train.should_stop():
        if rank == config["slow_rank"]:
            time.sleep(config["slow_ms"] / 1000)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""


class PythonProgressTest(PythonTestCase):
    """A Python training function's DDP reports progress as the LibTorch integration does,
    through prepare_model's communication hook: no user code."""

    def start(self, name, slow_rank, slow_ms):
        pid_dir = os.path.join(self.tmp, name + "-pids")
        os.makedirs(pid_dir)
        spec = python_spec(name, "train:train_fn", workers=2,
                           train_loop_config={"pid_dir": pid_dir, "slow_rank": slow_rank,
                                              "slow_ms": slow_ms},
                           env={"OMP_NUM_THREADS": "1"})
        job_id, _ = self.submit(self.write_dir(name, {"train.py": DDP_PROGRESS_MODULE}, spec))
        return job_id, pid_dir

    @needs_torch
    def test_a_throttled_python_rank_is_named_a_straggler(self):
        job_id, _ = self.start("pyslow", slow_rank=1, slow_ms=60)
        job = self.daemon.wait_job(
            job_id, lambda j: (j.get("progress") or {}).get("stragglers"), timeout=90,
            what="a straggler")
        self.assertEqual([s["rank"] for s in job["progress"]["stragglers"]], [1],
                         job["progress"])
        self.assertGreaterEqual(job["progress"]["stragglers"][0]["busy_s"], 0.05)
        self.daemon.cli("stop", job_id, "--wait", check=True)

    @needs_torch
    def test_a_stopped_python_rank_is_named_by_the_stalled_collective(self):
        d = self.daemon
        job_id, pid_dir = self.start("pystall", slow_rank=-1, slow_ms=0)
        d.wait_job(job_id, lambda j: len((j.get("progress") or {}).get("ranks", [])) == 2 and all(
            r["steps"] >= 20 for r in j["progress"]["ranks"]), timeout=90,
            what="20 steps on every rank")
        self.assertEqual(d.job(job_id)["progress"]["stragglers"], [])
        with open(os.path.join(pid_dir, "rank_1.pid")) as f:
            victim = int(f.read())
        os.kill(victim, signal.SIGSTOP)
        try:
            job = d.wait_job(job_id, lambda j: (j.get("progress") or {}).get("stalled"),
                             timeout=10, what="the stalled collective")
            self.assertEqual(job["progress"]["stalled"]["lagging"], [1], job["progress"])
            self.assertEqual(job["progress"]["stalled"]["waiting"], [0], job["progress"])
        finally:
            os.kill(victim, signal.SIGCONT)
        d.cli("stop", job_id, "--wait", check=True)


class PythonTuneTest(PythonTestCase):
    def test_tune_runs_a_python_training_function_per_trial(self):
        # `traintl tune` ships the trainer's working_dir as `submit` does; each trial's
        # function gets its own train_loop_config.
        module = """from traintl import train


def train_fn(config):
    for epoch in range(3):
        train.report({"loss": config["scale"] / (epoch + 1), "epoch": epoch})
"""
        d = self.write_dir("tune_py", {"train.py": module})
        spec = {"trainer": python_spec("pytune", "train:train_fn", workers=1,
                                       train_loop_config={"scale": 1.0}),
                "param_space": {"train_loop_config": {"scale": {"grid_search": [3.0, 1.0]}}},
                "tune_config": {"metric": "loss", "mode": "min", "max_concurrent_trials": 2}}
        with open(os.path.join(d, "tune.json"), "w") as f:
            json.dump(spec, f)
        p = self.cli_in(d, "tune", "tune.json", "--wait", timeout=SUBMIT_TIMEOUT_S)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        status, exp = self.daemon.get("/v1/tune/pytune")
        self.assertEqual(exp["state"], "SUCCEEDED", exp)
        self.assertEqual(exp["best_trial"]["config"]["train_loop_config"]["scale"], 1.0)
        for t in exp["trials"]:
            self.assertEqual(t["iterations"], 3, t)
            scale = t["config"]["train_loop_config"]["scale"]
            self.assertAlmostEqual(t["last"], scale / 3)


if __name__ == "__main__":
    main()
